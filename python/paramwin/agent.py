"""paramwin.Agent: the facade a training loop calls once per step."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from ._lifetime import close_after_block
from ._tensors import Layers
from .errors import InvalidArgument

__all__ = ["Agent", "agent_config"]


def _option_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "age" and isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise InvalidArgument(f"paramwin: option 'age' must be (lo, hi), got {value!r}")
        return f"{int(value[0])}..{int(value[1])}"
    if isinstance(value, (tuple, list)):
        return ",".join(_option_text(key, v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def agent_config(options: Union[None, str, Mapping[str, Any]] = None,
                 **keywords: Any) -> Dict[str, str]:
    """The key/value form of AgentOptions (docs/agent.md, "Configuration from strings") from
    a string ``"k=2 selection=fittest"``, a mapping, or keywords (``k=2,
    selection="fittest", age=(50, 150), triggers=["age", "worst_fraction"]``). A key given
    twice raises InvalidArgument."""
    config: Dict[str, str] = {}

    def put(key: str, value: Any) -> None:
        if key in config:
            raise InvalidArgument(f"paramwin: option '{key}' given twice")
        config[key] = _option_text(key, value)

    if isinstance(options, str):
        for token in options.replace(";", " ").split():
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise InvalidArgument(f"paramwin: option token '{token}' is not key=value")
            put(key, value)
    elif options is not None:
        for key, value in options.items():
            put(str(key), value)
    for key, value in keywords.items():
        put(key, value)
    return config


class Agent:
    """One member of a population over ``comm`` (mpi4py communicator, default COMM_WORLD).

    Options are those of AgentOptions in their key/value form, as keywords or a string
    (``Agent(layout, k=2, selection="fittest")`` or ``Agent(layout, options="k=2
    selection=fittest")``); callables: ``on_rebirth(event)``, ``reset(seed)`` (for
    ``mixing="reset"``: re-initialise your arrays), ``custom_trigger(ctx) -> bool``,
    ``prepare_params()``. Window options: ``transport``, ``verify``, ``name`` (name the
    window when several share a communicator: see ParameterWindow). Creation and
    close() are collective, and so is a step() that saves a checkpoint (``checkpoint_*``
    keys); otherwise step()'s reads of other agents wait no longer than
    ``read_timeout_seconds`` in all. A context manager (closes on exit).
    """

    def __init__(self, layout: "_core.Layout", comm: Any = None, *,
                 options: Union[None, str, Mapping[str, Any]] = None,
                 on_rebirth: Optional[Callable[["_core.StepEvent"], None]] = None,
                 reset: Optional[Callable[[int], None]] = None,
                 custom_trigger: Optional[Callable[["_core.TriggerContext"], bool]] = None,
                 prepare_params: Optional[Callable[[], None]] = None,
                 transport: str = "auto", verify: bool = True, name: str = "",
                 **keywords: Any):
        config = agent_config(options, **keywords)
        self._user_prepare = prepare_params
        self._batch: Optional[Layers] = None
        # The core holds a weak reference: no cycle through the C++ object, which Python's
        # collector cannot see into.
        self_ref = weakref.ref(self)

        def prepare() -> None:
            agent = self_ref()
            if agent is not None:
                agent._prepare()

        self._agent = _core.Agent(comm, layout, config, on_rebirth, reset, custom_trigger,
                                  prepare, transport, verify, name)

    def _prepare(self) -> None:
        if self._batch is not None:
            self._batch.refresh_staged()
        if self._user_prepare is not None:
            self._user_prepare()

    # -- the step ---------------------------------------------------------------------------
    def step(self, iteration: int, metric: float,
             params: Union[Sequence[Any], dict]) -> "_core.StepEvent":
        """One training step: reports ``metric``, may die and be reborn from donors into
        ``params`` (written in place; zero copy for CPU arrays and tensors), publishes per the
        cadence and returns the StepEvent. The GIL is released for the step's MPI work."""
        batch = Layers(params, writable=True)
        self._batch = batch
        try:
            event = self._agent.step(int(iteration), float(metric), batch.descriptors)
        finally:
            self._batch = None
        if event.died:
            batch.write_back()
        return event

    def publish(self, params: Union[Sequence[Any], dict]) -> "_core.PublishResult":
        """Publishes ``params`` now, outside the cadence (e.g. the initial parameters)."""
        batch = Layers(params, writable=False)
        return self._agent.publish(batch.descriptors)

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
        return self._agent.is_paused

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

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_after_block(self, "Agent", exc_type, exc, tb)

    # -- state ------------------------------------------------------------------------------
    def roster_all(self, *, timeout_seconds: float = 0.0) -> List["_core.RosterEntry"]:
        """Every agent's roster, indexed by rank (one-sided)."""
        return self._agent.roster_all(timeout_seconds)

    def roster(self, rank: int, *, timeout_seconds: float = 0.0) -> "_core.RosterEntry":
        """One agent's roster (one-sided)."""
        return self._agent.roster(rank, timeout_seconds)

    @property
    def hyperparameters(self) -> Dict[str, Any]:
        """This agent's hyperparameters (declared with the layout), name -> value: what its
        next publish carries; after a rebirth, the inherited and explored ones."""
        return self._agent.hyperparameters

    def set_hyperparameters(self, values: Mapping[str, Any]) -> None:
        """Sets some hyperparameters (the others keep their values); the next publish carries
        them."""
        self._agent.set_hyperparameters(dict(values))

    rank = property(lambda self: self._agent.rank, doc="Rank in the agent's window.")
    size = property(lambda self: self._agent.size, doc="Agents in the window.")
    layout = property(lambda self: self._agent.layout, doc="The parameters' Layout.")
    version = property(lambda self: self._agent.version, doc="Publish version of this agent.")
    steps = property(lambda self: self._agent.steps, doc="step() calls so far.")
    age = property(lambda self: self._agent.age, doc="Steps since (re)birth.")
    max_age = property(lambda self: self._agent.max_age, doc="Drawn maximum age.")
    generation = property(lambda self: self._agent.generation, doc="Rebirths so far.")
    stats = property(lambda self: self._agent.stats, doc="Counters and phase timers (AgentStats).")

    def summary(self) -> str:
        """Counters and phase timers as text (AgentStats::write_summary)."""
        return self._agent.summary()


class _Paused:
    def __init__(self, agent: Agent):
        self._agent = agent
        self._owns = False

    def __enter__(self) -> Agent:
        self._owns = not self._agent.is_paused
        if self._owns:
            self._agent.pause()
        return self._agent

    def __exit__(self, *exc) -> None:
        if self._owns:
            self._owns = False
            self._agent.resume()
