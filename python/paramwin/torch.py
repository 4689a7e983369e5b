"""paramwin.torch: TorchAgent, an Agent driven by a torch.nn.Module and its optimizer (and
TorchAveragingAgent, TorchElasticAgent, TorchElasticAveragingAgent: the averaging and elastic
agents driven the same way).

Written in Python over the binding, so it works with the torch the user has. The layout is
the module's ``named_parameters()`` (0-dim parameters included; float32, float64, bfloat16,
float16); a rebirth writes the donors' mix straight into the parameters' memory (CPU, or CUDA
with a device window) or into host buffers copied in under ``torch.no_grad()`` (other
devices, host staging), then resets the optimizer state of the replaced parameters (or calls
your ``optimizer_builder``), or, with ``inherit_optimizer_state=True``, writes the donors' mix
of it into the optimizer.
"""

from __future__ import annotations

import io
import os
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch as _torch

from . import _core
from ._device_windows import WindowChoice, choose_window, device_obstacle
from ._lifetime import close_after_block
from ._optimizer_state import OptimizerStateLayers, agreed
from ._tensors import named_layout
from .agent import Agent
from .averaging import AveragingAgent
from .elastic import ElasticAgent, ElasticAveragingAgent
from .groups import AgentGroups, GroupAgent
from .errors import InvalidArgument

__all__ = ["TorchAgent", "TorchAveragingAgent", "TorchElasticAgent", "TorchElasticAveragingAgent",
           "layout_of"]


def _named_parameters(module: _torch.nn.Module) -> List[Tuple[str, _torch.nn.Parameter]]:
    return list(module.named_parameters())


def _state_layers(optimizer: Optional[_torch.optim.Optimizer],
                  named: List[Tuple[str, _torch.nn.Parameter]], option: str,
                  device: Any = None) -> OptimizerStateLayers:
    """The optimizer's state layers for ``option`` (InvalidArgument without an optimizer)."""
    if optimizer is None:
        raise InvalidArgument(f"paramwin: {option} needs an optimizer (pass optimizer=...)")
    return OptimizerStateLayers(optimizer, named, option, device)


def layout_of(module: _torch.nn.Module,
              hyperparameters: Optional[Dict[str, Any]] = None) -> "_core.Layout":
    """The Layout of ``module.named_parameters()`` (names, shapes, dtypes, in order), with
    the hyperparameters named in ``hyperparameters`` declared (int values: int64, others:
    float64)."""
    layout = named_layout((name, p.detach()) for name, p in _named_parameters(module))
    for name, value in (hyperparameters or {}).items():
        layout.add_hyperparameter(name, "int64" if isinstance(value, int) else "float64")
    return layout


def _check_one_lr(optimizer: Optional[_torch.optim.Optimizer],
                  hyperparameters: Optional[Dict[str, Any]], what: str) -> None:
    """InvalidArgument when an "lr" hyperparameter would set one rate for param groups that
    have several."""
    if hyperparameters and "lr" in hyperparameters and optimizer is not None:
        lrs = sorted({float(g["lr"]) for g in optimizer.param_groups})
        if len(lrs) > 1:
            raise InvalidArgument(
                f"paramwin: {what}: the 'lr' hyperparameter sets one learning rate for "
                f"every param group, but the optimizer's groups have {lrs}; give them one "
                "learning rate, or leave 'lr' out of the hyperparameters")


def _state_hooks(ref: Any, options: Dict[str, Any]) -> None:
    """inherit_optimizer_state: replaces ``options``' prepare_params hook by one that copies
    the optimizer's state into the agent's state layers (those not in place) and then calls
    the user's, and its
    reset hook (mixing "reset") by the user's followed by zeroing the layers. ``ref``: a weak
    reference to the torch agent (its ``_state``, ``optimizer`` and ``_params``)."""
    user_prepare = options.pop("prepare_params", None)
    user_reset = options.pop("reset", None)

    def prepare() -> None:
        agent = ref()
        if agent is not None and agent._state is not None:
            agent._state.capture(agent.optimizer, agent._params)
        if user_prepare is not None:
            user_prepare()

    def reset(seed: int) -> None:
        user_reset(seed)
        agent = ref()
        if agent is not None and agent._state is not None:
            agent._state.clear()

    # A hook that is not callable is left for the agent to refuse.
    if user_prepare is None or callable(user_prepare):
        options["prepare_params"] = prepare
    else:
        options["prepare_params"] = user_prepare
    if user_reset is not None:
        options["reset"] = reset if callable(user_reset) else user_reset


