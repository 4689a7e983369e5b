#pragma once
/// @file hierarchical_averaging.hpp
/// HierarchicalAveragingAgent: Heat DASO's hierarchy over AgentGroups. The ranks of each
/// agent of the groups (a group: e.g. the ranks of one node) average synchronously every step
/// (an MPI_Allreduce mean over the group), and the groups average with each other
/// one-sidedly, at their own pace, through an AveragingAgent held by each group's leader
/// (in-agent rank 0) over the leaders: a slow group never holds the others up, and a
/// reduced-precision wire (WindowOptions::wire) shrinks what crosses between groups. See
/// docs/averaging.md.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <span>
#include <string>

#include "paramwin/averaging.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/pull.hpp"

namespace paramwin {

/// What one HierarchicalAveragingAgent::step (or finish) did on this rank.
struct HierarchicalRound {
  int group = -1;              ///< this rank's group (AgentGroups::agent())
  int group_size = 1;          ///< ranks in the group
  double group_seconds = 0.0;  ///< wall time of the in-group mean
  /// The round across groups. On the leader: its AveragingAgent's round. On the other ranks
  /// of the group: the leader's round as broadcast (kind, round, applied,
  /// background_applied, self_weight, published, version, bytes, seconds; no peers, and
  /// note says whose round it is); its parameters reach them through a broadcast.
  AveragingRound across{};
};

namespace detail {
class HierarchicalState;
}  // namespace detail

/// One rank of a model trained data-parallel by groups of ranks: synchronous within a group,
/// asynchronous and one-sided between groups. Every training rank of @p groups holds one.
/// Steps are collective over the group (never across groups, except warm-up, cool-down and
/// finish(), which are collective over every training rank). Host float32 and float64 layers.
/// Move-only; not thread-safe.
class HierarchicalAveragingAgent {
 public:
  /// Checks @p options (the across-group averaging: topology over the groups, whose ranks are
  /// the agent ids, interval, weights, schedules, background, the window's wire) and the
  /// layout on every training rank (InvalidArgument or LayoutMismatch on every training rank
  /// otherwise), then each leader creates its AveragingAgent over the leaders. The agent keeps
  /// duplicates of the communicators it needs (@p groups may be freed first); buffer ranks and
  /// the coordinator take no part (InvalidArgument if they try).
  /// @note Collective over @p groups' training ranks.
  HierarchicalAveragingAgent(const AgentGroups& groups, Layout layout,
                             AveragingOptions options = {},
                             const std::source_location& site = std::source_location::current());
  HierarchicalAveragingAgent(const HierarchicalAveragingAgent&) = delete;
  HierarchicalAveragingAgent& operator=(const HierarchicalAveragingAgent&) = delete;
  /// Takes over @p other's state; @p other throws InvalidArgument from every call.
  HierarchicalAveragingAgent(HierarchicalAveragingAgent&& other) noexcept;
  /// Frees this agent's state (collectively) and takes over @p other's.
  HierarchicalAveragingAgent& operator=(HierarchicalAveragingAgent&& other) noexcept;
  /// Frees the leader's window and the group's communicator. @note Collective.
  ~HierarchicalAveragingAgent();

  /// The in-group mean of @p params (every rank of the group then holds the same values),
  /// then the leader's AveragingAgent::step over the groups, whose result the leader
  /// broadcasts to its group when it changed the parameters. Bad @p params: InvalidArgument
  /// on every rank of the group before anything changes. @note Collective over the group.
  HierarchicalRound step(std::span<const LayerRef> params);
  /// @copydoc step(std::span<const LayerRef>)
  HierarchicalRound step(std::initializer_list<LayerRef> params) {
    return step(std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// The leader publishes @p params for the other groups (e.g. the initial parameters); a
  /// no-op returning an unpublished result on the other ranks. Not collective.
  PublishResult publish(std::span<const ConstLayerRef> params);
  /// @copydoc publish(std::span<const ConstLayerRef>)
  PublishResult publish(std::initializer_list<ConstLayerRef> params) {
    return publish(std::span<const ConstLayerRef>(params.begin(), params.size()));
  }
  /// The in-group mean, then the leaders' AveragingAgent::finish (a mean over the leaders),
  /// broadcast to every group: every training rank ends with the same parameters.
  /// @note Collective over every training rank.
  HierarchicalRound finish(std::span<const LayerRef> params);
  /// @copydoc finish(std::span<const LayerRef>)
  HierarchicalRound finish(std::initializer_list<LayerRef> params) {
    return finish(std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// Saves the hierarchy into one parallel-HDF5 checkpoint @p path (the format of
  /// AveragingAgent's, one agent per training rank, in training-rank order): every training
  /// rank's @p params (the members of a group differ between steps), its step count and
  /// pause, and on each leader its AveragingAgent's state across groups (whose background
  /// read in flight is waited for and dropped with a pending correction, as by
  /// AveragingAgent::save_checkpoint). Bad @p params: InvalidArgument on every training
  /// rank; a failed write: CheckpointError on every training rank.
  /// @note Collective over every training rank.
  void save_checkpoint(const std::string& path, std::span<const ConstLayerRef> params);
  /// @copydoc save_checkpoint(const std::string&, std::span<const ConstLayerRef>)
  void save_checkpoint(const std::string& path, std::initializer_list<ConstLayerRef> params) {
    save_checkpoint(path, std::span<const ConstLayerRef>(params.begin(), params.size()));
  }
  /// Continues from checkpoint @p path, written by save_checkpoint with the same groups
  /// (as many training ranks, the same group of each): fills @p params with this rank's
  /// saved parameters, restores the step count and pause, and each leader's agent across
  /// groups as AveragingAgent::load_checkpoint does (published under the saved version).
  /// CheckpointError on every training rank for a missing or bad file, another layout,
  /// other groups, a file of AveragingAgents or Agents; InvalidArgument for bad @p params;
  /// nothing changed then. @note Collective over every training rank.
  CheckpointLoad load_checkpoint(const std::string& path, std::span<const LayerRef> params);
  /// @copydoc load_checkpoint(const std::string&, std::span<const LayerRef>)
  CheckpointLoad load_checkpoint(const std::string& path, std::initializer_list<LayerRef> params) {
    return load_checkpoint(path, std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// Pauses the group's averaging across groups (AveragingAgent::pause on the leader; the
  /// in-group means go on). Call it on every rank of the group.
  void pause();
  /// Ends a pause (AveragingAgent::resume on the leader). Call it on every rank of the group.
  void resume();
  [[nodiscard]] bool is_paused() const;  ///< whether paused

  [[nodiscard]] int group() const;             ///< this rank's group (agent id)
  [[nodiscard]] int groups() const;            ///< number of groups
  [[nodiscard]] int rank_in_group() const;     ///< 0 for the leader
  [[nodiscard]] int group_size() const;        ///< ranks in this rank's group
  [[nodiscard]] bool leader() const;           ///< whether this rank leads its group
  [[nodiscard]] std::int64_t steps() const;    ///< step() calls so far
  [[nodiscard]] const Layout& layout() const;  ///< the layout
  /// The leader's AveragingAgent across groups; InvalidArgument on the other ranks.
  [[nodiscard]] AveragingAgent& across();

 private:
  [[nodiscard]] detail::HierarchicalState& state() const;
  std::unique_ptr<detail::HierarchicalState> state_;
};

}  // namespace paramwin
