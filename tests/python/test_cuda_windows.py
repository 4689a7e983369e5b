"""Device windows from Python on a GPU (docs/gpu.md, docs/python.md "CUDA tensors"): a
ParameterWindow(memory="cuda") round trip of CUDA tensors of every dtype, in place and bit for
bit (a mix with momentum gives a host window's bits), the wrong memory refused with nothing
changed, host windows still staging CUDA tensors, publishes ordered after the current stream,
an AveragingAgent on a device window mixing as a host window's does,
an Agent's checkpoints of CUDA tensors, and TorchAgent's device window by default (rebirths
land the donor's values bit for bit, no staging; checkpoints; grouped agents), its fallback
and refusals. Skipped, with a message, where torch sees no GPU.

Run on 2 ranks (several ranks may share one GPU):
    PYTHONPATH=<build>/python mpiexec -n 2 python -m pytest tests/python/test_cuda_windows.py
"""

import pytest
import torch
from mpi4py import MPI

import paramwin
from paramwin import _core
from paramwin._tensors import Layers
from paramwin.torch import TorchAgent
from conftest import need_ranks
from test_torch_agent import Net, fill  # a Linear(3, 2) and a 0-dim 'scale' (named first)

# Every test skips, on every rank alike, where torch sees no GPU.
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="torch.cuda.is_available() is False: the device-window tests need a CUDA GPU "
    "(test_device_options.py covers what runs without one)")

LAYOUT = (paramwin.Layout().add("f32", (5, 7)).add("f64", 3, "float64")
          .add("bf16", (4, 4), "bfloat16").add("f16", (), "float16"))
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}
BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
        torch.float16: torch.int16}
HOST_MEMORY = "is host memory, but the window is a device window"


