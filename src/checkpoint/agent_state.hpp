#pragma once
// An agent's state in a checkpoint (everything but its parameters), and its text encoding:
// one "key value" line per field, readable from h5py as the "state" dataset of the agent.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/event.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

/// Everything AgentCore and its window need to continue an agent bit for bit.
struct AgentSnapshot {
  Policy::State policy{};
  std::array<std::uint64_t, AgentStats::kCounterCount> stats{};
  std::vector<std::uint64_t> hyper{};  ///< Hyperparameters::words()
  AgentStatus status{};                ///< what the roster advertised
  std::uint64_t version = 0;           ///< publishes of the window
  std::int64_t steps_since_publish = 0;
  bool publish_pending = false;
  bool paused = false;
  AgentState resume_state = AgentState::active;
};

/// The text form of @p s.
[[nodiscard]] std::string encode_agent_state(const AgentSnapshot& s);
/// Parses encode_agent_state's text; CheckpointError naming the first bad line.
[[nodiscard]] AgentSnapshot decode_agent_state(std::string_view text);

}  // namespace paramwin::detail
