"""What every averaging method shares: the shard, the training loop (with the straggler
conditions of pbt_fashion/straggler.py), the snapshots the report evaluates, and the records.

One run = one method, one condition, one seed, on every rank of the launch. Each rank trains
the same model (pbt_fashion's MLP, the same initial weights on every rank) on its own disjoint
shard of the 50,000 training images (rank r takes images r, r+N, r+2N, ...) for the same number
of steps, so every method sees the same total samples (ranks x steps x 64). The training loop is
here; a method only wraps the model (DDP) and acts after each optimizer step (averaging), see
methods/__init__.py.

Held-out accuracy is measured after the run, never inside the clock: every ``tick`` seconds of
its training clock a rank copies its parameters (a 400 KB copy), and at the end rank 0 gathers
the copies and evaluates, for each tick time t, rank 0's model and the rank-average model (the
mean of every rank's latest copy at t; a rank that finished contributes its final parameters).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch

import model as M
import straggler as S
from common import polite_barrier
from straggler import CONDITIONS, Straggler  # noqa: F401  (run.py and the methods use them)

LR = 0.05
WEIGHT_DECAY = 1e-4


def shard(split, rank: int, size: int):
    """Rank ``rank``'s disjoint share of ``split`` (every size-th image from rank)."""
    return type(split)(split.x[rank::size].contiguous(), split.y[rank::size].contiguous())


