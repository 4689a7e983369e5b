"""Exceptions raised by paramwin: the C++ hierarchy of ``paramwin/error.hpp``, same messages.

::

    Error (RuntimeError)
    ├── InvalidArgument (also ValueError)   wrong sizes, shapes, dtypes, names, ranks, options
    ├── LayoutMismatch                      layouts differ between ranks or from a donor
    ├── DonorError          .rank           a donor cannot serve a pull
    │   └── ReadTimeout     .rank           an RMA read missed its deadline (also the
    │                                       builtin TimeoutError)
    ├── VerificationError                   a window failed its self-check at creation
    ├── MpiError            .code .call     an MPI call returned an error code
    ├── CheckpointError                     a checkpoint cannot be written or loaded
    ├── EvictedError                        this process stalled past the bound; a spare now
    └── CallbackError       .hook           a Python callable given to an agent raised
                                            (the original exception is its __cause__)

``TimeoutError`` (``paramwin.TimeoutError``, ``paramwin.errors.TimeoutError``) is a deprecated
alias of ``ReadTimeout``: the old name shadowed the builtin in ``from paramwin import *``.
Using it warns (DeprecationWarning); ``except TimeoutError`` with the builtin catches a
``ReadTimeout`` too.
"""

import builtins
import warnings

__all__ = [
    "Error",
    "InvalidArgument",
    "LayoutMismatch",
    "DonorError",
    "ReadTimeout",
    "VerificationError",
    "MpiError",
    "CheckpointError",
    "EvictedError",
    "CallbackError",
]


class Error(RuntimeError):
    """Base of every exception paramwin raises."""


class InvalidArgument(Error, ValueError):
    """Something passed was invalid: sizes, shapes, dtypes, names, ranks, options, a closed
    window."""


class LayoutMismatch(Error):
    """Layouts differ between ranks (at window creation) or between an agent and a donor."""


class DonorError(Error):
    """A donor cannot serve a pull: never published, incompatible, non-finite data, left,
    stale. ``rank`` is the donor concerned (-1: none in particular)."""

    def __init__(self, message: str, rank: int = -1):
        super().__init__(message)
        self.rank = rank


class ReadTimeout(DonorError, builtins.TimeoutError):
    """An RMA read did not complete within its deadline; the output is unchanged (C++:
    paramwin::TimeoutError). Also a builtin ``TimeoutError``, as the standard library's
    timeouts are (``socket.timeout``, ``asyncio.TimeoutError``): ``except TimeoutError``
    catches it. It derives from DonorError first, so its message and ``rank`` are
    DonorError's (``errno`` and ``strerror`` stay None)."""


class VerificationError(Error):
    """A window failed its self-check: remote reads did not return the owner's bytes."""


class EvictedError(Error):
    """This process was judged dead while it lived (a long stall) and a new membership epoch
    went on without it (docs/elastic.md): it has dropped its slot and is a spare now
    (``ElasticAgent.wait_for_slot()``)."""


class MpiError(Error):
    """An MPI call failed. ``code`` is MPI's error code, ``call`` the function that failed."""

    def __init__(self, message: str, code: int = 0, call: str = ""):
        super().__init__(message)
        self.code = code
        self.call = call


class CheckpointError(Error):
    """A checkpoint cannot be written or loaded: missing, truncated, corrupted, another
    layout or library version, too few agents. Raised on every rank; nothing changed."""


class CallbackError(Error):
    """A Python callable given to an agent (``hook``: "custom_trigger", "custom_explore",
    "on_rebirth", "reset", "prepare_params", "checkpoint_save", "checkpoint_load") raised;
    the exception it raised is ``__cause__``. The agent is left as the C++ library leaves it
    for a throwing callback (a throwing custom trigger undoes the step: docs/agent.md)."""

    def __init__(self, message: str, hook: str = ""):
        super().__init__(message)
        self.hook = hook


def __getattr__(name: str) -> type:
    """The deprecated alias ``TimeoutError`` (ReadTimeout), with a DeprecationWarning."""
    if name == "TimeoutError":
        warnings.warn("paramwin.TimeoutError is deprecated: use paramwin.ReadTimeout (also a "
                      "builtin TimeoutError)", DeprecationWarning, stacklevel=2)
        return ReadTimeout
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
