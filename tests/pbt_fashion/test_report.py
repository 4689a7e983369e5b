"""The report of scripts/pbt_fashion.sh (benchmarks/pbt_fashion/report.py): runs read from
several directories, the per-seed table and the paired comparison.
Run: /usr/bin/python3 -m pytest tests/pbt_fashion
"""

import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "pbt_fashion"))
import report as R  # noqa: E402


def write_run(d, method, seed, tests, ranks=2):
    """One run of @p method and @p seed: every rank evaluates at steps 100 and 200; the
    validation accuracy equals the test accuracy, @p tests[rank] at the end."""
    os.makedirs(d, exist_ok=True)
    for rank in range(ranks):
        with open(os.path.join(d, f"{method}-seed{seed}-rank{rank}.jsonl"), "w") as f:
            for step, clock in ((100, 1.0), (200, 2.0)):
                acc = tests[rank] if step == 200 else tests[rank] - 0.1
                f.write(json.dumps({"method": method, "seed": seed, "rank": rank, "step": step,
                                    "clock": clock + rank, "val": acc, "test": acc}) + "\n")


def test_several_directories_are_one_run(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_run(a, "random_search", 1, [0.80, 0.82])
    write_run(a, "paramwin_pbt", 1, [0.84, 0.83])
    write_run(b, "random_search", 2, [0.81, 0.79])
    write_run(b, "paramwin_pbt", 2, [0.85, 0.86])
    by = R.load(f"{a},{b}")
    assert sorted(by["random_search"]) == [1, 2]
    assert sorted(by["paramwin_pbt"]) == [1, 2]
    assert len(by["paramwin_pbt"][2]) == 4  # 2 ranks x 2 evaluations, read once
    assert R.best_at(by["paramwin_pbt"][2], math.inf) == pytest.approx(0.86)
    rows = R.summary(by)
    table = R.per_seed(rows)
    assert "| random_search | 82.00 | 81.00 |" in table
    assert "| paramwin_pbt | 84.00 | 86.00 |" in table


def test_a_seed_in_two_directories_is_an_error(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_run(a, "random_search", 1, [0.80, 0.82])
    write_run(b, "random_search", 1, [0.81, 0.79])
    with pytest.raises(ValueError, match="random_search seed 1 is in both"):
        R.load(f"{a},{b}")
    with pytest.raises(ValueError, match="given twice"):
        R.load(f"{a},{a}/")
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ValueError, match="no run records"):
        R.load(f"{a},{tmp_path / 'empty'}")


def test_a_missing_seed_leaves_its_cell_blank(tmp_path):
    a = str(tmp_path / "a")
    write_run(a, "random_search", 1, [0.80, 0.82])
    write_run(a, "random_search", 3, [0.70, 0.71])
    write_run(a, "paramwin_pbt", 3, [0.75, 0.74])
    table = R.per_seed(R.summary(R.load(a)))
    assert "| seed | 1 | 3 |" in table
    assert "| paramwin_pbt |  | 75.00 |" in table


def test_paired_statistics():
    p = R.paired([3.0, 5.0, 4.0, 10.0], [1.0, 1.0, 4.0, 2.0])  # differences 2, 4, 0, 8
    assert p["mean"] == pytest.approx(3.5)
    assert p["sd"] == pytest.approx(math.sqrt(35 / 3))
    assert p["median"] == pytest.approx(3.0)
    assert (p["min"], p["max"]) == (0.0, 8.0)
    assert p["t"] == pytest.approx(3.5 / (math.sqrt(35 / 3) / 2))
    assert (p["higher"], p["n"]) == (3, 4)  # a tie is not higher
    assert R.paired([2.0, 3.0], [1.0, 2.0])["t"] == math.inf  # equal, non-zero differences
    assert R.paired([1.0, 2.0], [1.0, 2.0])["t"] == 0.0


def test_versus_holds_the_method_against_every_other(tmp_path):
    a = str(tmp_path / "a")
    for seed, (mine, theirs) in enumerate([(0.86, 0.80), (0.85, 0.82), (0.87, 0.81)], start=1):
        write_run(a, "paramwin_pbt", seed, [mine, mine - 0.01])
        write_run(a, "random_search", seed, [theirs, theirs - 0.01])
    table = R.versus(R.summary(R.load(a)))
    line = next(l for l in table.splitlines() if l.startswith("| random_search |"))
    # mean 86.00 against 81.00: +5.00 over a spread of 1.00; per seed +6, +3, +6
    assert "| 86.00 ± 1.00 | 81.00 ± 1.00 | +5.00 | yes (+5.00 vs 1.00) |" in line
    assert "+5.00 ± 1.73 (+6.00; +3.00–+6.00)" in line
    assert line.endswith("| +5.00 | 3 of 3 |")
