// AgentGroups: validation of the split (identical on every rank) and the communicators.
#include "paramwin/groups.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "mpi/handles.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

namespace {

[[noreturn]] void bad(const std::string& why) {
  throw InvalidArgument("paramwin: AgentGroups: " + why);
}

/// One entry per rank: agent id, GroupOptions::kBufferRank or kCoordinatorRank. Throws
/// InvalidArgument; depends only on @p o and @p size, so every rank decides alike.
std::vector<int> assignment_of(const GroupOptions& o, int size) {
  if (!o.assignment.empty()) {
    if (o.assignment.size() != static_cast<std::size_t>(size)) {
      bad("assignment has " + std::to_string(o.assignment.size()) +
          " entries, the communicator has " + std::to_string(size) + " ranks");
    }
    int agents = 0;
    int coordinators = 0;
    for (std::size_t r = 0; r < o.assignment.size(); ++r) {
      const int a = o.assignment[r];
      if (a == GroupOptions::kCoordinatorRank) {
        ++coordinators;
      } else if (a != GroupOptions::kBufferRank && a < 0) {
        bad("assignment[" + std::to_string(r) + "] = " + std::to_string(a) +
            ": expected an agent id >= 0, kBufferRank (-1) or kCoordinatorRank (-2)");
      }
      agents = std::max(agents, a + 1);
    }
    if (coordinators > 1) bad("assignment names " + std::to_string(coordinators) + " coordinators");
    if (agents == 0) bad("assignment names no agent");
    for (int id = 0; id < agents; ++id) {
      if (std::find(o.assignment.begin(), o.assignment.end(), id) == o.assignment.end()) {
        bad("assignment uses agent ids up to " + std::to_string(agents - 1) +
            " but no rank has id " + std::to_string(id) + " (ids must be 0 .. A-1, each used)");
      }
    }
    return o.assignment;
  }
  if (o.ranks_per_agent < 1)
    bad("ranks_per_agent = " + std::to_string(o.ranks_per_agent) + " must be >= 1");
  if (o.buffer_ranks < 0) bad("buffer_ranks = " + std::to_string(o.buffer_ranks) + " must be >= 0");
  const int training = size - o.buffer_ranks - (o.coordinator ? 1 : 0);
  const std::string count = "the communicator has " + std::to_string(size) + " ranks, " +
                            std::to_string(o.buffer_ranks) + " buffer rank(s) and " +
                            (o.coordinator ? "1 coordinator" : "no coordinator") + " leave " +
                            std::to_string(training) + " training rank(s)";
  if (training < 1) bad(count + ": need at least one");
  if (training % o.ranks_per_agent != 0) {
    bad(count + ", not a multiple of ranks_per_agent = " + std::to_string(o.ranks_per_agent));
  }
  std::vector<int> a(static_cast<std::size_t>(size), GroupOptions::kBufferRank);
  for (int r = 0; r < training; ++r) a[static_cast<std::size_t>(r)] = r / o.ranks_per_agent;
  if (o.coordinator) a.back() = GroupOptions::kCoordinatorRank;
  return a;
}

/// Hash of the options as given, to check that every rank passed the same ones.
std::uint64_t options_hash(const GroupOptions& o) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](long long v) {
    h ^= static_cast<std::uint64_t>(v);
    h *= 0x100000001b3ULL;
  };
  mix(o.ranks_per_agent);
  mix(o.buffer_ranks);
  mix(o.coordinator ? 1 : 0);
  mix(static_cast<long long>(o.assignment.size()));
  for (int a : o.assignment) mix(a);
  return h;
}

}  // namespace

// Declared in this order so that they are freed shard, agent, role (reverse order).
struct AgentGroups::Comms {
  detail::Comm role;
  detail::Comm agent;
  detail::Comm shard;
};