@pytest.fixture
def dev(comm):
    """This rank's GPU (ranks share the GPUs round-robin), made current."""
    device = torch.device("cuda", comm.Get_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


@pytest.fixture
def no_staging(monkeypatch):
    """Fails the test if any layer is staged through host memory."""
    def refuse(self, obj, writable):
        raise AssertionError(f"staged a tensor on {obj.device} through host memory")

    monkeypatch.setattr(Layers, "_stage", refuse)


def values(rank, device="cpu"):
    """Rank ``rank``'s deterministic values of every LAYOUT layer."""
    g = torch.Generator().manual_seed(1000 + rank)
    return {s.name: torch.randn(s.shape, generator=g, dtype=torch.float64)
            .to(DTYPES[s.dtype]).to(device) for s in LAYOUT}


def same_bits(a, b):
    a, b = a.detach().cpu().reshape(-1), b.detach().cpu().reshape(-1)
    return a.dtype == b.dtype and torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


def test_the_library_sees_the_gpu_torch_sees():
    count, why = _core.cuda_devices()
    assert count > 0, f"torch sees a GPU but paramwin does not ({why}): a build with CUDA?"


def test_parameter_window_round_trip_of_every_dtype_in_place(comm, dev, no_staging):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    donor = (rank + 1) % n
    with paramwin.ParameterWindow(LAYOUT, comm, memory="cuda", cuda_device=dev.index,
                                  name="dev") as win, \
            paramwin.ParameterWindow(LAYOUT, comm, name="host") as host:
        assert win.memory == "cuda" and host.memory == "host"
        r = win.publish(values(rank, dev), stamp=7 + rank)
        assert r.published and r.version == 1 and win.version == 1
        host.publish(values(rank), stamp=7 + rank)
        comm.Barrier()
        out = {k: torch.zeros_like(v) for k, v in values(rank, dev).items()}
        pointers = {k: v.data_ptr() for k, v in out.items()}
        got = win.pull(donor, out)
        assert (got.donors[0].rank, got.donors[0].version, got.donors[0].stamp) == \
            (donor, 1, 7 + donor)
        expected = values(donor)
        for k, v in out.items():
            assert v.device == dev and v.data_ptr() == pointers[k]  # written in place
            assert same_bits(v, expected[k]), k
        # A weighted mix with momentum of every other rank: the host window's bits.
        donors = [d for d in range(n) if d != rank]
        weights = [1.0 + d for d in donors]
        mixed = values(rank, dev)
        reference = values(rank)
        win.pull(donors, mixed, weights=weights, momentum=0.25)
        host.pull(donors, reference, weights=weights, momentum=0.25)
        for k in mixed:
            assert same_bits(mixed[k], reference[k]), k
        comm.Barrier()


def test_wrong_memory_is_refused_and_changes_nothing(comm, dev):
    need_ranks(comm, 2)
    rank, n = comm.Get_rank(), comm.Get_size()
    donor = (rank + 1) % n
    with paramwin.ParameterWindow(LAYOUT, comm, memory="cuda", name="dev") as win:
        win.publish(values(rank, dev))
        comm.Barrier()
        for host in ({k: v.numpy() for k, v in values(rank).items() if k != "bf16"} |
                     {"bf16": values(rank)["bf16"]}, values(rank)):
            with pytest.raises(paramwin.InvalidArgument, match=HOST_MEMORY):
                win.publish(host)
        assert win.version == 1
        out = {k: torch.full_like(v, 3.0) for k, v in values(rank).items()}
        with pytest.raises(paramwin.InvalidArgument, match=HOST_MEMORY):
            win.pull(donor, out)
        assert all(bool((v == 3.0).all()) for v in out.values())
        comm.Barrier()
    # Host windows keep staging CUDA tensors (a device window exists in this process now),
    # momentum included: the staged buffer holds the tensor's values before the mix.
    with paramwin.ParameterWindow(LAYOUT, comm, name="host") as host:
        host.publish(values(rank, dev))
        comm.Barrier()
        staged = values(rank, dev)
        reference = values(rank)
        host.pull(donor, staged, momentum=0.5)
        host.pull(donor, reference, momentum=0.5)
        for k in staged:
            assert staged[k].device == dev and same_bits(staged[k], reference[k]), k
        comm.Barrier()


def test_publish_waits_for_the_current_stream(comm, dev):
    need_ranks(comm, 2)
    if not hasattr(torch.cuda, "_sleep"):
        pytest.skip("this torch has no torch.cuda._sleep to keep a stream busy")
    rank, n = comm.Get_rank(), comm.Get_size()
    layout = paramwin.Layout().add("w", 1 << 20)
    with paramwin.ParameterWindow(layout, comm, memory="cuda", name="stream") as win:
        w = torch.zeros(1 << 20, device=dev)
        torch.cuda.synchronize(dev)
        side = torch.cuda.Stream(dev)  # not ordered with the window's (legacy default) stream
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time before the fill
            w.fill_(rank + 1.0)
            win.publish([w])  # waits for the current stream, side, first
        comm.Barrier()
        out = torch.zeros_like(w)
        win.pull((rank + 1) % n, [out])
        assert bool((out == (rank + 1) % n + 1.0).all())
        comm.Barrier()


def population(comm, dev, agent, net, adam):
    """24 steps with deaths at age 4: every rebirth holds, bit for bit, what its donor published
    at the recorded version; the parameters stay the same tensors on the GPU."""
    rank, n = comm.Get_rank(), comm.Get_size()
    pointers = [p.data_ptr() for p in net.parameters()]
    x = torch.ones(4, 3, device=dev)
    fill(net, float(rank * 100))
    published = {agent.publish().version: float(rank * 100)}
    comm.Barrier()
    rebirths = []
    for step in range(1, 25):
        fill(net, float(rank * 100 + step))
        loss = net(x).pow(2).mean()
        event = agent.step(step, loss.item())
        held = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).cpu()
        assert bool((held == held[0]).all())
        if event.published:
            published[event.version] = float(rank * 100 + step) if not event.died else \
                float(held[0])
        if event.died:
            d = event.donors[0]
            rebirths.append((d.rank, d.version, float(held[0])))
            assert all(p not in adam.state for p in net.parameters())
            continue
        adam.zero_grad()
        loss.backward()
        adam.step()
    assert [p.data_ptr() for p in net.parameters()] == pointers
    assert all(p.device == dev for p in net.parameters())
    comm.Barrier()
    everyone = comm.allgather(published)
    for donor, version, got in rebirths:
        assert got == everyone[donor][version]
    assert (len(rebirths) > 0) == (n > 1)


