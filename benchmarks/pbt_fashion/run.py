"""Runs of methods on Fashion-MNIST, one after another: every MPI rank is one agent.

    mpiexec -n 4 /usr/bin/python3 benchmarks/pbt_fashion/run.py --method paramwin_pbt --seed 1

--method takes one method or several, comma-separated (one launch: the suite's short version
saves the start-up of Python, PyTorch and the data per method; the benchmark runs one method
per launch).

(Open MPI, Debian's mpi4py: ``mpiexec.openmpi``, as root with ``--allow-run-as-root``, with
more ranks than cores ``--oversubscribe``.) Writes one JSON-lines file per rank into --out;
scripts/pbt_fashion.sh runs every method and seed and benchmarks/pbt_fashion/report.py tables
and plots them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checkpoint_pbt  # noqa: E402
import data as D  # noqa: E402
from drift import Drift  # noqa: E402
import optuna_tpe  # noqa: E402
import model as M  # noqa: E402
import random_cosine  # noqa: E402
import random_search  # noqa: E402
import straggler as S  # noqa: E402
from common import Context, polite_allgather, polite_barrier  # noqa: E402

METHODS = {
    "random_search": random_search.run,
    "random_cosine": random_cosine.run,
    "optuna_tpe": optuna_tpe.run,
    "checkpoint_pbt": checkpoint_pbt.run,
    # The searched learning rate is the peak of a cosine schedule (model.anneal_lr).
    "checkpoint_pbt_cosine": lambda ctx: checkpoint_pbt.run(ctx, anneal=True),
}
PARAMWIN_METHODS = ("paramwin_pbt", "paramwin_pbt_sync", "paramwin_pb2", "paramwin_pbt_sync_twin",
                    "paramwin_pbt_cosine", "paramwin_pbt_same")


def calibration(comm, o, train) -> float:
    """This rank's step time for the straggler delays: calibrated by the first launch of a
    seed (every rank at once: the run's own contention) and kept in --out, so that every
    method of the seed gets the same delays (scripts/pbt_fashion.sh removes the file when it
    starts)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    path = os.path.join(o.out, f"calibration-{o.condition}-seed{o.seed}.json")
    known = None  # rank 0 reads, every rank takes its answer: one decision, no split collective
    if rank == 0 and os.path.exists(path):
        with open(path) as f:
            known = json.load(f)
        if len(known) != size:
            known = None
    known = comm.bcast(known, root=0)
    if known is not None:
        return float(known[rank])
    polite_barrier(comm)
    times = polite_allgather(comm, S.calibrate(train, o.seed, rank,
                                               {"lr": 0.05, "weight_decay": 1e-4}))
    if rank == 0:
        os.makedirs(o.out, exist_ok=True)
        with open(path, "w") as f:
            json.dump(times, f)
        print(f"pbt_fashion: seed {o.seed}, {o.condition}: calibrated step time "
              f"{min(times) * 1e3:.2f}-{max(times) * 1e3:.2f} ms", flush=True)
    return float(times[rank])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--method", required=True,
                   help="one or several (comma-separated) of "
                        + ", ".join(sorted(METHODS) + list(PARAMWIN_METHODS)))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=2000, help="training steps per agent (2000)")
    p.add_argument("--budget-seconds", type=float, default=3600.0,
                   help="wall-clock cap per run, training clock (3600)")
    p.add_argument("--interval", type=int, default=100, help="steps per PBT interval (100)")
    p.add_argument("--val-limit", type=int, default=2000,
                   help="validation images the metric uses (2000)")
    p.add_argument("--train-subset", type=int, default=0, help="training images (0: all 50,000)")
    p.add_argument("--test-subset", type=int, default=0, help="test images (0: all 10,000)")
    p.add_argument("--condition", default="none", choices=S.CONDITIONS,
                   help="stragglers: none, slow_rank (the last rank 2x slower), random (stalls)")
    p.add_argument("--task", default="default", choices=sorted(M.TASKS),
                   help="the search space (tasks.TASKS): default, schedule (learning rates "
                        "1e-4..1, a range whose ends are clearly wrong) or drift (the same "
                        "range on a stream whose pixels are permuted anew 3 times)")
    p.add_argument("--out", default="out/pbt_fashion")
    o = p.parse_args()
    if min(o.steps, o.interval, o.val_limit) < 1 or o.budget_seconds <= 0:
        p.error("--steps, --interval, --val-limit and --budget-seconds must be positive")
    methods = o.method.split(",")
    unknown = [m for m in methods if m not in METHODS and m not in PARAMWIN_METHODS]
    if unknown:
        p.error(f"unknown method(s) {unknown}")
    M.use_task(o.task)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    data = D.load(train_subset=o.train_subset, test_subset=o.test_subset)
    step_time = 0.0  # no delay to scale without stragglers
    if o.condition != "none":
        step_time = calibration(comm, o, data.train)
    drift = Drift(o.seed, o.steps, M.TASKS[o.task].get("shifts", 0))  # the seed's, every method's
    for method in methods:
        straggler = S.Straggler(o.condition, rank, size, o.seed, step_time)
        polite_barrier(comm)  # every agent starts its clock together
        ctx = Context(comm, rank, size, o.seed, method, o.steps, o.budget_seconds, o.interval,
                      o.val_limit, data, o.out, straggler, o.task, drift)
        if method in PARAMWIN_METHODS:
            import paramwin_pbt  # only these need paramwin
            paramwin_pbt.run(ctx)
        else:
            METHODS[method](ctx)
        ctx.close()
        polite_barrier(comm)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # one agent failing must end the run, not leave the others waiting
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
