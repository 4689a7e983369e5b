"""Checkpoints of the averaging agents from Python (docs/averaging.md, "Checkpoints"): a run
saved and continued against a new agent that loads the file and continues, in lockstep (the
same peers and bit-identical parameters at every step), TorchAveragingAgent with an Adam
optimizer's state, and bad checkpoints refused on every rank with nothing changed."""

import os

import numpy as np
import pytest
import torch
from mpi4py import MPI

import paramwin
from paramwin.torch import TorchAveragingAgent
from conftest import need_ranks

NEVER = 1 << 40  # publish_every: the lockstep publishes itself


def layout():
    return paramwin.Layout().add("w", (4, 3), "float32").add("b", (3,), "float64")


def initial(rank):
    return {"w": np.full((4, 3), 0.5 * rank, np.float32), "b": np.arange(3.0) - rank}


def shared_dir(comm, tmp_path):
    """A directory every rank sees (rank 0's tmp_path)."""
    return comm.bcast(str(tmp_path) if comm.Get_rank() == 0 else None, root=0)


def lockstep(comm, agent, params, steps):
    """Per step: train, step (no publish), barrier, publish, barrier; returns the rounds' peers
    and indices and the values."""
    rank = comm.Get_rank()
    out = []
    for t in steps:
        params["w"] += np.float32(0.01 * np.sin(t + rank))
        params["b"] += 0.02 * np.cos(0.5 * t + rank)
        r = agent.step(params)
        r = getattr(r, "across", r)  # a hierarchy: the leader's round
        out.append(([p.rank for p in r.peers], r.round, params["w"].copy(), params["b"].copy()))
        comm.Barrier()
        agent.publish(params)
        comm.Barrier()
    return out


def test_a_resumed_run_makes_the_rounds_of_the_uninterrupted_one(comm, tmp_path):
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    path = os.path.join(shared_dir(comm, tmp_path), "avg.h5")
    options = dict(topology="random", k=1, seed=4, interval=2, warmup_steps=1,
                   publish_every=NEVER)
    params = initial(rank)
    with paramwin.AveragingAgent(layout(), comm, **options) as a:
        a.publish(params)
        comm.Barrier()
        lockstep(comm, a, params, range(1, 6))
        a.save_checkpoint(path, params)
        saved = {k: v.copy() for k, v in params.items()}
        rounds, version = a.rounds, a.version
        original = lockstep(comm, a, params, range(6, 13))
    loaded = {"w": np.zeros((4, 3), np.float32), "b": np.zeros(3)}
    with paramwin.AveragingAgent(layout(), comm, **options) as b:
        result = b.load_checkpoint(path, loaded)
        assert isinstance(result, paramwin.CheckpointLoad)
        assert result.steps == 5 and result.agents == comm.Get_size() and result.source == rank
        assert (loaded["w"] == saved["w"]).all() and (loaded["b"] == saved["b"]).all()
        assert b.steps == 5 and b.rounds == rounds and b.version == version
        comm.Barrier()
        resumed = lockstep(comm, b, loaded, range(6, 13))
    assert any(peers for peers, _, _, _ in original)
    for (p0, r0, w0, b0), (p1, r1, w1, b1) in zip(original, resumed):
        assert p1 == p0 and r1 == r0
        assert (w1 == w0).all() and (b1 == b0).all()


