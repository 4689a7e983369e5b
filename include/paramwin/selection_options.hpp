#pragma once
/// @file selection_options.hpp
/// How a dying agent's donors are chosen: SelectionOptions (kind, k, quantile, staleness,
/// shortfall) and the custom selection hook's context (part of AgentOptions,
/// agent_options.hpp).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "paramwin/agent_kinds.hpp"

namespace paramwin {

/// Default SelectionOptions::max_staleness_seconds: far longer than the gap between two
/// publishes of a trainer that publishes every step, short enough that a dead agent's last
/// snapshot stops spreading within a minute.
inline constexpr double kDefaultMaxStalenessSeconds = 60.0;

/// One agent a custom selection may choose (SelectionContext::candidates).
struct SelectionCandidate {
  int rank = -1;        ///< the agent's rank
  double metric = 0.0;  ///< its metric as ranked (roster, or the synchronous ranking)
};

/// What a custom selection function sees. Read-only; valid during the call only.
struct SelectionContext {
  int rank = -1;                                                 ///< the dying agent
  int population = 0;                                            ///< agents in the window
  MetricDirection direction = MetricDirection::lower_is_better;  ///< metric direction
  std::size_t want = 1;  ///< donors wanted: k, or fewer when clamped (shortfall clamp)
  /// The eligible donors (SelectionOptions::shortfall already applied: at least @c want),
  /// best first (ties: lower rank first).
  std::span<const SelectionCandidate> candidates{};
  std::uint64_t seed = 0;  ///< from the agent's selection stream (reproducible per seed)
};

/// A custom selection: returns between 1 and context.want distinct ranks, each one of the
/// candidates (anything else throws InvalidArgument from step()); an empty result keeps the
/// death pending (no donor now, retried on the next step).
using SelectionFunction = std::function<std::vector<int>(const SelectionContext& context)>;

/// How donors are chosen.
struct SelectionOptions {
  SelectionKind kind = SelectionKind::uniform;  ///< selection rule
  int k = 2;                                    ///< donors per rebirth, >= 1
  int tournament_size = 2;                      ///< entrants per tournament, >= 1
  /// Too few eligible donors at a death. With defer or error, k > population - 1 is rejected
  /// at construction; with clamp it is allowed.
  Shortfall shortfall = Shortfall::defer;
  /// Staleness bound, in seconds: an agent whose latest publish is older than this (the
  /// reader's MPI_Wtime minus the roster's publish_time) is not eligible as a donor, e.g. a
  /// trainer that hangs, stopped publishing, or whose process died without MPI_Finalize
  /// (over shared memory its last snapshot stays readable and its roster still says active).
  /// On by default (kDefaultMaxStalenessSeconds); 0: no bound. Raise it for trainers whose
  /// publishes are further apart (long steps, evaluation phases). Compares clocks of two
  /// ranks: exact on one node; across nodes it needs MPI_WTIME_IS_GLOBAL or synchronised
  /// clocks.
  double max_staleness_seconds = kDefaultMaxStalenessSeconds;
  /// SelectionKind::truncation: donors come from the best quantile_count(n, quantile) of the
  /// n ranked agents. In [0, 1]; 0: the worst-fraction trigger's fraction (PBT's one
  /// quantile_fraction for both ends).
  double quantile = 0.0;
  SelectionFunction custom{};  ///< SelectionKind::custom: the user's choice (required there)
};

}  // namespace paramwin
