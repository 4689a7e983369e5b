"""paramwin: population training over MPI one-sided windows, from Python.

``import paramwin`` imports mpi4py.MPI (which initialises MPI). Communicators are mpi4py
communicators; the default is ``MPI.COMM_WORLD``. See docs/python.md.
"""

from mpi4py import MPI as _MPI  # noqa: F401 - initialises MPI before the core is used

from .errors import (DonorError, Error, InvalidArgument, LayoutMismatch, MpiError,  # noqa: I001
                     TimeoutError, VerificationError)
from ._core import (AgentStats, AgentStatus, DonorRead, DonorRecord, LayerSpec, Layout,
                    PhaseSeconds, PublishResult, PullResult, RosterEntry, StepEvent,
                    TimerSummary, TriggerContext, mpi_vendor, option_keys)
from ._tensors import named_layout as layout_of
from .window import ParameterWindow
from .agent import Agent, agent_config

__all__ = [
    "Agent", "AgentStats", "AgentStatus", "DonorError", "DonorRead", "DonorRecord", "Error",
    "InvalidArgument", "LayerSpec", "Layout", "LayoutMismatch", "MpiError", "ParameterWindow",
    "PhaseSeconds", "PublishResult", "PullResult", "RosterEntry", "StepEvent", "TimeoutError",
    "TimerSummary", "TriggerContext", "VerificationError", "agent_config", "layout_of",
    "mpi_vendor", "option_keys",
]

__version__ = "0.1.0"
