// GroupAgent: a member of a population whose agents are made of g ranks. The step itself is
// the step core every agent shares (AgentCore, src/agent/agent_core.cpp); this file checks
// the construction across the training ranks and forwards to the core with the shard
// executor (src/groups/shard_executor.cpp), which shares the leader's plan, pulls the shards
// and assembles them.
#include "paramwin/group_agent.hpp"

#include <string>
#include <utility>
#include <vector>

#include "agent/agent_core.hpp"
#include "detail/mpi_check.hpp"
#include "groups/shard_executor.hpp"
#include "mpi/agree.hpp"
#include "mpi/handles.hpp"
#include "paramwin/detail/agent_base.hpp"  // serving_window_options
#include "paramwin/error.hpp"

namespace paramwin {

struct GroupAgent::State {
  State(const AgentGroups& groups, Layout layout, AgentOptions options)
      // Policy streams are per agent: every rank of the agent draws the same ages; only the
      // leader's policy advances, the others mirror its counters (AgentCore::counters).
      : core(std::move(options), groups.agent(), groups.agents(), layout,
             groups.rank_in_agent() == 0),
        exec(groups, std::move(layout)) {}

  /// Who agrees, writes and shares in a checkpoint (see detail::CheckpointComms).
  [[nodiscard]] detail::CheckpointComms checkpoint_comms() const {
    return detail::CheckpointComms{.all = training.get(),
                                   .writers = leaders.get(),
                                   .agent = exec.ranks_per_agent() > 1 ? exec.agent_comm()
                                                                       : MPI_COMM_NULL};
  }

