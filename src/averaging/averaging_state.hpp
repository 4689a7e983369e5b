#pragma once
// AveragingState: what an AveragingAgent holds (its window, options, counters, what it saw of
// its peers, the pending background correction, the event log), and the round's parts.
#include <mpi.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "mpi/handles.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin::detail {

/// One peer's version as this agent last observed it, and its step then (stale_steps).
struct SeenVersion {
  std::uint64_t version = 0;
  std::int64_t since_step = 0;
};

class AveragingState {
 public:
  AveragingState(MPI_Comm comm, Layout layout, AveragingOptions options,
                 const std::source_location& site);

  /// The asynchronous round of step steps_ into @p params (inline or background), filling
  /// @p out. Never collective.
  void gossip(const BoundLayers<LayerRef>& params, AveragingRound& out);
  /// Adds the pending background correction to @p params, if any.
  bool apply_correction(const BoundLayers<LayerRef>& params);
  /// MPI_Allreduce mean of @p params over the communicator. @note Collective.
  void synchronous_mean(const BoundLayers<LayerRef>& params);
  /// Whether step @p step (1-based) is synchronous (warm-up or cool-down).
  [[nodiscard]] bool synchronous(std::int64_t step) const;
  /// Whether an asynchronous round is due at this step (and resets the interval clock).
  [[nodiscard]] bool round_due();
  /// Publishes @p params with the step as stamp; sets the roster active unless paused.
  PublishResult publish(const BoundLayers<ConstLayerRef>& params);
  /// Writes @p round to the event log, if any.
  void log(const AveragingRound& round);

  AveragingOptions options_;  // checked on every rank before the window exists
  Window window_;
  Comm sync_comm_;  // the synchronous means' communicator
  int rank_ = 0;
  int size_ = 1;
  std::int64_t steps_ = 0;
  std::int64_t rounds_ = 0;
  double last_round_time_ = 0.0;
  bool paused_ = false;
  std::vector<SeenVersion> seen_;
  std::vector<std::vector<double>> correction_;  // per layer, background
  bool pending_ = false;
  std::unique_ptr<std::ofstream> log_;

 private:
  /// Reads the roster of each of @p peers and says which are usable (SkipReason::none).
  void screen(std::span<const int> peers, AveragingRound& out);
  /// Background: the peers' mix into scratch, then the correction (1 - self)(mix - own).
  void begin_correction(const BoundLayers<LayerRef>& params, std::span<const int> donors,
                        const PullOptions& pull, double self, AveragingRound& out);
};

}  // namespace paramwin::detail
