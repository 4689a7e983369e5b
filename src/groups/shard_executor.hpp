#pragma once
// ShardExecutor: the rebirth executor of an agent made of g ranks (GroupAgent). Every rank
// holds the full replica and exposes one shard of it in its own window over the shard
// peers. The leader's plan reaches the agent's ranks in one broadcast; on a death every rank
// pulls its shard from the donors' matching ranks into scratch memory, an allgather of the
// outcomes (errors, publish stamps per donor) lets every rank reach the same verdict on
// whether the shards form one consistent mix, and the shards are assembled into every
// rank's replica. No collective here follows a user callback.
//
// A device window (WindowOptions::memory = Memory::cuda): the replicas and the shard slots
// live in GPU memory; a rank pulls its shard into a device scratch, and the shards are
// exchanged between the agent's ranks through host memory (a copy of the own shard out, the
// host exchange below, the assembled replica copied in), as MPI cannot move GPU memory here.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <source_location>
#include <vector>

#include "agent/rebirth_executor.hpp"
#include "groups/shard_outcomes.hpp"
#include "mpi/handles.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/options.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/shard_plan.hpp"
#include "paramwin/window.hpp"

namespace paramwin::detail {

class ShardExecutor final : public RebirthExecutor {
 public:
  /// Cuts @p layout for @p groups' agents (no MPI yet; see open()).
  ShardExecutor(const AgentGroups& groups, Layout layout);

  /// Duplicates the agent communicator, finds whether the agent's ranks share a node and
  /// creates this rank's shard window over the shard peers, at @p site (the GroupAgent's
  /// caller: an unnamed window's identity).
  /// @note Collective over the agent's ranks, then over the shard peers.
  void open(const AgentGroups& groups, const WindowOptions& window_options,
            const std::source_location& site);

  [[nodiscard]] const char* kind() const noexcept override { return "GroupAgent"; }
  [[nodiscard]] int agent_id() const override { return agent_; }
  [[nodiscard]] bool leader() const override { return rank_in_agent_ == 0; }
  [[nodiscard]] const Layout& layout() const override { return plan_.full(); }
  [[nodiscard]] std::uint64_t fingerprint() override { return fingerprint_; }

  void check_params(std::span<const LayerRef> ordered) const override;
  StepAgreement agree(const std::string& local_error, double metric, bool publish_pending,
                      bool paused) override;

  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds) override {
    return win().roster_all(timeout_seconds);
  }
  [[nodiscard]] RosterEntry own_roster() override { return win().roster(win().rank()); }
  void set_status(const AgentStatus& status) override { win().set_status(status); }

  RebirthPlan share(RebirthPlan plan, std::exception_ptr leader_error) override;
  void share_reset(std::span<const LayerRef> ordered, std::exception_ptr leader_error) override;
  PullOutcome pull(const RebirthPlan& plan, const PullOptions& options,
                   const BoundLayers<LayerRef>& ordered, StepEvent& event) override;
  AgentCounters share_rebirth(const AgentCounters& leader_counters, Hyperparameters& hyper,
                              std::exception_ptr leader_error) override;

  void advance_stamp() override { ++epoch_; }
  PublishResult publish(const BoundLayers<ConstLayerRef>& ordered,
                        const Hyperparameters& hyper) override;
  void progress() override { win().progress(); }
  [[nodiscard]] bool has_rma_readers() const override { return win().has_rma_readers(); }
  [[nodiscard]] bool device_window() const override { return device_; }
  [[nodiscard]] std::uint64_t version() const override { return epoch_; }
  /// The agent's next stamp is @p next when that is ahead (every rank of the agent calls it
  /// with the same value); the shard window numbers its own publishes on from there too.
  void continue_versions(std::uint64_t next) override {
    if (next > epoch_ + 1) epoch_ = next - 1;
    win().continue_versions(next);
  }
  /// The duplicate of the agent communicator the executor's collectives use.
  [[nodiscard]] MPI_Comm agent_comm() const noexcept { return agent_comm_.get(); }

