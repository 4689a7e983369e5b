"""paramwin.ParameterWindow: one agent's parameters exposed through MPI windows."""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Sequence, Union

from . import _core
from ._lifetime import close_after_block
from ._options import liveness_bound
from ._tensors import Layers

__all__ = ["ParameterWindow"]


def _donor_list(donors: Union[int, Iterable[int]]) -> List[int]:
    return [int(donors)] if isinstance(donors, int) else [int(d) for d in donors]


class ParameterWindow:
    """One agent's parameter window over ``comm`` (an mpi4py communicator; default
    ``MPI.COMM_WORLD``). Creation is collective and checks, on every rank, that the layouts
    agree (LayoutMismatch) and that remote reads return the owner's bytes
    (VerificationError). Use it as a context manager, or call close(): freeing a window is
    collective, so every rank must close it (the ``with`` block does).

    Keyword options are those of WindowOptions: ``transport`` ("auto", "shm", "rma"),
    ``wire`` ("native", "bfloat16", "float16"), ``layout_check`` ("strict", "per_donor"),
    ``verify``, ``progress_thread``, ``progress_interval_us``, ``name``, ``memory`` ("host",
    or "cuda": a device window, docs/gpu.md, the same on every rank) and ``cuda_device`` (a
    device window's GPU ordinal; -1: the current device), and the liveness bounds
    ``suspect_seconds`` and ``suspect_beats`` (LivenessOptions, docs/elastic.md: a reader
    judges an agent silent for max(suspect_seconds, suspect_beats x its heartbeat interval)
    a suspect; None keeps the library's default, 0 seconds turns the silence rule off). A device window takes CUDA torch
    tensors on its GPU in place, never staged; a CPU array or tensor given to it raises the
    library's InvalidArgument ("is host memory, but the window is a device window"). Without a
    CUDA device (or in a build without CUDA) its creation raises Error on every rank.

    Windows on one communicator pair up by the order of their creation. A named window is
    told apart by its name; an unnamed one by its order alone (from Python every window is
    created at the same line of the bindings). So two unnamed windows of one layout over the
    same processes may not be alive at once: the second raises InvalidArgument on every rank
    ("name your windows"), as they would pair crosswise if the ranks created them in
    different orders. Give each window a ``name`` when several share a communicator.
    """

    def __init__(self, layout: "_core.Layout", comm: Any = None, *, transport: str = "auto",
                 wire: str = "native", layout_check: str = "strict", verify: bool = True,
                 progress_thread: bool = False, progress_interval_us: int = 200,
                 name: str = "", memory: str = "host", cuda_device: int = -1,
                 suspect_seconds: Optional[float] = None,
                 suspect_beats: Optional[float] = None):
        self._win = _core.Window(comm, layout, transport, wire, layout_check, verify,
                                 progress_thread, progress_interval_us, name, str(memory),
                                 int(cuda_device), liveness_bound(suspect_seconds),
                                 liveness_bound(suspect_beats))
        self._device = self._win.memory == "cuda"

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the MPI windows (collective). Closing twice is a no-op."""
        self._win.close()

    @property
    def closed(self) -> bool:
        """True once closed; every other call then raises InvalidArgument."""
        return not self._win.valid

    def __enter__(self) -> "ParameterWindow":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        close_after_block(self, "ParameterWindow", exc_type, exc, tb)

    # -- properties -------------------------------------------------------------------------
    rank = property(lambda self: self._win.rank, doc="This rank in the window's communicator.")
    size = property(lambda self: self._win.size, doc="Number of agents (ranks).")
    layout = property(lambda self: self._win.layout, doc="This rank's Layout.")
    name = property(lambda self: self._win.name, doc="The window's name ('' if unnamed).")
    memory = property(lambda self: self._win.memory,
                      doc='Where the snapshots live: "host", or "cuda" for a device window.')
    version = property(lambda self: self._win.version, doc="Completed publishes of this rank.")
    fingerprint = property(lambda self: self._win.fingerprint, doc="Layout and wire fingerprint.")
    wire_bytes = property(lambda self: self._win.wire_bytes, doc="Bytes of one snapshot.")
    has_rma_readers = property(lambda self: self._win.has_rma_readers,
                               doc="Whether some rank reads this one over RMA.")
    pending_rma = property(lambda self: self._win.pending_rma,
                           doc="RMA reads abandoned at a deadline, not yet complete.")

    def transport_for(self, rank: int) -> str:
        """Transport a pull from ``rank`` uses: "shm" or "rma"."""
        return self._win.transport_for(rank)

    def progress(self) -> None:
        """Lets MPI progress once, serving RMA readers of this rank (GIL released)."""
        self._win.progress()

    # -- data -------------------------------------------------------------------------------
    def publish(self, layers: Union[Sequence[Any], dict], *, stamp: int = 0,
                hyper: Optional[dict] = None) -> "_core.PublishResult":
        """Publishes ``layers`` (a list bound by position, or a dict name -> array) as the next
        version; never waits for readers. Arrays: numpy or torch, C-contiguous, of the
        layer's shape and dtype. ``hyper``: values of declared hyperparameters (name ->
        number) published in the same snapshot (the others keep their values). The GIL is
        released while the core copies. A device window: CUDA tensors in place, once their
        device's current stream has finished."""
        batch = Layers(layers, writable=False, device_window=self._device)
        batch.prepare()
        return self._win.publish(batch.descriptors, stamp, hyper)

    def pull(self, donors: Union[int, Iterable[int]], out: Union[Sequence[Any], dict], *,
             reduction: Optional[str] = None, weights: Optional[Sequence[float]] = None,
             momentum: float = 0.0, non_finite: str = "fail", read_mode: str = "auto",
             optimistic_attempts: int = 4, chunk_bytes: int = 0,
             timeout_seconds: float = 0.0) -> "_core.PullResult":
        """Reads the latest complete snapshot of each donor and reduces it into ``out`` in
        place (zero copy for CPU arrays and tensors; device tensors are staged through the
        host, or written in place by a device window). ``reduction``: "mean" (default) or
        "weighted" (default when ``weights`` are given). Transactional: on any exception
        ``out`` is unchanged. The GIL is released while the core reads and reduces."""
        batch = Layers(out, writable=True, device_window=self._device)
        batch.prepare()
        if reduction is None:
            reduction = "weighted" if weights else "mean"
        result = self._win.pull(_donor_list(donors), batch.descriptors, reduction,
                                list(weights or []), float(momentum), non_finite, read_mode,
                                int(optimistic_attempts), int(chunk_bytes),
                                float(timeout_seconds))
        batch.write_back()
        return result

    # -- rosters ----------------------------------------------------------------------------
    def roster(self, rank: int, *, timeout_seconds: float = 0.0) -> "_core.RosterEntry":
        """One agent's roster, read one-sidedly."""
        return self._win.roster(rank, timeout_seconds)

    def roster_all(self, *, timeout_seconds: float = 0.0) -> List["_core.RosterEntry"]:
        """Every agent's roster, indexed by rank (no collective)."""
        return self._win.roster_all(timeout_seconds)

    @property
    def status(self) -> "_core.AgentStatus":
        """This agent's own roster fields as last set."""
        return self._win.status

    def set_status(self, *, iteration: Optional[int] = None, age: Optional[int] = None,
                   metric: Optional[float] = None, generation: Optional[int] = None,
                   state: Optional[str] = None) -> None:
        """Updates this agent's roster fields; the ones not given keep their values.
        ``state``: "fresh", "active", "rebirth", "left" or "paused"."""
        s = self._win.status
        self._win.set_status(s.iteration if iteration is None else int(iteration),
                             s.age if age is None else int(age),
                             s.metric if metric is None else float(metric),
                             s.generation if generation is None else int(generation),
                             s.state if state is None else state)

    def __repr__(self) -> str:
        if self.closed:
            return "ParameterWindow(closed)"
        return (f"ParameterWindow(rank={self.rank}, size={self.size}, layers={len(self.layout)}, "
                f"version={self.version})")
