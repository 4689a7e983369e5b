"""Data-parallel training with asynchronous model averaging from Python
(paramwin.torch.TorchAveragingAgent, docs/averaging.md): every rank trains the same small MLP
on its own shard of a synthetic classification task and, after every optimizer step, mixes in
the latest parameters its peers published, read one-sidedly: no rank waits for another, so
the slow rank (--slow-rank, sleeping its own step time before each step) holds nobody up.
Prints each rank's loss on its shard, its steps per second, and the consensus distance; ends
with one collective mean (finish()) that leaves every rank with the same model.

    mpiexec -n 4 /usr/bin/python3 examples/python/averaging.py --steps 300 --topology ring \\
        [--interval 1] [--background] [--slow-rank 3] [--log out/averaging.{rank}.jsonl]

(Open MPI's mpiexec, the MPI of Debian's mpi4py; as root add --allow-run-as-root, with more
ranks than cores --oversubscribe; PYTHONPATH=build-openmpi/python from the build tree.)
"""

from __future__ import annotations

import argparse
import time

import torch
from mpi4py import MPI

from paramwin.torch import TorchAveragingAgent

FEATURES, CLASSES, SAMPLES, BATCH = 20, 4, 2048, 32


def task(seed: int):
    """A fixed random teacher: every rank labels its inputs with the same rule."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(FEATURES, CLASSES, generator=g)


def shard(teacher, rank: int):
    """This rank's own samples (its inputs shifted by a rank-dependent offset: the shards
    differ, so a rank alone learns a biased model)."""
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(SAMPLES, FEATURES, generator=g) + 0.5 * rank
    return x, (x @ teacher).argmax(1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--topology", default="ring", help="all, ring, exponential, random")
    p.add_argument("--interval", type=int, default=1)
    p.add_argument("--background", action="store_true")
    p.add_argument("--slow-rank", type=int, default=-1, help="a rank twice as slow (-1: none)")
    p.add_argument("--log", default="", help="JSON-lines log of the rounds ({rank}: the rank)")
    p.add_argument("--report-every", type=int, default=100)
    o = p.parse_args()
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    teacher = task(7)
    x, y = shard(teacher, rank)
    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    first_loss = None
    with TorchAveragingAgent(model, comm, topology=o.topology, interval=o.interval,
                             background=o.background, event_log=o.log or None) as agent:
        agent.publish()
        start = time.perf_counter()
        for step in range(1, o.steps + 1):
            t0 = time.perf_counter()
            i = torch.randint(0, SAMPLES, (BATCH,))
            loss = loss_fn(model(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == o.slow_rank:
                time.sleep(time.perf_counter() - t0)  # a device twice as slow
            agent.step()  # mix in the peers' latest parameters (when due), then publish
            if first_loss is None:
                first_loss = float(loss)
            if step % o.report_every == 0 or step == o.steps:
                with torch.no_grad():
                    full = float(loss_fn(model(x), y))
                rate = step / (time.perf_counter() - start)
                print(f"rank {rank}: step {step}: loss on its shard {full:.4f}, "
                      f"{rate:.0f} steps/s, {agent.agent.rounds} rounds", flush=True)
        seconds = time.perf_counter() - start
        vec = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
        everyone = comm.allgather(vec)
        mean = torch.stack(everyone).mean(0)
        spread = max(float((v - mean).norm()) for v in everyone)
        agent.finish()  # collective: every rank now holds the mean
        with torch.no_grad():
            final = float(loss_fn(model(x), y))
    rates = comm.gather(o.steps / seconds, root=0)
    finals = comm.gather(final, root=0)
    if rank == 0:
        print(f"consensus distance before finish(): {spread:.4f}")
        print("steps/s per rank: " + ", ".join(f"{r:.0f}" for r in rates))
        print("loss of the final (mean) model on each shard: " +
              ", ".join(f"{f:.4f}" for f in finals))
        print(f"averaging.py: all {size} ranks finished")
    return 0 if final < first_loss else 1


if __name__ == "__main__":
    raise SystemExit(main())
