"""Checkpoints from Python (docs/checkpoints.md; the C++ library's files): save and load round
trips on every rank count, resume_newest from the checkpoint_* options, a bad file raising
CheckpointError on every rank with nothing changed, checkpoint hooks, and TorchAgent's
optimizer state. (C++ <-> Python files: tests/python/interop, CTest python.checkpoint_interop.)"""

import os

import numpy as np
import pytest

import paramwin

LAYOUT = paramwin.Layout().add("w", (3, 2)).add("b", 2, "float64")
LAYOUT.add_hyperparameter("lr")


def shared_dir(comm, tmp_path):
    """A directory every rank sees (rank 0's tmp_path)."""
    return comm.bcast(str(tmp_path) if comm.Get_rank() == 0 else None, root=0)


def params(value):
    return {"w": np.full((3, 2), value, np.float32), "b": np.full(2, value + 0.5)}


def test_save_then_load_restores_parameters_state_and_hyperparameters(comm, tmp_path):
    rank = comm.Get_rank()
    path = os.path.join(shared_dir(comm, tmp_path), "pop.h5")
    mine = params(rank + 1.0)
    with paramwin.Agent(LAYOUT, comm, seed=3, triggers="none", k=1,
                        shortfall=paramwin.Shortfall.clamp) as agent:
        agent.set_hyperparameters({"lr": 0.1 * (rank + 1)})
        for s in range(1, 4):
            agent.step(s, float(rank), mine)
        agent.save_checkpoint(path, mine)
        saved_steps = agent.steps
        # Change everything, then load: all of it comes back.
        other = params(-7.0)
        agent.set_hyperparameters({"lr": 9.0})
        agent.step(4, 0.0, other)
        loaded = agent.load_checkpoint(path, other)
        assert isinstance(loaded, paramwin.CheckpointLoad)
        assert loaded.agents == comm.Get_size() and loaded.source == rank and not loaded.reborn
        assert loaded.path == path and loaded.steps == saved_steps == agent.steps == 3
        assert (other["w"] == np.float32(rank + 1.0)).all() and (other["b"] == rank + 1.5).all()
        assert agent.hyperparameters["lr"] == pytest.approx(0.1 * (rank + 1))
        comm.Barrier()


def test_a_bad_checkpoint_raises_on_every_rank_and_changes_nothing(comm, tmp_path):
    rank = comm.Get_rank()
    d = shared_dir(comm, tmp_path)
    mine = params(rank + 2.0)
    with paramwin.Agent(LAYOUT, comm, triggers="none", k=1, shortfall="clamp") as agent:
        agent.step(1, 0.0, mine)
        with pytest.raises(paramwin.CheckpointError):
            agent.load_checkpoint(os.path.join(d, "missing.h5"), mine)
        if rank == 0:
            with open(os.path.join(d, "garbage.h5"), "wb") as f:
                f.write(b"not an HDF5 file" * 10)
        comm.Barrier()
        with pytest.raises(paramwin.CheckpointError):
            agent.load_checkpoint(os.path.join(d, "garbage.h5"), mine)
        assert agent.steps == 1 and (mine["w"] == np.float32(rank + 2.0)).all()
        # Parameters that do not fit the layout: InvalidArgument, before any file work.
        with pytest.raises(paramwin.InvalidArgument):
            agent.save_checkpoint(os.path.join(d, "bad.h5"), {"w": np.zeros(5, np.float32)})
        comm.Barrier()


def test_step_saves_by_the_options_and_resume_newest_loads_the_newest(comm, tmp_path):
    rank = comm.Get_rank()
    pattern = os.path.join(shared_dir(comm, tmp_path), "ck-{step}.h5")
    mine = params(rank * 10.0)
    opts = dict(seed=1, triggers=["age"], age=(1000, 1000), k=1, shortfall="clamp",
                checkpoint_every=2, checkpoint_keep=2, checkpoint_path=pattern)
    with paramwin.Agent(LAYOUT, comm, **opts) as agent:
        assert agent.resume_newest(mine) is None  # nothing saved yet: unchanged
        assert agent.steps == 0
        for s in range(1, 7):
            mine["w"][...] = rank * 10.0 + s
            agent.step(s, 0.0, mine)
        comm.Barrier()
        files = sorted(os.listdir(os.path.dirname(pattern)))
        assert files == ["ck-000000000004.h5", "ck-000000000006.h5"], files
    fresh = params(-1.0)
    with paramwin.Agent(LAYOUT, comm, **opts) as agent:
        loaded = agent.resume_newest(fresh)
        assert loaded is not None and loaded.steps == 6 and agent.steps == 6
        assert (fresh["w"] == np.float32(rank * 10.0 + 6)).all()
        comm.Barrier()


def test_checkpoint_hooks_round_trip_blobs(comm, tmp_path):
    rank = comm.Get_rank()
    path = os.path.join(shared_dir(comm, tmp_path), "hooks.h5")
    mine = params(1.0)
    got = {}
    with paramwin.Agent(LAYOUT, comm, triggers="none", k=1, shortfall="clamp") as agent:
        agent.set_checkpoint_hooks(save=lambda: {"note": f"rank {rank}".encode()},
                                   load=lambda blobs, reborn: got.update(blobs, reborn=reborn))
        agent.save_checkpoint(path, mine)
        agent.load_checkpoint(path, mine)
        assert got == {"note": f"rank {rank}".encode(), "reborn": False}

        def broken():
            raise RuntimeError("no state today")

        agent.set_checkpoint_hooks(save=broken)
        with pytest.raises(paramwin.Error, match="no state today|checkpoint_save"):
            agent.save_checkpoint(path + ".2", mine)
        comm.Barrier()


def test_torch_agent_checkpoint_restores_module_and_optimizer(comm, tmp_path):
    torch = pytest.importorskip("torch")
    from paramwin.torch import TorchAgent

    rank = comm.Get_rank()
    path = os.path.join(shared_dir(comm, tmp_path), "torch.h5")
    torch.manual_seed(rank)
    net = torch.nn.Linear(3, 2)
    adam = torch.optim.Adam(net.parameters(), lr=1e-2)
    x = torch.ones(4, 3)
    with TorchAgent(net, adam, comm, triggers="none", k=1, shortfall="clamp") as agent:
        for s in range(1, 4):
            agent.step(s, 0.0)
            adam.zero_grad()
            net(x).pow(2).mean().backward()
            adam.step()
        agent.save_checkpoint(path)
        want = [p.detach().clone() for p in net.parameters()]
        want_state = {k: v.clone() for k, v in adam.state[net.weight].items()}
        with torch.no_grad():
            for p in net.parameters():
                p.fill_(123.0)
        adam.state.clear()
        loaded = agent.load_checkpoint(path)
        assert loaded.steps == 3
        for p, w in zip(net.parameters(), want):
            assert torch.equal(p.detach(), w)
        for k, v in want_state.items():
            assert torch.equal(adam.state[net.weight][k], v), k
        comm.Barrier()
