#pragma once
// What a checkpoint holds of an AveragingAgent besides its parameters, and how it is taken and
// given back (averaging_checkpoint.cpp): shared by AveragingAgent's checkpoints and the
// hierarchy's, whose leaders hold one AveragingAgent each.
#include <cstdint>
#include <string>
#include <vector>

#include "averaging/averaging_state.hpp"
#include "checkpoint/file.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/layer_ref.hpp"

namespace paramwin::detail {

/// An AveragingAgent's state in a checkpoint.
struct AveragingSnapshot {
  int rank = 0;
  int size = 0;
  std::int64_t steps = 0;
  std::int64_t rounds = 0;
  bool paused = false;
  std::uint64_t version = 0;
  std::vector<SeenVersion> seen;  // per rank (stale_steps)
};

/// Drops the background round in flight (waited for) and the pending correction, then
/// returns @p s's state as text (a JSON object).
[[nodiscard]] std::string take_averaging_state(AveragingState& s);
/// Parses take_averaging_state's @p text; CheckpointError starting with @p where otherwise
/// (a dying agent's state text is named as such).
[[nodiscard]] AveragingSnapshot decode_averaging_state(const std::string& text,
                                                       const std::string& where);
/// Gives @p s the state of @p snap (the background round and correction dropped) and
/// publishes @p loaded under the saved version unless the saved agent had never published.
void restore_averaging_state(AveragingState& s, const AveragingSnapshot& snap,
                             const BoundLayers<ConstLayerRef>& loaded);

/// What one rank of an averaging population contributes to a checkpoint: @p ordered, its
/// @p state text, its step count (no metric: the file's agents are all equal).
[[nodiscard]] AgentRecord averaging_record(const BoundLayers<ConstLayerRef>& ordered,
                                           std::string state, std::int64_t steps);

}  // namespace paramwin::detail
