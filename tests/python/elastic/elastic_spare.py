"""Spares take dead members' slots from Python (docs/elastic.md, "Epochs and spares").

Six ranks under a launcher that lets the survivors live (Open MPI: ``mpirun
--enable-recovery``): four members of a ``paramwin.ElasticAgent`` population and two spares.
After iteration 30 slot 3's trainer raises an exception: it resigns, a spare takes its slot,
and the process waits as a spare itself. After iteration 60 slot 1's process ends
(``os._exit(3)``): the others judge it dead by its pid, and a spare takes the slot. Every
joined spare's first step must be a rebirth with reason ``joined`` from live donors, with its
parameters the mix of theirs (each member's parameters are its slot's constant, so the mix is
a weighted mean of the donors' constants). The last epoch's members gather their failures,
slot 0 prints "elastic: python spares took every dead slot", and every process ends with
``os._exit(0)``. ``--standing``: ``replacement="standing_window"``.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import paramwin



class TrainerFault(Exception):
    """The injected exception of a trainer (paramwin's errors are RuntimeErrors)."""


comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
members = size - 2
replacement = "standing_window" if "--standing" in sys.argv else "new_window"
layout = paramwin.Layout()
layout.add("w", 1000)
w = np.zeros(1000, dtype=np.float32)
agent = paramwin.ElasticAgent(layout, comm, members=members, replacement=replacement,
                              check_seconds=0.02, triggers=["none"], k=2,
                              name="python_elastic_spare", suspect_seconds=1.0)
failures = 0
joins = 0
finished = False
while not finished and agent.wait_for_slot():
    slot = agent.slot
    joined = agent.joined
    first = True
    try:
        for it in range(agent.resume_iteration, 150):
            if not (joined and first):
                w[:] = 100.0 * (slot + 1)  # a member's snapshot: its slot's constant
            event = agent.step(it, float(slot), [w])
            if joined and first:
                joins += 1
                slots_of = {r: s for s, r in enumerate(agent.members)}
                donors = [(d.rank if replacement == "new_window" else slots_of.get(d.rank, -1),
                           d.weight) for d in event.donors]
                want = sum(weight * 100.0 * (s + 1) for s, weight in donors)
                ok = (event.died and event.reason == paramwin.DeathReason.joined
                      and len(donors) == 2 and all(s >= 0 for s, _ in donors)
                      and abs(float(w[0]) - want) <= 1e-4 * want and float(w.max() - w.min()) == 0.0)
                print(f"world rank {rank}: joined slot {slot} at iteration {it} (epoch "
                      f"{agent.epoch}): {event.reason} from slots {[s for s, _ in donors]}, "
                      f"w {float(w[0]):.4f} (mix {want:.4f})", flush=True)
                if not ok:
                    failures += 1
                    print(f"FAILED: world rank {rank}: the joined step was not a rebirth from "
                          "2 live donors with their mix", flush=True)
            first = False
            time.sleep(0.005)  # the step's compute: the faults are judged while it trains
            if not joined and slot == members - 1 and it == 30:
                raise TrainerFault("the trainer's exception")
            if not joined and slot == 1 and it == 60:
                sys.stdout.flush()
                os._exit(3)
        agent.finish([w])
        finished = True
    except paramwin.EvictedError:
        pass
    except TrainerFault:
        agent.resign()
if not finished:
    os._exit(0)  # a spare released at the end
failed = agent.members_gather(float(failures))
joined_all = agent.members_gather(float(joins))
if agent.slot == 0:
    print(f"last epoch {agent.epoch}, {len(failed)} slots, {int(sum(joined_all))} joins", flush=True)
    if sum(failed) == 0 and sum(joined_all) == 2 and agent.epoch == 2 and len(failed) == members:
        print("elastic: python spares took every dead slot", flush=True)
    else:
        print("FAILED: python elastic spares", flush=True)
sys.stdout.flush()
os._exit(0)
