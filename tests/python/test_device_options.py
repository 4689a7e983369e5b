"""Device windows from Python without a GPU: the memory= keyword (parsed by the library),
a device window where the library sees no CUDA device (Error on every rank, host windows
still work, a GroupAgent's too), the layer descriptors, and TorchAgent's device_windows=
choice (the C++ TorchAgent's obstacles, agreed across ranks). test_cuda_windows.py runs the
device windows themselves on a GPU."""

import types

import numpy as np
import pytest
import torch

import paramwin
from paramwin import _core
from paramwin._device_windows import WindowChoice, choose_window, device_obstacle
from paramwin._tensors import Layers
from paramwin.torch import TorchAgent

LAYOUT = paramwin.Layout().add("w", (4, 3)).add("s", ())
GPU_VISIBLE = _core.cuda_devices()[0] > 0


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)


def cuda_like(index):
    """What device_obstacle reads of a CUDA tensor on device ``index`` (no GPU needed)."""
    return types.SimpleNamespace(is_cuda=True, device=torch.device("cuda", index))


def every_rank_raises(comm, exc, match, make):
    """make() raises exc matching match on this rank; every rank checks it."""
    with pytest.raises(exc, match=match):
        make()
    comm.Barrier()


# -- memory= on ParameterWindow, Agent, GroupAgent ----------------------------------------------

def test_memory_is_parsed_by_the_library(comm):
    every_rank_raises(comm, paramwin.InvalidArgument, r"unknown memory 'gpu' \(valid: host, cuda\)",
                      lambda: paramwin.ParameterWindow(LAYOUT, comm, memory="gpu"))
    every_rank_raises(comm, paramwin.InvalidArgument, r"unknown memory 'gpu'",
                      lambda: paramwin.Agent(LAYOUT, comm, memory="gpu", k=1, shortfall="clamp"))
    with paramwin.ParameterWindow(LAYOUT, comm, memory=paramwin.Memory.host) as win:
        assert win.memory == "host"
        win.publish([np.zeros((4, 3), np.float32), np.zeros((), np.float32)])
        comm.Barrier()
    with paramwin.Agent(LAYOUT, comm, k=1, shortfall="clamp") as agent:
        assert agent.memory == "host"
        comm.Barrier()


def test_a_negative_device_ordinal_is_refused_on_every_rank(comm):
    every_rank_raises(comm, paramwin.InvalidArgument, "cuda_device -2 is not a device ordinal",
                      lambda: paramwin.ParameterWindow(LAYOUT, comm, memory="cuda",
                                                       cuda_device=-2))


def test_a_device_window_without_a_device_fails_on_every_rank_and_host_windows_work(comm):
    if GPU_VISIBLE:
        pytest.skip("the library sees a CUDA device here: test_cuda_windows.py runs device "
                    "windows")
    nodevice = r"needs a CUDA device, but this process sees none|built without CUDA"
    every_rank_raises(comm, paramwin.Error, nodevice,
                      lambda: paramwin.ParameterWindow(LAYOUT, comm, memory="cuda"))
    every_rank_raises(comm, paramwin.Error, nodevice,
                      lambda: paramwin.Agent(LAYOUT, comm, memory="cuda", k=1,
                                             shortfall="clamp"))
    with paramwin.ParameterWindow(LAYOUT, comm) as win:
        assert win.publish([np.ones((4, 3), np.float32), np.ones((), np.float32)]).version == 1
        comm.Barrier()


def test_a_group_agents_device_window_without_a_device_fails_on_every_rank(comm):
    if GPU_VISIBLE:
        pytest.skip("the library sees a CUDA device here: test_cuda_windows.py runs device "
                    "windows")
    with paramwin.AgentGroups(comm, ranks_per_agent=1) as groups:
        every_rank_raises(comm, paramwin.Error,
                          r"needs a CUDA device, but this process sees none|built without CUDA",
                          lambda: paramwin.GroupAgent(groups, LAYOUT, memory="cuda", k=1,
                                                      shortfall="clamp"))
        with paramwin.GroupAgent(groups, LAYOUT, k=1, shortfall="clamp") as agent:
            assert agent.memory == "host"
            comm.Barrier()


# -- the layer descriptors ----------------------------------------------------------------

def test_descriptors_mark_device_memory_only_for_cuda_tensors_on_a_device_window():
    host = [np.zeros((4, 3), np.float32), torch.zeros(())]
    for device_window in (False, True):
        batch = Layers(host, writable=True, device_window=device_window)
        assert [d[4] for d in batch.descriptors] == [False, False]  # host memory: the core decides
        assert not batch.staged and batch.in_place_devices == []
        batch.prepare()  # nothing to copy, no stream to wait for
    # A tensor on a device that is neither the CPU nor CUDA is no device window's memory.
    with pytest.raises(paramwin.InvalidArgument, match="the tensor is on meta, but the window is "
                       "a device window"):
        Layers([torch.empty((4, 3), device="meta")], writable=False, device_window=True)


