#pragma once
// SoloExecutor: the rebirth executor of a one-rank agent (Agent). Its pull is the window's
// transactional pull straight into the caller's parameters; nothing is shared with anyone.

#include <cstdint>
#include <optional>

#include "agent/agent_core.hpp"
#include "agent/rebirth_executor.hpp"
#include "paramwin/detail/agent_base.hpp"

namespace paramwin::detail {

class SoloExecutor final : public RebirthExecutor {
 public:
  /// Executes over @p w; @p fingerprint caches the agent's own roster fingerprint across
  /// steps (read once from the roster).
  SoloExecutor(WindowAccess& w, std::optional<std::uint64_t>& fingerprint)
      : w_(w), fingerprint_(fingerprint) {}

  [[nodiscard]] const char* kind() const noexcept override { return "Agent"; }
  [[nodiscard]] int agent_id() const override { return w_.rank(); }
  [[nodiscard]] bool leader() const override { return true; }
  [[nodiscard]] const Layout& layout() const override { return w_.layout(); }
  [[nodiscard]] std::uint64_t fingerprint() override;

  void check_params(std::span<const LayerRef> /*ordered*/) const override {}
  StepAgreement agree(const std::string& local_error, double metric, bool publish_pending,
                      bool paused) override;

  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds) override {
    return w_.roster_all(timeout_seconds);
  }
  [[nodiscard]] RosterEntry own_roster() override { return w_.roster(w_.rank()); }
  void set_status(const AgentStatus& status) override { w_.set_status(status); }

  RebirthPlan share(RebirthPlan plan, std::exception_ptr leader_error) override;
  void share_reset(std::span<const LayerRef> ordered, std::exception_ptr leader_error) override;
  PullOutcome pull(const RebirthPlan& plan, const PullOptions& options,
                   const BoundLayers<LayerRef>& ordered, StepEvent& event) override;
  AgentCounters share_rebirth(const AgentCounters& leader_counters, Hyperparameters& /*hyper*/,
                              std::exception_ptr leader_error) override {
    if (leader_error) std::rethrow_exception(leader_error);
    return leader_counters;
  }

  [[nodiscard]] std::vector<RosterEntry> agree_ranking(const AgentStatus& mine,
                                                       const Hyperparameters& hyper) override;
  void sync_barrier() override;

  void advance_stamp() override {}
  PublishResult publish(const BoundLayers<ConstLayerRef>& ordered,
                        const Hyperparameters& hyper) override {
    return w_.publish(ordered, hyper);
  }
  void progress() override { w_.progress(); }
  [[nodiscard]] bool has_rma_readers() const override { return w_.has_rma_readers(); }
  [[nodiscard]] std::uint64_t version() const override { return w_.version(); }
  void continue_versions(std::uint64_t next) override { w_.continue_versions(next); }

 private:
  WindowAccess& w_;
  std::optional<std::uint64_t>& fingerprint_;
};

}  // namespace paramwin::detail
