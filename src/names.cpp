// The one message of every enumeration parser (enum_names.hpp).
#include <string>

#include "paramwin/enum_names.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

void throw_unknown_name(std::string_view what, std::string_view name, std::string_view valid) {
  throw InvalidArgument("paramwin: unknown " + std::string(what) + " '" + std::string(name) +
                        "' (valid: " + std::string(valid) + ")");
}

}  // namespace paramwin::detail