def flat_parameters(net: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector([p.detach() for p in net.parameters()]).clone()


@dataclass
class Run:
    """What a method sees: the ranks, the model and optimizer, the run's settings."""
    comm: Any                 # mpi4py COMM_WORLD (paramwin's methods need it)
    rank: int
    size: int
    seed: int
    method: str
    condition: str
    steps: int                # training steps per rank (equal total samples)
    period: int               # H: steps between averaging rounds
    warmup: int               # warm-up steps of synchronous averaging where a method has them
    tick: float               # seconds between parameter copies (the accuracy curve's grid)
    model: torch.nn.Module = field(default=None)       # the plain module (never the DDP wrapper)
    optimizer: Optional[torch.optim.Optimizer] = None
    extra: Dict[str, Any] = field(default_factory=dict)  # a method's own counters (recorded)


def calibrate(data_shard, seed: int, rank: int) -> float:
    """This rank's step time (straggler.calibrate) with this benchmark's hyperparameters."""
    return S.calibrate(data_shard, seed, rank, {"lr": LR, "weight_decay": WEIGHT_DECAY})


def train(run: Run, method, data_shard, straggler: Straggler) -> Dict[str, Any]:
    """The loop every method runs. Returns this rank's timings and parameter copies."""
    run.model = M.make_model(run.seed)  # the same initial weights on every rank
    run.optimizer = M.make_optimizer(run.model, {"lr": LR, "weight_decay": WEIGHT_DECAY})
    net = method.wrap(run, run.model)
    batches = M.Batches(data_shard, run.seed * 1000 + run.rank * 17)
    copies = [(0.0, 0.0, 0, flat_parameters(run.model))]  # (grid time, clock, step, params)
    polite_barrier(run.comm)  # every rank starts its clock together
    start = time.perf_counter()
    next_tick = run.tick
    for step in range(run.steps):
        straggler.wait()
        x, y = batches.next()
        M.train_step(net, run.optimizer, x, y)
        method.after_step(run, step)
        now = time.perf_counter() - start
        if now >= next_tick:
            copies.append((next_tick, now, step + 1, flat_parameters(run.model)))
            while next_tick <= now:
                next_tick += run.tick
    train_seconds = time.perf_counter() - start
    copies.append((train_seconds, train_seconds, run.steps, flat_parameters(run.model)))
    method.finish(run)  # a closing collective waits for the slowest rank: stamped when it ends
    finish_seconds = time.perf_counter() - start
    copies.append((finish_seconds, finish_seconds, run.steps, flat_parameters(run.model)))
    return {"rank": run.rank, "steps": run.steps, "seconds": train_seconds,
            "finish_seconds": finish_seconds,
            "steps_per_s": run.steps / train_seconds, "delay_seconds": straggler.total,
            "step_time": straggler.step_time, "extra": dict(run.extra), "copies": copies}


def curve_tasks(per_rank: List[Dict[str, Any]], tick: float, max_points: int) -> List[Dict]:
    """The curve's points: grid times (every ``tick`` seconds, thinned to at most
    ``max_points``, plus the time rank 0's training ended and the end) with rank 0's
    parameters and the rank-average parameters at each (the mean of every rank's latest copy
    at t). A rank's last two copies are its parameters when its training ended and after the
    method's ``finish`` (a closing mean, which waits for the slowest rank), each stamped when
    it was taken: a closing mean counts from the time it was made, never from the end of the
    rank's own training. ``avg`` is None where every rank holds rank 0's parameters (ddp)."""
    end = max(r["finish_seconds"] for r in per_rank)
    grid = [k * tick for k in range(int(end / tick) + 1)]
    stride = max(1, -(-len(grid) // max(1, max_points - 1)))
    grid = sorted(set(grid[::stride] + [per_rank[0]["seconds"], end]))

    def latest(r: Dict[str, Any], t: float):
        best = r["copies"][0]
        for c in r["copies"]:
            if c[0] <= t + 1e-9:
                best = c
        return best

    tasks = []
    for t in grid:
        picked = [latest(r, t) for r in per_rank]
        own = picked[0][3]
        same = all(torch.equal(own, c[3]) for c in picked[1:])
        tasks.append({"time": t, "rank0_step": picked[0][2],
                      "samples": sum(c[2] for c in picked) * M.BATCH, "rank0": own,
                      "avg": None if same else torch.stack([c[3] for c in picked]).mean(0)})
    return tasks


@torch.no_grad()
def evaluate(tasks: List[Dict], test, seed: int) -> List[Dict]:
    """Held-out accuracy of each task's rank-0 and average parameters."""
    net = M.make_model(seed)
    rows = []
    for task in tasks:
        torch.nn.utils.vector_to_parameters(task["rank0"], net.parameters())
        acc0 = M.accuracy(net, test)
        acc_avg = acc0
        if task["avg"] is not None:
            torch.nn.utils.vector_to_parameters(task["avg"], net.parameters())
            acc_avg = M.accuracy(net, test)
        rows.append({"time": task["time"], "rank0_step": task["rank0_step"],
                     "samples": task["samples"], "acc_rank0": acc0, "acc_avg": acc_avg})
    return rows


def evaluate_everywhere(comm, mine: Dict[str, Any], test, tick: float, max_points: int,
                        seed: int) -> Optional[Tuple[List[Dict], List[Dict[str, Any]]]]:
    """Gathers the copies on rank 0, shares the curve's points out over every rank (the
    evaluations are most of a run's machine time with the reference BLAS) and returns the curve
    and every rank's record on rank 0 (None elsewhere)."""
    polite_barrier(comm)  # the ranks finish apart: wait asleep, not in a blocking gather
    gathered = comm.gather(mine, root=0)
    chunks = None
    if comm.Get_rank() == 0:
        tasks = curve_tasks(gathered, tick, max_points)
        chunks = [tasks[i::comm.Get_size()] for i in range(comm.Get_size())]
    polite_barrier(comm)
    rows = evaluate(comm.scatter(chunks, root=0), test, seed)
    polite_barrier(comm)
    parts = comm.gather(rows, root=0)
    if comm.Get_rank() != 0:
        return None
    curve = sorted((r for part in parts for r in part), key=lambda r: r["time"])
    return curve, gathered


def write(out_dir: str, run: Run, per_rank: List[Dict[str, Any]], curve: List[Dict]) -> Dict:
    """One JSON line per run in out_dir/runs.jsonl: the summary and the curve."""
    os.makedirs(out_dir, exist_ok=True)
    ranks = [{k: v for k, v in r.items() if k != "copies"} for r in per_rank]
    row = {"method": run.method, "condition": run.condition, "seed": run.seed,
           "ranks": run.size, "steps": run.steps, "period": run.period, "warmup": run.warmup,
           "samples": run.size * run.steps * M.BATCH,
           "population_steps_per_s": sum(r["steps_per_s"] for r in ranks),
           "wall_seconds": max(r["finish_seconds"] for r in ranks),
           "final_acc_rank0": curve[-1]["acc_rank0"], "final_acc_avg": curve[-1]["acc_avg"],
           "per_rank": ranks, "curve": curve, "loadavg": os.getloadavg()[0]}
    with open(os.path.join(out_dir, "runs.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    return row
