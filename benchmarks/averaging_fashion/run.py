"""Runs of the averaging methods on Fashion-MNIST: every MPI rank trains the same model on its
own shard (data-parallel training), for every method and condition asked, one seed.

    mpiexec.openmpi -n 4 /usr/bin/python3 benchmarks/averaging_fashion/run.py --seed 1 \\
        --methods ddp,periodic,paramwin_inline,no_comm --conditions none,slow_rank,random

(as root add ``--allow-run-as-root``, with more ranks than cores ``--oversubscribe``.) The ranks
are launched by mpiexec, not torchrun, because paramwin's averaging methods need an MPI
communicator over the same processes (mpi4py's ``COMM_WORLD``); torch.distributed (gloo, for
DDP and PeriodicModelAverager) is initialised over the same ranks with a TCP rendezvous on
localhost whose port rank 0 picks. One launch runs every method and condition of one seed in
turn (a launch costs seconds of imports on 2 cores). Appends one JSON line per run to
--out/runs.jsonl; scripts/averaging_fashion.sh runs the seeds and report.py tables and plots.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(os.path.dirname(HERE), "pbt_fashion"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from mpi4py import MPI  # noqa: E402

import data as D  # noqa: E402  (pbt_fashion's)
import harness as H  # noqa: E402
import methods  # noqa: E402
from common import polite_allgather, polite_barrier  # noqa: E402  (pbt_fashion's)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods",
                   default="ddp,periodic,average_all,paramwin_inline,paramwin_background,"
                           "paramwin_hierarchical,no_comm",
                   help=f"comma-separated, of: {', '.join(methods.available())}")
    p.add_argument("--conditions", default=",".join(H.CONDITIONS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=600, help="training steps per rank (600)")
    p.add_argument("--period", type=int, default=8, help="H, steps between averages (8)")
    p.add_argument("--warmup", type=int, default=50,
                   help="warm-up steps of synchronous averaging (periodic) (50)")
    p.add_argument("--tick", type=float, default=1.0,
                   help="seconds between parameter copies: the curve's grid (1.0)")
    p.add_argument("--points", type=int, default=30,
                   help="most points of a run's accuracy curve (30): each costs evaluations")
    p.add_argument("--train-subset", type=int, default=0, help="training images (0: all 50,000)")
    p.add_argument("--test-subset", type=int, default=0, help="test images (0: all 10,000)")
    p.add_argument("--out", default="out/averaging_fashion")
    o = p.parse_args()
    names = [m for m in o.methods.split(",") if m]
    conditions = [c for c in o.conditions.split(",") if c]
    unknown = [m for m in names if m not in methods.available()]
    unknown += [c for c in conditions if c not in H.CONDITIONS]
    if unknown:
        p.error(f"unknown method or condition: {', '.join(unknown)}")
    if min(o.steps, o.period, o.points - 1) < 1 or o.warmup < 0 or o.tick <= 0:
        p.error("--steps and --period must be positive, --points >= 2, --warmup >= 0, --tick > 0")
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    port = comm.bcast(free_port() if rank == 0 else None, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    data = D.load(train_subset=o.train_subset, test_subset=o.test_subset)
    own = H.shard(data.train, rank, size)
    polite_barrier(comm)
    step_time = H.calibrate(own, o.seed, rank)
    times = polite_allgather(comm, step_time)
    if rank == 0:
        print(f"averaging_fashion: seed {o.seed}, {size} ranks, {len(own.y)} images per shard, "
              f"calibrated step time {min(times) * 1e3:.2f}-{max(times) * 1e3:.2f} ms", flush=True)
    for condition in conditions:
        for name in names:
            run = H.Run(comm, rank, size, o.seed, name, condition, o.steps, o.period, o.warmup,
                        o.tick)
            straggler = H.Straggler(condition, rank, size, o.seed, step_time)
            method = methods.make(name, run)
            t0 = time.perf_counter()
            mine = H.train(run, method, own, straggler)
            result = H.evaluate_everywhere(comm, mine, data.test, o.tick, o.points, o.seed)
            if rank == 0:
                curve, gathered = result
                row = H.write(o.out, run, gathered, curve)
                print(f"averaging_fashion: {name} {condition} seed {o.seed}: "
                      f"{row['population_steps_per_s']:.0f} steps/s, "
                      f"{row['wall_seconds']:.1f} s training, acc rank 0 "
                      f"{row['final_acc_rank0']:.4f} average {row['final_acc_avg']:.4f} "
                      f"({time.perf_counter() - t0:.1f} s with evaluation)", flush=True)
            polite_barrier(comm)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # one rank failing must end the run, not leave the others waiting
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
