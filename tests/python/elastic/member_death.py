"""A Python trainer's exception is a death the others survive (docs/elastic.md).

Run under a launcher that lets the survivors live (Open MPI: ``mpirun --enable-recovery``):
the last rank, the fittest agent (``selection="fittest"``), raises an exception inside its
``with paramwin.Agent(...)`` block at step 20. ``paramwin.exit_on_exception()`` makes that end
its process: without it the rank would wait in the block's collective ``close()`` (and at
exit in ``MPI_Finalize``) forever, alive to the others. The survivors step on for 2 s with
rebirths every 8-12 steps; each must judge the dead rank a suspect, and none of its later
rebirths may choose it. They then meet over a communicator without the dead rank, rank 0
prints "survivors: python member death survived", and each ends with ``os._exit(0)``.
``--without-exit-on-exception`` shows what it prevents (not a test: the job hangs).
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import paramwin

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
victim = size - 1
if "--without-exit-on-exception" not in sys.argv:  # the hang it prevents (docs/elastic.md)
    paramwin.exit_on_exception()

layout = paramwin.Layout()
layout.add("w", 1000)
w = np.full(1000, float(rank), dtype=np.float32)
metric = 0.0 if rank == victim else 1.0 + rank  # lower is better: the victim is the fittest
suspect_at = -1
reason = ""
rebirths_after = 0
chosen_after = 0
with paramwin.Agent(layout, comm, age=(8, 12), selection="fittest", k=1,
                    name="python_member_death") as agent:
    agent.publish([w])
    comm.Barrier()
    t0 = time.monotonic()
    step = 0
    while time.monotonic() - t0 < 2.0:
        step += 1
        w += 0.001
        event = agent.step(step, metric, [w])
        if rank == victim and step == 20:
            raise RuntimeError("the trainer of the last rank failed")
        time.sleep(0.003)
        if event.died and suspect_at >= 0:
            rebirths_after += 1
            chosen_after += sum(1 for d in event.donors if d.rank == victim)
        if suspect_at < 0:
            entry = agent.roster(victim)
            if entry.suspect:
                suspect_at, reason = step, entry.suspect_reason

    print(f"rank {rank}: dead rank {victim} a suspect at step {suspect_at} ({reason}); "
          f"{rebirths_after} rebirths after it, {chosen_after} from the dead rank", flush=True)
    failed = suspect_at < 0 or rebirths_after < 1 or chosen_after != 0
    if failed:
        print(f"FAILED: rank {rank}: the dead rank chosen, or not judged", flush=True)
    survivors = comm.Create_group(comm.Get_group().Excl([victim]))
    if survivors.allreduce(int(failed), op=MPI.MAX) == 0 and survivors.Get_rank() == 0:
        print("survivors: python member death survived", flush=True)
    sys.stdout.flush()
    os._exit(0)  # freeing the window or MPI_Finalize would wait for the dead rank
