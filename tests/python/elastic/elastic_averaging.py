"""Spares take dead members' slots in a Python averaging population (docs/elastic.md,
"Averaging populations").

Six ranks under a launcher that lets the survivors live (Open MPI: ``mpirun
--enable-recovery``): four members of a ``paramwin.ElasticAveragingAgent`` population that
gossip over a ring every step (5 ms apart), and two spares whose parameters start as junk (10^6). After
iteration 30 slot 3's trainer raises an exception: it resigns, a spare takes its slot, and the
process waits as a spare itself. After iteration 60 slot 1's process ends (``os._exit(3)``).
Every joined spare's first step must be a join ("joined") that read live members only, with
weights summing to 1 and its parameters among the members' values (no junk); every peer of
every round must hold another slot of the current epoch; and the last epoch's members must end
in consensus. Slot 0 prints "elastic: python averaging spares took every dead slot"; every
process ends with ``os._exit(0)``. ``--standing``: ``replacement="standing_window"``.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import paramwin


class TrainerFault(Exception):
    """The injected exception of a trainer (paramwin's errors are RuntimeErrors)."""


paramwin.exit_on_exception()
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
members = size - 2
standing = "--standing" in sys.argv
layout = paramwin.Layout()
layout.add("w", 1000)
w = np.full(1000, 1.0e6, dtype=np.float32)
if rank < members:
    w[:] = 1000.0 * rank
agent = paramwin.ElasticAveragingAgent(
    layout, comm, members=members, replacement="standing_window" if standing else "new_window",
    check_seconds=0.02, dead_after_seconds=1.5, agree_seconds=20.0, topology="ring",
    timeout_seconds=1.0, name="python_elastic_averaging", suspect_seconds=1.0)
failures = 0
joins = 0
finished = False
original = rank < members


def slot_of(peer_rank):
    """The slot of a round's peer in the current epoch (-1: none)."""
    if not standing:
        return peer_rank if 0 <= peer_rank < members else -1
    return agent.members.index(peer_rank) if peer_rank in agent.members else -1


while not finished and agent.wait_for_slot():
    slot = agent.slot
    joined = agent.joining
    first = True
    try:
        for it in range(agent.resume_iteration, 150):
            result = agent.step([w])
            for p in result.peers:
                if slot_of(p.rank) in (-1, slot):
                    failures += 1
                    print(f"FAILED: world rank {rank}: round peer {p.rank} holds no other slot",
                          flush=True)
            if joined and first:
                joins += 1
                read = [p for p in result.peers if p.skipped == "none"]
                ok = (result.kind == paramwin.RoundKind.joined and result.applied
                      and not result.joining and result.self_weight == 0.0 and read
                      and abs(sum(p.weight for p in read) - 1.0) < 1e-9
                      and 0.0 <= float(w[0]) <= 3000.0)
                print(f"world rank {rank}: joined slot {slot} at iteration {it}, "
                      f"{len(read)} members read, w[0] {float(w[0]):.4f}"
                      + ("" if ok else " (FAILED: not a proper join)"), flush=True)
                failures += 0 if ok else 1
            first = False
            time.sleep(0.005)  # the trainer's compute
            if original and not joined and it == 30 and slot == members - 1:
                raise TrainerFault("the trainer's exception")
            if original and not joined and it == 60 and slot == 1:
                print(f"world rank {rank}: slot 1 exits", flush=True)
                os._exit(3)
        agent.finish([w])
        finished = True
    except paramwin.EvictedError:
        pass
    except TrainerFault:
        agent.resign()

if finished:
    gathered = agent.members_gather(float(failures) * 1e9 + float(w[0]))
    joined_total = agent.members_gather(float(joins))
    if agent.slot == 0:
        bad = [v for v in gathered if v >= 1e8]
        values = [v for v in gathered if v < 1e8]
        spread = max(values) - min(values) if values else 0.0
        print(f"last epoch {agent.epoch}, w[0] {min(values):.4f}..{max(values):.4f}, "
              f"{int(sum(joined_total))} joins", flush=True)
        if not bad and agent.epoch == 2 and sum(joined_total) == 2 and spread < 0.01 \
                and 0.0 <= min(values) and max(values) <= 3000.0:
            print("elastic: python averaging spares took every dead slot", flush=True)
        else:
            print(f"FAILED: {len(bad)} members failed, epoch {agent.epoch}, "
                  f"{sum(joined_total)} joins, spread {spread}", flush=True)
sys.stdout.flush()
os._exit(0)
