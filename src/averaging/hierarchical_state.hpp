#pragma once
// HierarchicalState: what a HierarchicalAveragingAgent holds (its communicators, the leader's
// AveragingAgent over the leaders, its counters); hierarchical_agent.cpp steps it,
// hierarchical_checkpoint.cpp saves and loads it.
#include <cstdint>
#include <optional>
#include <source_location>
#include <span>

#include "mpi/handles.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::detail {

class HierarchicalState {
 public:
  HierarchicalState(const AgentGroups& groups, Layout layout, AveragingOptions options,
                    const std::source_location& site);

  Layout layout_;
  Comm training_;  // every training rank: the construction's and finish()'s agreements
  Comm group_;     // the ranks of this rank's group; the leader is rank 0
  int group_id_ = -1;
  int groups_ = 0;
  int rank_in_group_ = 0;
  int group_size_ = 1;
  std::int64_t steps_ = 0;
  bool paused_ = false;
  Comm leaders_;                          // the leaders, ranked by group id (leaders only)
  std::optional<AveragingAgent> across_;  // the leader's agent over the leaders

  /// @p params bound to the layout; the error agreed over @p comm first (every rank throws).
  [[nodiscard]] BoundLayers<LayerRef> bind_agreed(std::span<const LayerRef> params,
                                                  const char* caller, MPI_Comm comm) const;
  /// The mean of @p params over the group (every rank then holds the same values).
  void group_mean(const BoundLayers<LayerRef>& params) const;
  /// Runs @p across_step on the leader and shares its round (and, when it changed the
  /// parameters, @p params) with the group; a leader's exception is thrown on every rank of
  /// the group.
  template <class F>
  AveragingRound lead(const BoundLayers<LayerRef>& params, F&& across_step);
};

}  // namespace paramwin::detail
