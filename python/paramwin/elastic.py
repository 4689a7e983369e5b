"""paramwin.ElasticAgent: an Agent whose population outlives its processes (docs/elastic.md,
"Epochs and spares"). Members train in slots; spares sleep until a dead member's slot is
theirs, and their first step is a rebirth from live donors."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from ._options import agent_config, liveness_bound
from ._tensors import Layers
from .agent import ExploreContext, Params, _extra_hooks, _guard, _hooks
from .averaging import _options as _averaging_options

__all__ = ["ElasticAgent", "ElasticAveragingAgent"]


class ElasticAgent:
    """One process of an elastic population over ``comm`` (mpi4py communicator, default
    COMM_WORLD): the first ``members`` ranks train, one slot each; the others are spares.

    The trainer's loop (a Python exception in a trainer gives its slot to a spare)::

        agent = paramwin.ElasticAgent(layout, members=8, k=2)
        finished = False
        while not finished and agent.wait_for_slot():   # a spare sleeps here
            try:
                for it in range(agent.resume_iteration, steps):
                    loss = train(params)
                    agent.step(it, loss, params)
                agent.finish(params)        # also fills a slot that dies meanwhile
                finished = True
            except paramwin.EvictedError:   # stalled past the bound: a spare now
                pass
            except Exception:
                agent.resign()              # a spare takes the slot; this one waits
        os._exit(0)                         # never MPI_Finalize: it waits for the dead

    Agent options and callables are Agent's (``on_rebirth`` is where a joined spare takes
    its donors' optimizer state). ``replacement``: "new_window" (each epoch a new window over
    the live processes; the default) or "standing_window" (spares hold ranks of the one
    window; a replacement is messages only). ``check_seconds``, ``dead_after_seconds``,
    ``agree_seconds``: MembershipOptions; ``suspect_seconds``, ``suspect_beats``: the window's
    liveness bounds, as for ParameterWindow (a reader's judgement of a silent member in
    roster reads and donor choice; the coordinator's own bound is ``dead_after_seconds``).
    ``spawn_pool``, ``spawn_command``, ``spawn_args``: SpawnOptions (Open MPI, "new_window"):
    keep ``spawn_pool`` live spares by MPI_Comm_spawn (``spawn_low``: refill only when fewer
    than that many live, back up to ``spawn_pool``; 0, the default: ``spawn_pool``;
    ``spawn_ahead``: a spare spawns them while the members train on, under the UCX PML); the
    spawned processes run
    ``spawn_command`` (default: this interpreter) with ``spawn_args`` (default: this process's
    arguments, the script and its own), so the script must create the same ElasticAgent, and
    they join as spares (docs/elastic.md, "Refilling the spares"). ``join_service``,
    ``joining``: JoinOptions (Open MPI with ompi-server, "new_window"): the population takes
    in, as a spare, a process launched on its own that waits under that name (``joining=True``:
    this process is one; its constructor returns once it is in) (docs/elastic.md, "Joining
    from outside"). Host memory only. Creation is collective over
    ``comm``; nothing is freed at the end (end the process with ``os._exit``).
    """

    def __init__(self, layout: "_core.Layout", comm: Any = None, *, members: int = 0,
                 replacement: str = "new_window", check_seconds: float = 0.05,
                 dead_after_seconds: float = 30.0, agree_seconds: float = 60.0,
                 options: Union[None, str, Mapping[str, Any]] = None,
                 on_rebirth: Optional[Callable[["_core.StepEvent"], None]] = None,
                 reset: Optional[Callable[[int], None]] = None,
                 custom_trigger: Optional[Callable[["_core.TriggerContext"], bool]] = None,
                 custom_explore: Optional[Callable[[ExploreContext, dict], Optional[dict]]]
                 = None,
                 prepare_params: Optional[Callable[[], None]] = None,
                 transport: str = "auto", name: str = "",
                 suspect_seconds: Optional[float] = None, suspect_beats: Optional[float] = None,
                 spawn_pool: int = 0, spawn_command: Optional[str] = None,
                 spawn_args: Optional[Sequence[str]] = None, join_service: str = "",
                 joining: bool = False, spawn_low: int = 0, spawn_ahead: bool = False,
                 **keywords: Any):
        extra = _extra_hooks(keywords)
        config = agent_config(options, **keywords)
        self._user_prepare = _guard("prepare_params", prepare_params)
        self._batch: Optional[Layers] = None
        # The core holds a weak reference: no cycle through the C++ object, which Python's
        # collector cannot see into.
        self_ref = weakref.ref(self)

        def prepare() -> None:
            agent = self_ref()
            if agent is not None:
                agent._prepare()

        hooks = _hooks(on_rebirth, reset, custom_trigger, custom_explore, prepare)
        hooks.update(extra)
        self._agent = _core.ElasticAgent(comm, layout, config, hooks, str(transport), name,
                                         int(members), str(replacement), float(check_seconds),
                                         float(dead_after_seconds), float(agree_seconds),
                                         liveness_bound(suspect_seconds),
                                         liveness_bound(suspect_beats), int(spawn_pool),
                                         None if spawn_command is None else str(spawn_command),
                                         None if spawn_args is None
                                         else [str(a) for a in spawn_args],
                                         str(join_service), bool(joining), int(spawn_low),
                                         bool(spawn_ahead))

    def _prepare(self) -> None:
        if self._batch is not None:
            self._batch.prepare()
        if self._user_prepare is not None:
            self._user_prepare()

    def wait_for_slot(self) -> bool:
        """A member: True at once. A spare: sleeps (GIL released) until it is given a dead
        member's slot (True; its next step is a rebirth from live donors) or the population
        finished (False)."""
        return bool(self._agent.wait_for_slot())

    def step(self, iteration: int, metric: float, params: Params) -> "_core.StepEvent":
        """One step: the membership's messages first (a new epoch may move the agent to a new
        window), then Agent.step. Raises EvictedError when this process was judged dead while
        it stalled: it is a spare now (call wait_for_slot())."""
        batch = Layers(params, True, device_window=False)
        self._batch = batch
        try:
            event = self._agent.step(int(iteration), float(metric), batch.descriptors)
        finally:
            self._batch = None
        if event.died:
            batch.write_back()
        return event

    def resign(self) -> None:
        """Gives the slot up after a trainer's exception: a spare takes it, and this process
        becomes a spare (call wait_for_slot())."""
        self._agent.resign()

    def finish(self, params: Optional[Params] = None) -> None:
        """At the end of training: waits until every slot finished or is dead, then releases
        the spares. A slot that dies meanwhile is given to a spare, this member taking part
        in the new epoch; under "new_window" only when ``params`` (the last step's) are given,
        which it republishes in the new epoch's window (without them that slot stays empty).
        Raises EvictedError when this process was judged dead while it stalled before it
        finished (a spare now: wait_for_slot() returns False at the end)."""
        if params is None:
            self._agent.finish()
            return
        batch = Layers(params, True, device_window=False)
        self._batch = batch
        try:
            self._agent.finish(batch.descriptors)
        finally:
            self._batch = None

    def members_gather(self, value: float) -> List[float]:
        """Every last-epoch member's ``value``, in slot order (collective over them: call it
        after finish(), on the processes that finished in a slot)."""
        return list(self._agent.members_gather(float(value)))

    @property
    def member(self) -> bool:
        """Whether this process trains in a slot now."""
        return bool(self._agent.member)

    @property
    def joined(self) -> bool:
        """Whether this process was just given a slot and its next step is the rebirth."""
        return bool(self._agent.joined)

    @property
    def slot(self) -> int:
        """This process's slot (-1 for a spare)."""
        return int(self._agent.slot)

    @property
    def slots(self) -> int:
        """The population's size."""
        return int(self._agent.slots)

    @property
    def epoch(self) -> int:
        """The current membership epoch (0 at the start)."""
        return int(self._agent.epoch)

    @property
    def members(self) -> List[int]:
        """The world rank of every slot, as this process knows it."""
        return list(self._agent.members)

    @property
    def spares(self) -> List[int]:
        """The spares this process knows of (world ranks)."""
        return list(self._agent.spares)

    @property
    def world_rank(self) -> int:
        """This process's rank among every process of the population (after a refill: in the
        communicator the refill made; members and spares are ranks of the same)."""
        return int(self._agent.world_rank)

    @property
    def refills(self) -> Dict[str, Any]:
        """The spare pool's refills this process took part in: ``refills``, ``spawned``
        (processes started), ``failed``, ``last_seconds``, ``total_seconds`` (of all the refills
        it took part in) and ``spawned_here`` (this process
        was started by one); and the joins: ``joins``, ``joined`` (processes taken in) and
        ``joined_here`` (this process joined from outside)."""
        return dict(self._agent.refills)

    @property
    def resume_iteration(self) -> int:
        """Where a joined spare resumes: the slot's previous member's last iteration."""
        return int(self._agent.resume_iteration)

    @property
    def version(self) -> int:
        """This agent's publish version (a member's)."""
        return int(self._agent.version)

    @property
    def generation(self) -> int:
        """Rebirths of this agent so far (a member's)."""
        return int(self._agent.generation)

    @property
    def hyperparameters(self) -> Dict[str, Union[int, float]]:
        """The slot's agent's hyperparameters (a member's; see Agent.hyperparameters): a
        joined spare's are its donors', explored."""
        return self._agent.hyperparameters

    def set_hyperparameters(self, values: Mapping[str, Union[int, float]]) -> None:
        """Sets hyperparameters of the slot's agent (published with its next publish)."""
        self._agent.set_hyperparameters(values)


class ElasticAveragingAgent:
    """One process of an elastic averaging population over ``comm`` (mpi4py communicator,
    default COMM_WORLD): one model trained data-parallel by ranks that average one-sidedly
    (AveragingAgent), whose first ``members`` ranks train, one slot each; the others are
    spares (docs/elastic.md, "Averaging populations").

    The trainer's loop (a Python exception in a trainer gives its slot to a spare)::

        agent = paramwin.ElasticAveragingAgent(layout, members=8, topology="ring")
        finished = False
        while not finished and agent.wait_for_slot():   # a spare sleeps here
            try:
                for it in range(agent.resume_iteration, steps):
                    train(params)
                    agent.step(params)      # a joined spare's first step: the members' mix
                agent.finish(params)        # also fills a slot that dies meanwhile
                finished = True
            except paramwin.EvictedError:
                pass
            except Exception:
                agent.resign()
        os._exit(0)                         # never MPI_Finalize: it waits for the dead

    A joined spare's first ``step`` replaces ``params`` with the uniform mix of every usable
    member (``kind`` "joined"); put optimizer state into the layout for it to follow. The
    averaging keywords are AveragingAgent's, except what is collective over the population
    (``warmup_steps``, ``cooldown_steps``, ``symmetric``: InvalidArgument on every process);
    the topology ranges over the slots. ``replacement``, ``check_seconds``,
    ``dead_after_seconds``, ``agree_seconds``: as for ElasticAgent. Host memory; CPU arrays
    (numpy or torch) mixed in place. Creation is collective over ``comm``; nothing is freed
    at the end (end the process with ``os._exit``).
    """

    def __init__(self, layout: "_core.Layout", comm: Any = None, *, members: int = 0,
                 replacement: str = "new_window", check_seconds: float = 0.05,
                 dead_after_seconds: float = 30.0, agree_seconds: float = 60.0,
                 topology: Any = "all", k: int = 1, seed: int = 0, **options: Any):
        self._agent = _core.ElasticAveragingAgent(comm, layout,
                                                  _averaging_options(topology, k, seed, options),
                                                  int(members), str(replacement),
                                                  float(check_seconds),
                                                  float(dead_after_seconds),
                                                  float(agree_seconds))

    def wait_for_slot(self) -> bool:
        """A member: True at once. A spare: sleeps (GIL released) until it is given a dead
        member's slot (True; its next step is a join) or the population finished (False)."""
        return bool(self._agent.wait_for_slot())

    def step(self, params: Params) -> "_core.AveragingRound":
        """One step: the membership's messages first (a new epoch may move the agent to a new
        window), then AveragingAgent.step into ``params`` (in place). Raises EvictedError when
        this process was judged dead while it stalled: it is a spare now."""
        batch = Layers(params, True, device_window=False)
        batch.prepare()
        result = self._agent.step(batch.descriptors)
        if result.applied:
            batch.write_back()
        return result

    def resign(self) -> None:
        """Gives the slot up after a trainer's exception: a spare takes it, and this process
        becomes a spare (call wait_for_slot())."""
        self._agent.resign()

    def finish(self, params: Optional[Params] = None) -> None:
        """At the end of training: waits until every slot finished or is dead, then releases
        the spares (no synchronous mean: nothing collective runs over the population). A slot
        that dies meanwhile is given to a spare; under "new_window" only when ``params`` (the
        last step's) are given, which this member republishes in the new epoch's window."""
        if params is None:
            self._agent.finish()
            return
        batch = Layers(params, True, device_window=False)
        batch.prepare()
        self._agent.finish(batch.descriptors)

    def members_gather(self, value: float) -> List[float]:
        """Every last-epoch member's ``value``, in slot order (collective over them: call it
        after finish(), on the processes that finished in a slot)."""
        return list(self._agent.members_gather(float(value)))

    member = property(lambda self: bool(self._agent.member),
                      doc="Whether this process trains in a slot now.")
    joining = property(lambda self: bool(self._agent.joining),
                       doc="Whether this member's next step is its join.")
    slot = property(lambda self: int(self._agent.slot), doc="This process's slot (-1: a spare).")
    slots = property(lambda self: int(self._agent.slots), doc="The population's size.")
    epoch = property(lambda self: int(self._agent.epoch), doc="The membership epoch.")
    members = property(lambda self: list(self._agent.members),
                       doc="The world rank of every slot, as this process knows it.")
    world_rank = property(lambda self: int(self._agent.world_rank),
                          doc="This process's rank among every process of the population.")
    resume_iteration = property(lambda self: int(self._agent.resume_iteration),
                                doc="Where a joined spare resumes: the slot's last iteration.")
    version = property(lambda self: int(self._agent.version),
                       doc="This member's publish version.")
    steps = property(lambda self: int(self._agent.steps), doc="This member's step() calls.")
