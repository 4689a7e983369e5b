"""What every method shares: the clock that leaves the held-out evaluations out, the training
step with the run's straggler condition, the record writer, the polite collectives (ranks
outnumber cores here) and the explore step of the checkpoint-file baseline."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch

import model as M
from drift import Drift
from straggler import Straggler


class Clock:
    """Seconds since start, minus the time spent measuring held-out accuracy (which no
    method needs; it is the benchmark's instrument, not part of the training)."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._excluded = 0.0

    def now(self) -> float:
        return time.perf_counter() - self._start - self._excluded

    def exclude(self, seconds: float) -> None:
        self._excluded += seconds


def polite_wait(request) -> None:
    """Waits for an mpi4py request, sleeping between tests (MPI busy-polls otherwise)."""
    while not request.Test():
        time.sleep(0.0005)


def polite_barrier(comm) -> None:
    polite_wait(comm.Ibarrier())


def polite_allgather(comm, value) -> List[Any]:
    """An allgather of a small Python value that sleeps while the others arrive (a polite
    barrier first: mpi4py 3.1 has no nonblocking object collectives)."""
    polite_barrier(comm)
    return comm.allgather(value)


@dataclass
class Context:
    comm: Any
    rank: int
    size: int
    seed: int
    method: str
    steps: int           # training steps per agent (the equal-steps budget)
    budget_seconds: float  # wall-clock budget per run (training clock)
    interval: int        # steps between evaluations / PBT decisions
    val_limit: int       # validation images the metric uses
    data: Any
    out_dir: str
    straggler: Straggler  # the condition's delay before each training step
    task: str = "default"  # tasks.TASKS: the search space and budget (recorded)
    drift: Drift = field(default_factory=lambda: Drift(0, 1, 0))  # the task's stream (drift.py)
    clock: Clock = field(default_factory=Clock)
    stream_step: int = 0  # training steps so far, over all trials: the drift's clock

    def __post_init__(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, f"{self.method}-seed{self.seed}-rank{self.rank}.jsonl")
        self._file = open(path, "w")

    def agent_seed(self, salt: int = 0) -> int:
        return self.seed * 1000 + self.rank * 17 + salt

    def train_step(self, net: torch.nn.Module, opt: torch.optim.Optimizer, batches) -> None:
        """One training step on the next mini-batch, after the condition's delay (on the
        clock: a slow agent's sleep is its slower device)."""
        self.straggler.wait()
        x, y = batches.next()
        M.train_step(net, opt, self.drift.images(x, self.stream_step), y)
        self.stream_step += 1

    def _last_step(self) -> int:
        """The training step the stream is at: the last one taken (0 before any)."""
        return max(0, self.stream_step - 1)

    def _now_images(self, x: torch.Tensor) -> torch.Tensor:
        """Images as the stream shows them after the last training step (its phase)."""
        return self.drift.images(x, self._last_step())

    def out_of_budget(self, step: int) -> bool:
        return step >= self.steps or self.clock.now() >= self.budget_seconds

    def evaluate(self, net: torch.nn.Module) -> float:
        """The validation accuracy the methods rank and prune on (counted in the clock)."""
        return M.accuracy(net, self.data.validation, self.val_limit, self._now_images)

    def record(self, step: int, val: float, net: torch.nn.Module, hyper: Dict[str, float],
               **extra: Any) -> None:
        """Measures held-out (test) accuracy outside the clock and writes one record."""
        t0 = time.perf_counter()
        test = M.accuracy(net, self.data.test, images=self._now_images)
        self.clock.exclude(time.perf_counter() - t0)
        row = {"method": self.method, "condition": self.straggler.condition, "task": self.task,
               "seed": self.seed, "rank": self.rank, "step": step,
               "clock": self.clock.now(), "val": val, "test": test,
               "hyper": {k: float(v) for k, v in hyper.items()}}
        if self.drift.shift_steps:
            row["phase"] = self.drift.phase(self._last_step())
        row.update(extra)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def pbt_counts(n: int, quantile: float) -> int:
    """Ray Tune's PBT: ceil(quantile * n) agents in each tail, at most n / 2."""
    return min(math.ceil(quantile * n), n // 2)


def explore(hyper: Dict[str, float], rng: torch.Generator, resample_probability: float = 0.25,
            factors=(0.8, 1.2)) -> Dict[str, float]:
    """Ray Tune PBT's explore for continuous hyperparameters: each one is resampled from its
    distribution (log-uniform over model.SPACE) with the given probability, else multiplied by
    one of the factors (not clamped)."""
    out = {}
    for name, value in hyper.items():
        lo, hi = M.SPACE[name]
        if float(torch.rand(1, generator=rng)) < resample_probability:
            u = float(torch.rand(1, generator=rng))
            out[name] = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        else:
            out[name] = value * factors[int(torch.randint(len(factors), (1,), generator=rng))]
    return out
