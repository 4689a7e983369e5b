"""paramwin.AgentGroups and paramwin.GroupAgent: agents made of several ranks (data-parallel
replicas of one model), as in C++ (groups.hpp, group_agent.hpp; docs/agent.md)."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from ._options import agent_config, liveness_bound
from .agent import ExploreContext, OptionValue, _extra_hooks, _hooks, _Member
from .errors import InvalidArgument

__all__ = ["AgentGroups", "GroupAgent"]


class AgentGroups:
    """Splits ``comm`` (default COMM_WORLD) into agents of ``ranks_per_agent`` consecutive
    ranks, then ``buffer_ranks`` buffer ranks and, with ``coordinator=True``, a coordinator
    (the last rank); or, with ``assignment`` (one entry per rank: an agent id, -1 for a buffer
    rank, -2 for the coordinator), as given. Collective; bad options raise InvalidArgument on
    every rank. The communicators (``agent_comm``, ``shard_comm``, ``training_comm``,
    ``role_comm``: mpi4py communicators, None where this rank has none) belong to this object:
    do not Free them. close() (collective, after every GroupAgent made from it is closed) or
    the ``with`` block frees them."""

    BUFFER_RANK = -1
    COORDINATOR_RANK = -2

    def __init__(self, comm: Any = None, *, ranks_per_agent: int = 1, buffer_ranks: int = 0,
                 coordinator: bool = False, assignment: Optional[Sequence[int]] = None):
        self._groups = _core.AgentGroups(comm, int(ranks_per_agent), int(buffer_ranks),
                                         bool(coordinator), [int(a) for a in assignment or []])
        self._agents: "weakref.WeakSet[GroupAgent]" = weakref.WeakSet()

    def close(self) -> None:
        """Frees the communicators (collective). InvalidArgument while a GroupAgent made from
        it is open. Closing twice is a no-op."""
        if any(not a.closed for a in self._agents):
            raise InvalidArgument("paramwin: AgentGroups.close(): a GroupAgent made from it is "
                                  "still open; close it first")
        self._groups.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return not self._groups.valid

    def __enter__(self) -> "AgentGroups":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    role = property(lambda self: self._groups.role,
                    doc='This rank\'s role: "agent", "buffer" or "coordinator".')
    is_agent_rank = property(lambda self: self._groups.is_agent_rank,
                             doc="Whether this rank belongs to an agent.")
    world_rank = property(lambda self: self._groups.world_rank, doc="Rank in the input comm.")
    world_size = property(lambda self: self._groups.world_size, doc="Size of the input comm.")
    agents = property(lambda self: self._groups.agents, doc="Number of agents.")
    agent = property(lambda self: self._groups.agent,
                     doc="This rank's agent id, -1 for buffer ranks and the coordinator.")
    rank_in_agent = property(lambda self: self._groups.rank_in_agent,
                             doc="This rank's rank inside its agent (0: the leader), or -1.")
    uniform = property(lambda self: self._groups.uniform,
                       doc="Whether every agent has the same number of ranks.")
    buffer_ranks = property(lambda self: list(self._groups.buffer_ranks),
                            doc="Input-communicator ranks of the buffer ranks.")
    coordinator_rank = property(lambda self: self._groups.coordinator_rank,
                                doc="Input-communicator rank of the coordinator, or -1.")
    agent_comm = property(lambda self: self._groups.agent_comm,
                          doc="The ranks of this rank's agent (None for other roles).")
    shard_comm = property(lambda self: self._groups.shard_comm,
                          doc="The ranks with this in-agent rank across agents (or None).")
    training_comm = property(lambda self: self._groups.training_comm,
                             doc="All agent ranks (None for other roles).")
    role_comm = property(lambda self: self._groups.role_comm,
                         doc="The ranks sharing this rank's role.")

    def agent_size(self, id: int = -1) -> int:  # noqa: A002 - the C++ name
        """Ranks in agent ``id`` (this rank's agent when omitted)."""
        return int(self._groups.agent_size(int(id)))

    def agent_ranks(self, id: int) -> List[int]:  # noqa: A002 - the C++ name
        """The input-communicator ranks of agent ``id``, in in-agent rank order."""
        return list(self._groups.agent_ranks(int(id)))


class GroupAgent(_Member):
    """One rank of an agent made of several ranks (``groups``: an AgentGroups; only agent
    ranks construct one). Every rank holds the full replica of the parameters; each exposes
    one shard; a rebirth pulls every shard from the matching rank of each donor agent. Options
    and callables are Agent's (the leader runs ``custom_trigger`` and ``custom_explore``; if one
    raises, the leader raises CallbackError and the agent's other ranks raise Error saying the
    leader failed to decide, nothing changed). Collective: creation, close() and the
    checkpoint calls over all training ranks; step() over the agent's ranks; publish, leave,
    pause and resume on every rank of the agent in the same order. ``memory="cuda"`` gives
    the agent a device window (shards on the GPU, CUDA tensors in place; the shards travel
    between the agent's ranks through host memory: docs/gpu.md). ``suspect_seconds`` and
    ``suspect_beats``: the liveness bounds, as for ParameterWindow."""

    _what = "GroupAgent"

    def __init__(self, groups: AgentGroups, layout: "_core.Layout", *,
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
        if not isinstance(groups, AgentGroups):
            raise InvalidArgument("paramwin: GroupAgent needs a paramwin.AgentGroups, got "
                                  f"{type(groups).__name__}")
        extra = _extra_hooks(keywords)
        config = agent_config(options, **keywords)
        prepare = self._init_member(prepare_params)
        self.groups = groups
        hooks = _hooks(on_rebirth, reset, custom_trigger, custom_explore, prepare)
        hooks.update(extra)
        self._agent = _core.GroupAgent(groups._groups, layout, config, hooks, str(transport),
                                       verify, name, str(memory), int(cuda_device),
                                       liveness_bound(suspect_seconds),
                                       liveness_bound(suspect_beats))
        groups._agents.add(self)

    def __enter__(self) -> "GroupAgent":
        return self

    def _log_rank(self) -> int:
        return self.agent

    agent = property(lambda self: self._agent.agent, doc="This agent's id.")
    agents = property(lambda self: self._agent.agents, doc="Agents in the population.")
    rank_in_agent = property(lambda self: self._agent.rank_in_agent,
                             doc="This rank inside the agent (0: the leader, who decides).")
    ranks_per_agent = property(lambda self: self._agent.ranks_per_agent,
                               doc="Ranks per agent (g).")
    leader = property(lambda self: self._agent.leader, doc="Whether this rank decides.")
    epoch = property(lambda self: self._agent.epoch,
                     doc="Publish epoch of the agent's latest group publish.")
    rank = property(lambda self: self.groups.world_rank, doc="Rank in the groups' input comm.")
    size = property(lambda self: self.groups.world_size, doc="Size of the groups' input comm.")
