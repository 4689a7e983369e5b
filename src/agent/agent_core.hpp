#pragma once
// The step core shared by every agent kind (AgentCore), driven over a RebirthExecutor: a
// SoloExecutor for Agent (src/agent/agent_base.cpp), a ShardExecutor for GroupAgent
// (src/groups/group_agent.cpp). Private to the library.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/async_save.hpp"
#include "decision/rebirth_plan.hpp"  // RebirthPlan, AgentCounters
#include "paramwin/agent_options.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/event.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

/// @p path with every "{rank}" replaced by @p rank (event log paths).
[[nodiscard]] std::string expand_rank(std::string path, int rank);

/// Whether the publishing cadence @p p asks for a publish, @p steps_since_publish steps and
/// @p since_last_publish after the latest one.
[[nodiscard]] bool publish_due(const PublishOptions& p, std::int64_t steps_since_publish,
                               std::chrono::steady_clock::duration since_last_publish);

/// Where an agent's checkpoint collectives run. A one-rank Agent: its window's communicator
/// for everything. A GroupAgent: the training ranks agree, the leaders (one per agent, agent
/// index = rank) write and read the file, and each leader shares with its agent's ranks.
struct CheckpointComms {
  MPI_Comm all = MPI_COMM_NULL;      ///< every rank of every agent: agreements, rank 0 looks
  MPI_Comm writers = MPI_COMM_NULL;  ///< one rank per agent (rank = agent); NULL elsewhere
  MPI_Comm agent = MPI_COMM_NULL;    ///< the agent's ranks (writer = rank 0); NULL: one rank
};

/// Throws InvalidArgument on every rank of @p comm when @p c (every, every_seconds, path,
/// keep, async) differs across its ranks: every agent must save at the same steps into the
/// same files. @note Collective over @p comm.
void check_same_checkpoint_options(MPI_Comm comm, const CheckpointOptions& c);

/// Throws InvalidArgument on every rank of @p comm when the synchronous-PBT settings of
/// @p o (triggers.worst_fraction: synchronous, every, fraction; direction) differ across
/// ranks where any rank is synchronous. @note Collective over @p comm.
void check_same_sync_options(MPI_Comm comm, const AgentOptions& o);

class RebirthExecutor;  // src/agent/rebirth_executor.hpp
struct PullOutcome;     // src/agent/rebirth_executor.hpp
struct StepAgreement;   // src/agent/rebirth_executor.hpp
struct AgentSnapshot;   // src/checkpoint/agent_state.hpp

/// The step core of every agent: policy, counters, statistics, event log and publishing
/// state, and the one step sequence (agree, plan, attempt/exclude loop, rebirth, callbacks,
/// publish, record). Agent drives it with a solo executor over its window, GroupAgent with
/// a shard executor; features of the step are written here once.
class AgentCore {
 public:
  /// Validates @p options (InvalidArgument), their explore rules against @p layout's
  /// hyperparameters too; opens the event log when @p writes_log. The hyperparameters start
  /// at zero (layout.make_hyperparameters()).
  AgentCore(AgentOptions options, int rank, int population, const Layout& layout,
            bool writes_log = true);

  /// Validates on every rank of @p comm and throws InvalidArgument on every rank if any
  /// rank's options are invalid (so that the window creation that follows cannot hang).
  /// @note Collective over @p comm.
  [[nodiscard]] static AgentCore create_collective(MPI_Comm comm, AgentOptions options,
                                                   const Layout& layout);

  /// One step over @p ex (see Agent::step and GroupAgent::step for the contract): binds
  /// @p params once, runs the step, then saves when AgentOptions::checkpoint says one is due
  /// (over @p c; collective over @p c.all when checkpoints are on).
  StepEvent step(RebirthExecutor& ex, const CheckpointComms& c, std::int64_t iteration,
                 double metric, std::span<const LayerRef> params);
  /// Publishes @p params now, outside the cadence.
  PublishResult publish(RebirthExecutor& ex, std::span<const ConstLayerRef> params);
  /// Marks the agent as having left; step() throws from then on (a pause ends).
  void leave(RebirthExecutor& ex);
  /// Advertises the agent as paused in this rank's roster: not chosen, not ranked, no
  /// publishing by the cadence until resume(). No-op when already paused; InvalidArgument
  /// after leave().
  void pause(RebirthExecutor& ex);
  /// Ends a pause: the roster says active again (fresh if the agent never stepped). No-op
  /// when not paused or after leave(). Publishes nothing by itself.
  void resume(RebirthExecutor& ex);
  /// The next step is a rebirth from donors whatever the triggers (Policy::join).
  void join() noexcept { policy_.join(); }
  /// Whether pause() is in force on this rank.
  [[nodiscard]] bool paused() const noexcept { return paused_; }

