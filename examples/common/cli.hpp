#pragma once
// Command-line helpers shared by the examples: a usage error, a flag's value and number /
// LO..HI parsers.
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace paramwin_examples {

/// Thrown for a bad command line; every rank parses the same one, so every rank throws it.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The value after the flag argv[@p i] (advancing @p i to it), or UsageError when the command
/// line ends there.
inline std::string flag_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw UsageError(std::string(argv[i]) + " needs a value");
  return argv[++i];
}

/// @p text as a T, or UsageError naming @p flag.
template <class T>
T parse_number(std::string_view flag, const std::string& text) {
  std::istringstream in(text);
  T value{};
  if (!(in >> value) || !in.eof()) {
    throw UsageError(std::string(flag) + ": not a number: '" + text + "'");
  }
  return value;
}

/// "LO..HI" as a pair of T, or UsageError naming @p flag.
template <class T>
std::pair<T, T> parse_range(std::string_view flag, const std::string& text) {
  const auto dots = text.find("..");
  if (dots == std::string::npos) {
    throw UsageError(std::string(flag) + ": expected LO..HI, got '" + text + "'");
  }
  return {parse_number<T>(flag, text.substr(0, dots)),
          parse_number<T>(flag, text.substr(dots + 2))};
}

}  // namespace paramwin_examples
