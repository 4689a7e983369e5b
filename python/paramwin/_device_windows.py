"""TorchAgent's choice between a device window and host staging (``device_windows``), the
C++ TorchAgent's (src/torch/agent.cpp: ``device_obstacle``, ``choose_window``) in Python.

``auto`` (the default) gives an agent (solo or grouped) a device window when, on every rank,
every parameter is a CUDA tensor on one device and the library sees a CUDA device (a build
with CUDA); otherwise host staging, and a rank with CUDA tensors says why on stderr once.
``always`` (or ``memory="cuda"``) makes any obstacle an InvalidArgument on every rank;
``never`` keeps host staging. The choice is agreed over the agent's communicator (a grouped
agent: the training ranks') with the library's agreement (``_core.agree``), so every rank
makes the same one. Checkpoints copy a device window's layers through the host (docs/gpu.md).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, NamedTuple, Sequence, Tuple

from . import _core
from .errors import InvalidArgument

__all__ = ["WindowChoice", "device_obstacle", "choose_window"]


class WindowChoice(NamedTuple):
    """The chosen window: ``memory`` ("host" or "cuda") and, for "cuda", the device."""

    memory: str
    cuda_device: int


def device_obstacle(named: Sequence[Tuple[str, Any]]) -> Tuple[str, int, bool]:
    """Why this rank's agent cannot have a device window ("" if it can), the device of its
    tensors, and whether any of them is a CUDA tensor. ``named``: (name, tensor) pairs. The
    obstacles and their order are the C++ TorchAgent's (those Python has: no
    stage_through_host or live exposure here)."""
    why = ""
    device = -1
    any_cuda = False
    for name, t in named:
        any_cuda = any_cuda or bool(t.is_cuda)
        if why:
            continue
        if not t.is_cuda:
            why = f"'{name}' is on {t.device}"
        elif device < 0:
            device = int(t.device.index)
        elif int(t.device.index) != device:
            why = f"the tensors are on two devices (cuda:{device} and {t.device})"
    if not why and not named:
        why = "the module exchanges no tensors"
    if not why:
        count, none = _core.cuda_devices()
        if count == 0:
            why = f"no CUDA device ({none})"
    return why, device, any_cuda


def choose_window(comm: Any, device_windows: Any, memory: Any,
                  obstacle: Callable[[], Tuple[str, int, bool]]) -> WindowChoice:
    """The window a TorchAgent creates, the same on every rank of ``comm`` (collective unless
    ``device_windows`` is "never" and ``memory`` is "host"). ``device_windows`` and ``memory``
    are parsed by the library (InvalidArgument listing the valid names); ``obstacle()`` is
    device_obstacle's result for this rank."""
    mode = _core.parse_enum("DeviceWindows", str(device_windows))
    required = _core.parse_enum("Memory", str(memory)) == "cuda" or mode == "always"
    if not required and mode == "never":
        return WindowChoice("host", -1)
    device = -1
    any_cuda = False
    try:
        why, device, any_cuda = obstacle()
    except Exception as e:  # noqa: BLE001 - becomes this rank's obstacle, as in C++
        why = str(e) or type(e).__name__
    reason = _core.agree(comm, why)
    if not reason:
        return WindowChoice("cuda", device)
    if required:
        raise InvalidArgument("paramwin: TorchAgent cannot use a device window "
                              "(device_windows=\"always\" or memory=\"cuda\"): " + reason)
    if any_cuda:
        print("paramwin: TorchAgent stages its CUDA tensors through host memory, no device "
              f"window: {reason}", file=sys.stderr, flush=True)
    return WindowChoice("host", -1)
