"""Leaving a ``with`` block. ``close()`` is collective: a rank that leaves the block with an
exception while the other ranks carry on waits in it for them. Before it waits, it says so on
stderr (the exception and where it was raised), so a failure on one rank is visible at once
rather than as a silent hang.

After ``exit_on_exception()`` an exception that reaches the top, or leaves a ``with`` block on
a multi-rank communicator, ends the process instead (docs/elastic.md): the other ranks see a
dead member, skip it and train on, where a process waiting in ``close()`` or in mpi4py's
``MPI_Finalize`` at exit would hang, and look alive to them."""

import os
import sys
import traceback
from typing import Optional

_exit_code: Optional[int] = None  # set by exit_on_exception()


def _end_process(exc_type, exc, tb) -> None:
    code = _exit_code if _exit_code is not None else 1
    if isinstance(exc, SystemExit):  # sys.exit() in the block: its status, no traceback
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    else:
        traceback.print_exception(exc_type, exc, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_on_exception(code: int = 1) -> None:
    """Makes an uncaught exception end this process with exit status @p code, after printing
    it: at the top (``sys.excepthook``), and when it leaves the ``with`` block of a window or
    agent on more than one rank (before the collective ``close()``, which would wait for the
    others; a ``sys.exit()`` there ends it with its own status). Nothing is freed and
    ``MPI_Finalize`` is not called: both would wait for the other ranks forever. Launch with ``mpirun --enable-recovery`` (Open MPI) or ``mpiexec
    -disable-auto-cleanup`` (MPICH) so that the launcher lets the others live. See
    docs/elastic.md."""
    global _exit_code
    if not isinstance(code, int) or isinstance(code, bool):
        raise TypeError(f"exit_on_exception: code must be an int, got {code!r}")
    _exit_code = code
    sys.excepthook = _end_process


def close_after_block(obj, what: str, exc_type, exc, tb) -> None:
    """Closes @p obj (a ParameterWindow, Agent or TorchAgent) at the end of a ``with`` block,
    first reporting an exception that is leaving the block on a multi-rank communicator (or,
    after exit_on_exception(), ending the process with it)."""
    if exc is not None and not obj.closed and obj.size > 1:
        if _exit_code is not None:
            _end_process(exc_type, exc, tb)
        where = traceback.extract_tb(tb)[-1] if tb is not None else None
        at = f" (at {where.filename}:{where.lineno})" if where is not None else ""
        print(f"paramwin: rank {obj.rank} leaves a `with {what}` block with "
              f"{exc_type.__name__}: {exc}{at}; close() is collective and waits for the "
              "other ranks", file=sys.stderr, flush=True)
    obj.close()
