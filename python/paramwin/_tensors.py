"""Layers from numpy arrays and torch tensors: checks, descriptors for the C++ core, staging.

The core reads and writes the caller's memory directly (zero copy): a descriptor is
``(name or None, address, dtype, shape, device)`` of a C-contiguous CPU array or tensor
(``device`` False), taken from ``__array_interface__`` (numpy and anything with the buffer
protocol) or ``data_ptr()`` (torch). For a host window a tensor on another device (CUDA) is
staged: published from a host copy, pulled into a host buffer and copied back only when the
pull succeeded. For a device window (``memory="cuda"``) a CUDA tensor is given in place
(``device`` True: the core's ``paramwin::device_memory``), nothing is staged; anything else
is described as host memory, which the core refuses with its own error.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple

import numpy as np

from .errors import InvalidArgument

__all__ = ["Layers", "dtype_name", "shape_of", "is_torch_tensor"]

_NUMPY_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
                 np.dtype(np.float16): "float16"}
_SUPPORTED = "float32, float64, bfloat16 (torch only), float16"


def is_torch_tensor(obj: Any) -> bool:
    """True for a torch.Tensor (without importing torch when the caller did not)."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _torch_dtype_name(t) -> Optional[str]:
    import torch

    return {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
            torch.float16: "float16"}.get(t.dtype)


def _label(name: Optional[str], index: int) -> str:
    return f"'{name}'" if name else f"#{index}"


def dtype_name(obj: Any, name: Optional[str] = None, index: int = 0) -> str:
    """paramwin's dtype name of an array or tensor; InvalidArgument for other dtypes."""
    if is_torch_tensor(obj):
        found = _torch_dtype_name(obj)
        what = str(obj.dtype)
    else:
        found = _NUMPY_DTYPES.get(np.asarray(obj).dtype)
        what = str(np.asarray(obj).dtype)
    if found is None:
        raise InvalidArgument(f"paramwin: layer {_label(name, index)}: dtype {what} is not "
                              f"supported ({_SUPPORTED})")
    return found


def shape_of(obj: Any) -> Tuple[int, ...]:
    """The shape of an array or tensor as a tuple of ints."""
    return tuple(int(d) for d in obj.shape)


class Layers:
    """The descriptors of one call's layers, keeping the arrays alive and staging device
    tensors. ``writable``: the call writes into the layers (pull, step). ``device_window``:
    the call's window is a device window (CUDA tensors in place, no staging)."""

    def __init__(self, layers: Any, writable: bool, device_window: bool = False):
        if isinstance(layers, dict):
            items: List[Tuple[Optional[str], Any]] = [(str(k), v) for k, v in layers.items()]
        elif isinstance(layers, (list, tuple)):
            items = [(None, v) for v in layers]
        else:
            raise InvalidArgument("paramwin: layers must be a list/tuple (bound by position) or a "
                                  f"dict name -> array (bound by name), got {type(layers).__name__}")
        self.descriptors: List[tuple] = []
        self._keep: List[Any] = []
        self._staged: List[Tuple[Any, Any]] = []  # (device tensor, host buffer) for pulls
        self._devices: List[Any] = []  # the devices of the CUDA tensors given in place
        self._device_window = device_window
        for i, (name, obj) in enumerate(items):
            self.descriptors.append(self._describe(name, i, obj, writable))

    def _describe(self, name: Optional[str], i: int, obj: Any, writable: bool) -> tuple:
        if is_torch_tensor(obj):
            dtype = dtype_name(obj, name, i)
            if not obj.is_contiguous():
                raise InvalidArgument(f"paramwin: layer {_label(name, i)}: the tensor is not "
                                      "contiguous (strides " + str(tuple(obj.stride())) +
                                      "); pass .contiguous() and copy back")
            if obj.device.type == "cuda" and self._device_window:
                # In place: the device window reads and writes the tensor's GPU memory.
                if obj.device not in self._devices:
                    self._devices.append(obj.device)
                self._keep.append(obj)
                return (name, int(obj.data_ptr()), dtype, shape_of(obj), True)
            host = obj
            if obj.device.type != "cpu":
                if self._device_window:
                    raise InvalidArgument(
                        f"paramwin: layer {_label(name, i)}: the tensor is on {obj.device}, but "
                        "the window is a device window (memory=\"cuda\"), which takes CUDA "
                        "tensors")
                host = self._stage(obj, writable)
            self._keep.append(host)
            return (name, int(host.data_ptr()), dtype, shape_of(host), False)
        if not isinstance(obj, np.ndarray):
            try:
                memoryview(obj)
            except TypeError:
                raise InvalidArgument(
                    f"paramwin: layer {_label(name, i)}: expected a numpy array, a torch tensor or "
                    f"an object with the buffer protocol, got {type(obj).__name__}") from None
            obj = np.asarray(obj)
        dtype = dtype_name(obj, name, i)
        if not obj.flags.c_contiguous:
            raise InvalidArgument(f"paramwin: layer {_label(name, i)}: the array is not "
                                  f"C-contiguous (strides {obj.strides}); pass "
                                  "np.ascontiguousarray(...) and copy back")
        if writable and not obj.flags.writeable:
            raise InvalidArgument(f"paramwin: layer {_label(name, i)}: the array is read-only")
        self._keep.append(obj)
        return (name, int(obj.__array_interface__["data"][0]), dtype, shape_of(obj), False)

    def _stage(self, obj: Any, writable: bool) -> Any:
        """A host copy of the device tensor ``obj`` for a host window: publish reads a host
        copy; a pull writes into a host buffer that is copied to the device only after the
        pull succeeded (transactional)."""
        if not writable:
            return obj.detach().to("cpu")
        host = obj.detach().new_empty(obj.shape, device="cpu")
        self._staged.append((obj, host))
        return host

    @property
    def staged(self) -> bool:
        """Whether some layer lives on a device and goes through a host buffer."""
        return bool(self._staged)

    @property
    def in_place_devices(self) -> List[Any]:
        """The CUDA devices whose tensors a device window reads and writes in place."""
        return list(self._devices)

    def prepare(self) -> None:
        """Makes the layers the core is about to read current: copies the staged device
        tensors into their host buffers, and waits for the current stream of every device
        whose tensors are given in place (the kernels that produced their values may run on
        a stream the window's copies are not ordered after). Called before a publish or
        pull, and by a step only when it will read or write the layers (prepare_params)."""
        for device, host in self._staged:
            host.copy_(device.detach())
        if self._devices:
            import torch

            for device in self._devices:
                torch.cuda.current_stream(device).synchronize()

    def write_back(self) -> None:
        """Copies the host buffers into their device tensors (after a successful pull)."""
        if not self._staged:
            return
        import torch

        with torch.no_grad():
            for device, host in self._staged:
                device.copy_(host)



def named_layout(named: Iterable[Tuple[str, Any]]):
    """A Layout from (name, array or tensor) pairs, in order."""
    from ._core import Layout

    layout = Layout()
    for i, (name, obj) in enumerate(named):
        layout.add(name, shape_of(obj), dtype_name(obj, name, i))
    return layout
