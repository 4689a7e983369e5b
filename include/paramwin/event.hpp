#pragma once
/// @file event.hpp
/// What an Agent step did (StepEvent), the counters and phase timers accumulated over steps
/// (AgentStats), and the JSON-lines event log.

#include <array>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/agent_kinds.hpp"
#include "paramwin/enum_names.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/timer_summary.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin {

/// The timed phases of a step.
enum class Phase : std::uint8_t {
  decide = 0,    ///< triggers (and roster reads) and donor selection
  pull = 1,      ///< reading the donors and reducing into the caller's storage (fused)
  mix = 2,       ///< weights, reset callback and rebirth callback
  publish = 3,   ///< republishing
  assemble = 4,  ///< GroupAgent: gathering the shards pulled by the agent's ranks
};

/// Number of Phase values.
inline constexpr std::size_t kPhaseCount = 5;

namespace detail {
inline constexpr EnumName<Phase> kPhaseNames[] = {{Phase::decide, "decide"},
                                                  {Phase::pull, "pull"},
                                                  {Phase::mix, "mix"},
                                                  {Phase::publish, "publish"},
                                                  {Phase::assemble, "assemble"}};
}  // namespace detail
/// Names of Phase.
template <>
inline constexpr EnumTable<Phase> enum_table<Phase>{"phase", detail::kPhaseNames};

/// Lower-case name of @p phase ("decide", "pull", "mix", "publish", "assemble").
[[nodiscard]] constexpr std::string_view phase_name(Phase phase) noexcept {
  return enum_name(phase);
}

/// Seconds spent in each phase of one step (0 for phases that did not run).
struct PhaseSeconds {
  double decide = 0.0;    ///< triggers and selection
  double pull = 0.0;      ///< donor reads fused with the reduction
  double mix = 0.0;       ///< weights and callbacks
  double publish = 0.0;   ///< republish
  double assemble = 0.0;  ///< GroupAgent: shards gathered inside the agent (0 for Agent)
  /// Sum of all phases.
  [[nodiscard]] double total() const noexcept { return decide + pull + mix + publish + assemble; }
  /// The value of @p phase.
  [[nodiscard]] double operator[](Phase phase) const noexcept;
};

/// One donor of a rebirth: which version of it was read and what it weighed.
struct DonorRecord {
  int rank = -1;                         ///< donor rank in the window's communicator
  std::uint64_t version = 0;             ///< the donor's publish version that was read
  double metric = 0.0;                   ///< donor's roster metric read with the snapshot
  double weight = 0.0;                   ///< normalised weight applied (0 if skipped)
  std::size_t bytes = 0;                 ///< bytes moved from the donor
  Transport transport = Transport::shm;  ///< how it was read
  bool skipped = false;                  ///< left out for non-finite values
  /// Seconds since the donor's latest publish when it was selected (reader's MPI_Wtime minus
  /// the roster's publish_time): how old the parameters read are, at least.
  double staleness_seconds = 0.0;
};

/// What one Agent::step did.
struct StepEvent {
  int rank = -1;               ///< the agent's rank in its window
  std::int64_t iteration = 0;  ///< the trainer's iteration passed to step()
  std::int64_t step = 0;       ///< step() calls so far, this one included
  double metric = 0.0;         ///< the metric passed to step()
  bool died = false;           ///< the agent died and was reborn in this step
  /// Why it died; when deferred, why a death is pending; none otherwise.
  DeathReason reason = DeathReason::none;
  bool deferred = false;  ///< a death was due but postponed (too few donors, pull failed, paused)
  bool paused = false;    ///< the agent was paused during this step (no publish, not a donor)
  /// Why it was deferred (e.g. "rank 2 stale (no publish for 3.1 s > ...)", "rank 1 left",
  /// a donor's error), or which donors were retried.
  std::string note{};
  std::int64_t age = 0;                  ///< age at this step, before any rebirth
  std::int64_t max_age = 0;              ///< maximum age in force at this step, before any rebirth
  std::int64_t next_max_age = 0;         ///< maximum age after this step (redrawn when died)
  std::uint64_t generation = 0;          ///< times reborn, after this step
  MixingKind mixing = MixingKind::mean;  ///< how the donors were mixed (when died)
  std::vector<DonorRecord> donors{};     ///< donors read, best first (when died)
  std::size_t bytes = 0;                 ///< bytes pulled in this step
  bool published = false;                ///< parameters were published in this step
  bool publish_skipped = false;          ///< a publish was attempted but a reader pinned the slot
  unsigned publish_attempts = 0;  ///< tries of this step's publish (> 1: a rebirth's retried)
  std::uint64_t version = 0;      ///< this agent's publish version after the step
  PhaseSeconds seconds{};         ///< time of each phase
  /// The agent's hyperparameters after the step (after the rebirth's exploit and explore
  /// when died): what its next publish carries. Empty when the layout declares none.
  Hyperparameters hyper{};
  /// The agent's hyperparameters before the rebirth (when died; otherwise equal to hyper).
  Hyperparameters hyper_before{};
};

