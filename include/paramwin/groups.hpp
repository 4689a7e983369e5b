#pragma once
/// @file groups.hpp
/// AgentGroups: splits a communicator into agents made of several ranks (data-parallel
/// replicas of one model), plus optional buffer ranks and a coordinator, and hands every rank
/// the communicators it needs: its agent's, and its shard peers' (the ranks holding the same
/// shard in every agent).

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "paramwin/enum_names.hpp"

namespace paramwin {

/// What a rank does in a grouped population.
enum class Role : std::uint8_t {
  agent = 0,        ///< one of the ranks of an agent (a training rank)
  buffer = 1,       ///< a buffer rank (e.g. a replay buffer); no agent
  coordinator = 2,  ///< the coordinator; no agent
};

namespace detail {
inline constexpr EnumName<Role> kRoleNames[] = {{Role::agent, "agent"},
                                                {Role::buffer, "buffer"},
                                                {Role::coordinator, "coordinator"}};
}  // namespace detail
/// Names of Role.
template <>
inline constexpr EnumTable<Role> enum_table<Role>{"role", detail::kRoleNames};

/// Lower-case name of @p role ("agent", "buffer", "coordinator").
[[nodiscard]] constexpr std::string_view role_name(Role role) noexcept { return enum_name(role); }

/// How to split a communicator into agents.
///
/// Uniform split (assignment empty): the first `size - buffer_ranks - coordinator` ranks are
/// training ranks, cut into agents of @ref ranks_per_agent consecutive ranks (agent a holds
/// ranks a*g .. a*g+g-1); then come the buffer ranks; the coordinator, if any, is the last
/// rank. The number of training ranks must be a positive multiple of ranks_per_agent.
///
/// Explicit split: @ref assignment has one entry per rank of the communicator: an agent id
/// (0 .. A-1, every id used at least once) or kBufferRank / kCoordinatorRank (at most one
/// coordinator). Agents may then differ in size; sharded agents (GroupAgent) need equal sizes.
struct GroupOptions {
  int ranks_per_agent = 1;        ///< g, for the uniform split
  int buffer_ranks = 0;           ///< ranks set aside as buffer ranks (uniform split)
  bool coordinator = false;       ///< set the last rank aside as coordinator (uniform split)
  std::vector<int> assignment{};  ///< explicit split: agent id or a role per rank

  static constexpr int kBufferRank = -1;       ///< assignment value of a buffer rank
  static constexpr int kCoordinatorRank = -2;  ///< assignment value of the coordinator
};

/// The result of splitting a communicator into agent groups. Every rank of the input
/// communicator gets one; communicators a rank does not belong to are MPI_COMM_NULL.
/// Owns the communicators it created (freed collectively on destruction); move-only.
class AgentGroups {
 public:
  /// Splits @p comm. Checks @p options on every rank and throws InvalidArgument on every
  /// rank (naming the problem: sizes, ids, roles) when they are invalid or differ across
  /// ranks; no rank is left waiting in a collective.
  /// @note Collective over @p comm.
  AgentGroups(MPI_Comm comm, const GroupOptions& options);
  AgentGroups(const AgentGroups&) = delete;
  AgentGroups& operator=(const AgentGroups&) = delete;
  /// Moves; the source is left empty.
  AgentGroups(AgentGroups&& other) noexcept;
  /// Frees this object's communicators and takes over @p other's.
  AgentGroups& operator=(AgentGroups&& other) noexcept;
  /// Frees the communicators; never throws.
  /// @note Collective over the input communicator.
  ~AgentGroups();

  [[nodiscard]] Role role() const noexcept { return role_; }  ///< this rank's role
  [[nodiscard]] bool is_agent_rank() const noexcept { return role_ == Role::agent; }  ///< agent
  [[nodiscard]] int world_rank() const noexcept { return world_rank_; }  ///< in the input comm
  [[nodiscard]] int world_size() const noexcept { return world_size_; }  ///< of the input comm
  /// Number of agents.
  [[nodiscard]] int agents() const noexcept { return static_cast<int>(agent_sizes_.size()); }
  /// This rank's agent id (0 .. agents()-1), or -1 for buffer ranks and the coordinator.
  [[nodiscard]] int agent() const noexcept { return agent_; }
  /// This rank's rank inside its agent (0 is the agent's leader), -1 if not an agent rank.
  [[nodiscard]] int rank_in_agent() const noexcept { return rank_in_agent_; }
  /// Ranks in agent @p id (size of this rank's agent when @p id is omitted).
  [[nodiscard]] int agent_size(int id = -1) const;
  /// True when every agent has the same number of ranks.
  [[nodiscard]] bool uniform() const noexcept { return uniform_; }
  /// The ranks of @p id in the input communicator, in in-agent rank order.
  [[nodiscard]] std::vector<int> agent_ranks(int id) const;
  /// Input-communicator ranks of the buffer ranks, and of the coordinator (-1 if none).
  [[nodiscard]] const std::vector<int>& buffer_ranks() const noexcept { return buffer_ranks_; }
  [[nodiscard]] int coordinator_rank() const noexcept { return coordinator_rank_; }  ///< or -1

  /// The ranks of this rank's agent (rank order = in-agent rank); MPI_COMM_NULL otherwise.
  [[nodiscard]] MPI_Comm agent_comm() const noexcept;
  /// The ranks with this rank's in-agent rank across all agents that have one (rank order
  /// = agent id when agents are uniform); MPI_COMM_NULL for other roles.
  [[nodiscard]] MPI_Comm shard_comm() const noexcept;
  /// All agent ranks (the training ranks), in input order; MPI_COMM_NULL for other roles.
  [[nodiscard]] MPI_Comm training_comm() const noexcept {
    return role_ == Role::agent ? role_comm() : MPI_COMM_NULL;
  }
  /// The ranks sharing this rank's role (all buffer ranks, or the coordinator alone, or all
  /// training ranks).
  [[nodiscard]] MPI_Comm role_comm() const noexcept;

 private:
  struct Comms;  // the communicators this object owns (src/groups/groups.cpp)

  Role role_ = Role::agent;
  int world_rank_ = 0;
  int world_size_ = 0;
  int agent_ = -1;
  int rank_in_agent_ = -1;
  bool uniform_ = true;
  std::vector<int> assignment_;  // agent id or role code per input rank
  std::vector<int> agent_sizes_;
  std::vector<int> buffer_ranks_;
  int coordinator_rank_ = -1;
  std::unique_ptr<Comms> comms_;  // null once moved from
};

}  // namespace paramwin
