"""Leaving a ``with`` block. ``close()`` is collective: a rank that leaves the block with an
exception while the other ranks carry on waits in it for them. Before it waits, it says so on
stderr (the exception and where it was raised), so a failure on one rank is visible at once
rather than as a silent hang."""

import sys
import traceback


def close_after_block(obj, what: str, exc_type, exc, tb) -> None:
    """Closes @p obj (a ParameterWindow, Agent or TorchAgent) at the end of a ``with`` block,
    first reporting an exception that is leaving the block on a multi-rank communicator."""
    if exc is not None and not obj.closed and obj.size > 1:
        where = traceback.extract_tb(tb)[-1] if tb is not None else None
        at = f" (at {where.filename}:{where.lineno})" if where is not None else ""
        print(f"paramwin: rank {obj.rank} leaves a `with {what}` block with "
              f"{exc_type.__name__}: {exc}{at}; close() is collective and waits for the "
              "other ranks", file=sys.stderr, flush=True)
    obj.close()
