#pragma once
/// @file policy.hpp
/// Policy, the MPI-free decision engine an Agent drives (who dies, who donates, with which
/// weights, from seeded per-agent streams), and the donor selection helpers it is built
/// from, usable on their own with rosters from ParameterWindow::roster_all().

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "paramwin/agent_kinds.hpp"
#include "paramwin/agent_options.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/roster.hpp"

namespace paramwin {

namespace detail {
class Pb2Explorer;  // src/decision/pb2.hpp: PB2's state, private to the library
}  // namespace detail

/// Rank of each agent that may donate to @p self: published (version > 0), not mid-rebirth,
/// not left, not paused, same fingerprint as @p fingerprint, not @p self, and — when
/// @p max_staleness_seconds > 0 — published at most that long before @p now (MPI_Wtime
/// seconds, as RosterEntry::publish_time). Sorted by rank.
[[nodiscard]] std::vector<int> eligible_donors(std::span<const RosterEntry> rosters, int self,
                                               std::uint64_t fingerprint,
                                               double max_staleness_seconds = 0.0,
                                               double now = 0.0);

/// Seconds between @p entry's latest publish and @p now (0 when it never published).
[[nodiscard]] double staleness_seconds(const RosterEntry& entry, double now) noexcept;

/// How many agents a quantile of @p fraction holds among @p n ranked agents, at either end:
/// ceil(fraction * n), capped at n / 2 (floor), as Ray Tune's PBT counts them; 0 when
/// n < 2 or fraction is 0. E.g. fraction 0.25: n = 2, 3, 4 → 1; n = 5..8 → 2. InvalidArgument
/// for a fraction outside [0, 1].
[[nodiscard]] std::size_t quantile_count(std::size_t n, double fraction);

/// The worst quantile_count(n, @p fraction) of the n ranked agents, worst first. Ranked:
/// state active or rebirth (a dying agent still counts with its last metric; fresh, left and
/// paused agents do not, nor agents whose roster read did not answer), same @p fingerprint;
/// @p self is ranked with @p own_metric whatever its roster says. Ties: the higher rank is
/// worse; NaN is worst.
[[nodiscard]] std::vector<int> worst_ranks(std::span<const RosterEntry> rosters, int self,
                                           double own_metric, std::uint64_t fingerprint,
                                           MetricDirection direction, double fraction);

/// The best quantile_count(n, @p fraction) of the n agents worst_ranks() ranks (the same
/// ranking, @p self with @p own_metric), best first: the top quantile of truncation
/// selection. May hold @p self.
[[nodiscard]] std::vector<int> best_ranks(std::span<const RosterEntry> rosters, int self,
                                          double own_metric, std::uint64_t fingerprint,
                                          MetricDirection direction, double fraction);

/// What rank_at_same_iteration() found.
struct SameIterationRank {
  bool worst = false;         ///< @p self is in the worst quantile
  std::size_t ranked = 0;     ///< agents ranked, @p self included
  std::size_t worse = 0;      ///< ranked agents worse than @p self
  std::size_t count = 0;      ///< quantile_count(ranked, fraction)
  std::size_t ahead = 0;      ///< of the ranked, compared by their latest metric (> 1 report ahead)
  std::size_t unmatched = 0;  ///< left out: behind every report in @p own_reports
};

/// The worst-fraction check of WorstFractionTrigger::same_iteration: @p self is ranked with
/// each other agent (the agents worst_ranks() ranks) at one iteration c, the latest both have
/// reported. The other's report: its roster's latest when its iteration is at most
/// @p self's latest, else its previous report (RosterEntry::previous) when that one is; an
/// agent further ahead is compared by its latest metric with @p self's latest. @p self's
/// report at c: the latest of @p own_reports (ascending iterations, the last one now) at an
/// iteration <= c; an agent behind all of them is not ranked (unmatched). @p self is worst
/// when fewer than quantile_count(ranked, @p fraction) ranked agents are worse (ties: the
/// higher rank is worse; NaN is worst), the same rule as worst_ranks(). InvalidArgument for
/// empty @p own_reports, iterations not ascending, or a fraction outside [0, 1].
[[nodiscard]] SameIterationRank rank_at_same_iteration(std::span<const RosterEntry> rosters,
                                                       int self,
                                                       std::span<const MetricReport> own_reports,
                                                       std::uint64_t fingerprint,
                                                       MetricDirection direction, double fraction);

/// The top quantile of the same ranking as rank_at_same_iteration(), best first: every agent
/// it ranks ordered by its lead over @p self at their common iteration (its metric there
/// against @p self's there, in @p direction; @p self leads itself by 0; NaN is worse than any
/// number; equal leads: the lower rank first), the first quantile_count(ranked, @p fraction).
/// What truncation selection draws from with WorstFractionTrigger::same_iteration. May hold
/// @p self. InvalidArgument as rank_at_same_iteration().
[[nodiscard]] std::vector<int> best_at_same_iteration(std::span<const RosterEntry> rosters,
                                                      int self,
                                                      std::span<const MetricReport> own_reports,
                                                      std::uint64_t fingerprint,
                                                      MetricDirection direction, double fraction);

/// Positive weights summing to 1 for donors given best first (by @p metrics), larger for
/// better donors (equal metrics: equal weights). NaN metrics count as the worst.
[[nodiscard]] std::vector<double> fitness_weights(std::span<const double> metrics,
                                                  MetricDirection direction,
                                                  FitnessWeighting weighting, double temperature);

/// The donors a selection chose, best first for fittest/tournament (and for weighted/best
/// mixing, which sort them), with the roster metrics the choice was based on.
struct DonorChoice {
  std::vector<int> ranks{};       ///< chosen donors
  std::vector<double> metrics{};  ///< their roster metrics, same order
  std::size_t candidates = 0;     ///< eligible agents there were
  std::string shortfall{};        ///< why fewer than k were chosen ("" when k were)
};

/// The MPI-free decision engine of one agent: age, warm-up, cooldown, triggers, donor
/// selection and mixing weights, all from seeded per-agent streams. Agent drives it; tests
/// and custom loops may use it directly with rosters from ParameterWindow::roster_all().
class Policy {
 public:
  /// Validates @p options (InvalidArgument) and draws the first maximum age.
  Policy(AgentOptions options, int rank, int population);
  /// Policies are values: a copy copies everything, PB2's observations included.
  Policy(const Policy& other);
  /// Copies @p other (PB2's observations included).
  Policy& operator=(const Policy& other);
  /// Takes @p other's state; @p other is left valid only to be assigned or destroyed.
  Policy(Policy&& other) noexcept;
  /// Takes @p other's state; @p other is left valid only to be assigned or destroyed.
  Policy& operator=(Policy&& other) noexcept;
  /// Destroys the policy (and its PB2 state).
  ~Policy();

