// What agent_kinds.hpp does not define inline: the trigger parser and the metric ordering.
#include "paramwin/agent_kinds.hpp"

#include <cmath>
#include <string>

namespace paramwin {

DeathReason parse_trigger(std::string_view name) {
  const std::optional<DeathReason> reason = find_enum<DeathReason>(name);
  if (reason && *reason != DeathReason::none) {
    return *reason;
  }
  std::string valid;
  for (const EnumName<DeathReason>& n : enum_table<DeathReason>.names) {
    if (n.value != DeathReason::none) {
      valid.append(valid.empty() ? "" : ", ").append(n.name);
    }
  }
  detail::throw_unknown_name("trigger", name, valid);
}

bool is_better(MetricDirection direction, double a, double b) noexcept {
  if (std::isnan(a)) {
    return false;
  }
  if (std::isnan(b)) {
    return true;
  }
  return direction == MetricDirection::lower_is_better ? a < b : a > b;
}

}  // namespace paramwin
