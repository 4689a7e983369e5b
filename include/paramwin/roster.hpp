#pragma once
/// @file roster.hpp
/// The small per-agent header that anyone can read one-sidedly: version, iteration, age,
/// fitness metric, generation, layout fingerprint and state.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "paramwin/enum_names.hpp"
#include "paramwin/hyper.hpp"

namespace paramwin {

/// Lifecycle state an agent advertises in its roster.
enum class AgentState : std::uint32_t {
  fresh = 0,    ///< window created, nothing published yet
  active = 1,   ///< training and publishing
  rebirth = 2,  ///< being reborn: do not choose as a donor
  left = 3,     ///< left the population: do not choose as a donor
  paused = 4,   ///< paused (AgentInterface::pause): do not choose as a donor, do not rank
};

namespace detail {
inline constexpr EnumName<AgentState> kAgentStateNames[] = {{AgentState::fresh, "fresh"},
                                                            {AgentState::active, "active"},
                                                            {AgentState::rebirth, "rebirth"},
                                                            {AgentState::left, "left"},
                                                            {AgentState::paused, "paused"}};
}  // namespace detail
/// Names of AgentState.
template <>
inline constexpr EnumTable<AgentState> enum_table<AgentState>{"agent state",
                                                              detail::kAgentStateNames};

/// Lower-case name of @p state.
[[nodiscard]] constexpr std::string_view state_name(AgentState state) noexcept {
  return enum_name(state);
}

/// The fields an owner sets about itself (everything but the version, which publish sets).
struct AgentStatus {
  std::int64_t iteration = 0;            ///< trainer's step counter
  std::int64_t age = 0;                  ///< steps since (re)birth
  double metric = 0.0;                   ///< fitness: loss or reward, direction is the policy's
  std::uint64_t generation = 0;          ///< times reborn
  AgentState state = AgentState::fresh;  ///< what donor selection may do with this agent
};

/// One report of an agent: a trainer iteration and the metric it set with it.
struct MetricReport {
  std::int64_t iteration = 0;  ///< trainer's step counter
  double metric = 0.0;         ///< the metric reported at that iteration
};

/// What an agent's segment says of its process: written at window creation (pid, host,
/// incarnation) and by every set_status, i.e. every agent step (heartbeat). See
/// docs/elastic.md.
struct Liveness {
  std::uint64_t heartbeat = 0;         ///< set_status calls since the window was created
  std::int64_t pid = 0;                ///< the owner's process id (on its host)
  std::uint64_t host = 0;              ///< host id (host name and PID namespace): equal, same host
  std::uint64_t incarnation = 0;       ///< random: drawn at creation, again by renew_incarnation
  double beat_interval_seconds = 0.0;  ///< moving average of the time between heartbeats
};

/// One agent's roster as read (locally or remotely) at one instant.
struct RosterEntry {
  int rank = -1;                     ///< rank in the window's communicator
  std::uint64_t version = 0;         ///< completed publishes (0: never published)
  std::uint64_t fingerprint = 0;     ///< layout fingerprint of the agent
  std::uint64_t status_updates = 0;  ///< number of set_status calls (changes on every update)
  double publish_time = 0.0;         ///< MPI_Wtime of the latest publish (0 if none)
  AgentStatus status;                ///< the owner's self-reported fields
  /// The owner's report before its latest iteration: the iteration and metric of its last
  /// status before status.iteration changed (the window keeps it; a fresh status is no
  /// report). Empty until the owner's second iteration. Read under the roster's seqlock, with
  /// status. What ranking at the same iteration needs of an agent one report ahead.
  std::optional<MetricReport> previous{};
  /// The hyperparameters of the agent's latest publish (empty when the layout declares
  /// none; zeros before the first publish). Read under the roster's seqlock, with status.
  Hyperparameters hyper{};
  /// False when a bounded roster_all() read of this agent over RMA did not complete before
  /// its deadline (the agent did not enter MPI meanwhile: busy, or its process is gone);
  /// every other field but rank is then empty (version 0: never chosen as a donor).
  bool answered = true;
  Liveness liveness{};  ///< the owner's heartbeat, process and host
  /// This reader judges the agent's process dead or stalled: on this host its pid is gone, or
  /// its heartbeat has not changed for longer than WindowOptions::liveness allows (as this
  /// reader observed it). A suspect is never chosen as a donor, ranked or averaged with;
  /// the judgement is undone when its heartbeat moves again. docs/elastic.md.
  bool suspect = false;
  std::string suspect_reason{};  ///< why it is a suspect (empty when it is not)
};

}  // namespace paramwin
