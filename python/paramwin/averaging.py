"""paramwin.AveragingAgent: one model trained data-parallel by ranks that average their
parameters with each other one-sidedly (asynchronous model averaging, gossip), the C++
``paramwin::AveragingAgent`` (docs/averaging.md) over numpy arrays and torch tensors."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _core
from ._lifetime import close_after_block
from ._tensors import Layers
from .errors import InvalidArgument

__all__ = ["AveragingAgent", "HierarchicalAveragingAgent", "topology_peers"]

Params = Union[Sequence[Any], Dict[str, Any]]
TopologyArg = Union[str, Sequence[Sequence[int]], Callable[[int, int, int], Sequence[int]]]


def _topology(topology: TopologyArg) -> tuple:
    """(kind name, neighbour lists, callable or None) of a ``topology`` keyword: a kind name
    ("all", "random", "ring", "exponential", or a TopologyKind member), a list of neighbour
    lists (one per rank: "neighbours") or a callable ``(round, rank, size) -> peers``
    ("custom")."""
    if isinstance(topology, str):  # TopologyKind members are str too
        return str(topology), [], None
    if callable(topology):
        def custom(round_: int, rank: int, size: int) -> List[int]:
            return [int(p) for p in topology(round_, rank, size)]

        return "custom", [], custom
    try:
        lists = [[int(p) for p in peers] for peers in topology]
    except TypeError:
        raise InvalidArgument("paramwin: AveragingAgent: topology must be a name (\"all\", "
                              "\"random\", \"ring\", \"exponential\"), a list of neighbour lists "
                              "or a callable (round, rank, size) -> peers, got "
                              f"{type(topology).__name__}") from None
    return "neighbours", lists, None


def topology_peers(topology: TopologyArg, round: int, rank: int, size: int, *, k: int = 1,
                   seed: int = 0) -> List[int]:
    """The peers ``topology`` (as AveragingAgent takes it) names for ``rank`` at its
    asynchronous round ``round`` in a population of ``size`` (the library's Topology::peers;
    InvalidArgument when they are not valid peers)."""
    kind, lists, custom = _topology(topology)
    return _core.topology_peers(kind, int(k), int(seed), lists, custom, int(round), int(rank),
                                int(size))


_DEFAULTS: Dict[str, Any] = {
    "interval": 1, "interval_ms": 0.0, "self_weight": None, "peer_weights": None,
    "normalize_weights": False, "warmup_steps": 0, "cooldown_steps": 0, "total_steps": 0,
    "publish_every": 1, "stale_steps": 0, "stale_seconds": 0.0, "background": False,
    "background_worker": True, "symmetric": False, "timeout_seconds": 0.0, "event_log": None,
    "transport": "auto", "wire": "native", "verify": True, "name": "", "memory": "host",
    "cuda_device": -1, "suspect_seconds": None, "suspect_beats": None,
}


def _options(topology: TopologyArg, k: int, seed: int, given: Dict[str, Any]) -> Dict[str, Any]:
    """The options dict the core takes (python/src/averaging.cpp): the topology's keys plus
    every keyword of _DEFAULTS (InvalidArgument naming an unknown keyword)."""
    unknown = sorted(set(given) - set(_DEFAULTS))
    if unknown:
        raise InvalidArgument(f"paramwin: AveragingAgent: unknown option(s) {', '.join(unknown)}; "
                              f"options: topology, k, seed, {', '.join(_DEFAULTS)}")
    values = dict(_DEFAULTS, **given)
    kind, lists, custom = _topology(topology)
    out: Dict[str, Any] = {"topology": kind, "k": int(k), "seed": int(seed), "neighbours": lists,
                           "custom": custom}
    for key, value in values.items():
        if key == "peer_weights":
            value = [float(w) for w in (value or [])]
        elif key == "event_log":
            value = value or ""
        elif key in ("transport", "wire", "name", "memory"):
            value = str(value)
        out[key] = value
    return out


class _Averaging:
    """What AveragingAgent and HierarchicalAveragingAgent share: the training loop's calls over
    arrays and tensors, pause and resume, the context manager."""

    _agent: Any

    def _layers(self, params: Params, writable: bool) -> Layers:
        batch = Layers(params, writable, device_window=self.memory == "cuda")
        batch.prepare()
        return batch

    memory = property(lambda self: "host", doc='Where the snapshots live ("host").')

    def publish(self, params: Params) -> "_core.PublishResult":
        """Publishes ``params`` now (the initial parameters, before the first step)."""
        batch = self._layers(params, writable=False)  # holds the staged copies during the call
        return self._agent.publish(batch.descriptors)

    def _mixing_call(self, call: Callable[[list], Any], params: Params, applied) -> Any:
        batch = self._layers(params, writable=True)
        result = call(batch.descriptors)
        if applied(result):
            batch.write_back()
        return result

    # -- checkpoints (docs/averaging.md, "Checkpoints"; the files are the C++ library's) ----
    def save_checkpoint(self, path: Union[str, "os.PathLike[str]"], params: Params) -> None:
        """Saves the averaging population into the parallel-HDF5 checkpoint ``path``: every
        rank its ``params`` and its state (steps, rounds, paused, publish version; a
        hierarchy: every training rank's, the leaders' agents across groups). A background
        read in flight is waited for and dropped, with a pending correction. Collective;
        CheckpointError (InvalidArgument for bad ``params``) on every rank."""
        batch = self._layers(params, writable=False)
        self._agent.save_checkpoint(os.fspath(path), batch.descriptors)

    def load_checkpoint(self, path: Union[str, "os.PathLike[str]"],
                        params: Params) -> "_core.CheckpointLoad":
        """Continues from checkpoint ``path`` (written by Python or C++ over as many ranks, a
        hierarchy: with the same groups): fills ``params``, restores the agent's state so that
        its next rounds are the saving run's, and publishes them. Collective. CheckpointError
        on every rank for a missing file, another layout or number of ranks, or a checkpoint
        of another kind of agent; nothing changed."""
        batch = self._layers(params, writable=True)
        result = self._agent.load_checkpoint(os.fspath(path), batch.descriptors)
        batch.write_back()
        return result

    def pause(self) -> None:
        """Bagua's abort(): no reads, no publishes, the roster says paused (no peer reads this
        agent); synchronous steps still take part."""
        self._agent.pause()

    def resume(self) -> None:
        """Bagua's resume()."""
        self._agent.resume()

    @property
    def is_paused(self) -> bool:
        """Whether paused."""
        return self._agent.is_paused()

    steps = property(lambda self: self._agent.steps, doc="step() calls so far.")
    layout = property(lambda self: self._agent.layout, doc="The agent's Layout.")

    def close(self) -> None:
        """Frees the agent (collective). Closing twice is a no-op."""
        self._agent.close()

    @property
    def closed(self) -> bool:
        """True once closed; every other call then raises InvalidArgument."""
        return not self._agent.valid

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_after_block(self, type(self).__name__, exc_type, exc, tb)


