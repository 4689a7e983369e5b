"""Staged layers outlive the core's call: a host window stages a CUDA tensor through a host
copy (publish) or a host buffer (pull, step), and the core reads and writes those by address,
so every call must hold them until the core returns. At 70381e7 AveragingAgent.publish
dropped its copies before the core read them (the H200 run of 2026-12-04: the peers mixed
freed memory, docs/gpu.md). Here CPU tensors are staged as CUDA ones would be, each host copy
watched through a weak reference, and a spy in front of the core checks that every copy made
for its call is still alive when the call begins. Any number of ranks."""

import weakref

import numpy as np
import pytest
import torch

import paramwin
from paramwin._tensors import Layers, dtype_name, is_torch_tensor, shape_of

LAYOUT = paramwin.Layout().add("w", (4, 3), "float64").add("b", (3,), "float32")


class Watch:
    """The host copies made since the core's last call, as weak references."""

    def __init__(self):
        self.copies = []
        self.checked = 0

    def take(self, what):
        """Fails the test if a copy made for this call is gone already; forgets them."""
        dead = [i for i, ref in enumerate(self.copies) if ref() is None]
        assert self.copies, f"{what}: no layer was staged"
        assert not dead, f"{what}: {len(dead)} of {len(self.copies)} staged copies were freed " \
                         "before the core read them"
        self.copies = []
        self.checked += 1


@pytest.fixture
def watch(monkeypatch):
    """Stages every CPU torch tensor as a host window stages a CUDA tensor (Layers._stage),
    watching each host copy."""
    w = Watch()
    describe = Layers._describe

    def staged(self, name, i, obj, writable):
        if not (is_torch_tensor(obj) and obj.device.type == "cpu"):
            return describe(self, name, i, obj, writable)
        host = self._stage(obj, writable)
        w.copies.append(weakref.ref(host))
        self._keep.append(host)
        return (name, int(host.data_ptr()), dtype_name(obj, name, i), shape_of(host), False)

    monkeypatch.setattr(Layers, "_describe", staged)
    return w


class Spy:
    """The core object in front of which it stands, its calls checked by ``watch``."""

    def __init__(self, core, watch):
        self._core, self._watch = core, watch

    def __getattr__(self, name):
        target = getattr(self._core, name)
        if name not in ("publish", "step", "finish", "pull", "save_checkpoint",
                        "load_checkpoint"):
            return target

        def call(*args, **kwargs):
            self._watch.take(name)
            return target(*args, **kwargs)

        return call


def tensors(rank):
    g = torch.Generator().manual_seed(rank)
    return {"w": torch.randn((4, 3), generator=g, dtype=torch.float64),
            "b": torch.randn((3,), generator=g, dtype=torch.float32)}


def test_averaging_agent_holds_its_staged_copies(comm, watch):
    values = tensors(comm.Get_rank())
    with paramwin.AveragingAgent(LAYOUT, comm, topology="all", name="staging_avg") as agent:
        agent._agent = Spy(agent._agent, watch)
        agent.publish(values)
        comm.Barrier()
        for _ in range(3):
            agent.step(values)
            comm.Barrier()
        agent.finish(values)
        agent._agent = agent._agent._core
    assert watch.checked == 5
    # Every rank ends with the mean of the values published and mixed from staged copies.
    mine = torch.cat([values["w"].reshape(-1), values["b"].double()]).numpy()
    for other in comm.allgather(mine):
        np.testing.assert_allclose(other, mine, rtol=1e-6)


def test_agent_and_window_hold_their_staged_copies(comm, watch):
    rank, size = comm.Get_rank(), comm.Get_size()
    values = tensors(rank)
    with paramwin.Agent(LAYOUT, comm, k=1, shortfall="clamp", name="staging_agent") as agent:
        agent._agent = Spy(agent._agent, watch)
        agent.publish(values)
        agent.step(0, float(rank), values)
        agent._agent = agent._agent._core
    with paramwin.ParameterWindow(LAYOUT, comm, name="staging_win") as win:
        win._win = Spy(win._win, watch)
        win.publish(values)
        comm.Barrier()
        if size > 1:
            into = {k: torch.zeros_like(v) for k, v in values.items()}
            win.pull([(rank + 1) % size], into)
            want = tensors((rank + 1) % size)
            for k in into:
                assert torch.equal(into[k], want[k]), k
        comm.Barrier()
        win._win = win._win._core
    assert watch.checked >= 3