  /// Reads every agent's roster when the worst-fraction trigger needs it.
  using RosterReader = std::function<std::vector<RosterEntry>()>;

  /// Feeds explore.kind pb2 one roster read (every agent's metric, iteration, generation and
  /// hyperparameters; see docs/agent.md, "Explore: PB2"); no-op for other kinds. The agents
  /// call it with every roster read of a step (worst-fraction checks, donor selection); a
  /// custom loop calls it with its own reads. @p fingerprint is this agent's.
  void observe(std::span<const RosterEntry> rosters, std::uint64_t fingerprint);
  /// Tells explore.kind pb2 that this agent was just reborn (call after reborn()) at trainer
  /// iteration @p iteration with the values @p hyper, starting from a copy of a donor whose
  /// roster metric was @p metric: its next interval starts there. No-op for other kinds.
  void observe_rebirth(std::int64_t iteration, double metric, const Hyperparameters& hyper);
  /// PB2 observations held now (0 for other kinds).
  [[nodiscard]] std::size_t pb2_observations() const noexcept;
  /// What the latest exploit_explore's explore did, for the event's note: PB2's GP path
  /// (its kernel and beta) or its fallback to perturb/resample and why; empty for pbt.
  [[nodiscard]] const std::string& explore_note() const noexcept { return explore_note_; }

  /// Advances one step (age and step count) and returns why this agent dies now, or none.
  /// A death stays pending (returned again) until reborn() is called. If the custom trigger
  /// or @p rosters throws, the step is undone (age and step count unchanged) and the
  /// exception propagates. @p rosters is called
  /// only on worst-fraction check steps; @p fingerprint is this agent's roster fingerprint.
  [[nodiscard]] DeathReason decide(std::int64_t iteration, double metric,
                                   const RosterReader& rosters, std::uint64_t fingerprint);

  /// Chooses donors among @p rosters per the selection options. Fewer than k eligible:
  /// error → DonorError; clamp → all there are; defer → empty ranks. Never picks self.
  /// @p exclude lists ranks to leave out (e.g. a donor whose pull just failed). @p now
  /// (MPI_Wtime seconds) judges staleness when selection.max_staleness_seconds > 0.
  /// Truncation: the eligible agents of the top quantile (best_ranks(), this agent ranked
  /// with its roster metric; with worst_fraction.same_iteration, best_at_same_iteration()
  /// with reports(), once decide() kept one); custom: the user's function (InvalidArgument when it
  /// returns a rank that is no candidate, a rank twice, or more than wanted).
  [[nodiscard]] DonorChoice select_donors(std::span<const RosterEntry> rosters,
                                          std::uint64_t fingerprint,
                                          std::span<const int> exclude = {}, double now = 0.0);

  /// Mixing weights for donors with @p metrics_best_first (explicit weights, truncated and
  /// renormalised when clamped, or fitness weights). Positive, summing to 1.
  [[nodiscard]] std::vector<double> mixing_weights(
      std::span<const double> metrics_best_first) const;

