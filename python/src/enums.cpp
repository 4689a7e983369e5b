// The names of the library's enumerations (enum_names.hpp), for the Python enums of
// paramwin/enums.py: one table per enumeration of enum_list.hpp, its canonical names in
// declaration order, and the library's parser of each (canonical names and aliases, its
// InvalidArgument otherwise).
#include <string>
#include <string_view>
#include <vector>

#include "bindings.hpp"
#include "enum_list.hpp"
#include "paramwin/error.hpp"

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
  static const std::vector<Entry> all = [] {
    std::vector<Entry> out;
    for_each_enum([&out]<NamedEnum E>(const char* name) { out.push_back(entry<E>(name)); });
    return out;
  }();
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
