#pragma once
// RebirthExecutor: what the step core (AgentCore::step) needs from the ranks that hold one
// agent: one rank (SoloExecutor, Agent) or g ranks that each hold a shard (ShardExecutor,
// GroupAgent). The core owns the sequence (agree, plan, attempt/exclude loop, rebirth,
// callbacks, publish, stats, log); an executor only moves data and, for a group, shares the
// leader's decisions with the other ranks of the agent.

#include <chrono>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "decision/rebirth_plan.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

using StepClock = std::chrono::steady_clock;  ///< the clock of the step's phase timers

/// Seconds from @p t to now, for the step's phase timers.
[[nodiscard]] inline double seconds_since(StepClock::time_point t) {
  return std::chrono::duration<double>(StepClock::now() - t).count();
}

/// What every rank of the agent agreed on at the start of a step.
struct StepAgreement {
  double metric = 0.0;               ///< the agent's metric (a group's: the mean of its ranks')
  bool any_publish_pending = false;  ///< some rank still owes a publish
  bool paused = false;               ///< the agent is paused (on every one of its ranks)
};

/// How one pull attempt ended, the same on every rank of the agent.
struct PullOutcome {
  bool ok = false;
  int blame = -1;      ///< the donor that failed, or -1 when no single donor is to blame
  bool retry = false;  ///< with blame -1: worth another choice (e.g. shards of two publishes)
  /// The pull failed after writing into the caller's parameters (PartialPullError, direct
  /// landing): they are partly written, and the step must not leave them so.
  bool partial = false;
  std::string why{};  ///< for the event's note
  /// On the leader, when ok: the hyperparameters of the donors that were mixed in (the
  /// versions read), best first, and their normalised weights; skipped donors left out.
  std::vector<Hyperparameters> donor_hyper{};
  std::vector<double> donor_weights{};  ///< parallel to donor_hyper
};

/// Fills @p outcome's donor hyperparameters and weights from a pull's @p result.
inline void record_donor_hyper(const PullResult& result, PullOutcome& outcome) {
  for (const DonorRead& d : result.donors) {
    if (d.skipped) continue;
    outcome.donor_hyper.push_back(d.hyper);
    outcome.donor_weights.push_back(d.weight);
  }
}

class RebirthExecutor {
 public:
  RebirthExecutor() = default;
  RebirthExecutor(const RebirthExecutor&) = delete;
  RebirthExecutor& operator=(const RebirthExecutor&) = delete;
  RebirthExecutor(RebirthExecutor&&) = delete;
  RebirthExecutor& operator=(RebirthExecutor&&) = delete;
  virtual ~RebirthExecutor() = default;

  /// "Agent" or "GroupAgent", for messages.
  [[nodiscard]] virtual const char* kind() const noexcept = 0;
  /// The agent's id in the population (its rank among the agents).
  [[nodiscard]] virtual int agent_id() const = 0;
  /// True on the rank that plans for the agent (every solo agent).
  [[nodiscard]] virtual bool leader() const = 0;
  /// The full layout the caller's parameters follow.
  [[nodiscard]] virtual const Layout& layout() const = 0;
  /// This agent's layout fingerprint as donors see it in the rosters.
  [[nodiscard]] virtual std::uint64_t fingerprint() = 0;

  /// Refuses parameters this executor cannot work on (InvalidArgument), beyond the binder's
  /// checks. @p ordered is in layout order.
  virtual void check_params(std::span<const LayerRef> ordered) const = 0;
  /// Agrees on the step's inputs over the agent's ranks. @p local_error non-empty: this
  /// rank's parameters are bad. Throws InvalidArgument on every rank when any rank's are,
  /// or when some ranks are @p paused and others not (pause() was not called on every rank).
  virtual StepAgreement agree(const std::string& local_error, double metric, bool publish_pending,
                              bool paused) = 0;

  /// Every agent's roster (the leader plans with them).
  /// Every agent's roster; @p timeout_seconds > 0 bounds the RMA reads (late agents come
  /// back with answered = false).
  [[nodiscard]] virtual std::vector<RosterEntry> roster_all(double timeout_seconds) = 0;
  /// This agent's own roster entry.
  [[nodiscard]] virtual RosterEntry own_roster() = 0;
  /// Updates this rank's roster entry.
  virtual void set_status(const AgentStatus& status) = 0;