class _TorchMember:
    """What TorchAgent and TorchElasticAgent share: the module's parameters (with the state
    layers of inherit_optimizer_state) as the core's layers, the optimizer after a rebirth,
    and the "lr" hyperparameter kept in step with the optimizer's param groups. ``_agent``
    has ``hyperparameters`` and ``set_hyperparameters``."""

    _agent: Any
    module: _torch.nn.Module
    optimizer: Optional[_torch.optim.Optimizer]
    _builder: Optional[Callable[[_torch.nn.Module], _torch.optim.Optimizer]]
    _names: List[str]
    _params: List[_torch.nn.Parameter]
    _device: Optional[int]
    _state: Optional[OptimizerStateLayers]
    _states_inherited: int

    @property
    def optimizer_states_inherited(self) -> int:
        """Optimizer state entries written from a rebirth's mix (inherit_optimizer_state)."""
        return self._states_inherited

    # The parameters' storage as plain tensors (no autograd): the core writes into them.
    def _data(self) -> Dict[str, _torch.Tensor]:
        data = {name: p.data for name, p in zip(self._names, self._params)}
        if self._device is not None:
            for name, t in data.items():
                if not t.is_cuda or t.device.index != self._device:
                    raise InvalidArgument(
                        f"paramwin: '{name}' is on {t.device}, but this TorchAgent's window is "
                        f"a device window on cuda:{self._device} (keep the module there, or "
                        "use device_windows=\"never\")")
        if self._state is not None:
            data.update(self._state.layers(self.optimizer, self._params))
        return data

    def _after_rebirth(self) -> None:
        if self._builder is not None:
            self.optimizer = self._builder(self.module)
        if self._state is not None:
            self._states_inherited += self._state.restore(self.optimizer, self._params)
        elif self._builder is None and self.optimizer is not None:
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