  /// Marks the rebirth done: age 0, generation + 1, new maximum age, cooldown starts.
  void reborn();
  /// Makes the next decide() return DeathReason::joined whatever the warm-up and cooldown
  /// (an agent that takes a dead member's slot starts from live donors, ElasticAgent).
  void join() noexcept { pending_ = DeathReason::joined; }
  /// A seed for the reset callback, from its own per-agent stream.
  [[nodiscard]] std::uint64_t next_reset_seed();
  /// The rebirth's hyperparameters: inherit from @p donors (best first, normalised
  /// @p weights) per options().explore, explore them from the agent's explore stream (kind
  /// pb2: GP-UCB when enough observations exist, else perturb / resample), then the user's
  /// explore function. Call before reborn() (the context's generation is the
  /// one after the rebirth). @p own is returned unchanged when no hyperparameter is declared.
  [[nodiscard]] Hyperparameters exploit_explore(const Hyperparameters& own,
                                                std::span<const Hyperparameters> donors,
                                                std::span<const double> weights);

  [[nodiscard]] const AgentOptions& options() const noexcept { return options_; }  ///< options
  [[nodiscard]] int rank() const noexcept { return rank_; }                        ///< agent's rank
  [[nodiscard]] int population() const noexcept { return population_; }     ///< agents in window
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }      ///< decide() calls
  [[nodiscard]] std::int64_t age() const noexcept { return age_; }          ///< steps since birth
  [[nodiscard]] std::int64_t max_age() const noexcept { return max_age_; }  ///< drawn max age
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }  ///< rebirths
  [[nodiscard]] DeathReason pending() const noexcept { return pending_; }  ///< death awaiting
  /// worst_fraction.same_iteration: this agent's reports since its latest rebirth that
  /// decide() keeps (ascending iterations, the latest last), at most kReportHistory.
  [[nodiscard]] const std::vector<MetricReport>& reports() const noexcept { return reports_; }
  /// How many of its own reports a policy keeps for worst_fraction.same_iteration: an agent
  /// further behind is not ranked with it.
  static constexpr std::size_t kReportHistory = 64;
  /// True when a death is allowed at the current step (past warm-up and cooldown).
  [[nodiscard]] bool death_allowed() const noexcept;

  /// Everything a Policy changes as it runs (population checkpoints, docs/checkpoints.md).
  /// PB2's observations are not part of it: a restored agent gathers them again.
  struct State {
    std::string streams{};          ///< the four random streams as std::mt19937_64 writes them
    std::int64_t steps = 0;         ///< decide() calls
    std::int64_t age = 0;           ///< steps since (re)birth
    std::int64_t max_age = 0;       ///< drawn maximum age
    std::int64_t rebirth_step = 0;  ///< steps at the latest rebirth
    std::uint64_t generation = 0;   ///< rebirths
    DeathReason pending = DeathReason::none;  ///< death awaiting a rebirth
  };
  /// The policy's state now.
  [[nodiscard]] State state() const;
  /// Continues from @p state (the options, rank and population stay this policy's);
  /// InvalidArgument (and nothing changed) when its streams do not parse or a count is out
  /// of range.
  void restore(const State& state);

 private:
  [[nodiscard]] std::int64_t draw_max_age();
  /// SelectionKind::custom: calls the user's function on @p eligible (want of them) and
  /// checks what it returns.
  [[nodiscard]] std::vector<int> custom_choice(std::vector<int> eligible, std::size_t want,
                                               const std::function<double(int)>& metric_of,
                                               const std::function<bool(int, int)>& better);
  /// worst_fraction.same_iteration: keeps (@p iteration, @p metric) in reports_.
  void record_report(std::int64_t iteration, double metric);
  [[nodiscard]] DeathReason decide_now(std::int64_t iteration, double metric,
                                       const RosterReader& rosters, std::uint64_t fingerprint);

  // Every member is copied by Policy(const Policy&) (src/decision/policy.cpp): a new member
  // goes there too.
  AgentOptions options_;
  int rank_;
  int population_;
  std::mt19937_64 age_rng_;
  std::mt19937_64 select_rng_;
  std::mt19937_64 reset_rng_;
  std::mt19937_64 explore_rng_;
  std::int64_t steps_ = 0;
  std::int64_t age_ = 0;
  std::int64_t max_age_ = 0;
  std::int64_t rebirth_step_ = 0;
  std::uint64_t generation_ = 0;
  DeathReason pending_ = DeathReason::none;
  // worst_fraction.same_iteration: this agent's reports since its latest rebirth, ascending
  // iterations, at most kReportHistory (the oldest dropped first).
  std::vector<MetricReport> reports_{};
  std::unique_ptr<detail::Pb2Explorer> pb2_;  // explore.kind pb2 only
  std::string explore_note_{};
};

}  // namespace paramwin
