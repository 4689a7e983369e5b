#pragma once
/// @file triggers.hpp
/// When an agent dies: the death triggers (age, threshold, worst fraction with its
/// synchronous mode, a custom predicate) and their warm-up and cooldown (part of AgentOptions,
/// agent_options.hpp).

#include <cstdint>
#include <functional>

namespace paramwin {

/// Age trigger: the maximum age is drawn uniformly from [lo, hi] (steps since birth), redrawn
/// after each death, from a per-agent stream seeded by (seed, rank).
struct AgeTrigger {
  bool enabled = true;    ///< on by default (the seed systems' default mode)
  std::int64_t lo = 50;   ///< smallest maximum age, >= 1
  std::int64_t hi = 150;  ///< largest maximum age, >= lo
};

/// Threshold trigger: dies when the metric is worse than @c value (strictly; NaN is worse).
struct ThresholdTrigger {
  bool enabled = false;  ///< off by default
  double value = 0.0;    ///< the threshold, in the metric's units
};

/// Worst-fraction trigger (PBT's "bottom quantile"): every @c every steps the agent ranks
/// the population and dies if it is among the quantile_count(n, fraction) worst of the n
/// ranked agents: ceil(fraction * n), capped at n / 2 (Ray Tune's PBT), so that it fires
/// with 2 or 3 agents too. Ranked: agents active or mid-rebirth with this agent's layout;
/// agents that left, are paused or never stepped are not (a population shrinks as agents
/// finish). Enabled with fraction 0, or in a population of 1, it could never fire: validate()
/// rejects both.
struct WorstFractionTrigger {
  bool enabled = false;     ///< off by default
  double fraction = 0.2;    ///< in [0, 1]; above 0.5 acts as 0.5 (the cap)
  std::int64_t every = 10;  ///< check cadence in steps, >= 1 (PBT's perturbation interval)
  /// Asynchronous (false, the default): the ranking comes from one-sided roster reads, each
  /// agent on its own; other agents are seen as of their latest step. Synchronous (true,
  /// Ray Tune's synch=True): at every @c every-th step all agents publish, agree on one
  /// ranking (an MPI_Allgather of their metrics, an MPI_Allgatherv of their hyperparameters)
  /// and the worst are reborn from it before any agent goes on (a barrier after the pulls),
  /// so that runs with the same seeds make the same decisions. Collective: every agent must call
  /// step() the same number of times (an agent that leaves early blocks the others at the next
  /// interval); only this trigger may be on; one-rank Agents only (GroupAgent refuses it). See
  /// docs/agent.md, "PBT".
  bool synchronous = false;
  /// Asynchronous mode only: compare this agent with each other agent at one iteration, the
  /// latest both have reported (this agent's own earlier reports since its latest rebirth, an
  /// agent one report ahead by its roster's previous report), instead of everyone's latest
  /// report whatever its iteration (Ray Tune's asynchronous rule). Only agents it can be
  /// compared with count towards the quantile; an agent more than one report ahead is
  /// compared by its latest metric. Truncation selection then draws from the top of the same
  /// ranking (best_at_same_iteration()). For metrics that move for every agent at once (a
  /// data stream that shifts). See docs/agent.md, "Ranking at the same iteration", and
  /// rank_at_same_iteration().
  bool same_iteration = false;
};

/// What a custom trigger sees.
struct TriggerContext {
  int rank = -1;                 ///< this agent's rank in its window
  int population = 0;            ///< number of agents in the window
  std::int64_t iteration = 0;    ///< the trainer's iteration passed to step()
  std::int64_t step = 0;         ///< number of step() calls so far, this one included
  std::int64_t age = 0;          ///< steps since (re)birth, this one included
  std::int64_t max_age = 0;      ///< the drawn maximum age in force
  double metric = 0.0;           ///< the metric passed to step()
  std::uint64_t generation = 0;  ///< times reborn
};

/// A custom death predicate: returns true when the agent should die now.
using CustomTrigger = std::function<bool(const TriggerContext&)>;

/// The composable death triggers, with warm-up and cooldown. Any enabled trigger that fires
/// kills; the reported reason is the first that fired in the order age, threshold,
/// worst_fraction, custom.
struct TriggerOptions {
  AgeTrigger age{};                       ///< maximum-age trigger
  ThresholdTrigger threshold{};           ///< metric threshold trigger
  WorstFractionTrigger worst_fraction{};  ///< population-rank trigger (reads rosters)
  CustomTrigger custom{};                 ///< enabled when set
  std::int64_t warmup = 0;                ///< no deaths during the first @c warmup steps, >= 0
  std::int64_t cooldown = 0;  ///< no death within @c cooldown steps after a rebirth, >= 0
};

}  // namespace paramwin
