#pragma once
// Donor eligibility, written once: eligible_donors() keeps the agents with no reason against
// them, and Policy::select_donors() names the reasons in its shortfall message.

#include <cstdint>
#include <string>

#include "paramwin/roster.hpp"

namespace paramwin::detail {

/// Why an agent may not donate (the first reason that applies, in this order).
enum class Ineligible {
  none,             ///< it may donate
  self,             ///< the agent asking
  no_answer,        ///< its roster read did not answer in time
  never_published,  ///< version 0
  incompatible,     ///< another layout fingerprint
  mid_rebirth,      ///< AgentState::rebirth
  left,             ///< AgentState::left
  paused,           ///< AgentState::paused
  suspect,          ///< its process is judged dead or stalled (RosterEntry::suspect)
  stale,            ///< no publish for longer than the staleness bound
};

/// Why @p e may not donate to @p self, an agent of layout @p fingerprint; staleness counts
/// only when @p max_staleness_seconds > 0 (judged at @p now, MPI_Wtime seconds).
[[nodiscard]] Ineligible ineligibility(const RosterEntry& e, int self, std::uint64_t fingerprint,
                                       double max_staleness_seconds, double now) noexcept;

/// The reason's words in a shortfall message ("never published", "stale (no publish for
/// ...)"); empty for Ineligible::none and Ineligible::self.
[[nodiscard]] std::string describe(Ineligible why, const RosterEntry& e,
                                   double max_staleness_seconds, double now);

}  // namespace paramwin::detail
