"""A module's population outlives its processes (docs/elastic.md, "Python"):
``paramwin.torch.TorchElasticAgent`` with the optimizer's state and the learning rate
inherited by the spare that takes a dead member's slot.

Six ranks under a launcher that lets the survivors live (Open MPI: ``mpirun
--enable-recovery``): four members and two spares, each with a ``Linear(3, 2)`` and Adam.
A member's state before each step is its slot's constants: parameters ``100 (slot + 1)``,
Adam's ``exp_avg`` ``10 (slot + 1)``, ``exp_avg_sq`` ``slot + 1``, ``step`` ``5 (slot + 1)``
and learning rate ``0.001 (slot + 1)``. After iteration 30 slot 3's trainer raises (it
resigns, a spare takes its slot); after iteration 60 slot 1's process ends (``os._exit(3)``).
Each joined spare's first step must be a rebirth (reason ``joined``) from 2 live donors whose
weighted mix it holds: in the module's parameters, in Adam's state (the step rounded), and
as its learning rate the best donor's (``explore.inherit=best``, no explore rule), in the
optimizer's param groups too. The last epoch's members gather their failures, and slot 0
prints "elastic: torch spares inherited every dead slot". ``--standing``:
``replacement="standing_window"``. ``--refill`` (Open MPI): five ranks, four members and one
spare that the population keeps by MPI_Comm_spawn (``spawn_pool=1``); both faults are exits,
so the second slot is taken by a spawned process (this script with the same arguments, its
MPI_COMM_WORLD the refill's new processes only), which must be one of the joiners.
"""

import os
import sys
import time

import torch
from mpi4py import MPI

import paramwin
import paramwin.torch


class TrainerFault(Exception):
    """The injected exception of a trainer (paramwin's errors are RuntimeErrors)."""


def encode(model, opt, slot):
    """The member's state: its slot's constants (see the module's docstring)."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(100.0 * (slot + 1))
            opt.state[p] = {"step": torch.tensor(5.0 * (slot + 1)),
                            "exp_avg": torch.full_like(p, 10.0 * (slot + 1)),
                            "exp_avg_sq": torch.full_like(p, 1.0 * (slot + 1))}
    for g in opt.param_groups:
        g["lr"] = 0.001 * (slot + 1)


def check_join(model, opt, agent, event, slots_of):
    """Whether the joined rebirth holds the mix of its donors (one line printed)."""
    donors = [(slots_of.get(d.rank, -1), d.weight) for d in event.donors]
    if len(donors) != 2 or any(s < 0 for s, _ in donors):
        print(f"FAILED: donors {donors}", flush=True)
        return False

    def mix(f):
        return sum(w * f(s) for s, w in donors)
    ok = event.died and event.reason == paramwin.DeathReason.joined
    for p in model.parameters():
        st = opt.state.get(p, {})
        ok = ok and torch.allclose(p.detach(), torch.full_like(p, mix(lambda s: 100.0 * (s + 1))))
        ok = ok and "exp_avg" in st and torch.allclose(
            st["exp_avg"], torch.full_like(p, mix(lambda s: 10.0 * (s + 1))))
        ok = ok and "exp_avg_sq" in st and torch.allclose(
            st["exp_avg_sq"], torch.full_like(p, mix(lambda s: 1.0 * (s + 1))))
        ok = ok and "step" in st and float(st["step"]) == round(mix(lambda s: 5.0 * (s + 1)))
    lr = agent.hyperparameters["lr"]
    best = min(s for s, _ in donors)  # the fittest: lower metric (the slot) is better
    ok = ok and abs(lr - 0.001 * (best + 1)) < 1e-12
    ok = ok and all(g["lr"] == lr for g in opt.param_groups)
    ok = ok and agent.optimizer_states_inherited >= 2
    print(f"world rank {agent.agent.world_rank}: joined slot {agent.slot} (epoch "
          f"{agent.epoch}): {event.reason} from slots {[s for s, _ in donors]}, lr {lr}, "
          f"{'the exact mix' if ok else 'NOT the mix'}", flush=True)
    return ok


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    refill = "--refill" in sys.argv
    # --refill: 4 members (a spawned process's world is not the population's).
    members = 4 if refill else size - 2
    replacement = "standing_window" if "--standing" in sys.argv else "new_window"
    torch.manual_seed(rank)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.001 * (rank + 1))
    agent = paramwin.torch.TorchElasticAgent(
        model, opt, comm, members=members, replacement=replacement, check_seconds=0.02,
        triggers=["none"], k=2, inherit_optimizer_state=True,
        hyperparameters={"lr": 0.001 * (rank + 1)}, name="python_torch_elastic",
        suspect_seconds=1.0, spawn_pool=1 if refill else 0)
    spawned = agent.agent.refills["spawned_here"]
    failures = joins = spawned_joins = 0
    finished = False
    while not finished and agent.wait_for_slot():
        slot, joined, first = agent.slot, agent.joined, True
        try:
            for it in range(agent.resume_iteration, 150):
                if not (joined and first):
                    encode(model, opt, slot)
                event = agent.step(it, float(slot))
                if joined and first:
                    joins += 1
                    spawned_joins += int(spawned)
                    # A donor's window rank: its slot (new_window), or its world rank.
                    slots_of = {r: s for s, r in enumerate(agent.agent.members)}
                    if replacement == "new_window":
                        slots_of = {s: s for s in range(members)}
                    if not check_join(model, opt, agent, event, slots_of):
                        failures += 1
                first = False
                time.sleep(0.005)  # the step's compute: the faults are judged meanwhile
                if not joined and slot == members - 1 and it == 30:
                    if refill:  # the pool must be refilled for the next fault's slot
                        sys.stdout.flush()
                        os._exit(3)
                    raise TrainerFault("the trainer's exception")
                if not joined and slot == 1 and it == 60:
                    sys.stdout.flush()
                    os._exit(3)
            agent.finish()
            finished = True
        except paramwin.EvictedError:
            pass
        except TrainerFault:
            agent.resign()
    if not finished:
        os._exit(0)  # a spare released at the end
    failed = agent.agent.members_gather(float(failures))
    joined_all = agent.agent.members_gather(float(joins))
    spawned_all = agent.agent.members_gather(float(spawned_joins))
    if agent.slot == 0:
        print(f"last epoch {agent.epoch}, {len(failed)} slots, {int(sum(joined_all))} joins "
              f"({int(sum(spawned_all))} by spawned processes; refills {agent.agent.refills})",
              flush=True)
        if sum(failed) == 0 and sum(joined_all) == 2 and agent.epoch == 2 \
                and len(failed) == members and (not refill or sum(spawned_all) >= 1):
            print("elastic: torch spares inherited every dead slot", flush=True)
        else:
            print("FAILED: torch elastic spares", flush=True)
    sys.stdout.flush()
    os._exit(0)


main()
