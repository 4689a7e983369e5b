// The names of the library's enumerations (enum_names.hpp), for the Python enums of
// paramwin/enums.py: one table per enumeration, its canonical names in declaration order, and
// the library's parser of each (canonical names and aliases, its InvalidArgument otherwise).
#include <string>
#include <string_view>
#include <vector>

#include "bindings.hpp"
#include "paramwin/agent_kinds.hpp"
#include "paramwin/dtype.hpp"
#include "paramwin/enum_names.hpp"
#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/torch/device_windows.hpp"  // no LibTorch: the names only
#include "paramwin/window_options.hpp"

namespace paramwin::python {
namespace {

// One enumeration: its Python name, its canonical names, and its parser's canonical result.
struct Entry {
  const char* name;
  std::vector<std::string> (*names)();
  std::string (*canonical)(std::string_view text);
};

template <NamedEnum E>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const EnumName<E>& n : enum_table<E>.names) out.emplace_back(n.name);
  return out;
}

template <NamedEnum E>
std::string canonical_of(std::string_view text) {
  return std::string(enum_name(parse_enum<E>(text)));
}

template <NamedEnum E>
Entry entry(const char* name) {
  return Entry{name, &names_of<E>, &canonical_of<E>};
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> all = {
      entry<MetricDirection>("MetricDirection"),
      entry<DeathReason>("DeathReason"),
      entry<SelectionKind>("SelectionKind"),
      entry<MixingKind>("MixingKind"),
      entry<FitnessWeighting>("FitnessWeighting"),
      entry<Shortfall>("Shortfall"),
      entry<PausedDeaths>("PausedDeaths"),
      entry<DType>("DType"),
      entry<Phase>("Phase"),
      entry<HyperInherit>("HyperInherit"),
      entry<HyperScale>("HyperScale"),
      entry<HyperDistribution>("HyperDistribution"),
      entry<Role>("Role"),
      entry<HyperType>("HyperType"),
      entry<ReadMode>("ReadMode"),
      entry<Landing>("Landing"),
      entry<Reduction>("Reduction"),
      entry<NonFinitePolicy>("NonFinitePolicy"),
      entry<AgentState>("AgentState"),
      entry<Transport>("Transport"),
      entry<WireFormat>("WireFormat"),
      entry<Exposure>("Exposure"),
      entry<LayoutCheck>("LayoutCheck"),
      entry<ExploreKind>("ExploreKind"),
      entry<Memory>("Memory"),
      entry<torch::DeviceWindows>("DeviceWindows"),
  };
  return all;
}

}  // namespace

void bind_enums(py::module_& m) {
  m.def(
      "enum_tables",
      [] {
        py::dict out;
        for (const Entry& e : entries()) {
          py::list names;
          for (const std::string& n : e.names()) names.append(n);
          out[e.name] = names;
        }
        return out;
      },
      "The names of the library's enumerations: enum name -> its value names, in order.");
  m.def(
      "parse_enum",
      [](std::string_view enumeration, std::string_view text) {
        for (const Entry& e : entries()) {
          if (e.name == enumeration) return e.canonical(text);
        }
        throw InvalidArgument("paramwin: no enumeration '" + std::string(enumeration) + "'");
      },
      py::arg("enumeration"), py::arg("text"),
      "The canonical name of the value spelled text (a name or an alias) of an enumeration of "
      "enum_tables(), parsed by the library (InvalidArgument listing the valid spellings).");
}

}  // namespace paramwin::python