def test_torch_agent_uses_a_device_window_by_default(comm, dev, capfd, no_staging):
    torch.manual_seed(comm.Get_rank())
    net = Net().to(dev)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)
    with TorchAgent(net, adam, comm, seed=5, age=(4, 4), k=1, shortfall="clamp") as agent:
        assert agent.device_window and agent.agent.memory == "cuda"
        population(comm, dev, agent, net, adam)
    assert "device window" not in capfd.readouterr().err


def test_grouped_torch_agent_uses_a_device_window(comm, dev, no_staging):
    need_ranks(comm, 4)
    with paramwin.AgentGroups(comm, ranks_per_agent=2) as groups:
        net = Net().to(dev)
        fill(net, float(groups.agent * 100))  # the replicas of one agent are identical
        with TorchAgent(net, torch.optim.SGD(net.parameters(), lr=0.0), groups=groups, k=1,
                        shortfall="clamp", age=(2, 2), seed=3) as agent:
            assert agent.device_window and agent.agent.memory == "cuda"
            agent.publish()
            comm.Barrier()
            # On until every agent was reborn once (at most 100 steps), in step on every rank:
            # with two agents a death is deferred while the only donor is mid-rebirth itself
            # or publishes between the reads of its two shards (test_groups.py).
            died = steps = 0
            while steps < 3 or (steps < 100 and comm.allreduce(died == 0, op=MPI.LOR)):
                steps += 1
                died += agent.step(steps, 0.0).died
            held = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).cpu()
            rebirths = comm.allgather(died)  # checked on every rank alike
            assert all(d > 0 for d in rebirths), f"rebirths per rank in {steps} steps: {rebirths}"
            # Reborn from the other agent: every element is its value.
            assert bool((held == held[0]).all()) and float(held[0]) in (0.0, 100.0)
            replicas = groups.agent_comm.allgather(held.tolist())
            assert replicas[0] == replicas[1]
        comm.Barrier()


def test_a_module_moved_off_its_gpu_is_refused_and_can_come_back(comm, dev):
    net = Net().to(dev)
    with TorchAgent(net, torch.optim.SGD(net.parameters(), lr=0.1), comm, k=1,
                    shortfall="clamp") as agent:
        assert agent.device_window
        agent.step(1, 0.0)
        net.cpu()
        with pytest.raises(paramwin.InvalidArgument,
                           match=r"'scale' is on cpu, but this TorchAgent's window is a device "
                                 rf"window on cuda:{dev.index}"):
            agent.step(2, 0.0)
        assert agent.steps == 1
        net.to(dev)
        agent.step(2, 0.0)
        assert agent.steps == 2
        comm.Barrier()


