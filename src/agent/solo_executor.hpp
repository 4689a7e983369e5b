#pragma once
// SoloExecutor: the rebirth executor of a one-rank agent (Agent). Its pull is the window's
// transactional pull straight into the caller's parameters; nothing is shared with anyone.
// Written over any window with Window's members: the library runs it over Window
// (agent_base.cpp), the step core's tests over fake windows.

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agent/agent_core.hpp"
#include "agent/rebirth_executor.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin::detail {

/// Synchronous PBT's ranking over @p comm (every agent's rank of it): see
/// RebirthExecutor::agree_ranking; @p version and @p fingerprint are this agent's.
/// @note Collective over @p comm.
[[nodiscard]] std::vector<RosterEntry> agree_ranking_over(MPI_Comm comm, const AgentStatus& mine,
                                                          const Hyperparameters& hyper,
                                                          std::uint64_t version,
                                                          std::uint64_t fingerprint);
/// Synchronous PBT's barrier over @p comm. @note Collective over @p comm.
void sync_barrier_over(MPI_Comm comm);
/// How a one-rank agent's pull ended: @p pull() (the window's pull) run and timed, its
/// donor-specific failures turned into an outcome, its result recorded in @p event.
template <class PullFn>
PullOutcome solo_pull(const RebirthPlan& plan, StepEvent& event, PullFn pull) {
  const auto t = StepClock::now();
  try {
    // Transactional pulls write into the caller's layers only once every donor's snapshot
    // has been read whole; a direct one (Landing::direct) may fail midway (partial below).
    const PullResult r = pull();
    event.seconds.pull += seconds_since(t);
    event.donors = donor_records(plan, r);
    event.bytes += r.bytes;
    PullOutcome outcome{.ok = true};
    record_donor_hyper(r, outcome);
    return outcome;
  } catch (const PartialPullError& e) {
    event.seconds.pull += seconds_since(t);
    return PullOutcome{.ok = false,
                       .blame = e.rank(),
                       .retry = false,
                       .partial = true,
                       .why = e.what()};
  } catch (const DonorError& e) {
    event.seconds.pull += seconds_since(t);
    return PullOutcome{.ok = false, .blame = e.rank(), .retry = false, .why = e.what()};
  }
}

/// The one-rank agent's communicators: its window's for everything.
template <class W>
[[nodiscard]] CheckpointComms solo_comms(const W& w) {
  return CheckpointComms{.all = w.comm(), .writers = w.comm(), .agent = MPI_COMM_NULL};
}

template <class W = Window>
class SoloExecutor final : public RebirthExecutor {
 public:
  /// Executes over @p w; @p fingerprint caches the agent's own roster fingerprint across
  /// steps (read once from the roster).
  SoloExecutor(W& w, std::optional<std::uint64_t>& fingerprint)
      : w_(w), fingerprint_(fingerprint) {}

  [[nodiscard]] const char* kind() const noexcept override { return "Agent"; }
  [[nodiscard]] int agent_id() const override { return w_.rank(); }
  [[nodiscard]] bool leader() const override { return true; }
  [[nodiscard]] const Layout& layout() const override { return w_.layout(); }
  [[nodiscard]] std::uint64_t fingerprint() override {
    if (!fingerprint_) fingerprint_ = w_.roster(w_.rank()).fingerprint;
    return *fingerprint_;
  }

  void check_params(std::span<const LayerRef> /*ordered*/) const override {}
  StepAgreement agree(const std::string& local_error, double metric, bool publish_pending,
                      bool paused) override {
    if (!local_error.empty()) throw InvalidArgument(local_error);
    return StepAgreement{.metric = metric,
                         .any_publish_pending = publish_pending,
                         .paused = paused};
  }

  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds) override {
    return w_.roster_all(timeout_seconds);
  }
  [[nodiscard]] RosterEntry own_roster() override { return w_.roster(w_.rank()); }
  void set_status(const AgentStatus& status) override { w_.set_status(status); }

  RebirthPlan share(RebirthPlan plan, std::exception_ptr leader_error) override {
    if (leader_error) std::rethrow_exception(leader_error);
    return plan;
  }
  void share_reset(std::span<const LayerRef> /*ordered*/,
                   std::exception_ptr leader_error) override {
    if (leader_error) std::rethrow_exception(leader_error);
  }
  PullOutcome pull(const RebirthPlan& plan, const PullOptions& options,
                   const BoundLayers<LayerRef>& ordered, StepEvent& event) override {
    return solo_pull(plan, event, [&] { return w_.pull(plan.donors, ordered, options); });
  }
  AgentCounters share_rebirth(const AgentCounters& leader_counters, Hyperparameters& /*hyper*/,
                              std::exception_ptr leader_error) override {
    if (leader_error) std::rethrow_exception(leader_error);
    return leader_counters;
  }

  [[nodiscard]] std::vector<RosterEntry> agree_ranking(const AgentStatus& mine,
                                                       const Hyperparameters& hyper) override {
    return agree_ranking_over(w_.comm(), mine, hyper, w_.version(), fingerprint());
  }
  void sync_barrier() override { sync_barrier_over(w_.comm()); }

  void advance_stamp() override {}
  PublishResult publish(const BoundLayers<ConstLayerRef>& ordered,
                        const Hyperparameters& hyper) override {
    return w_.publish(ordered, hyper);
  }
  void progress() override { w_.progress(); }
  [[nodiscard]] bool has_rma_readers() const override { return w_.has_rma_readers(); }
  [[nodiscard]] bool device_window() const override { return w_.options().memory == Memory::cuda; }
  [[nodiscard]] std::uint64_t version() const override { return w_.version(); }
  void continue_versions(std::uint64_t next) override { w_.continue_versions(next); }

 private:
  W& w_;
  std::optional<std::uint64_t>& fingerprint_;
};

extern template class SoloExecutor<Window>;

}  // namespace paramwin::detail