AgentGroups::AgentGroups(MPI_Comm comm, const GroupOptions& options) {
  if (comm == MPI_COMM_NULL || MPI_Comm_rank(comm, &world_rank_) != MPI_SUCCESS ||
      MPI_Comm_size(comm, &world_size_) != MPI_SUCCESS) {
    bad("invalid communicator");
  }
  // Same options everywhere? (Different ones would split inconsistently and hang.)
  if (!detail::same_on_all_ranks(comm, options_hash(options))) {
    bad("GroupOptions differ across ranks; pass the same options on every rank");
  }

  assignment_ = assignment_of(options, world_size_);
  int agents = 0;
  for (int a : assignment_) agents = std::max(agents, a + 1);
  agent_sizes_.assign(static_cast<std::size_t>(agents), 0);
  for (int r = 0; r < world_size_; ++r) {
    const int a = assignment_[static_cast<std::size_t>(r)];
    if (a >= 0) {
      if (r == world_rank_) rank_in_agent_ = agent_sizes_[static_cast<std::size_t>(a)];
      ++agent_sizes_[static_cast<std::size_t>(a)];
    } else if (a == GroupOptions::kBufferRank) {
      buffer_ranks_.push_back(r);
    } else {
      coordinator_rank_ = r;
    }
  }
  uniform_ = std::all_of(agent_sizes_.begin(), agent_sizes_.end(),
                         [&](int s) { return s == agent_sizes_.front(); });
  const int mine = assignment_[static_cast<std::size_t>(world_rank_)];
  agent_ = mine >= 0 ? mine : -1;
  role_ = mine >= 0 ? Role::agent
                    : (mine == GroupOptions::kBufferRank ? Role::buffer : Role::coordinator);

  // Role: 0 training, 1 buffer, 2 coordinator; keys keep the input order. A split that
  // throws frees the ones made before it (Comm destructors).
  auto comms = std::make_unique<Comms>();
  comms->role = detail::Comm::split(comm, static_cast<int>(role_), world_rank_);
  comms->agent = detail::Comm::split(comm, agent_ >= 0 ? agent_ : MPI_UNDEFINED, world_rank_);
  comms->shard = detail::Comm::split(comm, agent_ >= 0 ? rank_in_agent_ : MPI_UNDEFINED,
                                     agent_ >= 0 ? agent_ : 0);
  comms_ = std::move(comms);
}

AgentGroups::AgentGroups(AgentGroups&& other) noexcept = default;

AgentGroups& AgentGroups::operator=(AgentGroups&& other) noexcept {
  // Written out: a defaulted one would empty the vectors on self-move (libstdc++).
  if (this != &other) {
    comms_.reset();  // frees this object's communicators (collective) before taking over
    role_ = other.role_;
    world_rank_ = other.world_rank_;
    world_size_ = other.world_size_;
    agent_ = other.agent_;
    rank_in_agent_ = other.rank_in_agent_;
    uniform_ = other.uniform_;
    assignment_ = std::move(other.assignment_);
    agent_sizes_ = std::move(other.agent_sizes_);
    buffer_ranks_ = std::move(other.buffer_ranks_);
    coordinator_rank_ = other.coordinator_rank_;
    comms_ = std::move(other.comms_);
  }
  return *this;
}

/// Frees the communicators (Comm destructors: never throw, nothing after MPI_Finalize).
AgentGroups::~AgentGroups() = default;

MPI_Comm AgentGroups::agent_comm() const noexcept {
  return comms_ ? comms_->agent.get() : MPI_COMM_NULL;
}
MPI_Comm AgentGroups::shard_comm() const noexcept {
  return comms_ ? comms_->shard.get() : MPI_COMM_NULL;
}
MPI_Comm AgentGroups::role_comm() const noexcept {
  return comms_ ? comms_->role.get() : MPI_COMM_NULL;
}

int AgentGroups::agent_size(int id) const {
  if (id < 0) id = agent_;
  if (id < 0 || id >= agents()) {
    throw InvalidArgument("paramwin: AgentGroups::agent_size: no agent " + std::to_string(id) +
                          " (there are " + std::to_string(agents()) + ")");
  }
  return agent_sizes_[static_cast<std::size_t>(id)];
}

std::vector<int> AgentGroups::agent_ranks(int id) const {
  (void)agent_size(id);  // checks the id
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (assignment_[static_cast<std::size_t>(r)] == id) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace paramwin
