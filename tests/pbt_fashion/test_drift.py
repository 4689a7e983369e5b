"""The drift task's stream (benchmarks/pbt_fashion/drift.py) and how the benchmark's Context
follows it: every method trains and is measured on the images of the phase its step count is
in, the same for every rank and method of a seed.
Run: /usr/bin/python3 -m pytest tests/pbt_fashion
"""

import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "pbt_fashion"))
import data as D  # noqa: E402
import model as M  # noqa: E402
from common import Context  # noqa: E402
from drift import Drift  # noqa: E402
from straggler import Straggler  # noqa: E402


def test_shifts_are_the_seeds_and_near_even_spacing():
    a, b = Drift(3, 4000, 3), Drift(3, 4000, 3)
    assert a.shift_steps == b.shift_steps
    assert len(a.shift_steps) == 3
    for k, s in enumerate(a.shift_steps, start=1):
        assert abs(s - 1000 * k) <= 300, a.shift_steps
    seen = {tuple(Drift(seed, 4000, 3).shift_steps) for seed in range(1, 11)}
    assert len(seen) > 1  # drawn per seed, not fixed
    x = torch.arange(2 * 784, dtype=torch.float32).reshape(2, 784)
    late = a.shift_steps[-1]
    assert torch.equal(a.images(x, late), b.images(x, late))
    assert not torch.equal(Drift(4, 4000, 3).images(x, 3999), a.images(x, 3999))


def test_phases_and_images():
    d = Drift(1, 4000, 3)
    first, second, third = d.shift_steps
    assert [d.phase(t) for t in (0, first - 1, first, second - 1, second, third, 3999)] == \
        [0, 0, 1, 1, 2, 3, 3]
    x = torch.randn(5, 784)
    assert d.images(x, first - 1) is x  # phase 0: the images as they are
    views = [d.images(x, s) for s in (first, second, third)]
    for v in views:  # each phase a permutation of the pixels, not the original order
        assert torch.equal(v.sort(dim=1).values, x.sort(dim=1).values)
        assert not torch.equal(v, x)
    assert not torch.equal(views[0], views[1]) and not torch.equal(views[1], views[2])
    assert torch.equal(d.images(x, first), d.images(x, second - 1))  # fixed within a phase


def test_no_shifts_leaves_the_data_alone():
    d = Drift(1, 4000, 0)
    x = torch.randn(3, 784)
    assert d.shift_steps == [] and d.phase(3999) == 0 and d.images(x, 3999) is x


@pytest.mark.parametrize("steps,shifts", [(0, 3), (4000, -1), (3, 3)])
def test_bad_arguments_are_refused(steps, shifts):
    with pytest.raises(ValueError, match="Drift"):
        Drift(1, steps, shifts)


class _Recorder(torch.nn.Module):
    """A linear classifier that keeps the images of its last forward call."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(784, 10)
        self.seen = None

    def forward(self, x):
        self.seen = x.detach().clone()
        return self.linear(x)


def test_context_trains_and_evaluates_on_the_current_phase(tmp_path):
    n = 64
    split = D.Split(torch.randn(n, 784), torch.randint(10, (n,)))
    data = D.FashionMnist(split, split, split)
    drift = Drift(2, 40, 3)  # shifts near steps 10, 20 and 30
    ctx = Context(None, 0, 1, 2, "unit", 40, 1e9, 10, n, data, str(tmp_path),
                  Straggler("none", 0, 1, 2, 0.0), "drift", drift)
    net = _Recorder()
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    batches = M.Batches(split, 7)
    reference = M.Batches(split, 7)  # the same stream of mini-batches
    for step in range(40):
        ctx.train_step(net, opt, batches)
        x, _ = reference.next()
        assert torch.equal(net.seen, drift.images(x, step)), step
        ctx.evaluate(net)  # after step: the phase of the step just trained
        assert torch.equal(net.seen, drift.images(split.x, step)), step
    assert ctx.stream_step == 40
    ctx.close()


def test_the_report_reads_only_the_latest_phase():
    import report
    rows = [  # an Optuna-like run: a trial that ended in phase 0 with the best validation
        {"rank": 0, "trial": 0, "step": 10, "clock": 1.0, "val": 0.90, "test": 0.89, "phase": 0},
        {"rank": 1, "trial": 1, "step": 10, "clock": 1.0, "val": 0.70, "test": 0.69, "phase": 0},
        {"rank": 1, "trial": 1, "step": 20, "clock": 2.0, "val": 0.60, "test": 0.61, "phase": 1},
        {"rank": 0, "trial": 2, "step": 20, "clock": 2.5, "val": 0.50, "test": 0.52, "phase": 1},
    ]
    assert report.best_at(rows, 1.5) == 0.89  # phase 0 is the stream's latest by then
    assert report.best_at(rows, 2.2) == 0.61  # trial 0 was measured on phase 0's images
    assert report.best_at(rows, float("inf")) == 0.61
    stationary = [{k: v for k, v in r.items() if k != "phase"} for r in rows]
    assert report.best_at(stationary, float("inf")) == 0.89  # no phases: every trial counts
