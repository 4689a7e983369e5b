#pragma once
// RebirthPlan: what one step of an agent decided (die or not, who donates, how to mix), made
// once by plan_rebirth() from the Policy and the rosters, MPI-free, and executed by a solo
// executor (Agent: one rank) or a shard executor (GroupAgent: g ranks, which receive the
// leader's plan in its wire form). Every trigger, selection or mixing feature belongs here
// (or in Policy), so that both executors get it at once.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "paramwin/event.hpp"
#include "paramwin/options.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

/// The policy's counters an agent reports. On the ranks of a group other than the leader,
/// the leader's, as shared with each step.
struct AgentCounters {
  std::int64_t steps = 0;        ///< steps so far
  std::int64_t age = 0;          ///< steps since (re)birth
  std::int64_t max_age = 0;      ///< drawn maximum age in force
  std::uint64_t generation = 0;  ///< rebirths
};

/// What the executors do with a plan.
enum class PlanAction : std::int64_t {
  none = 0,   ///< no death this step
  pull = 1,   ///< pull the donors and mix them into the parameters
  reset = 2,  ///< call the reset callback with reset_seed
  defer = 3,  ///< a death, but no donor now: stays pending
  error = 4,  ///< the leader failed to plan (it rethrows; the others throw too)
};

/// One attempt's decision. Per-donor vectors are parallel to `donors` (best first).
struct RebirthPlan {
  PlanAction action = PlanAction::none;
  DeathReason reason = DeathReason::none;
  bool publish_due = false;  ///< the publish cadence asks for a publish this step
  bool donor_error = false;  ///< action error: the leader's error was a DonorError
  AgentCounters counters{};
  std::uint64_t reset_seed = 0;
  std::vector<int> donors{};
  std::vector<double> weights{};    ///< empty: plain mean; otherwise Reduction::weighted
  std::vector<double> metrics{};    ///< the donors' roster metrics at planning time
  std::vector<double> staleness{};  ///< seconds since each donor's latest roster update
  std::string note{};               ///< shortfall / "clamped: ..." (planner only, not on the wire)

  /// Words of the wire form for a population of @p capacity agents (k <= capacity).
  [[nodiscard]] static std::size_t wire_words(std::size_t capacity) noexcept;
  /// The plan as fixed-size int64 words (a versioned header, then the per-donor blocks), so
  /// that every rank of a group can receive it with one broadcast of known size.
  /// InvalidArgument when the plan has more donors than @p capacity.
  [[nodiscard]] std::vector<std::int64_t> to_wire(std::size_t capacity) const;
  /// The plan back from to_wire(); Error on a wrong version or a malformed message.
  [[nodiscard]] static RebirthPlan from_wire(std::span<const std::int64_t> words);
};

/// What plan_rebirth needs besides the policy.
struct PlanInput {
  std::int64_t iteration = 0;
  double metric = 0.0;
  std::uint64_t fingerprint = 0;  ///< this agent's layout fingerprint
  bool first_attempt = true;      ///< decide (advance the policy); later attempts re-plan
  bool publish_due = false;       ///< the cadence's verdict, carried into the plan
  /// The agent is paused with PausedDeaths::defer: a death is decided but not carried out
  /// (action defer, note "paused"), and no roster is read for donors.
  bool hold_deaths = false;
  std::span<const int> exclude{};  ///< donors that failed in earlier attempts
  Policy::RosterReader rosters;    ///< reads every agent's roster
  std::function<double()> now;     ///< MPI_Wtime in the agents; any clock in tests
};

/// One attempt: on the first, Policy::decide advances the agent one step; on a death held
/// by a pause (PlanInput::hold_deaths), defer; on a death, the donors are chosen (select_donors),
/// trimmed to one for MixingKind::best and weighted for MixingKind::weighted. Throws what the
/// policy, the trigger or the roster reader throws (the policy then undoes the step, see
/// Policy::decide).
[[nodiscard]] RebirthPlan plan_rebirth(Policy& policy, const PlanInput& in);

/// The pull options of a plan's rebirth: its mix (reduction, weights, momentum, non-finite
/// policy), the agent's @p read settings and the time left, @p timeout_seconds (0: none).
[[nodiscard]] PullOptions pull_options(const RebirthPlan& plan, const MixingOptions& mixing,
                                       const ReadOptions& read = {}, double timeout_seconds = 0.0);

/// The event's donor records for a finished pull of @p plan (one per donor read).
[[nodiscard]] std::vector<DonorRecord> donor_records(const RebirthPlan& plan,
                                                     const PullResult& result);

/// Appends @p piece to @p note with "; " between pieces.
void append_note(std::string& note, const std::string& piece);

}  // namespace paramwin::detail
