"""paramwin.torch: TorchAgent, an Agent driven by a torch.nn.Module and its optimizer.

Written in Python over the binding, so it works with the torch the user has. The layout is
the module's ``named_parameters()`` (0-dim parameters included; float32, float64, bfloat16,
float16); a rebirth writes the donors' mix straight into the parameters' memory (CPU) or
into host buffers copied in under ``torch.no_grad()`` (other devices), then resets the
optimizer state of the replaced parameters (or calls your ``optimizer_builder``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch as _torch

from . import _core
from ._lifetime import close_after_block
from ._tensors import named_layout
from .agent import Agent
from .errors import InvalidArgument

__all__ = ["TorchAgent", "layout_of"]


def _named_parameters(module: _torch.nn.Module) -> List[Tuple[str, _torch.nn.Parameter]]:
    return list(module.named_parameters())


def layout_of(module: _torch.nn.Module,
              hyperparameters: Optional[Dict[str, Any]] = None) -> "_core.Layout":
    """The Layout of ``module.named_parameters()`` (names, shapes, dtypes, in order), with
    the hyperparameters named in ``hyperparameters`` declared (int values: int64, others:
    float64)."""
    layout = named_layout((name, p.detach()) for name, p in _named_parameters(module))
    for name, value in (hyperparameters or {}).items():
        layout.add_hyperparameter(name, "int64" if isinstance(value, int) else "float64")
    return layout


class TorchAgent:
    """A population member made of a module and its optimizer (collective creation).

    ``TorchAgent(module, optimizer, comm=None, optimizer_builder=None, **options)``: options
    are Agent's (keywords or ``options="..."``). ``step(iteration, metric)`` reports the
    metric, may replace the parameters and returns the StepEvent; call it before
    ``loss.backward()`` (the gradient of a step that died belongs to the dead parameters:
    skip its ``optimizer.step()``). On a rebirth the optimizer's state of every replaced
    parameter is dropped (Adam's moments, momentum buffers: rebuilt from zero on the next
    ``optimizer.step()``), or, with ``optimizer_builder(module) -> optimizer``, the optimizer
    is replaced by a new one (``agent.optimizer``).

    Population-based training: ``hyperparameters={"lr": 1e-3, ...}`` declares them (initial
    values) and publishes them with the parameters; a rebirth inherits and explores them per
    the explore options (``options={"explore.lr": "log_uniform:1e-4..1e-1"}``, docs/agent.md)
    and TorchAgent sets every param group's ``lr`` from ``"lr"`` (your other hyperparameters
    are in ``agent.hyperparameters`` and ``event.hyper``); each ``step`` first takes the
    optimizer's current ``lr`` (a scheduler's), so that is what gets published. Without an
    ``"lr"`` hyperparameter the optimizer's learning rates are left alone.
    """

    def __init__(self, module: _torch.nn.Module, optimizer: Optional[_torch.optim.Optimizer],
                 comm: Any = None, *,
                 optimizer_builder: Optional[Callable[[_torch.nn.Module],
                                                      _torch.optim.Optimizer]] = None,
                 hyperparameters: Optional[Dict[str, Any]] = None,
                 **options: Any):
        named = _named_parameters(module)
        if not named:
            raise InvalidArgument("paramwin: the module has no parameters")
        self.module = module
        self.optimizer = optimizer
        self._builder = optimizer_builder
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        self._agent = Agent(layout_of(module, hyperparameters), comm, **options)
        if hyperparameters:
            self._agent.set_hyperparameters(hyperparameters)
            self._apply_lr()

    # The parameters' storage as plain tensors (no autograd): the core writes into them.
    def _data(self) -> Dict[str, _torch.Tensor]:
        return {name: p.data for name, p in zip(self._names, self._params)}

    def publish(self) -> "_core.PublishResult":
        """Publishes the module's parameters now (e.g. before the first step)."""
        return self._agent.publish(self._data())

    def step(self, iteration: int, metric: float) -> "_core.StepEvent":
        """One step of the population (see Agent.step); on a rebirth the parameters hold the
        donors' mix and the optimizer state of the replaced parameters is reset."""
        self._sync_lr()
        with _torch.no_grad():
            event = self._agent.step(iteration, metric, self._data())
        if event.died:
            self._after_rebirth()
        return event

    def _after_rebirth(self) -> None:
        if self._builder is not None:
            self.optimizer = self._builder(self.module)
        elif self.optimizer is not None:
            for p in self._params:
                self.optimizer.state.pop(p, None)
        self._apply_lr()

    def _sync_lr(self) -> None:
        # A learning-rate schedule's change to the optimizer is what the next publish carries
        # (and what a rebirth's hyper_before shows), as in the C++ TorchAgent.
        if self.optimizer is None or "lr" not in self._agent.hyperparameters:
            return
        lrs = sorted({float(g["lr"]) for g in self.optimizer.param_groups})
        if len(lrs) != 1:
            raise InvalidArgument("paramwin: the 'lr' hyperparameter needs one learning rate in "
                                  f"every param group, but the optimizer's groups have {lrs}")
        if lrs[0] != self._agent.hyperparameters["lr"]:
            self._agent.set_hyperparameters({"lr": lrs[0]})

    def _apply_lr(self) -> None:
        lr = self._agent.hyperparameters.get("lr")
        if lr is not None and self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = float(lr)

    @property
    def hyperparameters(self) -> Dict[str, Any]:
        """The agent's hyperparameters (see Agent.hyperparameters)."""
        return self._agent.hyperparameters

    def set_hyperparameters(self, values: Dict[str, Any]) -> None:
        """Sets hyperparameters (published with the next publish); "lr" also goes to the
        optimizer's param groups."""
        self._agent.set_hyperparameters(values)
        self._apply_lr()

    # -- forwarding -------------------------------------------------------------------------
    @property
    def agent(self) -> Agent:
        """The underlying Agent (rosters, stats, pause, ...)."""
        return self._agent

    layout = property(lambda self: self._agent.layout, doc="The module's Layout.")
    rank = property(lambda self: self._agent.rank, doc="Rank in the agent's window.")
    size = property(lambda self: self._agent.size, doc="Agents in the window.")
    generation = property(lambda self: self._agent.generation, doc="Rebirths so far.")
    age = property(lambda self: self._agent.age, doc="Steps since (re)birth.")
    stats = property(lambda self: self._agent.stats, doc="Counters and phase timers.")

    def paused(self):
        """Context manager pausing the agent for a block (see Agent.paused)."""
        return self._agent.paused()

    def roster_all(self, **kw: Any):
        """Every agent's roster (see Agent.roster_all)."""
        return self._agent.roster_all(**kw)

    def close(self) -> None:
        """Frees the agent's window (collective)."""
        self._agent.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._agent.closed

    def __enter__(self) -> "TorchAgent":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_after_block(self, "TorchAgent", exc_type, exc, tb)