class AveragingAgent(_Averaging):
    """One rank of a model trained data-parallel by ranks that average with each other
    one-sidedly; every rank of ``comm`` (an mpi4py communicator, default ``MPI.COMM_WORLD``)
    holds one. Creation is collective: the options are checked on every rank (InvalidArgument
    on every rank, naming the first failing rank), and ranks with another layout are refused.

    Call ``publish(params)`` once with the initial parameters, then ``step(params)`` after
    every optimizer step, and ``finish(params)`` at the end (collective: every rank then holds
    the mean). ``step`` mixes the peers' latest published snapshots into ``params`` in place,
    ``new = self_weight * own + sum_i w_i * peer_i``, when a round is due, and publishes; it
    never waits for another rank (warm-up and cool-down steps are collective means).

    Keywords (the C++ AveragingOptions, docs/averaging.md):

    - ``topology``: "all" (every other rank), "random" (``k`` distinct peers per round from
      the stream of ``seed``), "ring", "exponential" (SGP's graph), a list of neighbour lists
      (one per rank), or a callable ``(round, rank, size) -> peers``.
    - ``interval`` (steps between rounds) or ``interval_ms`` (Bagua's ``sync_interval_ms``).
    - ``self_weight`` (None: uniform), ``peer_weights`` (one per peer, in topology order),
      ``normalize_weights``.
    - ``warmup_steps``, ``cooldown_steps`` with ``total_steps``: synchronous means
      (MPI_Allreduce) at the start and the end.
    - ``publish_every``, ``stale_steps``, ``stale_seconds``, ``timeout_seconds``.
    - ``background``: a round's read of the peers runs on the agent's worker thread while the
      trainer computes (``background_worker=True``, the default, where the window and MPI's
      thread level allow it: ``background_inline_reason`` says why not), and its mix lands as
      a correction ``(1 - self_weight)(mix - own_at_read)`` at a later step, keeping the local
      progress made meanwhile; ``step()`` never waits for the read.
    - ``symmetric``: mean-preserving pairwise exchange on one node: a round that moves this
      rank towards a peer also moves the peer back by as much (through its shared-memory
      inbox, drained at its next step), so averaging never moves the population's mean;
      inline rounds only (``background=False``), host float32/float64 layers.
    - ``event_log``: a JSON-lines file of the rounds ("{rank}" replaced by the rank).
    - the window's ``transport``, ``wire``, ``verify``, ``name``, ``memory``, ``cuda_device``,
      and its liveness bounds ``suspect_seconds``, ``suspect_beats`` (None: the default).

    Arrays: numpy or torch, C-contiguous, of the layer's shape and dtype; CPU memory is mixed
    in place (zero copy), CUDA tensors are staged through host buffers (or given in place to
    a device window, ``memory="cuda"``). Use it as a context manager, or call close()
    (collective).
    """

    def __init__(self, layout: "_core.Layout", comm: Any = None, *,
                 topology: TopologyArg = "all", k: int = 1, seed: int = 0, **options: Any):
        self._agent = _core.AveragingAgent(comm, layout, _options(topology, k, seed, options))

    def step(self, params: Params) -> "_core.AveragingRound":
        """One training step's averaging into ``params`` (in place); returns what it did
        (``kind``: "none", "gossip" or "synchronous"; ``peers``: each peer's version, weight
        and why it was skipped). The GIL is released while the core reads and mixes."""
        return self._mixing_call(self._agent.step, params, lambda r: r.applied)

    def finish(self, params: Params) -> "_core.AveragingRound":
        """Ends the run with one synchronous mean into ``params`` (every rank then holds the
        same values) and publishes it. Collective."""
        return self._mixing_call(self._agent.finish, params, lambda r: True)

    rank = property(lambda self: self._agent.rank, doc="This rank in the communicator.")
    size = property(lambda self: self._agent.size, doc="Ranks in the communicator.")
    rounds = property(lambda self: self._agent.rounds, doc="Asynchronous rounds so far.")
    version = property(lambda self: self._agent.version, doc="Completed publishes of this rank.")
    background_inline_reason = property(
        lambda self: self._agent.background_inline_reason,
        doc='Background averaging: "" when its reads run on the worker thread, else why not.')
    memory = property(lambda self: self._agent.memory,
                      doc='Where the snapshots live: "host", or "cuda" for a device window.')

    def roster_all(self, *, timeout_seconds: float = 0.0) -> List["_core.RosterEntry"]:
        """Every rank's roster, indexed by rank (no collective)."""
        return self._agent.roster_all(timeout_seconds)

    # -- checkpoints: save_checkpoint and load_checkpoint are _Averaging's -------------------
    def set_checkpoint_hooks(self, save: Optional[Callable[[], Dict[str, bytes]]] = None,
                             load: Optional[Callable[[Dict[str, bytes], bool], None]] = None
                             ) -> None:
        """Adds the owner's own state to this agent's checkpoints: ``save()`` returns blobs
        name -> bytes (same names on every rank); ``load(blobs, reborn)`` receives them once a
        load validated the file (``reborn`` is always False here)."""
        self._agent.set_checkpoint_hooks(save, load)

    def __repr__(self) -> str:
        if self.closed:
            return "AveragingAgent(closed)"
        return (f"AveragingAgent(rank={self.rank}, size={self.size}, steps={self.steps}, "
                f"rounds={self.rounds})")


