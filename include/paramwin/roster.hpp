#pragma once
/// @file roster.hpp
/// The small per-agent header that anyone can read one-sidedly: version, iteration, age,
/// fitness metric, generation, layout fingerprint and state.

#include <cstdint>
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

/// One agent's roster as read (locally or remotely) at one instant.
struct RosterEntry {
  int rank = -1;                     ///< rank in the window's communicator
  std::uint64_t version = 0;         ///< completed publishes (0: never published)
  std::uint64_t fingerprint = 0;     ///< layout fingerprint of the agent
  std::uint64_t status_updates = 0;  ///< number of set_status calls (changes on every update)
  double publish_time = 0.0;         ///< MPI_Wtime of the latest publish (0 if none)
  AgentStatus status;                ///< the owner's self-reported fields
  /// The hyperparameters of the agent's latest publish (empty when the layout declares
  /// none; zeros before the first publish). Read under the roster's seqlock, with status.
  Hyperparameters hyper{};
  /// False when a bounded roster_all() read of this agent over RMA did not complete before
  /// its deadline (the agent did not enter MPI meanwhile: busy, or its process is gone);
  /// every other field but rank is then empty (version 0: never chosen as a donor).
  bool answered = true;
};

}  // namespace paramwin
