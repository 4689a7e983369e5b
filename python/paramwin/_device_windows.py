"""TorchAgent's choice between a device window and host staging (``device_windows``): the
library's (paramwin/device_choice.hpp: ``device_obstacle``, ``choose_device_window``), which
the C++ TorchAgent (src/torch/agent.cpp) calls too; here only the tensors are read.

``auto`` (the default) gives an agent (solo or grouped) a device window when, on every rank,
every parameter is a CUDA tensor on one device and the library sees a CUDA device (a build
with CUDA); otherwise host staging, and a rank with CUDA tensors says why on stderr once.
``always`` (or ``memory="cuda"``) makes any obstacle an InvalidArgument on every rank;
``never`` keeps host staging. The choice is agreed over the agent's communicator (a grouped
agent: the training ranks') with the library's agreement, so every rank
makes the same one. Checkpoints copy a device window's layers through the host (docs/gpu.md).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence, Tuple

from . import _core

__all__ = ["WindowChoice", "device_obstacle", "choose_window"]


class WindowChoice(NamedTuple):
    """The chosen window: ``memory`` ("host" or "cuda") and, for "cuda", the device."""

    memory: str
    cuda_device: int


def device_obstacle(named: Sequence[Tuple[str, Any]]) -> Tuple[str, int, bool]:
    """Why this rank's agent cannot have a device window ("" if it can), the device of its
    tensors, and whether any of them is a CUDA tensor. ``named``: (name, tensor) pairs. The
    library's obstacles in its order (``paramwin::device_obstacle``, the C++ TorchAgent's;
    Python has no stage_through_host or live exposure here)."""
    return _core.device_obstacle([
        (name, bool(t.is_cuda), int(t.device.index) if t.is_cuda else -1, str(t.device))
        for name, t in named])


def choose_window(comm: Any, device_windows: Any, memory: Any,
                  obstacle: Callable[[], Tuple[str, int, bool]]) -> WindowChoice:
    """The window a TorchAgent creates, the same on every rank of ``comm`` (collective unless
    ``device_windows`` is "never" and ``memory`` is "host"): the library's choice
    (``paramwin::choose_device_window``). ``device_windows`` and ``memory`` are parsed by the
    library (InvalidArgument listing the valid names); ``obstacle()`` is device_obstacle's
    result for this rank (an exception it raises is this rank's obstacle, as in C++)."""
    mode = _core.parse_enum("DeviceWindows", str(device_windows))
    required = _core.parse_enum("Memory", str(memory)) == "cuda" or mode == "always"

    def asked() -> Tuple[str, int, bool]:
        try:
            return obstacle()
        except Exception as e:  # noqa: BLE001 - becomes this rank's obstacle, as in C++
            return str(e) or type(e).__name__, -1, False

    device, cuda_device = _core.choose_device_window(
        comm, required, mode == "never", asked, "paramwin",
        'device_windows="always" or memory="cuda"')
    return WindowChoice("cuda", cuda_device) if device else WindowChoice("host", -1)