class HierarchicalAveragingAgent(_Averaging):
    """Heat DASO's hierarchy over ``groups`` (a paramwin.AgentGroups): the ranks of each agent
    of the groups (a group, e.g. one node) average synchronously every step (an MPI_Allreduce
    mean over the group), and the groups average with each other one-sidedly, at their own
    pace, through an AveragingAgent their leader (in-agent rank 0) holds over the leaders.
    Every training rank holds one (collective creation over them). The keywords are
    AveragingAgent's and configure the averaging across groups (the topology's ranks are the
    group ids; ``wire="bfloat16"`` halves what crosses between groups). Host float32 and
    float64 layers. ``step`` and ``publish`` are collective over the group, ``finish`` over
    every training rank."""

    def __init__(self, groups: Any, layout: "_core.Layout", *, topology: TopologyArg = "all",
                 k: int = 1, seed: int = 0, **options: Any):
        core_groups = getattr(groups, "_groups", groups)  # paramwin.AgentGroups or _core's
        self._agent = _core.HierarchicalAveragingAgent(core_groups, layout,
                                                       _options(topology, k, seed, options))

    def step(self, params: Params) -> "_core.HierarchicalRound":
        """The in-group mean of ``params``, then the leader's round across groups (reaching the
        group when it changed the parameters); returns what it did (``across``: the leader's
        AveragingRound, broadcast). Collective over the group."""
        return self._mixing_call(self._agent.step, params, lambda r: True)

    def finish(self, params: Params) -> "_core.HierarchicalRound":
        """The in-group mean, then the mean over the groups: every training rank ends equal.
        Collective over every training rank."""
        return self._mixing_call(self._agent.finish, params, lambda r: True)

    group = property(lambda self: self._agent.group, doc="This rank's group (agent id).")
    groups = property(lambda self: self._agent.groups, doc="Number of groups.")
    rank_in_group = property(lambda self: self._agent.rank_in_group, doc="0 for the leader.")
    group_size = property(lambda self: self._agent.group_size, doc="Ranks in this group.")
    leader = property(lambda self: self._agent.leader, doc="Whether this rank leads its group.")
    rounds = property(lambda self: self._agent.rounds,
                      doc="The leader's rounds across groups (-1 on the other ranks).")
    rank = property(lambda self: self._agent.group, doc="The group id (for messages).")
    size = property(lambda self: self._agent.groups, doc="Number of groups (for messages).")

    def __repr__(self) -> str:
        if self.closed:
            return "HierarchicalAveragingAgent(closed)"
        return (f"HierarchicalAveragingAgent(group={self.group}, groups={self.groups}, "
                f"rank_in_group={self.rank_in_group}, steps={self.steps})")