# -- TorchAgent's choice ------------------------------------------------------------------

def test_device_windows_is_parsed_by_the_library(comm):
    every_rank_raises(comm, paramwin.InvalidArgument,
                      r"unknown device windows 'sometimes' \(valid: auto, always, never, "
                      r"automatic\)",
                      lambda: TorchAgent(Net(), None, comm, device_windows="sometimes", k=1,
                                         shortfall="clamp"))
    assert [m.value for m in paramwin.DeviceWindows] == ["auto", "always", "never"]


@pytest.mark.parametrize("keywords", [{"device_windows": "always"},
                                      {"device_windows": paramwin.DeviceWindows.always},
                                      {"memory": "cuda"}])
def test_always_with_cpu_tensors_is_refused_on_every_rank(comm, keywords):
    every_rank_raises(comm, paramwin.InvalidArgument,
                      r"TorchAgent cannot use a device window \(device_windows=\"always\" or "
                      r"memory=\"cuda\"\): 'lin.weight' is on cpu",
                      lambda: TorchAgent(Net(), None, comm, k=1, shortfall="clamp", **keywords))


def test_grouped_torch_agents_of_cpu_modules_keep_host_windows(comm):
    with paramwin.AgentGroups(comm, ranks_per_agent=1) as groups:
        every_rank_raises(comm, paramwin.InvalidArgument, "cannot use a device window .*: "
                          "'lin.weight' is on cpu",
                          lambda: TorchAgent(Net(), None, groups=groups, device_windows="always",
                                             k=1, shortfall="clamp"))
        with TorchAgent(Net(), None, groups=groups, k=1, shortfall="clamp") as agent:
            assert not agent.device_window and agent.agent.memory == "host"
            comm.Barrier()


@pytest.mark.parametrize("mode", ["auto", "automatic", "never"])
def test_cpu_modules_keep_host_windows_without_a_word(comm, capfd, mode):
    torch.manual_seed(comm.Get_rank())
    net = Net()
    with TorchAgent(net, torch.optim.SGD(net.parameters(), lr=0.1), comm, device_windows=mode,
                    age=(2, 2), k=1, shortfall="clamp") as agent:
        assert not agent.device_window and agent.agent.memory == "host"
        agent.publish()
        comm.Barrier()
        died = sum(agent.step(step, 0.0).died for step in range(1, 5))
        assert (died > 0) == (comm.Get_size() > 1)
        comm.Barrier()
    assert "device window" not in capfd.readouterr().err


def test_the_obstacles_are_the_cpp_adapters_in_its_order():
    assert device_obstacle([("a", torch.zeros(1)), ("b", cuda_like(0))]) == \
        ("'a' is on cpu", -1, True)  # no device read after the first obstacle
    assert device_obstacle([("a", torch.zeros(1))]) == ("'a' is on cpu", -1, False)
    assert device_obstacle([("a", cuda_like(0)), ("b", cuda_like(1))])[0] == \
        "the tensors are on two devices (cuda:0 and cuda:1)"
    assert device_obstacle([])[0] == "the module exchanges no tensors"
    both = [("a", cuda_like(1)), ("b", cuda_like(1))]
    why, device, any_cuda = device_obstacle(both)
    count, reason = _core.cuda_devices()
    assert (why, device, any_cuda) == ("" if count else f"no CUDA device ({reason})", 1, True)


def test_the_choice_is_agreed_and_names_the_first_failing_rank(comm, capfd):
    rank = comm.Get_rank()
    ok = lambda: ("", 0, True)  # noqa: E731
    assert choose_window(comm, "auto", "host", ok) == WindowChoice("cuda", 0)
    assert choose_window(comm, "always", "host", ok) == WindowChoice("cuda", 0)
    # never: no collective, the obstacle is not even asked for.
    assert choose_window(comm, "never", "host", lambda: 1 / 0) == WindowChoice("host", -1)
    last = comm.Get_size() - 1
    only_last = lambda: ("because" if rank == last else "", 0, rank != 0)  # noqa: E731
    expected = "because" if rank == last else f"paramwin: rank {last} failed: because"
    with pytest.raises(paramwin.InvalidArgument, match="cannot use a device window .*: " +
                       expected):
        choose_window(comm, "never", "cuda", only_last)  # memory="cuda" requires it
    capfd.readouterr()
    assert choose_window(comm, "auto", "host", only_last) == WindowChoice("host", -1)
    err = capfd.readouterr().err
    said = f"TorchAgent stages its CUDA tensors through host memory, no device window: {expected}"
    assert (said in err) == (rank != 0)  # only a rank with CUDA tensors says why
    # An obstacle that raises is this rank's obstacle, as in C++.
    with pytest.raises(paramwin.InvalidArgument, match="ZeroDivisionError|division by zero"):
        choose_window(comm, "always", "host", lambda: 1 / 0)
    comm.Barrier()
