// Writes paramwin/enums.pyi, the type stubs of paramwin/enums.py, from the library's name
// tables (enum_list.hpp): run at build time (python/CMakeLists.txt), so type checkers and
// editors see every member of every enumeration and the stubs cannot drift from the tables.
//
//   paramwin_enum_stubs <path of enums.pyi>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>

#include "enum_list.hpp"

namespace {

// A name Python accepts as a class attribute: an identifier that is not a keyword.
bool python_attribute(std::string_view name) {
  static constexpr std::string_view kKeywords[] =
      {"False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
       "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
       "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
       "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};
  if (name.empty() ||
      std::find(std::begin(kKeywords), std::end(kKeywords), name) != std::end(kKeywords)) {
    return false;
  }
  const auto word = [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  return !(name[0] >= '0' && name[0] <= '9') && std::all_of(name.begin(), name.end(), word);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: paramwin_enum_stubs <enums.pyi>\n";
    return 2;
  }
  std::ostringstream all;
  std::ostringstream classes;
  bool ok = true;
  paramwin::python::for_each_enum([&]<paramwin::NamedEnum E>(const char* name) {
    all << "    \"" << name << "\",\n";
    classes << "\n\nclass " << name << "(_StrEnum):\n";
    classes << "    \"\"\"paramwin::" << name << "; members equal their names.\"\"\"\n\n";
    for (const paramwin::EnumName<E>& n : paramwin::enum_table<E>.names) {
      if (!python_attribute(n.name)) {
        std::cerr << "paramwin_enum_stubs: " << name << " value '" << n.name
                  << "' is not a Python attribute name\n";
        ok = false;
      }
      classes << "    " << n.name << " = \"" << n.name << "\"\n";
    }
  });
  if (!ok) return 1;
  std::ofstream out(argv[1], std::ios::out | std::ios::trunc);
  out << "\"\"\"Type stubs of paramwin.enums, written at build time from the library's name "
         "tables\n"
         "(python/src/enum_stubs.cpp, python/src/enum_list.hpp). Generated: do not edit.\"\"\"\n\n"
         "import enum\n"
         "from typing import Dict, Type\n\n"
         "__all__ = [\n"
      << all.str()
      << "    \"ENUMS\",\n"
         "]\n\n\n"
         "class _StrEnum(str, enum.Enum):\n"
         "    \"\"\"An enum whose members are their names as strings.\"\"\"\n\n"
         "    def __str__(self) -> str: ...\n\n\n"
         "#: Every enumeration by name.\n"
         "ENUMS: Dict[str, Type[_StrEnum]]\n"
      << classes.str();
  out.close();
  if (!out) {
    std::cerr << "paramwin_enum_stubs: cannot write " << argv[1] << '\n';
    return 1;
  }
  return 0;
}
