"""A module's averaging population outlives its processes (docs/elastic.md, "Averaging
populations"): ``paramwin.torch.TorchElasticAveragingAgent`` with Adam's state mixed
(``mix_optimizer_state=True``).

Six ranks under a launcher that lets the survivors live (Open MPI: ``mpirun
--enable-recovery``): four members and two spares, each with a ``Linear(3, 2)`` and Adam, no
gossip rounds (``interval`` 10^9: the joins are the only mixes). A member's state before each
step is its slot's constants: parameters ``100 (slot + 1)``, Adam's ``exp_avg`` ``10 (slot +
1)``, ``exp_avg_sq`` ``slot + 1``, ``step`` ``5 (slot + 1)``; a spare holds junk (10^6, step
1). After iteration 30 slot 3's trainer raises (it resigns, a spare takes its slot); after
iteration 60 slot 1's process ends (``os._exit(3)``). Each joined spare's first step must be a
join (kind ``joined``, self weight 0) whose module and Adam state hold the exact weighted mix
of the members its round read (the step count mixed and rounded). The last epoch's members
gather their failures, and slot 0 prints "elastic: torch averaging spares joined every dead
slot". ``--standing``: ``replacement="standing_window"``.
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
    """The member's state: its slot's constants; slot -1: a spare's junk."""
    with torch.no_grad():
        for p in model.parameters():
            base = 1.0e6 if slot < 0 else None
            p.fill_(base or 100.0 * (slot + 1))
            opt.state[p] = {"step": torch.tensor(1.0 if slot < 0 else 5.0 * (slot + 1)),
                            "exp_avg": torch.full_like(p, base or 10.0 * (slot + 1)),
                            "exp_avg_sq": torch.full_like(p, base or 1.0 * (slot + 1))}


def check_join(model, opt, agent, r, slot_of):
    """Whether the join holds the exact mix of the members it read (one line printed)."""
    read = [(slot_of(p.rank), p.weight) for p in r.peers if p.skipped == "none"]
    ok = (r.kind == paramwin.RoundKind.joined and r.applied and r.self_weight == 0.0
          and len(read) > 0 and all(s not in (-1, agent.slot) for s, _ in read)
          and abs(sum(w for _, w in read) - 1.0) < 1e-9)

    def mix(f):
        return sum(w * f(s) for s, w in read)
    for p in model.parameters():
        st = opt.state.get(p, {})
        ok = ok and torch.allclose(p.detach(), torch.full_like(p, mix(lambda s: 100.0 * (s + 1))))
        ok = ok and "exp_avg" in st and torch.allclose(
            st["exp_avg"], torch.full_like(p, mix(lambda s: 10.0 * (s + 1))))
        ok = ok and "exp_avg_sq" in st and torch.allclose(
            st["exp_avg_sq"], torch.full_like(p, mix(lambda s: 1.0 * (s + 1))))
        ok = ok and "step" in st and float(st["step"]) == round(mix(lambda s: 5.0 * (s + 1)))
    ok = ok and agent.optimizer_states_mixed >= 2
    print(f"world rank {agent.agent.world_rank}: joined slot {agent.slot} (epoch "
          f"{agent.epoch}): {r.kind} round over slots {[s for s, _ in read]}, "
          f"{'the exact mix' if ok else 'NOT the mix'}", flush=True)
    return ok


def main():
    paramwin.exit_on_exception()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    members = size - 2
    standing = "--standing" in sys.argv
    torch.manual_seed(rank)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    agent = paramwin.torch.TorchElasticAveragingAgent(
        model, comm, members=members, optimizer=opt, mix_optimizer_state=True,
        replacement="standing_window" if standing else "new_window", check_seconds=0.02,
        dead_after_seconds=1.5, agree_seconds=20.0, interval=10**9, timeout_seconds=1.0,
        name="python_torch_elastic_averaging", suspect_seconds=1.0)

    def slot_of(peer_rank):
        """The slot of a round's peer in the current epoch (-1: none)."""
        if not standing:
            return peer_rank if 0 <= peer_rank < members else -1
        ranks = agent.agent.members
        return ranks.index(peer_rank) if peer_rank in ranks else -1

    failures = joins = 0
    finished = False
    while not finished and agent.wait_for_slot():
        slot, joined, first = agent.slot, agent.joining, True
        try:
            for it in range(agent.resume_iteration, 150):
                encode(model, opt, -1 if joined and first else slot)
                r = agent.step()
                if joined and first:
                    joins += 1
                    failures += 0 if check_join(model, opt, agent, r, slot_of) else 1
                first = False
                time.sleep(0.005)  # the step's compute: the faults are judged meanwhile
                if not joined and slot == members - 1 and it == 30:
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
    if agent.slot == 0:
        print(f"last epoch {agent.epoch}, {len(failed)} slots, {int(sum(joined_all))} joins",
              flush=True)
        if sum(failed) == 0 and sum(joined_all) == 2 and agent.epoch == 2 \
                and len(failed) == members:
            print("elastic: torch averaging spares joined every dead slot", flush=True)
        else:
            print(f"FAILED: {int(sum(failed))} bad joins, {int(sum(joined_all))} joins, epoch "
                  f"{agent.epoch}, {len(failed)} slots", flush=True)
    sys.stdout.flush()
    os._exit(0)


main()