  /// save_checkpoint over any executor: @p c says who agrees, who writes and who shares
  /// (see CheckpointComms). The owner's save hook runs on the writers only.
  /// @note Collective over @p c.all.
  void save_checkpoint(RebirthExecutor& ex, const CheckpointComms& c, const std::string& path,
                       std::span<const ConstLayerRef> params);
  /// save_checkpoint of layers already bound and checked (after wait_checkpoint).
  /// @note Collective over @p c.all.
  void save_bound(RebirthExecutor& ex, const CheckpointComms& c, const std::string& path,
                  const BoundLayers<ConstLayerRef>& ordered);
  /// wait_checkpoint over @p c (only writers hold an asynchronous writer).
  /// @note Collective over @p c.all.
  void wait_checkpoint(const CheckpointComms& c);
  /// load_checkpoint over any executor: the writers read the file, each shares its agent's
  /// staged share and final state with the agent's ranks, every rank applies it.
  /// @note Collective over @p c.all.
  CheckpointLoad load_checkpoint(RebirthExecutor& ex, const CheckpointComms& c,
                                 const std::string& path, std::span<const LayerRef> params);
  /// resume_newest over any executor. @note Collective over @p c.all.
  std::optional<CheckpointLoad> resume_newest(RebirthExecutor& ex, const CheckpointComms& c,
                                              std::span<const LayerRef> params);
  /// After a step: saves @p ordered (the step's bound parameters) when
  /// AgentOptions::checkpoint says one is due. @note Collective over @p c.all when
  /// checkpoints are on.
  void checkpoint_if_due(RebirthExecutor& ex, const CheckpointComms& c,
                         const BoundLayers<LayerRef>& ordered);
  /// The owner's own state for every checkpoint (see Agent::set_checkpoint_hooks).
  void set_checkpoint_hooks(CheckpointHooks hooks) { hooks_ = std::move(hooks); }

  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] const AgentStats& stats() const noexcept { return stats_; }
  /// The policy's counters as the agent's leader last shared them (on a leader: the
  /// policy's own).
  [[nodiscard]] const AgentCounters& counters() const noexcept { return counters_; }
  void set_event_log(EventLog log) noexcept { log_ = std::move(log); }
  /// The agent's hyperparameters: what its next publish carries.
  [[nodiscard]] const Hyperparameters& hyperparameters() const noexcept { return hyper_; }
  /// Replaces them; InvalidArgument unless @p values have the same declarations.
  void set_hyperparameters(const Hyperparameters& values);

 private:
  using Clock = std::chrono::steady_clock;

  void set_status(RebirthExecutor& ex, AgentState state, std::int64_t iteration, double metric);
  /// The state the roster returns to outside a rebirth: paused, or active — once the
  /// parameters of a rebirth whose publish was deferred (publish.defer_rebirth) are out;
  /// mid-rebirth until then.
  [[nodiscard]] AgentState resting_state() const noexcept {
    if (paused_) return AgentState::paused;
    return rebirth_unpublished_ ? AgentState::rebirth : AgentState::active;
  }
  RebirthPlan plan(RebirthExecutor& ex, const StepEvent& event, bool first,
                   std::span<const int> exclude);
  /// What attempts() and try_pulls() did (agent_core.cpp).
  struct Attempts;

  /// The step after binding (@p bad: why binding failed on this rank, "" when it did not).
  StepEvent run_step(RebirthExecutor& ex, std::int64_t iteration, double metric,
                     std::span<const LayerRef> params, const BoundLayers<LayerRef>& ordered,
                     const std::string& bad);
  /// The step's clocks and counters started, its event begun from the agreement @p in.
  StepEvent start_step(RebirthExecutor& ex, std::int64_t iteration, const StepAgreement& in);
  /// The decision and its attempts, a partial pull's reset included.
  Attempts attempts(RebirthExecutor& ex, std::span<const LayerRef> params,
                    const BoundLayers<LayerRef>& ordered, StepEvent& event);
  /// The attempts themselves (Attempts::partial: some pull left the parameters partly
  /// written).
  Attempts try_pulls(RebirthExecutor& ex, std::span<const LayerRef> params,
                     const BoundLayers<LayerRef>& ordered, StepEvent& event);
  /// A plan's PlanAction::reset: the reset callback with @p seed, shared by the leader.
  void reset_by_plan(RebirthExecutor& ex, std::span<const LayerRef> params,
                     const BoundLayers<LayerRef>& ordered, StepEvent& event, std::uint64_t seed);
  /// After the parameters were reborn from @p pulled: explore, redraw, share the counters.
  void rebirth(RebirthExecutor& ex, std::int64_t iteration, const PullOutcome& pulled,
               StepEvent& event, std::string& note);
  /// On an error of the step: the resting state again, and a synchronous step's barrier met.
  void abandon_step(RebirthExecutor& ex, std::int64_t iteration, double metric, bool sync_step);
  /// The step's end: what is owed a publish, the roster, on_rebirth, the publish, the record.
  void finish_step(RebirthExecutor& ex, std::span<const LayerRef> params,
                   const BoundLayers<LayerRef>& ordered, const StepAgreement& in,
                   bool publish_pending, Attempts& a, StepEvent& event);
  /// Publishes the step's parameters; with @p wait_for_pins (a rebirth's own publish, in its
  /// step or the next with publish.defer_rebirth; a synchronous interval's) a publish that a
  /// reader's pin skips is retried for up to publish.rebirth_wait_ms. Advertises the resting
  /// state once a rebirth's parameters are out.
  void publish_step(RebirthExecutor& ex, const BoundLayers<LayerRef>& ordered, StepEvent& event,
                    bool wait_for_pins);
  /// After a publish try: the cadence's counters and, once a deferred rebirth's parameters
  /// are out, the roster's resting state.
  void published(RebirthExecutor& ex, const PublishResult& r);
  /// Seconds left until this step's deadline (read.timeout_seconds; meaningless without).
  [[nodiscard]] double time_left() const;
  /// The bound of a roster read now: read.roster_timeout_seconds within the time left.
  [[nodiscard]] double roster_timeout() const;
  /// Synchronous PBT at an interval step: every agent's roster from collectives
  /// (RebirthExecutor::agree_ranking; PB2 observes it as it observes roster reads), the
  /// agreed worst quantile marked mid-rebirth so that no agent chooses a dying agent as a
  /// donor. @note Collective over every agent.
  [[nodiscard]] std::vector<RosterEntry> agreed_ranking(RebirthExecutor& ex, std::int64_t iteration,
                                                        double metric, bool paused);
  /// Calls AgentOptions::prepare_params once per step()/publish() (tracked by
  /// params_prepared_), adding its time to @p seconds.
  void prepare_params(double& seconds);
  /// After a load (@p reborn: this agent restarts from another's share): the saved version
  /// continued, the parameters republished, the roster status advertised.
  void republish_loaded(RebirthExecutor& ex, bool reborn, const AgentSnapshot& s,
                        const BoundLayers<LayerRef>& ordered);

  Policy policy_;
  AgentStats stats_;
  EventLog log_;
  AgentCounters counters_{};
  AgentState advertised_ = AgentState::active;  // the state this rank last set in its roster
  bool publish_pending_ = true;       // first step publishes (unless publishing is manual only)
  bool rebirth_unpublished_ = false;  // defer_rebirth: a rebirth's mix, not yet published
  bool rebirth_publish_deferred_ = false;  // defer_rebirth: the next publish is the rebirth's
  bool left_ = false;                      // leave() was called: step() is refused from then on
  bool paused_ = false;                    // pause() is in force
  bool params_prepared_ = false;           // prepare_params ran in the step()/publish() in progress
  AgentState resume_state_ = AgentState::active;  // what resume() advertises
  std::int64_t steps_since_publish_ = 0;
  Clock::time_point last_publish_{};
  double deadline_ = 0.0;  // this step's MPI_Wtime deadline for waiting on others (0: none)
  Hyperparameters hyper_;  // published with every publish; replaced by a rebirth
  // Synchronous PBT: this interval step's agreed rosters, which the plan ranks and chooses
  // donors from instead of reading rosters (empty outside such a step).
  std::optional<std::vector<RosterEntry>> agreed_;
  CheckpointHooks hooks_{};
  Clock::time_point last_checkpoint_ = Clock::now();  // for checkpoint.every_seconds
  // The writer of asynchronous saves (CheckpointOptions::async), made at the first one.
  std::unique_ptr<AsyncCheckpoint> async_;
};

}  // namespace paramwin::detail