  detail::AgentCore core;
  detail::ShardExecutor exec;
  detail::Comm training;  // a duplicate of the training communicator: checkpoint agreements
  detail::Comm leaders;   // the agents' leaders, rank = agent id; empty on the other ranks
};

GroupAgent::GroupAgent(const AgentGroups& groups, Layout layout, AgentOptions options,
                       const WindowOptions& window_options, const std::source_location& site) {
  if (!groups.is_agent_rank()) {
    throw InvalidArgument("paramwin: GroupAgent: world rank " +
                          std::to_string(groups.world_rank()) + " is a " +
                          std::string(role_name(groups.role())) +
                          " rank, not an agent rank; only agent ranks construct a GroupAgent");
  }
  const MPI_Comm training = groups.training_comm();
  // Decide everything that could fail on one rank only before any collective over a
  // subset: options, exposure, uniform agents; then the layout across all training ranks.
  std::string error;
  try {
    if (!groups.uniform()) {
      throw InvalidArgument("paramwin: GroupAgent: agents differ in size (explicit assignment); "
                            "sharded agents need the same number of ranks in every agent");
    }
    if (window_options.exposure == Exposure::live) {
      throw InvalidArgument("paramwin: GroupAgent: Exposure::live is not supported: each rank's "
                            "window holds one shard while the trainer holds the full replica");
    }
    if (options.triggers.worst_fraction.synchronous) {
      throw InvalidArgument("paramwin: GroupAgent: synchronous PBT "
                            "(triggers.worst_fraction.synchronous) is not supported for sharded "
                            "agents; use the asynchronous mode or one-rank Agents");
    }
    s_ = std::make_unique<State>(groups, std::move(layout), std::move(options));
  } catch (const Error& e) {
    error = e.what();
  }
  try {
    detail::agree_or_throw<InvalidArgument>(training, error);
  } catch (const InvalidArgument&) {
    s_.reset();
    throw;
  }
  // The same full layout everywhere: shard layouts alone would not catch a difference
  // inside one agent before the shard windows' collectives split the ranks.
  const Layout& full = s_->exec.plan().full();
  if (!detail::same_on_all_ranks(training, full.fingerprint())) {
    const std::vector<std::string> texts = detail::allgather_text(training, full.serialize());
    std::size_t r = 1;
    while (r + 1 < texts.size() && texts[r] == texts[0]) ++r;
    const std::string why =
        Layout::first_difference(Layout::deserialize(texts[0]), Layout::deserialize(texts[r]));
    s_.reset();
    throw LayoutMismatch("paramwin: GroupAgent: layouts differ across training ranks: rank 0 "
                         "vs rank " +
                         std::to_string(r) + " differ at " + why);
  }
  // Checkpoints are collective over the training ranks: the same options everywhere; the
  // leaders (one per agent, ordered by agent id) are the file's agents.
  try {
    detail::check_same_checkpoint_options(training, s_->core.policy().options().checkpoint);
  } catch (const InvalidArgument&) {
    s_.reset();
    throw;
  }
  s_->training = detail::Comm::dup(training);
  s_->leaders = detail::Comm::split(training, groups.rank_in_agent() == 0 ? 0 : MPI_UNDEFINED,
                                    groups.agent());
  s_->exec.open(groups,
                detail::serving_window_options(window_options, s_->core.policy().options().serve),
                site);
}

GroupAgent::GroupAgent(GroupAgent&&) noexcept = default;
GroupAgent& GroupAgent::operator=(GroupAgent&&) noexcept = default;
GroupAgent::~GroupAgent() = default;

GroupAgent::State& GroupAgent::state() const {
  if (!s_) throw Error("paramwin: use of a GroupAgent that was moved from or failed to construct");
  return *s_;
}

StepEvent GroupAgent::step(std::int64_t iteration, double metric,
                           std::span<const LayerRef> params) {
  State& st = state();
  return st.core.step(st.exec, st.checkpoint_comms(), iteration, metric, params);
}

void GroupAgent::save_checkpoint(const std::string& path, std::span<const ConstLayerRef> params) {
  State& st = state();
  st.core.save_checkpoint(st.exec, st.checkpoint_comms(), path, params);
}

CheckpointLoad GroupAgent::load_checkpoint(const std::string& path,
                                           std::span<const LayerRef> params) {
  State& st = state();
  return st.core.load_checkpoint(st.exec, st.checkpoint_comms(), path, params);
}

std::optional<CheckpointLoad> GroupAgent::resume_newest(std::span<const LayerRef> params) {
  State& st = state();
  return st.core.resume_newest(st.exec, st.checkpoint_comms(), params);
}

void GroupAgent::wait_checkpoint() {
  State& st = state();
  st.core.wait_checkpoint(st.checkpoint_comms());
}

void GroupAgent::set_checkpoint_hooks(CheckpointHooks hooks) {
  state().core.set_checkpoint_hooks(std::move(hooks));
}

PublishResult GroupAgent::publish(std::span<const ConstLayerRef> params) {
  State& st = state();
  return st.core.publish(st.exec, params);
}

void GroupAgent::leave() {
  State& st = state();
  st.core.leave(st.exec);
}

void GroupAgent::progress() { state().exec.win().progress(); }
void GroupAgent::pause() {
  State& st = state();
  st.core.pause(st.exec);
}

void GroupAgent::resume() {
  State& st = state();
  st.core.resume(st.exec);
}

bool GroupAgent::is_paused() const { return state().core.paused(); }

void GroupAgent::close() {
  State& st = state();
  if (st.exec.has_window()) st.exec.win().close();
}

ParameterWindow<>& GroupAgent::window() { return state().exec.win(); }
const ParameterWindow<>& GroupAgent::window() const { return state().exec.win(); }
const ShardPlan& GroupAgent::plan() const { return state().exec.plan(); }
const Layout& GroupAgent::layout() const { return state().exec.plan().full(); }
const AgentStats& GroupAgent::stats() const { return state().core.stats(); }
const AgentOptions& GroupAgent::options() const { return state().core.policy().options(); }
int GroupAgent::agent() const { return state().exec.agent_id(); }
int GroupAgent::agents() const { return state().exec.agents(); }
int GroupAgent::rank_in_agent() const { return state().exec.rank_in_agent(); }
int GroupAgent::ranks_per_agent() const { return state().exec.ranks_per_agent(); }
std::int64_t GroupAgent::steps() const { return state().core.counters().steps; }
std::int64_t GroupAgent::age() const { return state().core.counters().age; }
std::int64_t GroupAgent::max_age() const { return state().core.counters().max_age; }
std::uint64_t GroupAgent::generation() const { return state().core.counters().generation; }
std::uint64_t GroupAgent::epoch() const { return state().exec.version(); }
void GroupAgent::write_summary(std::ostream& out) const { state().core.stats().write_summary(out); }
void GroupAgent::set_event_log(EventLog log) { state().core.set_event_log(std::move(log)); }
const Hyperparameters& GroupAgent::hyperparameters() const {
  return state().core.hyperparameters();
}
void GroupAgent::set_hyperparameters(const Hyperparameters& values) {
  state().core.set_hyperparameters(values);
}

}  // namespace paramwin
