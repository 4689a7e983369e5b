"""The Python side of docs/benchmarks.md's Python comparison: rank 0 pulls 10M float32
parameters in 8 layers (torch tensors, zero copy) from ranks 1..k through ``import paramwin``
— the same case as the C++ benchmark ``layers8/pull/k:K/n:10M`` (multi_donor_bench.cpp) —
and, for scale, the same mean with the seed's method written in Python with mpi4py
(examples/python/seed_policy.py: per donor lock, Get of the whole flat buffer, unlock,
torch add_, then a division; and its per-layer variant). Medians over --reps timed calls
after a warm-up, one JSON line per case on rank 0; for paramwin also the median of the C++
pull's own time inside those calls (PullResult.seconds): the difference is the binding's.

    mpiexec.openmpi --oversubscribe -n 4 python3 benchmarks/python_pull_bench.py [--reps 30]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
from mpi4py import MPI

import paramwin

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
from seed_policy import SeedSpawnPolicy  # noqa: E402

N, LAYERS = 10_000_000, 8


def idle_until(comm, request):
    """Donors wait without spinning (4 ranks, 2 cores): shared-memory pulls need no donor."""
    while not request.Test():
        time.sleep(0.001)


def timed(comm, reps, fn):
    """Median seconds of fn() on rank 0 (after one untimed call); others wait politely."""
    rank = comm.Get_rank()
    times = []
    if rank == 0:
        fn()
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    idle_until(comm, comm.Ibarrier())
    return statistics.median(times) if times else 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    o = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    per_layer = N // LAYERS
    layout = paramwin.Layout()
    for i in range(LAYERS):
        layout.add(f"layer{i}", per_layer)
    params = [torch.full((per_layer,), float(rank)) + torch.arange(per_layer) % 7
              for _ in range(LAYERS)]
    results = []
    with paramwin.ParameterWindow(layout, comm) as win:
        win.publish(params)
        idle_until(comm, comm.Ibarrier())
        for k in (1, 3):
            if k + 1 > size:
                continue
            donors = list(range(1, k + 1))
            inner = []  # the C++ pull's own time (PullResult.seconds) inside each Python call
            seconds = timed(comm, o.reps,
                            lambda: inner.append(win.pull(donors, params).seconds))
            if rank == 0:
                want = sum(range(1, k + 1)) / k
                assert torch.equal(params[0], torch.full((per_layer,), want) + torch.arange(per_layer) % 7)
            results.append({"name": f"python/pull/k:{k}/n:10M", "median_ms": seconds * 1e3,
                            "core_median_ms": statistics.median(inner[1:] or [0.0]) * 1e3})
        idle_until(comm, comm.Ibarrier())

    # The seed's method, same sizes, same MPI, same run.
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.full((N,), float(rank)))
    seed = SeedSpawnPolicy(model, comm=comm)
    seed.expose(model)
    idle_until(comm, comm.Ibarrier())
    out = torch.empty(N)
    for k in (1, 3):
        if k + 1 > size:
            continue
        donors = list(range(1, k + 1))
        seconds = timed(comm, o.reps, lambda: seed.mean_of(donors, out))
        if rank == 0:
            assert float(out[0]) == sum(donors) / k
        results.append({"name": f"seed/flat/k:{k}/n:10M", "median_ms": seconds * 1e3})
        seconds = timed(comm, o.reps,
                        lambda: seed.mean_of_per_layer(donors, out, [per_layer] * LAYERS))
        results.append({"name": f"seed/per_layer/k:{k}/n:10M", "median_ms": seconds * 1e3})
    idle_until(comm, comm.Ibarrier())
    seed.shutdown()
    if rank == 0:
        for r in results:
            r.update(reps=o.reps, ranks=size, mpi=paramwin.mpi_vendor)
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