  /// The leader's plan on every rank (for one rank: @p plan itself). @p leader_error is the
  /// exception the leader's planning threw, if any; the leader rethrows it after sharing
  /// an error plan, the other ranks throw an Error (or a DonorError) naming the leader.
  virtual RebirthPlan share(RebirthPlan plan, std::exception_ptr leader_error) = 0;
  /// After the leader ran the reset callback into @p ordered (@p leader_error: it threw):
  /// every rank holds the leader's result, or every rank throws.
  virtual void share_reset(std::span<const LayerRef> ordered, std::exception_ptr leader_error) = 0;
  /// Pulls and mixes the plan's donors into @p ordered with @p options (pull_options: the
  /// mix, the read settings, this rank's time left). On failure @p ordered is unchanged on
  /// every rank. Adds to the event's timers, donors and bytes.
  virtual PullOutcome pull(const RebirthPlan& plan, const PullOptions& options,
                           const BoundLayers<LayerRef>& ordered, StepEvent& event) = 0;
  /// The leader's counters after Policy::reborn() and its hyperparameters after the
  /// rebirth's exploit and explore (@p hyper: the leader's in, every rank's out) on every
  /// rank. @p leader_error: the leader's explore threw; every rank then throws (the leader
  /// rethrows it) with nothing shared.
  virtual AgentCounters share_rebirth(const AgentCounters& leader_counters, Hyperparameters& hyper,
                                      std::exception_ptr leader_error) = 0;

  /// Synchronous PBT (WorstFractionTrigger::synchronous): every agent's roster as far as the
  /// ranking, donor eligibility and PB2's observations need it (rank, version, fingerprint,
  /// the status's metric, state, iteration and generation, the hyperparameters; no publish
  /// time, so nobody is stale), in agent order, from collectives over the agents: each
  /// passes its status @p mine and its @p hyper. Every agent gets the same list.
  /// The base refuses (only a one-rank Agent implements it; GroupAgent refuses the option at
  /// construction). @note Collective over every agent.
  [[nodiscard]] virtual std::vector<RosterEntry> agree_ranking(const AgentStatus& /*mine*/,
                                                               const Hyperparameters& /*hyper*/) {
    throw InvalidArgument("paramwin: " + std::string(kind()) +
                          ": synchronous PBT (triggers.worst_fraction.synchronous) needs one-rank "
                          "agents");
  }
  /// Synchronous PBT: returns once every agent reached it, i.e. once every pull of the
  /// interval is done. @note Collective over every agent.
  virtual void sync_barrier() {
    throw InvalidArgument("paramwin: " + std::string(kind()) +
                          ": synchronous PBT (triggers.worst_fraction.synchronous) needs one-rank "
                          "agents");
  }

  /// Fixes the stamp of the agent's next publish once a publish is decided, before any
  /// callback runs (so callbacks see it as version()); a no-op where the window numbers
  /// its own publishes.
  virtual void advance_stamp() = 0;
  /// Publishes @p ordered (this rank's part of it) with the stamp advance_stamp() fixed.
  virtual PublishResult publish(const BoundLayers<ConstLayerRef>& ordered,
                                const Hyperparameters& hyper) = 0;
  /// Lets MPI progress once on this rank's window (serves its RMA readers).
  virtual void progress() = 0;
  /// Whether some rank reads this rank's window over RMA (ParameterWindow::has_rma_readers).
  [[nodiscard]] virtual bool has_rma_readers() const = 0;
  /// Whether the window is a device window (Memory::cuda): its pulls write the caller's device
  /// memory in place, so the prepare hook (which orders them after the caller's kernels) runs
  /// before every pull.
  [[nodiscard]] virtual bool device_window() const = 0;
  /// The agent's latest publish: the window version (solo) or the group's stamp (epoch).
  [[nodiscard]] virtual std::uint64_t version() const = 0;
  /// Checkpoint resume: the next publish gets version (stamp) @p next when that is ahead of
  /// the one it would get anyway (never backwards; ParameterWindow::continue_versions).
  virtual void continue_versions(std::uint64_t next) = 0;
};

}  // namespace paramwin::detail
