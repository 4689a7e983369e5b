"""paramwin: population training over MPI one-sided windows, from Python.

``import paramwin`` imports mpi4py.MPI (which initialises MPI) and checks that its MPI library
is the one this paramwin was built against (ImportError naming both otherwise).
Communicators are mpi4py communicators; the default is ``MPI.COMM_WORLD``. See
docs/python.md.
"""

from mpi4py import MPI as _MPI

from . import _build_info
from ._mpi_check import check_mpi as _check_mpi

_check_mpi(_MPI, _build_info)  # before the extension loads a second MPI library beside it

from .errors import (CallbackError, CheckpointError, DonorError, Error,  # noqa: E402,I001
                     EvictedError, InvalidArgument, LayoutMismatch, MpiError, ReadTimeout,
                     VerificationError)
from ._core import (AgentStats, AgentStatus, CheckpointLoad, DonorRead,  # noqa: E402
                    DonorRecord, LayerSpec, Layout, PhaseSeconds, PublishResult, PullResult,
                    RosterEntry, SelectionContext, StepEvent, TimerSummary, TriggerContext,
                    AveragingPeer, AveragingRound, HierarchicalRound, mpi_vendor)
from .enums import (AgentState, DeathReason, DeviceWindows, DType, ExploreKind,  # noqa: E402
                    Exposure, Memory, FitnessWeighting, HyperDistribution, HyperInherit,
                    HyperScale, HyperType, Landing, LayoutCheck, MetricDirection, MixingKind,
                    NonFinitePolicy, PausedDeaths, Phase, ReadMode, Reduction, Role,
                    RoundKind, SelectionKind, Shortfall, SkipReason, TopologyKind, Transport,
                    WireFormat)
from ._tensors import named_layout as layout_of  # noqa: E402
from ._options import OptionKey, agent_config, option_table  # noqa: E402
from .window import ParameterWindow  # noqa: E402
from .agent import Agent, ExploreContext  # noqa: E402
from .groups import AgentGroups, GroupAgent  # noqa: E402
from .averaging import (AveragingAgent, HierarchicalAveragingAgent,  # noqa: E402
                        topology_peers)
from .elastic import ElasticAgent, ElasticAveragingAgent  # noqa: E402
from ._lifetime import exit_on_exception  # noqa: E402


def __getattr__(name: str) -> type:
    """The deprecated alias ``paramwin.TimeoutError`` (ReadTimeout), with a
    DeprecationWarning (paramwin.errors)."""
    from . import errors

    if name == "TimeoutError":
        return errors.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def option_keys():
    """The C++ option key table as (key, aliases, value, doc) tuples (see option_table())."""
    from . import _core

    return _core.option_keys()


__all__ = [
    "Agent", "AgentGroups", "AgentState", "AgentStats", "AgentStatus", "AveragingAgent",
    "AveragingPeer", "AveragingRound", "CallbackError",
    "CheckpointError", "CheckpointLoad", "DType", "DeathReason", "DeviceWindows", "DonorError",
    "DonorRead", "DonorRecord", "ElasticAgent", "ElasticAveragingAgent", "Error", "EvictedError", "ExploreContext", "ExploreKind", "Exposure",
    "FitnessWeighting", "GroupAgent", "HierarchicalAveragingAgent", "HierarchicalRound",
    "HyperDistribution", "HyperInherit", "HyperScale",
    "HyperType", "InvalidArgument", "Landing", "LayerSpec", "Layout", "LayoutCheck",
    "LayoutMismatch", "Memory", "MetricDirection", "MixingKind", "MpiError", "NonFinitePolicy",
    "OptionKey", "ParameterWindow", "PausedDeaths", "Phase", "PhaseSeconds", "PublishResult",
    "PullResult", "ReadMode", "ReadTimeout", "Reduction", "Role", "RosterEntry", "RoundKind",
    "SelectionContext",
    "SelectionKind", "Shortfall", "SkipReason", "StepEvent", "TimerSummary", "TopologyKind",
    "Transport", "TriggerContext", "VerificationError", "WireFormat", "agent_config",
    "exit_on_exception", "layout_of",
    "mpi_vendor", "option_keys", "option_table", "topology_peers", "__version__",
]

__version__: str = _build_info.VERSION
