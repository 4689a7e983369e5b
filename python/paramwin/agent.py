"""paramwin.Agent: the facade a training loop calls once per step (and the calls it shares
with paramwin.GroupAgent: steps, publishes, pauses, checkpoints, hooks)."""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from ._lifetime import close_after_block
from ._options import agent_config, liveness_bound
from ._tensors import Layers
from .errors import CallbackError

__all__ = ["Agent", "ExploreContext", "agent_config"]

Params = Union[Sequence[Any], Dict[str, Any]]
OptionValue = Any  # see paramwin._options: bool, int, float, str, enum, (lo, hi), list, dict


@dataclass
class ExploreContext:
    """What a ``custom_explore`` callable sees (C++ ExploreContext): the agent (``rank``: its rank
    or agent id), ``generation`` (this rebirth included), ``before`` (its hyperparameters
    before the rebirth), ``donors`` (the donors' published hyperparameters, best first),
    ``weights`` (their normalised mixing weights), ``seed`` (from the agent's explore
    stream: draw from ``random.Random(seed)`` to stay reproducible)."""

    rank: int
    generation: int
    before: Dict[str, Any]
    donors: List[Dict[str, Any]] = field(default_factory=list)
    weights: List[float] = field(default_factory=list)
    seed: int = 0


def _guard(hook: str, fn: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    """``fn`` raising CallbackError (naming ``hook``, the original exception as its cause)
    instead of whatever it raised."""
    if fn is None:
        return None
    if not callable(fn):
        from .errors import InvalidArgument

        raise InvalidArgument(f"paramwin: {hook} must be callable, got {type(fn).__name__}")

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised, named, with the cause kept
            raise CallbackError(f"paramwin: the {hook} callable raised "
                                f"{type(e).__name__}: {e}", hook) from e

    return call


def _extra_hooks(keywords: Dict[str, Any]) -> Dict[str, Any]:
    """Takes out of ``keywords`` the hooks of the C++ hook table (``_core.hook_names()``) that
    have no keyword of their own here (a hook added to python/src/callbacks.cpp is a keyword at
    once), each guarded like the others."""
    names = set(_core.hook_names())
    return {k: _guard(k, keywords.pop(k)) for k in list(keywords) if k in names}


def _hooks(on_rebirth, reset, custom_trigger, custom_explore, prepare) -> Dict[str, Any]:
    trigger = _guard("custom_trigger", custom_trigger)
    user_explore = _guard("custom_explore", custom_explore)

    def explore_call(ctx: tuple, values: Dict[str, Any]) -> Dict[str, Any]:
        assert user_explore is not None
        rank, generation, before, donors, weights, seed = ctx
        out = user_explore(ExploreContext(rank, generation, before, donors, weights, seed),
                           values)
        return values if out is None else dict(out)

    return {
        "on_rebirth": _guard("on_rebirth", on_rebirth),
        "reset": _guard("reset", reset),
        "custom_trigger": None if trigger is None else (lambda ctx: bool(trigger(ctx))),
        "custom_explore": None if user_explore is None else explore_call,
        "prepare_params": prepare,
    }


class _Member:
    """What Agent and GroupAgent share (AgentInterface): ``self._agent`` is the core object."""

    _agent: Any
    _what = "Agent"

    def _init_member(self, prepare_params: Optional[Callable[[], None]]) -> Callable[[], None]:
        self._user_prepare = _guard("prepare_params", prepare_params)
        self._batch: Optional[Layers] = None
        # The core holds a weak reference: no cycle through the C++ object, which Python's
        # collector cannot see into.
        self_ref = weakref.ref(self)

        def prepare() -> None:
            agent = self_ref()
            if agent is not None:
                agent._prepare()

        return prepare

    def _prepare(self) -> None:
        if self._batch is not None:
            self._batch.prepare()
        if self._user_prepare is not None:
            self._user_prepare()

    # -- the step ---------------------------------------------------------------------------
    @property
    def memory(self) -> str:
        """Where the agent's snapshots live: "host", or "cuda" for a device window (its
        calls then take CUDA tensors in place)."""
        return str(self._agent.memory)

    def _layers(self, params: Params, writable: bool) -> Layers:
        return Layers(params, writable, device_window=self._agent.memory == "cuda")

    def step(self, iteration: int, metric: float, params: Params) -> "_core.StepEvent":
        """One training step: reports ``metric``, may die and be reborn from donors into
        ``params`` (written in place; zero copy for CPU arrays and tensors, and for CUDA
        tensors on a device window), publishes per the cadence, saves a checkpoint when the
        ``checkpoint_*`` options ask for it, and returns the StepEvent. The GIL is released
        for the step's MPI work."""
        batch = self._layers(params, writable=True)
        self._batch = batch
        try:
            event = self._agent.step(int(iteration), float(metric), batch.descriptors)
        finally:
            self._batch = None
        if event.died:
            batch.write_back()
        return event

    def publish(self, params: Params) -> "_core.PublishResult":
        """Publishes ``params`` now, outside the cadence (e.g. the initial parameters)."""
        batch = self._layers(params, writable=False)
        batch.prepare()
        return self._agent.publish(batch.descriptors)

    # -- checkpoints (docs/checkpoints.md; the files are the C++ library's) -----------------
    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"], params: Params) -> None:
        """Saves the whole population into the parallel-HDF5 checkpoint ``path`` (every
        agent its ``params`` and state; the same file format as C++). Collective: every
        agent calls it with the same path. CheckpointError on every rank when one fails."""
        batch = self._layers(params, writable=False)
        batch.prepare()  # a device window's tensors: their producing stream has finished
        self._agent.save_checkpoint(os.fspath(path), batch.descriptors)

    def load_checkpoint(self, path: Union[str, "os.PathLike[str]"],
                        params: Params) -> "_core.CheckpointLoad":
        """Continues from checkpoint ``path`` (written by Python or C++): fills ``params`` and
        restores the agent's state. Collective. The file is validated entirely first:
        CheckpointError on every rank otherwise, with the agent and ``params`` untouched."""
        batch = self._layers(params, writable=True)
        result = self._agent.load_checkpoint(os.fspath(path), batch.descriptors)
        batch.write_back()
        return result

    def resume_newest(self, params: Params) -> Optional["_core.CheckpointLoad"]:
        """Loads the newest checkpoint of the ``checkpoint_path`` option's pattern, or
        returns None (nothing changed) when there is none. Collective."""
        batch = self._layers(params, writable=True)
        result = self._agent.resume_newest(batch.descriptors)
        if result is not None:
            batch.write_back()
        return result

    def wait_checkpoint(self) -> None:
        """Waits for an asynchronous save (``checkpoint_async=True``) and raises its error on
        every rank. Collective."""
        self._agent.wait_checkpoint()

    def set_checkpoint_hooks(self, save: Optional[Callable[[], Dict[str, bytes]]] = None,
                             load: Optional[Callable[[Dict[str, bytes], bool], None]] = None
                             ) -> None:
        """Adds the owner's own state to every checkpoint of this agent: ``save()`` returns
        blobs name -> bytes (same names, same order on every rank); ``load(blobs, reborn)``
        receives them after a load validated the file (``reborn``: this agent was not in the
        file and took a donor's)."""
        self._agent.set_checkpoint_hooks(_guard("checkpoint_save", save),
                                         _guard("checkpoint_load", load))

    # -- membership -------------------------------------------------------------------------
    def leave(self) -> None:
        """Leaves the population; step() raises from then on."""
        self._agent.leave()

    def pause(self) -> None:
        """Pauses the agent (not chosen as a donor, not ranked); see also paused()."""
        self._agent.pause()

    def resume(self) -> None:
        """Ends a pause."""
        self._agent.resume()

    @property
    def is_paused(self) -> bool:
        """Whether the agent is paused."""
        return bool(self._agent.is_paused)

    def paused(self) -> "_Paused":
        """A context manager that pauses the agent for a block (nests; resumes on exit,
        also on an exception) — PauseGuard's Python form."""
        return _Paused(self)

    def progress(self) -> None:
        """Lets MPI progress once, serving this agent's RMA readers (GIL released)."""
        self._agent.progress()

    def close(self) -> None:
        """Frees the agent's window (collective). Closing twice is a no-op."""
        self._agent.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return not self._agent.valid

    def __exit__(self, exc_type, exc, tb) -> None:
        close_after_block(self, self._what, exc_type, exc, tb)

    # -- state ------------------------------------------------------------------------------
    @property
    def hyperparameters(self) -> Dict[str, Any]:
        """This agent's hyperparameters (declared with the layout), name -> value: what its
        next publish carries; after a rebirth, the inherited and explored ones."""
        return self._agent.hyperparameters

    def set_hyperparameters(self, values: Mapping[str, Any]) -> None:
        """Sets some hyperparameters (the others keep their values); the next publish carries
        them."""
        self._agent.set_hyperparameters(dict(values))

    @property
    def layout(self) -> "_core.Layout":
        """The parameters' Layout."""
        return self._agent.layout

    @property
    def steps(self) -> int:
        """step() calls so far."""
        return int(self._agent.steps)

    @property
    def age(self) -> int:
        """Steps since (re)birth."""
        return int(self._agent.age)

    @property
    def max_age(self) -> int:
        """The drawn maximum age in force."""
        return int(self._agent.max_age)

    @property
    def generation(self) -> int:
        """Rebirths so far."""
        return int(self._agent.generation)

    @property
    def stats(self) -> "_core.AgentStats":
        """Counters and phase timers (AgentStats)."""
        return self._agent.stats

    @property
    def event_log(self) -> str:
        """The ``event_log`` option's path pattern ("" when there is no log); "{rank}" in it
        is replaced by the rank (a GroupAgent: its agent id, written by the leader)."""
        return str(self._agent.event_log)

    @property
    def event_log_path(self) -> Optional[str]:
        """This agent's event log file, or None when there is no log."""
        pattern = self.event_log
        if not pattern:
            return None
        return pattern.replace("{rank}", str(self._log_rank()))

    def _log_rank(self) -> int:
        raise NotImplementedError

    def roster_all(self, *, timeout_seconds: float = 0.0) -> List["_core.RosterEntry"]:
        """Every agent's roster, indexed by rank (one-sided; a GroupAgent's: this rank's
        shard window, indexed by agent id)."""
        return self._agent.roster_all(timeout_seconds)

    def summary(self) -> str:
        """Counters and phase timers as text (AgentStats::write_summary)."""
        return self._agent.summary()


class Agent(_Member):
    """One member of a population over ``comm`` (mpi4py communicator, default COMM_WORLD).

    Options are those of AgentOptions (every key of the C++ option table, docs/python.md) as
    typed keywords, a mapping or a string (``Agent(layout, k=2,
    selection=SelectionKind.fittest, age=(50, 150))`` or ``Agent(layout, options="k=2
    selection=fittest")``). Callables (each runs with the GIL, only while it runs; one that
    raises makes the call raise CallbackError): ``on_rebirth(event)``, ``reset(seed)`` (for
    ``mixing="reset"``: re-initialise your arrays), ``custom_trigger(ctx) -> bool``,
    ``custom_explore(ctx: ExploreContext, values: dict) -> dict | None`` (after the built-in
    explore: return the new values, or change ``values`` in place),
    ``custom_selection(ctx: SelectionContext) -> list[int]`` (the donors' ranks, chosen from
    ``ctx.candidates``; sets ``selection="custom"`` unless given), ``prepare_params()``.
    (The ``explore`` keyword is the option: ``explore={"lr": "log_uniform:1e-4..1e-1"}``.) Window
    options: ``transport``, ``verify``, ``name`` (name the window when several share a
    communicator: see ParameterWindow), ``memory`` and ``cuda_device`` ("cuda": a device
    window taking CUDA tensors in place, as for ParameterWindow; checkpoints copy them through
    host memory, as in C++), ``suspect_seconds`` and ``suspect_beats`` (the liveness bounds,
    as for ParameterWindow). Creation, close() and the checkpoint calls are
    collective, and so is a step() that saves a checkpoint (``checkpoint_*`` keys); otherwise
    step()'s reads of other agents wait no longer than ``read_timeout_seconds`` in all. A
    context manager (closes on exit).
    """

    _what = "Agent"

    def __init__(self, layout: "_core.Layout", comm: Any = None, *,
                 options: Union[None, str, Mapping[str, Any]] = None,
                 on_rebirth: Optional[Callable[["_core.StepEvent"], None]] = None,
                 reset: Optional[Callable[[int], None]] = None,
                 custom_trigger: Optional[Callable[["_core.TriggerContext"], bool]] = None,
                 custom_explore: Optional[Callable[[ExploreContext, Dict[str, Any]],
                                                   Optional[Dict[str, Any]]]] = None,
                 prepare_params: Optional[Callable[[], None]] = None,
                 transport: str = "auto", verify: bool = True, name: str = "",
                 memory: str = "host", cuda_device: int = -1,
                 suspect_seconds: Optional[float] = None, suspect_beats: Optional[float] = None,
                 **keywords: OptionValue):
        extra = _extra_hooks(keywords)
        config = agent_config(options, **keywords)
        prepare = self._init_member(prepare_params)
        hooks = _hooks(on_rebirth, reset, custom_trigger, custom_explore, prepare)
        hooks.update(extra)
        self._agent = _core.Agent(comm, layout, config, hooks, str(transport), verify, name,
                                  str(memory), int(cuda_device), liveness_bound(suspect_seconds),
                                  liveness_bound(suspect_beats))

    def __enter__(self) -> "Agent":
        return self

    def _log_rank(self) -> int:
        return self.rank

    def roster(self, rank: int, *, timeout_seconds: float = 0.0) -> "_core.RosterEntry":
        """One agent's roster (one-sided)."""
        return self._agent.roster(rank, timeout_seconds)

    @property
    def rank(self) -> int:
        """Rank in the agent's window."""
        return int(self._agent.rank)

    @property
    def size(self) -> int:
        """Agents in the window."""
        return int(self._agent.size)

    @property
    def version(self) -> int:
        """Publish version of this agent."""
        return int(self._agent.version)


class _Paused:
    def __init__(self, agent: _Member):
        self._agent = agent
        self._owns = False

    def __enter__(self) -> Any:
        self._owns = not self._agent.is_paused
        if self._owns:
            self._agent.pause()
        return self._agent

    def __exit__(self, *exc: Any) -> None:
        if self._owns:
            self._owns = False
            self._agent.resume()
