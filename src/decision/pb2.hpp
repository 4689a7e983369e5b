#pragma once
// PB2's explore (ExploreKind::pb2; Parker-Holder et al., "Provably Efficient Online
// Hyperparameter Optimization with Population-Based Bandits", NeurIPS 2020; Ray Tune's PB2):
// the population's recent (time, hyperparameters, improvement) observations, gathered from
// the roster reads an agent already makes, fit a time-varying GP (src/decision/gp.hpp); a
// reborn agent's rules take the values that maximise its upper confidence bound.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "decision/gp.hpp"
#include "paramwin/agent_kinds.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

/// @p v of @p rule mapped to [0, 1] by its bounds (choices: their smallest..largest), in log
/// space for log-scale rules; clamped to [0, 1]; 0 when the bounds coincide.
[[nodiscard]] double pb2_normalize(const HyperRule& rule, double v) noexcept;
/// The inverse of pb2_normalize for @p z in [0, 1] (clamped), before any rounding.
[[nodiscard]] double pb2_denormalize(const HyperRule& rule, double z) noexcept;
/// The UCB exploration weight for @p n observations, as Ray Tune's PB2: beta = c1 +
/// max(0, log(c2 n)) with c1 = 0.2, c2 = 0.4 (the acquisition is mean + sqrt(beta) * sd).
[[nodiscard]] double pb2_beta(std::size_t n) noexcept;

/// The point of [0, 1]^dim that maximises mean + sqrt(@p beta) * sd of @p gp at time @p t:
/// @p start and @p candidates uniform draws from @p rng (always candidates * dim draws), the
/// best five refined by a coordinate pattern search (step 0.1 halved down to 1e-3) inside
/// the box. Ties go to the earlier point. @p value receives the acquisition there.
[[nodiscard]] std::vector<double> ucb_argmax(const TimeVaryingGp& gp, double t, double beta,
                                             std::size_t candidates, std::span<const double> start,
                                             std::mt19937_64& rng, double& value);

/// One observation: over an interval ending at @p time (the agent's iteration), an agent
/// with hyperparameters @p z (normalised, one per rule) improved its metric by
/// @p improvement per iteration (in the metric's direction: larger is better).
struct Pb2Observation {
  int rank = -1;
  double time = 0.0;
  double span = 0.0;  ///< iterations the interval lasted
  std::vector<double> z{};
  double improvement = 0.0;
};

/// What one explore did.
struct Pb2Result {
  bool used_gp = false;  ///< false: too few observations (or no fit): fall back to PBT's explore
  std::string note{};    ///< for the event: the GP's kernel and beta, or why it fell back
  GpKernel kernel{};     ///< the fitted kernel (used_gp)
  double acquisition = 0.0;  ///< UCB at the chosen point (used_gp)
  std::size_t observations = 0;
};

/// An agent's PB2 state: the latest roster reading of every agent and a window of the most
/// recent observations.
class Pb2Explorer {
 public:
  Pb2Explorer(std::vector<HyperRule> rules, Pb2Options options, MetricDirection direction);

  /// One roster read. For each agent that answered, published, shares @p fingerprint, is
  /// active or mid-rebirth, and reports a finite metric and every rule's hyperparameter:
  /// compared with the previous reading of it, same generation and same rule values and a
  /// larger iteration make one observation (metric delta over iteration delta, signed so
  /// that larger is better); anything else (a rebirth, a changed value, a restart) starts a
  /// new interval. Readings at the same iteration change nothing.
  void observe(std::span<const RosterEntry> rosters, std::uint64_t fingerprint);

  /// This agent (@p rank) was just reborn: its new interval starts now, at @p iteration, with
  /// generation @p generation, the values @p hyper and the metric @p metric (its best donor's:
  /// a reborn agent starts from a copy, as Ray's PB2 records it). Without it the interval
  /// would start only at the next roster read, and an agent reborn at every check would
  /// never observe its own values. A non-finite metric or a missing value starts nothing.
  void start_interval(int rank, std::uint64_t generation, std::int64_t iteration, double metric,
                      const Hyperparameters& hyper);

  /// Chooses every rule's value of @p hyper (the inherited values; the start point of the
  /// search) by GP-UCB when there are at least min_observations observations; otherwise
  /// leaves @p hyper and @p rng untouched (used_gp false, the note says why).
  [[nodiscard]] Pb2Result explore(Hyperparameters& hyper, std::mt19937_64& rng) const;

  [[nodiscard]] const std::deque<Pb2Observation>& observations() const noexcept { return window_; }

 private:
  struct Reading {
    std::uint64_t generation = 0;
    std::int64_t iteration = 0;
    double metric = 0.0;
    std::vector<double> z{};
  };

  std::vector<HyperRule> rules_;
  Pb2Options options_;
  MetricDirection direction_;
  std::map<int, Reading> last_{};
  std::deque<Pb2Observation> window_{};
};

}  // namespace paramwin::detail
