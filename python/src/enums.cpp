// The names of the library's enumerations (enum_names.hpp), for the Python enums of
// paramwin/enums.py: one table per enumeration, its canonical names in declaration order.
#include "bindings.hpp"
#include "paramwin/agent_kinds.hpp"
#include "paramwin/dtype.hpp"
#include "paramwin/enum_names.hpp"
#include "paramwin/event.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin::python {
namespace {

template <NamedEnum E>
void add(py::dict& out, const char* name) {
  py::list names;
  for (const EnumName<E>& n : enum_table<E>.names) names.append(std::string(n.name));
  out[name] = names;
}

}  // namespace

void bind_enums(py::module_& m) {
  m.def(
      "enum_tables",
      [] {
        py::dict out;
        add<MetricDirection>(out, "MetricDirection");
        add<DeathReason>(out, "DeathReason");
        add<SelectionKind>(out, "SelectionKind");
        add<MixingKind>(out, "MixingKind");
        add<FitnessWeighting>(out, "FitnessWeighting");
        add<Shortfall>(out, "Shortfall");
        add<PausedDeaths>(out, "PausedDeaths");
        add<DType>(out, "DType");
        add<Phase>(out, "Phase");
        add<HyperInherit>(out, "HyperInherit");
        add<HyperScale>(out, "HyperScale");
        add<HyperDistribution>(out, "HyperDistribution");
        add<Role>(out, "Role");
        add<HyperType>(out, "HyperType");
        add<ReadMode>(out, "ReadMode");
        add<Landing>(out, "Landing");
        add<Reduction>(out, "Reduction");
        add<NonFinitePolicy>(out, "NonFinitePolicy");
        add<AgentState>(out, "AgentState");
        add<Transport>(out, "Transport");
        add<WireFormat>(out, "WireFormat");
        add<Exposure>(out, "Exposure");
        add<LayoutCheck>(out, "LayoutCheck");
        add<ExploreKind>(out, "ExploreKind");
        add<Memory>(out, "Memory");
        return out;
      },
      "The names of the library's enumerations: enum name -> its value names, in order.");
}

}  // namespace paramwin::python