def test_averaging_agent_on_a_device_window_mixes_as_a_host_window_does(comm, dev, no_staging):
    """An AveragingAgent on a device window (CUDA tensors mixed in place) beside one on a host
    window over CPU copies, in lock step: the rounds read the peers' explicit publishes of the
    previous iteration (the steps publish nothing), and after every round the CUDA tensors
    hold the host agent's bits. finish() of device tensors is refused on every rank."""
    need_ranks(comm, 2)
    rank = comm.Get_rank()
    layout = paramwin.Layout().add("f32", (37, 5)).add("f64", 11, "float64")
    layout.add("bf16", (9,), "bfloat16")
    g = torch.Generator().manual_seed(500 + rank)
    host = {s.name: torch.randn(s.shape, generator=g, dtype=torch.float64).to(DTYPES[s.dtype])
            for s in layout}
    cuda = {k: v.to(dev) for k, v in host.items()}
    pointers = [t.data_ptr() for t in cuda.values()]
    options = {"topology": "ring", "publish_every": 1_000_000}
    with paramwin.AveragingAgent(layout, comm, memory="cuda", name="avg_dev", **options) as d, \
            paramwin.AveragingAgent(layout, comm, name="avg_host", **options) as h:
        assert d.memory == "cuda" and h.memory == "host"
        for t in range(4):
            d.publish(cuda)
            h.publish(host)
            comm.Barrier()
            rd, rh = d.step(cuda), h.step(host)
            assert rd.applied and rh.applied, (rd.note, rh.note)
            assert [(p.rank, p.version) for p in rd.peers] == \
                [(p.rank, p.version) for p in rh.peers]
            for k in host:
                assert same_bits(cuda[k], host[k]), (t, k)
            comm.Barrier()
        assert [t.data_ptr() for t in cuda.values()] == pointers  # mixed in place
        before = {k: v.clone() for k, v in cuda.items()}
        with pytest.raises(paramwin.InvalidArgument, match="needs host memory"):
            d.finish(cuda)
        assert all(same_bits(cuda[k], before[k]) for k in cuda)
        comm.Barrier()


# The checkpoint tests come last: at cd948f4 a device window's save_checkpoint crashed the
# Python process (SIGSEGV) on the H200, which ended every test after it (docs/gpu.md).
def test_an_agent_on_a_device_window_checkpoints_its_cuda_tensors(comm, dev, tmp_path):
    """An agent on a device window checkpoints its CUDA tensors (copied through the host) and
    loads them back in place, bit for bit."""
    rank = comm.Get_rank()
    path = comm.bcast(str(tmp_path / "c.h5") if rank == 0 else None)
    with paramwin.Agent(LAYOUT, comm, memory="cuda", k=1, shortfall="clamp",
                        name="agent") as agent:
        assert agent.memory == "cuda"
        saved = values(rank, dev)
        agent.publish(saved)
        agent.save_checkpoint(path, saved)
        loaded = values(rank + 7, dev)
        pointers = [t.data_ptr() for t in loaded.values()]
        agent.load_checkpoint(path, loaded)
        assert [t.data_ptr() for t in loaded.values()] == pointers
        for k in saved:
            assert loaded[k].device == dev and same_bits(loaded[k], saved[k]), k
        comm.Barrier()


def test_torch_agent_stages_when_asked_and_checkpoints_on_its_device_window(comm, dev, capfd,
                                                                             tmp_path):
    rank = comm.Get_rank()
    pattern = comm.bcast(str(tmp_path / "c{step}.h5") if rank == 0 else None)
    checkpoints = {"checkpoint_every": 8, "checkpoint_path": pattern}
    for keywords, device_window in (({"device_windows": "never"}, False), (checkpoints, True)):
        torch.manual_seed(rank)
        net = Net().to(dev)
        adam = torch.optim.Adam(net.parameters(), lr=1e-3)
        capfd.readouterr()
        with TorchAgent(net, adam, comm, seed=5, age=(4, 4), k=1, shortfall="clamp",
                        **keywords) as agent:
            assert agent.device_window == device_window
            assert agent.agent.memory == ("cuda" if device_window else "host")
            assert "device window" not in capfd.readouterr().err  # asked for, or no obstacle
            population(comm, dev, agent, net, adam)
            agent.wait_checkpoint()
    comm.Barrier()
    # The periodic saves wrote the device window's parameters: the newest loads back.
    net = Net().to(dev)
    with TorchAgent(net, torch.optim.Adam(net.parameters(), lr=1e-3), comm, k=1,
                    shortfall="clamp", **checkpoints) as agent:
        assert agent.device_window
        assert agent.resume_newest() is not None
        assert all(p.device == dev for p in net.parameters())
    comm.Barrier()