  [[nodiscard]] ParameterWindow<>& win() { return *window_; }
  [[nodiscard]] const ParameterWindow<>& win() const { return *window_; }
  [[nodiscard]] bool has_window() const noexcept { return window_.has_value(); }
  [[nodiscard]] const ShardPlan& plan() const noexcept { return plan_; }
  [[nodiscard]] int agents() const noexcept { return agents_; }
  [[nodiscard]] int rank_in_agent() const noexcept { return rank_in_agent_; }
  [[nodiscard]] int ranks_per_agent() const noexcept { return g_; }

 private:
  /// A byte range of the caller's memory.
  struct Block {
    std::byte* data;
    std::size_t bytes;
  };

  [[nodiscard]] std::vector<ConstLayerRef> shard_of(std::span<const ConstLayerRef> full) const;
  [[nodiscard]] std::vector<std::size_t> offsets_of(int s) const;
  void ensure_scratch(int ordinal);
  [[nodiscard]] std::vector<LayerRef> scratch_refs(std::span<const LayerRef> ordered);
  [[nodiscard]] std::vector<Block> blocks_of(int s, std::span<const LayerRef> ordered) const;
  void copy_shard(int s, const std::byte* src, std::span<const LayerRef> ordered) const;
  void assemble(std::span<const LayerRef> ordered);
  void broadcast_blocks(const std::vector<Block>& blocks, int root) const;
  void start_from_current(std::span<const LayerRef> ordered, std::span<const LayerRef> scratch);
  /// Device window: @p ordered's layers as host refs over image_ (made once), holding the
  /// layers' values when @p fill; store_image() copies image_ back into @p ordered.
  [[nodiscard]] std::vector<LayerRef> host_image(std::span<const LayerRef> ordered, bool fill);
  void store_image(std::span<const LayerRef> ordered) const;
  /// This rank's shard of a rebirth pull into @p scratch (first the current parameters'
  /// shard, with momentum; a device window's shard then out to the host scratch): fills
  /// @p out (this rank's row of ShardOutcomes), @p result and, on failure, @p error.
  void pull_shard(const RebirthPlan& plan, const PullOptions& po, std::span<const LayerRef> ordered,
                  const BoundLayers<LayerRef>& scratch, std::vector<std::int64_t>& out,
                  PullResult& result, std::string& error, bool& partial);
  PullOutcome verdict(const ShardOutcomes& outcomes, std::span<const int> donors,
                      const std::string& own_error) const;

  ShardPlan plan_;
  std::optional<ParameterWindow<>> window_;
  Comm agent_comm_;  // a duplicate of the groups' agent communicator
  int agent_;
  int agents_;
  int rank_in_agent_;
  int g_;
  std::uint64_t epoch_ = 0;
  std::uint64_t fingerprint_ = 0;
  // This rank's shard, pulled before it is trusted. When the agent's ranks share a node it
  // lives in a shared-memory window over the agent, and the gather is a plain copy from the
  // peers' scratch; otherwise in private memory, gathered by broadcasts.
  bool same_node_ = false;
  Win scratch_win_;                       // same_node_: the shared scratch, locked for its life
  std::vector<std::byte*> peer_scratch_;  // per in-agent rank (same_node_)
  std::vector<std::byte> private_scratch_;
  std::byte* scratch_ = nullptr;
  std::vector<std::size_t> scratch_offset_;  // per layer
  // A device window: the pull's scratch on the GPU (own shard), and a host image of the
  // replica for the exchange between the agent's ranks (g > 1 only).
  bool device_ = false;
  std::unique_ptr<void, void (*)(void*)> device_scratch_{nullptr, [](void*) {}};
  std::vector<std::byte> image_;
  std::vector<std::size_t> image_offset_;  // per layer of the full layout, then the size
};

}  // namespace paramwin::detail
