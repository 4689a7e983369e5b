"""The optimizer's per-parameter state as extra layers of an agent's layout: the C++ adapter's
``detail::OptimizerStateLayers`` (src/torch/optimizer_state.cpp) over ``torch.optim``, for
TorchAgent's ``inherit_optimizer_state`` and TorchAveragingAgent's ``mix_optimizer_state``.

One set of layers per optimized parameter ``p`` (the same names and dtypes as in C++, so the
snapshots and checkpoints of both agree): Adam and AdamW ``optimizer/p/exp_avg``,
``optimizer/p/exp_avg_sq`` (``amsgrad``: ``optimizer/p/max_exp_avg_sq``) in the parameter's
dtype and a float64 scalar ``optimizer/p/step``; SGD with momentum
``optimizer/p/momentum_buffer`` and a float64 scalar ``optimizer/p/has_momentum_buffer``.
``layers`` maps each tensor layer to the optimizer's own state tensor where one fits (a CPU
tensor, contiguous, of the layer's dtype and size: the layer is *in place*, as in C++) and to a
buffer of its own otherwise; ``capture`` copies the optimizer's state into the buffers (zeros
and step 0 for a parameter without state: what the optimizer starts from; nothing for a layer
in place), the agent publishes and mixes the layers with the parameters, and ``restore``
writes them back into the optimizer (nothing to copy for a layer in place).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch as _torch

from .errors import InvalidArgument

__all__ = ["OptimizerStateLayers", "agreed"]


def agreed(comm: Any, make: Any) -> Any:
    """``make()`` on every rank of ``comm`` (collective): its result, or InvalidArgument on every
    rank when it raised InvalidArgument on one (that rank's message; the others' say which rank
    failed), as the C++ adapter's agreement before the agent's collective creation."""
    from . import _core

    result, error = None, ""
    try:
        result = make()
    except InvalidArgument as e:
        error = str(e) or "InvalidArgument"
    error = _core.agree(comm, error)
    if error:
        raise InvalidArgument(error)
    return result


def _family_of(optimizer: Any, option: str) -> str:
    # AdamW first: a later torch derives it from Adam.
    for kind, name in ((_torch.optim.AdamW, "AdamW"), (_torch.optim.Adam, "Adam"),
                       (_torch.optim.SGD, "SGD")):
        if isinstance(optimizer, kind):
            return name
    raise InvalidArgument(f"paramwin: {option} supports torch.optim.Adam, AdamW and SGD (with "
                          f"momentum); this optimizer is {type(optimizer).__name__} (turn the "
                          "option off)")


def _group_of(optimizer: Any, param: Any) -> Optional[Dict[str, Any]]:
    for group in optimizer.param_groups:
        if any(p is param for p in group["params"]):
            return group
    return None


def _fields_of(family: str, group: Dict[str, Any]) -> Tuple[List[str], str]:
    """The tensor fields and the scalar field of a parameter in ``group`` ([] when the
    optimizer keeps no state for it: SGD without momentum)."""
    if family == "SGD":
        return (["momentum_buffer"], "has_momentum_buffer") if group.get("momentum", 0) else ([], "")
    moments = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group.get("amsgrad") else [])
    return moments, "step"


class _Field:
    """One layer: ``buffer`` its own memory (allocated when first needed), ``memory`` what the
    layer is now (``buffer``, or the optimizer's state tensor: in place)."""
    __slots__ = ("param", "field", "name", "shape", "dtype", "buffer", "memory")

    def __init__(self, param: int, field: str, name: str, shape: Any, dtype: Any):
        self.param, self.field, self.name = param, field, name
        self.shape, self.dtype = tuple(shape), dtype
        self.buffer: Any = None
        self.memory: Any = None

    @property
    def scalar(self) -> bool:
        return self.field in ("step", "has_momentum_buffer")


class OptimizerStateLayers:
    """The state layers of ``optimizer`` for ``named`` ((name, parameter) pairs in layout
    order), their buffers zeros on ``device`` (None: the CPU; a device window's CUDA device).
    InvalidArgument (naming ``option``) for another optimizer than Adam, AdamW or SGD, and when
    it keeps no state for any of the parameters (SGD without momentum)."""

    def __init__(self, optimizer: Any, named: Sequence[Tuple[str, Any]], option: str,
                 device: Any = None):
        self._option = option
        self._family = _family_of(optimizer, option)
        self._device = _torch.device(device) if device is not None else _torch.device("cpu")
        self._fields: List[_Field] = []
        for i, (name, param) in enumerate(named):
            group = _group_of(optimizer, param)
            if group is None:
                continue  # not optimized: no state
            tensors, scalar = _fields_of(self._family, group)
            if not tensors:
                continue
            for field in tensors:
                self._fields.append(_Field(i, field, f"optimizer/{name}/{field}", param.shape,
                                           param.dtype))
            self._fields.append(_Field(i, scalar, f"optimizer/{name}/{scalar}", (),
                                       _torch.float64))
        if not self._fields:
            raise InvalidArgument(
                f"paramwin: {option}: the {self._family} optimizer keeps no state for any "
                "exchanged parameter (SGD without momentum, or no parameter of the module in its "
                "groups)")

    def append_to(self, layout: Any) -> None:
        """Declares the state layers in ``layout`` (after the module's)."""
        for f in self._fields:
            dtype = {_torch.float32: "float32", _torch.float64: "float64",
                     _torch.bfloat16: "bfloat16", _torch.float16: "float16"}[f.dtype]
            layout.add(f.name, f.shape, dtype)

    def _own(self, f: _Field) -> Any:
        if f.buffer is None:
            f.buffer = _torch.zeros(f.shape, dtype=f.dtype, device=self._device)
        return f.buffer

    def _fits(self, t: Any, f: _Field) -> bool:
        return (self._device.type == "cpu" and isinstance(t, _torch.Tensor)
                and t.device.type == "cpu" and t.dtype == f.dtype and t.is_contiguous()
                and tuple(t.shape) == f.shape and t.numel() > 0)

    def layers(self, optimizer: Any, params: Sequence[Any]) -> Dict[str, Any]:
        """The layers by name, for ``optimizer``'s current state of ``params`` (the module's
        parameters in layout order): a tensor layer is the optimizer's own state tensor when
        one fits (in place: the agent reads and writes it where it is, and its own buffer is
        released), else its own buffer. Call it for every call into the agent (the optimizer
        may have replaced or dropped its tensors since)."""
        out = {}
        for f in self._fields:
            state = None if f.scalar else optimizer.state.get(params[f.param])
            t = state.get(f.field) if state else None
            if self._fits(t, f):
                f.memory, f.buffer = t, None
            else:
                f.memory = self._own(f)
            out[f.name] = f.memory
        return out

    @property
    def in_place(self) -> int:
        """How many layers the last ``layers()`` gave in place (the optimizer's own tensors)."""
        return sum(1 for f in self._fields if f.memory is not None and f.memory is not f.buffer)

    def _memory(self, f: _Field) -> Any:
        if f.memory is None:
            f.memory = self._own(f)
        return f.memory

    @property
    def names(self) -> List[str]:
        """The layer names, in layout order."""
        return [f.name for f in self._fields]

    def _check_family(self, optimizer: Any) -> None:
        now = _family_of(optimizer, self._option)
        if now != self._family:
            raise InvalidArgument(f"paramwin: the optimizer is now {now} but its state layers "
                                  f"were made for {self._family} (the builder must build the "
                                  "same kind)")

    @_torch.no_grad()
    def capture(self, optimizer: Any, params: Sequence[Any]) -> None:
        """Copies ``optimizer``'s state of ``params`` (the module's parameters in layout order)
        into the buffers; a parameter without state is written as zeros with step 0. On a CUDA
        device the copies are waited for (the window reads the buffers next)."""
        self._check_family(optimizer)
        for f in self._fields:
            state = optimizer.state.get(params[f.param])
            memory = self._memory(f)
            if f.field == "has_momentum_buffer":
                memory.fill_(1.0 if state and state.get("momentum_buffer") is not None else 0.0)
            elif f.field == "step":
                memory.fill_(float(state["step"]) if state and "step" in state else 0.0)
            elif state and state.get(f.field) is not None:
                if state[f.field].data_ptr() != memory.data_ptr():  # else: in place
                    memory.copy_(state[f.field].detach())
            else:
                memory.zero_()
        if self._device.type == "cuda":
            _torch.cuda.current_stream(self._device).synchronize()

    @_torch.no_grad()
    def restore(self, optimizer: Any, params: Sequence[Any], keep_own_counts: bool = False) -> int:
        """Writes the buffers (a rebirth's or a round's mix) into ``optimizer``'s state of
        ``params``, as the C++ adapter does. A rebirth: a parameter whose mixed step (Adam,
        AdamW) or mixed presence (SGD) rounds to 0 gets no state (erased: the optimizer starts it
        afresh), the others the mixed tensors and the rounded mixed step. With
        ``keep_own_counts`` (averaging) the mixed tensors are always written and Adam's step
        stays the entry's own (0 for a new entry). Returns the number of entries written."""
        self._check_family(optimizer)
        written = 0
        begin = 0
        while begin < len(self._fields):
            end = begin
            while end < len(self._fields) and self._fields[end].param == self._fields[begin].param:
                end += 1
            param = params[self._fields[begin].param]
            if self._restore_one(optimizer, param, self._fields[begin:end], keep_own_counts):
                written += 1
            begin = end
        return written

    def _restore_one(self, optimizer: Any, param: Any, fields: List[_Field],
                     keep_own_counts: bool) -> bool:
        state = optimizer.state.get(param)
        if keep_own_counts:
            count = int(float(state["step"])) if state and "step" in state else 0
        else:
            mixed = float(self._memory(fields[-1]))
            count = round(mixed) if mixed == mixed and abs(mixed) != float("inf") else 0
            if count <= 0:
                optimizer.state.pop(param, None)
                return False
        entry = optimizer.state[param]  # a defaultdict: created when missing
        for f in fields[:-1]:
            own, memory = entry.get(f.field), self._memory(f)
            if (isinstance(own, _torch.Tensor) and own.shape == param.shape
                    and own.dtype == param.dtype and own.device == param.device
                    and own.is_contiguous()):
                # Into the entry's own tensor: no allocation (a fresh tensor of a large model's
                # size is page-faulted in on its first write, which costs more than the copy);
                # nothing to copy when the layer is that tensor (in place).
                if own.data_ptr() != memory.data_ptr():
                    own.copy_(memory.view(param.shape))
            else:
                entry[f.field] = memory.to(device=param.device, dtype=param.dtype, copy=True)
        if self._family != "SGD":
            entry["step"] = self._step_tensor(optimizer, param, entry.get("step"), count)
        return True

    @staticmethod
    def _step_tensor(optimizer: Any, param: Any, old: Any, count: int) -> Any:
        """Adam's step ``count`` as the optimizer keeps it: like the entry's own when it has one
        (a tensor, or a number in an old torch), else as Adam creates it (a CPU scalar, or a
        (1,) tensor on the parameter's device when capturable or fused)."""
        if isinstance(old, _torch.Tensor):
            return _torch.full_like(old, float(count))
        if old is not None:
            return type(old)(count)
        defaults = optimizer.defaults
        if defaults.get("capturable") or defaults.get("fused"):
            return _torch.full((1,), float(count), dtype=_torch.float, device=param.device)
        return _torch.tensor(float(count))

    def clear(self) -> None:
        """Zeros every layer (step 0: restore() then erases every entry)."""
        for f in self._fields:
            self._memory(f).zero_()