class TorchAgent(_TorchMember):
    """A population member made of a module and its optimizer (collective creation).

    ``TorchAgent(module, optimizer, comm=None, optimizer_builder=None, **options)``: options
    are Agent's (keywords or ``options="..."``). ``step(iteration, metric)`` reports the
    metric, may replace the parameters and returns the StepEvent; call it before
    ``loss.backward()`` (the gradient of a step that died belongs to the dead parameters:
    skip its ``optimizer.step()``). On a rebirth the optimizer's state of every replaced
    parameter is dropped (Adam's moments, momentum buffers: rebuilt from zero on the next
    ``optimizer.step()``), or, with ``optimizer_builder(module) -> optimizer``, the optimizer
    is replaced by a new one (``agent.optimizer``). With ``groups=AgentGroups(...)`` the agent
    is a GroupAgent (every rank of the agent holds the module; ``comm`` is then ignored).

    ``inherit_optimizer_state=True`` (the C++ ``TorchAgentOptions::inherit_optimizer_state``;
    Adam, AdamW or SGD with momentum, a solo agent: InvalidArgument on every rank otherwise):
    the optimizer's per-parameter state travels with the weights. It becomes layers of the
    snapshot after the parameters (``optimizer/<name>/exp_avg``, ``.../exp_avg_sq``,
    ``.../max_exp_avg_sq`` with amsgrad, ``.../step``; SGD: ``.../momentum_buffer``,
    ``.../has_momentum_buffer``), copied from the optimizer whenever the agent is about to
    publish; a rebirth mixes it exactly like the weights (the same donors, weights, momentum
    blend) and writes it into the optimizer in force (the borrowed one, or the builder's new
    one): Adam's step is the mixed step rounded; a parameter whose mixed step (or SGD's mixed
    presence flag) rounds to 0 gets no state (the optimizer starts it afresh).
    ``optimizer_states_inherited`` counts the entries written. A state missing on a donor is
    published as zeros with step 0.

    Checkpoints: ``save_checkpoint(path)``, ``load_checkpoint(path)``, ``resume_newest()``,
    ``wait_checkpoint()`` and the ``checkpoint_*`` options write and read the C++ library's
    files (docs/checkpoints.md): the module's parameters and the agent's state, plus the
    optimizer's ``state_dict()`` (torch.save) in the blob "optimizer.python". A file written
    by the C++ TorchAgent holds LibTorch's optimizer archive (blob "optimizer") instead, which
    Python cannot read: loading it restores the parameters and the agent, and the optimizer's
    state of every parameter is dropped (as on a rebirth); the C++ TorchAgent likewise
    ignores "optimizer.python".

    Population-based training: ``hyperparameters={"lr": 1e-3, ...}`` declares them (initial
    values) and publishes them with the parameters; a rebirth inherits and explores them per
    the explore options (``options={"explore.lr": "log_uniform:1e-4..1e-1"}``, docs/agent.md)
    and TorchAgent sets every param group's ``lr`` from ``"lr"`` (your other hyperparameters
    are in ``agent.hyperparameters`` and ``event.hyper``); each ``step`` first takes the
    optimizer's current ``lr`` (a scheduler's), so that is what gets published. Without an
    ``"lr"`` hyperparameter the optimizer's learning rates are left alone; with one, every
    param group must have the same learning rate (InvalidArgument otherwise, as in C++).

    CUDA modules: ``device_windows="auto"`` (the default; "automatic" too) gives the agent
    (solo or grouped) a device window (docs/gpu.md: snapshots in GPU memory, rebirths GPU to
    GPU, the parameters read and written in place, nothing staged) when on every rank every
    parameter is a CUDA tensor on one device and the library sees a CUDA device; otherwise the
    parameters are staged through host memory, and a rank with CUDA tensors says why on
    stderr once. ``"always"`` (or ``memory="cuda"``) makes any obstacle an InvalidArgument on
    every rank; ``"never"`` stages. ``device_window`` says which. On a device window the
    checkpoint calls copy the parameters through host memory, as in C++, and a parameter
    moved off the GPU raises InvalidArgument at the next step or publish.
    """

    OPTIMIZER_BLOB = "optimizer.python"

    def __init__(self, module: _torch.nn.Module, optimizer: Optional[_torch.optim.Optimizer],
                 comm: Any = None, *,
                 optimizer_builder: Optional[Callable[[_torch.nn.Module],
                                                      _torch.optim.Optimizer]] = None,
                 hyperparameters: Optional[Dict[str, Any]] = None,
                 groups: Optional[AgentGroups] = None,
                 device_windows: str = "auto",
                 inherit_optimizer_state: bool = False,
                 **options: Any):
        named = _named_parameters(module)
        if not named:
            raise InvalidArgument("paramwin: the module has no parameters")
        _check_one_lr(optimizer, hyperparameters, "TorchAgent")
        self.module = module
        self.optimizer = optimizer
        self._builder = optimizer_builder
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        # Agreed over the agent's ranks (a grouped agent: every training rank). A rank that is
        # not an agent rank has no training communicator: GroupAgent refuses it below.
        choose = groups is None or groups.is_agent_rank
        choice = choose_window(
            groups.training_comm if groups is not None else comm, device_windows,
            options.pop("memory", "host"),
            lambda: device_obstacle([(n, p.detach()) for n, p in named])) if choose \
            else WindowChoice("host", -1)
        options.pop("cuda_device", None)  # the device window's is the tensors' device
        self._device = choice.cuda_device if choice.memory == "cuda" else None
        self._state: Optional[OptimizerStateLayers] = None
        self._states_inherited = 0
        layout = layout_of(module, hyperparameters)
        # Weak references: the core holds the hooks, and a cycle through the C++ object would
        # keep this agent (and its window) alive until exit.
        ref = weakref.ref(self)
        if inherit_optimizer_state:
            self._inherit_state(groups, comm, named, layout, options, ref)
        self._agent: Any
        if groups is not None:
            self._agent = GroupAgent(groups, layout, memory=choice.memory,
                                     cuda_device=choice.cuda_device, **options)
        else:
            self._agent = Agent(layout, comm, memory=choice.memory,
                                cuda_device=choice.cuda_device, **options)
        self._agent.set_checkpoint_hooks(
            lambda: ref()._save_blobs() if ref() is not None else {},
            lambda blobs, reborn: ref()._load_blobs(blobs, reborn) if ref() is not None
            else None)
        if hyperparameters:
            self._agent.set_hyperparameters(hyperparameters)
            self._apply_lr()

    def _inherit_state(self, groups: Optional[AgentGroups], comm: Any,
                       named: List[Tuple[str, _torch.nn.Parameter]], layout: "_core.Layout",
                       options: Dict[str, Any], ref: "weakref.ref[TorchAgent]") -> None:
        """inherit_optimizer_state: the state layers (agreed over ``comm``) appended to
        ``layout``; the agent's prepare_params hook copies the state into those not in place
        (then calls the user's), its reset hook (mixing "reset") zeros them after the user's."""
        if groups is not None:
            raise InvalidArgument("paramwin: TorchAgent: inherit_optimizer_state is not supported "
                                  "for grouped agents (AgentGroups) yet; use the reset or a "
                                  "builder")
        device = None if self._device is None else _torch.device("cuda", self._device)
        self._state = agreed(comm, lambda: _state_layers(self.optimizer, named,
                                                         "inherit_optimizer_state", device))
        self._state.append_to(layout)
        _state_hooks(ref, options)

    @property
    def device_window(self) -> bool:
        """True when the agent's window is a device window (the parameters are read and
        written in place on their GPU); False when they are staged through host memory."""
        return self._device is not None

    def publish(self) -> "_core.PublishResult":
        """Publishes the module's parameters now (e.g. before the first step)."""
        return self._agent.publish(self._data())

    def step(self, iteration: int, metric: float) -> "_core.StepEvent":
        """One step of the population (see Agent.step); on a rebirth the parameters hold the
        donors' mix and the optimizer state of the replaced parameters is reset (or holds the
        donors' mix with inherit_optimizer_state)."""
        self._sync_lr()
        with _torch.no_grad():
            event = self._agent.step(iteration, metric, self._data())
        if event.died:
            self._after_rebirth()
        return event

    # -- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Saves the population (the module's parameters, the agent's state, the optimizer's
        state_dict) into checkpoint ``path``; collective (see Agent.save_checkpoint)."""
        self._sync_lr()
        with _torch.no_grad():
            self._agent.save_checkpoint(path, self._data())

    def load_checkpoint(self, path: Union[str, "os.PathLike[str]"]) -> "_core.CheckpointLoad":
        """Continues from checkpoint ``path`` (Python's or C++'s): the module's parameters, the
        agent's state and, when the file has it, the optimizer's state; collective."""
        with _torch.no_grad():
            result = self._agent.load_checkpoint(path, self._data())
        self._apply_lr()
        return result

    def resume_newest(self) -> Optional["_core.CheckpointLoad"]:
        """Loads the newest checkpoint of the ``checkpoint_path`` pattern, or returns None
        when there is none; collective."""
        with _torch.no_grad():
            result = self._agent.resume_newest(self._data())
        if result is not None:
            self._apply_lr()
        return result

    def wait_checkpoint(self) -> None:
        """Waits for an asynchronous save and raises its error; collective."""
        self._agent.wait_checkpoint()

    def _save_blobs(self) -> Dict[str, bytes]:
        if self.optimizer is None:
            return {}
        if self._state is not None:  # the layers the save reads hold the current state
            self._state.capture(self.optimizer, self._params)
        out = io.BytesIO()
        _torch.save(self.optimizer.state_dict(), out)
        return {self.OPTIMIZER_BLOB: out.getvalue()}

    def _load_blobs(self, blobs: Dict[str, bytes], reborn: bool) -> None:
        for p in self._params:
            p.grad = None
        if self._builder is not None:
            self.optimizer = self._builder(self.module)
        if self.optimizer is None:
            return
        blob = blobs.get(self.OPTIMIZER_BLOB)
        if blob is None or reborn:
            # A C++ TorchAgent's file (LibTorch's archive), or an agent reborn from a donor:
            # a fresh optimizer state, as on a rebirth.
            for p in self._params:
                self.optimizer.state.pop(p, None)
            return
        self.optimizer.load_state_dict(_torch.load(io.BytesIO(blob)))

    # -- forwarding -------------------------------------------------------------------------
    @property
    def agent(self) -> Union[Agent, GroupAgent]:
        """The underlying Agent or GroupAgent (rosters, stats, pause, ...)."""
        return self._agent

    layout = property(lambda self: self._agent.layout, doc="The module's Layout.")
    rank = property(lambda self: self._agent.rank, doc="Rank in the agent's window.")
    size = property(lambda self: self._agent.size, doc="Agents in the window.")
    generation = property(lambda self: self._agent.generation, doc="Rebirths so far.")
    age = property(lambda self: self._agent.age, doc="Steps since (re)birth.")
    stats = property(lambda self: self._agent.stats, doc="Counters and phase timers.")
    steps = property(lambda self: self._agent.steps, doc="step() calls so far.")
    event_log_path = property(lambda self: self._agent.event_log_path,
                              doc="This agent's event log file, or None.")

    def pause(self) -> None:
        """Pauses the agent (see Agent.pause)."""
        self._agent.pause()

    def resume(self) -> None:
        """Ends a pause (see Agent.resume)."""
        self._agent.resume()

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


class _ElasticSlot:
    """What the module elastic agents share: the slot's calls and properties of the elastic
    agent they hold (``self._agent``)."""

    _agent: Any

    def resign(self) -> None:
        """Gives the slot up after a trainer's exception (a spare takes it); this process is
        a spare now (call wait_for_slot())."""
        self._agent.resign()

    member = property(lambda self: self._agent.member, doc="Whether this process has a slot.")
    slot = property(lambda self: self._agent.slot, doc="This process's slot (-1: a spare).")
    epoch = property(lambda self: self._agent.epoch, doc="The membership epoch.")
    resume_iteration = property(lambda self: self._agent.resume_iteration,
                                doc="Where a joined spare resumes its slot's training.")


class TorchElasticAgent(_ElasticSlot, _TorchMember):
    """One process of an elastic population of modules (docs/elastic.md, "Epochs and
    spares"): ``paramwin.ElasticAgent`` driven by a module and its optimizer, as TorchAgent
    drives an Agent. Every process of ``comm`` (mpi4py; default COMM_WORLD) builds the module
    and its optimizer; the first ``members`` ranks train in slots, the others are spares. A
    spare given a dead member's slot starts with a rebirth from live donors: their mix written
    into the module's parameters in place, the optimizer's state of the replaced parameters
    dropped (or, with ``optimizer_builder(module)``, a new optimizer: ``agent.optimizer``; or,
    with ``inherit_optimizer_state=True``, the donors' mix of it, as for TorchAgent), and the
    hyperparameters inherited and explored (``"lr"`` goes to every param group). No
    checkpoint is read. The module's parameters must be CPU tensors (a host window).

    The trainer's loop (a Python exception in one trainer is a death the others survive)::

        agent = paramwin.torch.TorchElasticAgent(model, opt, members=8, k=2,
                                                 inherit_optimizer_state=True)
        finished = False
        while not finished and agent.wait_for_slot():    # a spare sleeps here
            try:
                for it in range(agent.resume_iteration, steps):
                    loss = loss_fn(model(x), y)
                    if agent.step(it, loss.item()).died:
                        continue                          # the gradient is the dead weights'
                    agent.optimizer.zero_grad()
                    loss.backward()
                    agent.optimizer.step()
                agent.finish()
                finished = True
            except paramwin.EvictedError:                 # stalled past the bound: a spare
                pass
            except Exception:
                agent.resign()                            # a spare takes the slot
        os._exit(0)                                       # never MPI_Finalize

    Options are paramwin.ElasticAgent's (``replacement``, ``check_seconds``,
    ``dead_after_seconds``, ``agree_seconds``, ``suspect_seconds``, the agent's options and
    callables). Creation is collective over ``comm``; a bad argument on one rank raises
    InvalidArgument on every rank.
    """

    def __init__(self, module: _torch.nn.Module, optimizer: Optional[_torch.optim.Optimizer],
                 comm: Any = None, *, members: int,
                 optimizer_builder: Optional[Callable[[_torch.nn.Module],
                                                      _torch.optim.Optimizer]] = None,
                 hyperparameters: Optional[Dict[str, Any]] = None,
                 inherit_optimizer_state: bool = False, **options: Any):
        named = _named_parameters(module)
        self.module = module
        self.optimizer = optimizer
        self._builder = optimizer_builder
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        self._device = None
        self._state = None
        self._states_inherited = 0
        self._initial_hyper = dict(hyperparameters or {})

        def check() -> Optional[OptimizerStateLayers]:
            if not named:
                raise InvalidArgument("paramwin: the module has no parameters")
            for name, p in named:
                if p.device.type != "cpu":
                    raise InvalidArgument(
                        f"paramwin: TorchElasticAgent: '{name}' is on {p.device}; an elastic "
                        "population's window is host memory (keep the module on the CPU)")
            _check_one_lr(optimizer, hyperparameters, "TorchElasticAgent")
            if not inherit_optimizer_state:
                return None
            return _state_layers(optimizer, named, "inherit_optimizer_state")

        # Agreed before the collective creation: a rank that refuses must not leave the others
        # waiting in it.
        self._state = agreed(comm, check)
        layout = layout_of(module, hyperparameters)
        if self._state is not None:
            self._state.append_to(layout)
            _state_hooks(weakref.ref(self), options)
        self._agent = ElasticAgent(layout, comm, members=members, **options)
        if self._agent.member:
            self._start_hyperparameters()

    def _start_hyperparameters(self) -> None:
        if self._initial_hyper:
            self._agent.set_hyperparameters(self._initial_hyper)
            self._apply_lr()

    def wait_for_slot(self) -> bool:
        """A member: True at once. A spare: sleeps until it is given a dead member's slot
        (True: its next step is the rebirth from live donors) or the population finished
        (False)."""
        if not self._agent.wait_for_slot():
            return False
        if self._agent.joined:
            # The agent's own values until the rebirth replaces them (explore.inherit=keep
            # keeps these).
            self._start_hyperparameters()
        return True

    def step(self, iteration: int, metric: float) -> "_core.StepEvent":
        """One step (see paramwin.ElasticAgent.step): the membership's messages, then the
        agent's step over the module's parameters; on a rebirth (a joined spare's first step)
        the parameters, optimizer state and hyperparameters are the donors'. Raises
        EvictedError when this process was judged dead while it stalled (a spare now)."""
        self._sync_lr()
        with _torch.no_grad():
            event = self._agent.step(int(iteration), float(metric), self._data())
        if event.died:
            self._after_rebirth()
        return event

    def finish(self) -> None:
        """At the end of training: waits until every slot finished or is dead, then releases
        the spares; a slot that dies meanwhile is given to a spare, this member republishing
        the module's parameters in the new epoch's window (EvictedError: see
        paramwin.ElasticAgent.finish)."""
        with _torch.no_grad():
            self._agent.finish(self._data())

    @property
    def agent(self) -> ElasticAgent:
        """The underlying paramwin.ElasticAgent (slot, epoch, members, spares, version,
        members_gather, ...)."""
        return self._agent

    joined = property(lambda self: self._agent.joined,
                      doc="Whether the next step is a joined spare's rebirth.")


class _ModuleAveraging:
    """What the module averaging agents share: the module's parameters (then, with
    ``mix_optimizer_state``, the optimizer's state layers) as the agent's data, and a round's
    mix written back into the optimizer."""

    def _bind(self, module: _torch.nn.Module,
              named: List[Tuple[str, _torch.nn.Parameter]],
              optimizer: Optional[_torch.optim.Optimizer],
              state: Optional[OptimizerStateLayers]) -> None:
        """``named``: the module's ``_named_parameters``, as the caller collected them."""
        self.module = module
        self.optimizer = optimizer
        self._names = [name for name, _ in named]
        self._params = [p for _, p in named]
        self._state = state
        self._states_mixed = 0

    def _layout(self) -> "_core.Layout":
        layout = layout_of(self.module)
        if self._state is not None:
            self._state.append_to(layout)
        return layout

    def _data(self) -> Dict[str, _torch.Tensor]:
        data = {name: p.data for name, p in zip(self._names, self._params)}
        if self._state is not None:
            data.update(self._state.layers(self.optimizer, self._params))
            self._state.capture(self.optimizer, self._params)
        return data

    def _mixed(self, r: "_core.AveragingRound",
               keep_own_counts: bool = True) -> "_core.AveragingRound":
        if self._state is not None and r.applied:
            self._states_mixed += self._state.restore(self.optimizer, self._params,
                                                      keep_own_counts=keep_own_counts)
        return r

    @property
    def optimizer_states_mixed(self) -> int:
        """Optimizer state entries written from a mix so far (``mix_optimizer_state``)."""
        return self._states_mixed


class TorchAveragingAgent(_ModuleAveraging):
    """One rank of a module trained data-parallel by ranks that average their parameters
    one-sidedly (paramwin.AveragingAgent over ``module.named_parameters()``; collective
    creation over ``comm``).

    ``TorchAveragingAgent(module, comm=None, optimizer=None, mix_optimizer_state=False,
    **options)``: options are AveragingAgent's keywords. Call ``step()`` after every
    ``optimizer.step()`` (it mixes the peers into the parameters in place and publishes),
    ``finish()`` at the end (collective: every rank then holds the mean). The first ``step()``
    publishes the initial parameters first if ``publish()`` was not called.
    ``save_checkpoint(path, optimizer=None)`` and ``load_checkpoint(path, optimizer=None)``
    save and restore the averaging population (AveragingAgent's checkpoints) with the
    optimizer's ``state_dict`` (the one given, else the agent's own ``optimizer``, if any).

    The optimizer's state (Adam's moments, momentum buffers) is each rank's own and is kept,
    unless ``mix_optimizer_state=True`` (the C++ ``TorchAveragingOptions::mix_optimizer_state``;
    needs ``optimizer``, a torch.optim Adam, AdamW or SGD with momentum: InvalidArgument on
    every rank otherwise): then the state becomes layers of the snapshot, after the
    parameters (``optimizer/<name>/exp_avg``, ``.../exp_avg_sq``, ``.../max_exp_avg_sq`` with
    amsgrad, ``.../step``; SGD: ``.../momentum_buffer``, ``.../has_momentum_buffer``), copied
    from the optimizer before every call, and a round (a mean, a correction) mixes it with the
    weights of the parameters and writes it into the optimizer (an entry is created for a
    parameter without one). Adam's step count is not mixed: each rank keeps its own (its bias
    correction follows its own steps). ``optimizer_states_mixed`` counts the entries written.

    CUDA modules: their parameters (and the optimizer's state) are staged through host buffers
    (copied in before a step, copied back when the step changed them), as in the C++ adapter:
    warm-up, cool-down, ``finish()`` and background corrections compute on the host, so an
    averaging agent has no device window (``memory="cuda"`` raises InvalidArgument).
    """

    def __init__(self, module: _torch.nn.Module, comm: Any = None, *,
                 optimizer: Optional[_torch.optim.Optimizer] = None,
                 mix_optimizer_state: bool = False, **options: Any):
        named = _named_parameters(module)
        if not named:
            raise InvalidArgument("paramwin: the module has no parameters")
        if str(options.get("memory", "host")) != "host":
            raise InvalidArgument("paramwin: TorchAveragingAgent: the synchronous means and "
                                  "background corrections run on the host, so it has no device "
                                  "window (memory must be \"host\"; CUDA parameters are staged)")
        state: Optional[OptimizerStateLayers] = None
        if mix_optimizer_state:
            state = agreed(comm, lambda: _state_layers(optimizer, named, "mix_optimizer_state"))
        self._bind(module, named, optimizer, state)
        self.agent = AveragingAgent(self._layout(), comm, **options)
        self._published = False

    def publish(self) -> "_core.PublishResult":
        """Publishes the module's parameters now (the initial ones, before the first step)."""
        self._published = True
        return self.agent.publish(self._data())

    def step(self) -> "_core.AveragingRound":
        """The step's averaging into the module's parameters (see AveragingAgent.step)."""
        if not self._published:
            self.publish()
        with _torch.no_grad():
            return self._mixed(self.agent.step(self._data()))

    def finish(self) -> "_core.AveragingRound":
        """The closing synchronous mean (collective; see AveragingAgent.finish), of the
        optimizer's state too with ``mix_optimizer_state``."""
        with _torch.no_grad():
            return self._mixed(self.agent.finish(self._data()))

    # -- checkpoints ------------------------------------------------------------------------
    OPTIMIZER_BLOB = "optimizer.python"

    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"],
                        optimizer: Optional[_torch.optim.Optimizer] = None) -> None:
        """Saves the averaging population into checkpoint ``path`` (AveragingAgent.
        save_checkpoint): the module's parameters, the agent's state and, given an
        ``optimizer`` (default: the one the agent was created with, if any), its state_dict
        (the blob ``optimizer.python``, as TorchAgent's). Collective: every rank has an
        optimizer, or none has."""
        if optimizer is None:
            optimizer = self.optimizer

        def blobs() -> Dict[str, bytes]:
            out = io.BytesIO()
            _torch.save(optimizer.state_dict(), out)
            return {self.OPTIMIZER_BLOB: out.getvalue()}

        self.agent.set_checkpoint_hooks(blobs if optimizer is not None else None, None)
        try:
            with _torch.no_grad():
                self.agent.save_checkpoint(path, self._data())
        finally:
            self.agent.set_checkpoint_hooks(None, None)

    def load_checkpoint(self, path: Union[str, "os.PathLike[str]"],
                        optimizer: Optional[_torch.optim.Optimizer] = None
                        ) -> "_core.CheckpointLoad":
        """Continues from checkpoint ``path`` (AveragingAgent.load_checkpoint): the module's
        parameters, the agent's state (the next rounds are the saving run's; the loaded
        parameters are published) and, given an ``optimizer`` (default: the one the agent was
        created with, if any) and a file that holds its state_dict, the optimizer's state.
        Collective; on an error nothing changed."""
        if optimizer is None:
            optimizer = self.optimizer

        def restore(blobs: Dict[str, bytes], reborn: bool) -> None:
            blob = blobs.get(self.OPTIMIZER_BLOB)
            if blob is not None:
                optimizer.load_state_dict(_torch.load(io.BytesIO(blob)))

        self.agent.set_checkpoint_hooks(None, restore if optimizer is not None else None)
        try:
            with _torch.no_grad():
                result = self.agent.load_checkpoint(path, self._data())
        finally:
            self.agent.set_checkpoint_hooks(None, None)
        self._published = True  # the load published the loaded parameters
        return result

    def pause(self) -> None:
        """See AveragingAgent.pause."""
        self.agent.pause()

    def resume(self) -> None:
        """See AveragingAgent.resume."""
        self.agent.resume()

    def close(self) -> None:
        """Frees the window (collective)."""
        self.agent.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self.agent.closed

    rank = property(lambda self: self.agent.rank, doc="This rank in the communicator.")
    size = property(lambda self: self.agent.size, doc="Ranks in the communicator.")

    def __enter__(self) -> "TorchAveragingAgent":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_after_block(self, "TorchAveragingAgent", exc_type, exc, tb)


class TorchElasticAveragingAgent(_ElasticSlot, _ModuleAveraging):
    """One process of an elastic averaging population of modules (docs/elastic.md, "Averaging
    populations"): ``paramwin.ElasticAveragingAgent`` driven by a module's parameters, as
    TorchAveragingAgent drives an AveragingAgent. Every process of ``comm`` (mpi4py; default
    COMM_WORLD) builds the module (and its optimizer); the first ``members`` ranks train in
    slots, the others are spares. A spare given a dead member's slot starts from the uniform
    mix of the live members (round kind ``"joined"``), read one-sidedly: the module's
    parameters and, with ``mix_optimizer_state=True`` (Adam, AdamW or SGD with momentum), the
    optimizer's state, Adam's step count included (the joiner takes over the members'
    training; other rounds keep each rank's own count). The parameters must be CPU tensors.

    The trainer's loop (a Python exception in one trainer is a death the others survive)::

        agent = paramwin.torch.TorchElasticAveragingAgent(model, members=8, optimizer=opt,
                                                          mix_optimizer_state=True,
                                                          topology="ring")
        finished = False
        while not finished and agent.wait_for_slot():    # a spare sleeps here
            try:
                for it in range(agent.resume_iteration, steps):
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
                    agent.step()                          # a joiner's first: the members' mix
                agent.finish()
                finished = True
            except paramwin.EvictedError:                 # stalled past the bound: a spare
                pass
            except Exception:
                agent.resign()                            # a spare takes the slot
        os._exit(0)                                       # never MPI_Finalize

    Options are paramwin.ElasticAveragingAgent's (``replacement``, ``check_seconds``,
    ``dead_after_seconds``, ``agree_seconds``, the averaging keywords less what is collective
    over the population). Creation is collective over ``comm``; a bad argument on one process
    raises InvalidArgument on every process.
    """

    def __init__(self, module: _torch.nn.Module, comm: Any = None, *, members: int,
                 optimizer: Optional[_torch.optim.Optimizer] = None,
                 mix_optimizer_state: bool = False, **options: Any):
        named = _named_parameters(module)

        def check() -> Optional[OptimizerStateLayers]:
            if not named:
                raise InvalidArgument("paramwin: the module has no parameters")
            for name, p in named:
                if p.device.type != "cpu":
                    raise InvalidArgument(
                        f"paramwin: TorchElasticAveragingAgent: '{name}' is on {p.device}; an "
                        "elastic population's window is host memory (keep the module on the CPU)")
            if str(options.get("memory", "host")) != "host":
                raise InvalidArgument("paramwin: TorchElasticAveragingAgent: an elastic "
                                      "population's window is host memory (memory must be "
                                      "\"host\")")
            if not mix_optimizer_state:
                return None
            return _state_layers(optimizer, named, "mix_optimizer_state")

        # Agreed before the collective creation: a process that refuses must not leave the
        # others waiting in it.
        self._bind(module, named, optimizer, agreed(comm, check))
        self._agent = ElasticAveragingAgent(self._layout(), comm, members=members, **options)

    def wait_for_slot(self) -> bool:
        """A member: True at once. A spare: sleeps until it is given a dead member's slot
        (True: its next step is the join) or the population finished (False)."""
        return self._agent.wait_for_slot()

    def step(self) -> "_core.AveragingRound":
        """One step, after the optimizer's (see paramwin.ElasticAveragingAgent.step): the
        membership's messages, then the round into the module's parameters (and with
        ``mix_optimizer_state`` the optimizer's state) in place. Raises EvictedError when this
        process was judged dead while it stalled (a spare now)."""
        with _torch.no_grad():
            r = self._agent.step(self._data())
        return self._mixed(r, keep_own_counts=str(r.kind) != "joined")

    def finish(self) -> None:
        """At the end of training: waits until every slot finished or is dead, then releases
        the spares (no mean: nothing collective runs over the population); a slot that dies
        meanwhile is given to a spare, this member republishing the module's parameters in
        the new epoch's window."""
        with _torch.no_grad():
            self._agent.finish(self._data())

    @property
    def agent(self) -> ElasticAveragingAgent:
        """The underlying paramwin.ElasticAveragingAgent (slot, epoch, members, version,
        members_gather, ...)."""
        return self._agent

    joining = property(lambda self: self._agent.joining,
                       doc="Whether this member's next step is its join.")
