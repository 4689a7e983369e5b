// Prints the library's option key table (agent_option_keys()) as "key<TAB>aliases<TAB>value
// <TAB>doc" lines, into the file named by the first argument (or standard output): what
// scripts/check_docs.py compares docs/agent.md's option table with (test docs_check).
#include <fstream>
#include <iostream>

#include "paramwin/agent_options.hpp"

int main(int argc, char** argv) {
  std::ofstream file;
  if (argc > 1) file.open(argv[1]);
  std::ostream& out = argc > 1 ? file : std::cout;
  for (const paramwin::OptionKey& k : paramwin::agent_option_keys()) {
    out << k.key << '\t' << k.aliases << '\t' << k.value << '\t' << k.doc << '\n';
  }
  return out ? 0 : 1;
}