/// One JSON object (no newline) describing @p event; see docs/agent.md for the fields.
/// Hyperparameters appear as "hyper": {"name": value, ...} on every event and
/// "hyper_before": {...} on events that died (int64 as integers, float64 as numbers).
[[nodiscard]] std::string to_json(const StepEvent& event);

/// The event of one event-log line (to_json's output): the inverse of to_json, field by field
/// (one schema serves both). Non-finite numbers (written as null) come back as NaN; a field
/// written only sometimes ("hyper_before", "note") takes its default when absent, and
/// "hyper_before" then equals "hyper". Hyperparameters come back declared in the line's order,
/// int64 for integers and float64 for other numbers. InvalidArgument for a line that is not a
/// JSON object, or whose fields are missing or of the wrong kind.
[[nodiscard]] StepEvent step_event_from_json(std::string_view line);

/// Counters and per-phase timers over an agent's steps, in constant memory: each timer is a
/// TimerAccumulator (exact count / min / max / total / mean, median exact up to
/// TimerAccumulator::kReservoirSize samples and estimated from a seeded reservoir beyond).
class AgentStats {
 public:
  /// Adds one step's event.
  void record(const StepEvent& event);

  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }  ///< steps recorded
  [[nodiscard]] std::int64_t deaths() const noexcept;                   ///< all deaths
  /// Deaths with reason @p reason.
  [[nodiscard]] std::int64_t deaths(DeathReason reason) const noexcept;
  [[nodiscard]] std::int64_t deferred() const noexcept { return deferred_; }         ///< postponed
  [[nodiscard]] std::int64_t pulls() const noexcept { return pulls_; }               ///< pulls done
  [[nodiscard]] std::size_t bytes_pulled() const noexcept { return bytes_pulled_; }  ///< total
  [[nodiscard]] std::int64_t donors_used() const noexcept { return donors_used_; }   ///< total
  [[nodiscard]] std::int64_t publishes() const noexcept { return publishes_; }       ///< done
  /// Publishes skipped because a reader pinned the slot.
  [[nodiscard]] std::int64_t publishes_skipped() const noexcept { return publishes_skipped_; }
  /// Summary of the timer of @p phase (only steps where the phase ran are samples).
  [[nodiscard]] TimerSummary timer(Phase phase) const;
  /// Summary of whole rebirths: the time of every step that died, all phases together.
  [[nodiscard]] TimerSummary rebirth_timer() const;
  /// Human-readable summary: counters, then one line per phase with min/median/max.
  void write_summary(std::ostream& out) const;

  /// Number of values counters() returns.
  static constexpr std::size_t kCounterCount = 12;
  /// The counters (steps, deaths by reason, deferred, pulls, bytes pulled, donors used,
  /// publishes, publishes skipped), for checkpoints; the timers are not included.
  [[nodiscard]] std::array<std::uint64_t, kCounterCount> counters() const noexcept;
  /// Continues from @p values (counters()); the timers start empty.
  void restore_counters(const std::array<std::uint64_t, kCounterCount>& values) noexcept;

 private:
  std::int64_t steps_ = 0;
  std::array<std::int64_t, 5> deaths_{};
  std::int64_t deferred_ = 0;
  std::int64_t pulls_ = 0;
  std::size_t bytes_pulled_ = 0;
  std::int64_t donors_used_ = 0;
  std::int64_t publishes_ = 0;
  std::int64_t publishes_skipped_ = 0;
  std::array<TimerAccumulator, kPhaseCount> timers_{};
  TimerAccumulator rebirths_{};
};

/// Writes one JSON line per death (and per deferred death when asked) to a stream or file.
/// Move-only; a default-constructed log writes nothing.
class EventLog {
 public:
  /// A disabled log.
  EventLog() noexcept;
  /// Writes to @p out, which must outlive the log.
  explicit EventLog(std::ostream& out, bool include_deferred = false);
  /// Creates (truncates) the file at @p path; throws InvalidArgument if it cannot be opened.
  explicit EventLog(const std::string& path, bool include_deferred = false);
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  /// Takes over @p other's stream; @p other becomes disabled.
  EventLog(EventLog&& other) noexcept;
  /// Closes this log's file (if owned) and takes over @p other's stream.
  EventLog& operator=(EventLog&& other) noexcept;
  /// Flushes and closes an owned file.
  ~EventLog();

  /// Writes @p event as one line if it is a death (or a deferral, when included); flushes.
  void write(const StepEvent& event);
  /// True when the log writes somewhere.
  [[nodiscard]] bool enabled() const noexcept { return out_ != nullptr; }

 private:
  std::unique_ptr<std::ostream> owned_;
  std::ostream* out_ = nullptr;
  bool include_deferred_ = false;
};

}  // namespace paramwin
