#pragma once
// The library's enumerations the Python package exposes, listed once: the extension's
// enum_tables() (enums.cpp) and the generated type stubs paramwin/enums.pyi (enum_stubs.cpp,
// run at build time) both walk this list, so neither can drift from the C++ name tables.
// Needs no Python and no MPI initialisation (the stub generator is a plain program).

#include "paramwin/agent_kinds.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/dtype.hpp"
#include "paramwin/enum_names.hpp"
#include "paramwin/event.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/torch/device_windows.hpp"  // no LibTorch: the names only
#include "paramwin/window_options.hpp"

namespace paramwin::python {

/// Calls `f.template operator()<E>(python_name)` for each exposed enumeration E, in the
/// order of paramwin/enums.py's __all__.
template <class F>
void for_each_enum(F&& f) {
  f.template operator()<MetricDirection>("MetricDirection");
  f.template operator()<DeathReason>("DeathReason");
  f.template operator()<SelectionKind>("SelectionKind");
  f.template operator()<MixingKind>("MixingKind");
  f.template operator()<FitnessWeighting>("FitnessWeighting");
  f.template operator()<Shortfall>("Shortfall");
  f.template operator()<PausedDeaths>("PausedDeaths");
  f.template operator()<DType>("DType");
  f.template operator()<Phase>("Phase");
  f.template operator()<HyperInherit>("HyperInherit");
  f.template operator()<HyperScale>("HyperScale");
  f.template operator()<HyperDistribution>("HyperDistribution");
  f.template operator()<Role>("Role");
  f.template operator()<HyperType>("HyperType");
  f.template operator()<ReadMode>("ReadMode");
  f.template operator()<Landing>("Landing");
  f.template operator()<Reduction>("Reduction");
  f.template operator()<NonFinitePolicy>("NonFinitePolicy");
  f.template operator()<AgentState>("AgentState");
  f.template operator()<Transport>("Transport");
  f.template operator()<WireFormat>("WireFormat");
  f.template operator()<Exposure>("Exposure");
  f.template operator()<LayoutCheck>("LayoutCheck");
  f.template operator()<ExploreKind>("ExploreKind");
  f.template operator()<Memory>("Memory");
  f.template operator()<torch::DeviceWindows>("DeviceWindows");
  f.template operator()<TopologyKind>("TopologyKind");
  f.template operator()<RoundKind>("RoundKind");
  f.template operator()<SkipReason>("SkipReason");
}

}  // namespace paramwin::python