def test_bad_checkpoints_are_refused_on_every_rank_and_change_nothing(comm, tmp_path):
    rank, size = comm.Get_rank(), comm.Get_size()
    d = shared_dir(comm, tmp_path)
    params = initial(rank)
    with paramwin.AveragingAgent(layout(), comm) as agent:
        agent.publish(params)
        agent.step(params)
        comm.Barrier()
        agent.save_checkpoint(os.path.join(d, "good.h5"), params)
        before = {k: v.copy() for k, v in params.items()}
        with pytest.raises(paramwin.CheckpointError, match="does not exist"):
            agent.load_checkpoint(os.path.join(d, "missing.h5"), params)
        other = paramwin.Layout().add("w", (4, 4), "float32").add("b", (3,), "float64")
        with paramwin.AveragingAgent(other, comm) as wide:
            wide.save_checkpoint(os.path.join(d, "wide.h5"),
                                 {"w": np.ones((4, 4), np.float32), "b": np.ones(3)})
        with pytest.raises(paramwin.CheckpointError, match="another layout"):
            agent.load_checkpoint(os.path.join(d, "wide.h5"), params)
        if size > 1:
            if rank == 0:
                with paramwin.AveragingAgent(layout(), MPI.COMM_SELF) as alone:
                    alone.save_checkpoint(os.path.join(d, "alone.h5"), params)
            comm.Barrier()
            with pytest.raises(paramwin.CheckpointError, match="population of 1 averaging"):
                agent.load_checkpoint(os.path.join(d, "alone.h5"), params)
        with pytest.raises(paramwin.InvalidArgument):
            agent.load_checkpoint(os.path.join(d, "good.h5"), {"w": np.zeros(5, np.float32)})
        assert (params["w"] == before["w"]).all() and (params["b"] == before["b"]).all()
        assert agent.steps == 1
        comm.Barrier()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)


def adam_steps(net, opt, rank, steps):
    for t in steps:
        opt.zero_grad()
        x = torch.full((1, 3), 0.1 * t + rank)
        net.fc(x).pow(2).sum().backward()
        opt.step()


def test_torch_agent_restores_the_module_and_the_optimizer(comm, tmp_path):
    rank = comm.Get_rank()
    path = os.path.join(shared_dir(comm, tmp_path), "torch.h5")
    torch.manual_seed(rank)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    with TorchAveragingAgent(net, comm) as agent:
        for t in range(1, 4):
            adam_steps(net, opt, rank, [t])
            agent.step()
        comm.Barrier()
        agent.save_checkpoint(path, optimizer=opt)
        saved = {k: v.clone() for k, v in net.state_dict().items()}
        saved_steps = [float(opt.state[p]["step"]) for p in net.parameters()]
    torch.manual_seed(100 + rank)
    net2 = Net()
    opt2 = torch.optim.Adam(net2.parameters(), lr=1e-2)
    with TorchAveragingAgent(net2, comm) as agent2:
        result = agent2.load_checkpoint(path, optimizer=opt2)
        assert result.steps == 3
        for k, v in net2.state_dict().items():
            assert torch.equal(v, saved[k]), k
        assert [float(opt2.state[p]["step"]) for p in net2.parameters()] == saved_steps
        for p, q in zip(net.parameters(), net2.parameters()):
            assert torch.equal(opt.state[p]["exp_avg_sq"], opt2.state[q]["exp_avg_sq"])
        comm.Barrier()


def test_hierarchy_resumes_every_training_rank(comm, tmp_path):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    if n % 2:
        pytest.skip("needs groups of 2 ranks")
    path = os.path.join(shared_dir(comm, tmp_path), "tiers.h5")
    options = dict(topology="ring", publish_every=NEVER)
    params = initial(rank)
    with paramwin.AgentGroups(comm, ranks_per_agent=2) as groups:
        with paramwin.HierarchicalAveragingAgent(groups, layout(), **options) as a:
            a.publish(params)
            comm.Barrier()
            lockstep(comm, a, params, range(1, 4))
            if not a.leader:  # the members differ at the save; a leader keeps what it published
                params["b"] += 1.0
            a.save_checkpoint(path, params)
            saved = {k: v.copy() for k, v in params.items()}
            original = lockstep(comm, a, params, range(4, 8))
        loaded = {"w": np.zeros((4, 3), np.float32), "b": np.zeros(3)}
        with paramwin.HierarchicalAveragingAgent(groups, layout(), **options) as b:
            assert b.load_checkpoint(path, loaded).steps == 3 and b.steps == 3
            assert (loaded["w"] == saved["w"]).all() and (loaded["b"] == saved["b"]).all()
            comm.Barrier()
            resumed = lockstep(comm, b, loaded, range(4, 8))
    for (_, r0, w0, b0), (_, r1, w1, b1) in zip(original, resumed):
        assert r1 == r0 and (w1 == w0).all() and (b1 == b0).all()
