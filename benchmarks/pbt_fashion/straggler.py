"""Straggler conditions shared by the Fashion-MNIST benchmarks (pbt_fashion, averaging_fashion).

A condition delays a rank before each of its training steps, by a sleep: a slower device whose
CPU idles (the other ranks get the core meanwhile).
- ``none``: no delay.
- ``slow_rank``: the last rank sleeps its own step time before every step: 2x slower.
- ``random``: at every step each rank stalls, with probability RANDOM_P, for RANDOM_STALL_STEPS
  of its own step times (a pause of about ten steps: preemption, a noisy neighbour); the mean
  slowdown is 1.5x.
The step time is calibrated (``calibrate``) with every rank calibrating at once (the contention
of the run itself), so a delay never depends on the noise of one step: once per launch in
averaging_fashion (one launch runs every method), once per seed in pbt_fashion (run.py keeps it
in its --out folder for the seed's other launches), so every method of a seed gets the same
delays.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Dict

import model as M

CONDITIONS = ("none", "slow_rank", "random")
RANDOM_P = 0.05
RANDOM_STALL_STEPS = 10.0
CALIBRATION_STEPS = 20


@dataclass
class Straggler:
    """The condition's delay before each step, in seconds."""
    condition: str
    rank: int
    size: int
    seed: int
    step_time: float  # this rank's calibrated step time, seconds

    def __post_init__(self) -> None:
        if self.condition not in CONDITIONS:
            raise ValueError(f"unknown condition {self.condition!r} (one of {CONDITIONS})")
        self._rng = random.Random(self.seed * 7919 + self.rank * 104729 + 3)
        self.total = 0.0

    def delay(self) -> float:
        d = 0.0
        if self.condition == "slow_rank" and self.rank == self.size - 1:
            d = self.step_time  # 2x slower: sleeps its own step time before every step
        elif self.condition == "random" and self._rng.random() < RANDOM_P:
            d = RANDOM_STALL_STEPS * self.step_time
        self.total += d
        return d

    def wait(self) -> None:
        """Sleeps this step's delay."""
        d = self.delay()
        if d > 0:
            time.sleep(d)


def calibrate(train_split, seed: int, rank: int, hyper: Dict[str, float]) -> float:
    """Median seconds of one training step of this rank (pbt_fashion's MLP, batch 64), measured
    on a throwaway model after 5 warm-up steps."""
    net = M.make_model(seed + 1)
    opt = M.make_optimizer(net, hyper)
    batches = M.Batches(train_split, seed * 1000 + rank + 555)
    times = []
    for i in range(CALIBRATION_STEPS + 5):
        x, y = batches.next()
        t0 = time.perf_counter()
        M.train_step(net, opt, x, y)
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ceiling(condition: str, seed: int, size: int, steps: int, interval: int) -> Dict[str, float]:
    """What the condition's delays alone allow a population that never waits, against one that
    meets every @p interval steps (checkpoint-file PBT, paramwin's synchronous mode): each
    rank's time for @p steps steps of one unit plus its delays (the very draws run.py's ranks
    make for @p seed), without a meeting point, over the time with one (every interval as long
    as its slowest rank's). Each rank on a device of its own: the CPU a sleeping rank leaves to
    the others on a shared machine is not modelled. Returns the fastest, mean and slowest
    rank's ratio."""
    delays = []
    for rank in range(size):
        s = Straggler(condition, rank, size, seed, 1.0)
        delays.append([1.0 + s.delay() for _ in range(steps)])
    met = sum(max(sum(d[i:i + interval]) for d in delays) for i in range(0, steps, interval))
    alone = [sum(d) / met for d in delays]
    return {"fastest": min(alone), "mean": statistics.mean(alone), "slowest": max(alone)}


def main() -> None:
    import argparse
    p = argparse.ArgumentParser(description="The wall time a population that never waits needs, "
                                "as a fraction of one that meets every interval (ceiling())")
    p.add_argument("--condition", default="random", choices=CONDITIONS[1:])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--size", type=int, default=4)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--interval", type=int, default=100)
    o = p.parse_args()
    print("| seed | fastest rank | mean | slowest rank |")
    print("| ---: | ---: | ---: | ---: |")
    rows = [ceiling(o.condition, s, o.size, o.steps, o.interval) for s in range(1, o.seeds + 1)]
    for seed, r in enumerate(rows, 1):
        print(f"| {seed} | {r['fastest']:.3f} | {r['mean']:.3f} | {r['slowest']:.3f} |")
    med = {k: statistics.median(r[k] for r in rows) for k in ("fastest", "mean", "slowest")}
    print(f"| median | {med['fastest']:.3f} | {med['mean']:.3f} | {med['slowest']:.3f} |")


if __name__ == "__main__":
    main()
