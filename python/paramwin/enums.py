"""The library's enumerations as Python enums, made from the C++ name tables (so they cannot
drift from the library). Every member is also its name as a ``str`` (``SelectionKind.fittest
== "fittest"``): options take an enum member or its name alike, and the string fields of the
records (``StepEvent.reason``, ``DonorRecord.transport``) compare equal to the members."""

from __future__ import annotations

import enum
from typing import Dict, List, Type

from . import _core

__all__ = [
    "MetricDirection", "DeathReason", "SelectionKind", "MixingKind", "FitnessWeighting",
    "Shortfall", "PausedDeaths", "DType", "Phase", "HyperInherit", "HyperScale",
    "HyperDistribution", "Role", "HyperType", "ReadMode", "Landing", "Reduction",
    "NonFinitePolicy", "AgentState", "Transport", "WireFormat", "Exposure", "LayoutCheck",
    "ExploreKind", "Memory", "DeviceWindows", "TopologyKind", "RoundKind", "SkipReason", "ENUMS",
]


class _StrEnum(str, enum.Enum):
    """An enum whose members are their names as strings."""

    def __str__(self) -> str:
        return str(self.value)


def _make(name: str, names: List[str]) -> Type[_StrEnum]:
    cls = _StrEnum(name, [(n, n) for n in names], module=__name__)  # type: ignore[misc]
    cls.__doc__ = f"paramwin::{name} ({', '.join(names)}); members equal their names."
    return cls


#: Every enumeration by name, made from _core.enum_tables().
ENUMS: Dict[str, Type[_StrEnum]] = {n: _make(n, v) for n, v in _core.enum_tables().items()}

MetricDirection = ENUMS["MetricDirection"]
DeathReason = ENUMS["DeathReason"]
SelectionKind = ENUMS["SelectionKind"]
MixingKind = ENUMS["MixingKind"]
FitnessWeighting = ENUMS["FitnessWeighting"]
Shortfall = ENUMS["Shortfall"]
PausedDeaths = ENUMS["PausedDeaths"]
DType = ENUMS["DType"]
Phase = ENUMS["Phase"]
HyperInherit = ENUMS["HyperInherit"]
HyperScale = ENUMS["HyperScale"]
HyperDistribution = ENUMS["HyperDistribution"]
Role = ENUMS["Role"]
HyperType = ENUMS["HyperType"]
ReadMode = ENUMS["ReadMode"]
Landing = ENUMS["Landing"]
Reduction = ENUMS["Reduction"]
NonFinitePolicy = ENUMS["NonFinitePolicy"]
AgentState = ENUMS["AgentState"]
Transport = ENUMS["Transport"]
WireFormat = ENUMS["WireFormat"]
Exposure = ENUMS["Exposure"]
LayoutCheck = ENUMS["LayoutCheck"]
ExploreKind = ENUMS["ExploreKind"]
Memory = ENUMS["Memory"]
DeviceWindows = ENUMS["DeviceWindows"]
TopologyKind = ENUMS["TopologyKind"]
RoundKind = ENUMS["RoundKind"]
SkipReason = ENUMS["SkipReason"]
