#pragma once
/// @file policy.hpp
/// Population policies: who dies (triggers), who donates (selection), how donors are mixed,
/// the options that configure them (also from strings), and Policy, the MPI-free decision
/// engine an Agent drives.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/checkpoint.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin {

struct StepEvent;

/// Which way the fitness metric improves.
enum class MetricDirection : std::uint8_t {
  lower_is_better = 0,   ///< losses
  higher_is_better = 1,  ///< rewards, accuracies
};

/// Why an agent died (none: it did not).
enum class DeathReason : std::uint8_t {
  none = 0,            ///< no death
  age = 1,             ///< reached its drawn maximum age
  threshold = 2,       ///< metric worse than the threshold
  worst_fraction = 3,  ///< among the worst fraction of the population
  custom = 4,          ///< the user's predicate said so
};

/// How donors are chosen among the eligible agents.
enum class SelectionKind : std::uint8_t {
  uniform = 0,     ///< k distinct donors uniformly at random
  fittest = 1,     ///< the k best by roster metric
  tournament = 2,  ///< k tournaments of size t, each won by its best entrant
};

/// How the donors' parameters become the reborn agent's parameters.
enum class MixingKind : std::uint8_t {
  mean = 0,      ///< arithmetic mean of the donors
  weighted = 1,  ///< weighted mean, better donors weigh more (explicit or fitness weights)
  best = 2,      ///< copy of the best selected donor
  reset = 3,     ///< no donors: the user's reset callback re-initialises the parameters
};

/// How MixingKind::weighted derives weights from donor metrics (when none are given).
enum class FitnessWeighting : std::uint8_t {
  rank = 0,     ///< best of n donors weighs n, next n-1, ..., worst 1 (ties share the mean)
  softmax = 1,  ///< exp(score / temperature), score = -metric (lower) or metric (higher)
};

/// What to do when fewer eligible donors than k exist at the moment of a death.
enum class Shortfall : std::uint8_t {
  defer = 0,  ///< keep the death pending and retry on the next step (no rebirth now)
  clamp = 1,  ///< use the eligible donors there are (at least one; none: defer)
  error = 2,  ///< throw DonorError naming the candidates and why the others were skipped
};

/// What a paused agent (AgentInterface::pause) does with a death its triggers decide.
enum class PausedDeaths : std::uint8_t {
  defer = 0,   ///< the death stays pending (StepEvent::deferred, note "paused") until resumed
  honour = 1,  ///< reborn as usual (the pull happens); the republish waits for the resume
};

/// Lower-case name of @p direction ("lower_is_better", "higher_is_better").
[[nodiscard]] std::string_view direction_name(MetricDirection direction) noexcept;
/// Lower-case name of @p reason ("none", "age", "threshold", "worst_fraction", "custom").
[[nodiscard]] std::string_view reason_name(DeathReason reason) noexcept;
/// Lower-case name of @p kind ("uniform", "fittest", "tournament").
[[nodiscard]] std::string_view selection_name(SelectionKind kind) noexcept;
/// Lower-case name of @p kind ("mean", "weighted", "best", "reset").
[[nodiscard]] std::string_view mixing_name(MixingKind kind) noexcept;
/// Lower-case name of @p weighting ("rank", "softmax").
[[nodiscard]] std::string_view weighting_name(FitnessWeighting weighting) noexcept;
/// Lower-case name of @p shortfall ("defer", "clamp", "error").
[[nodiscard]] std::string_view shortfall_name(Shortfall shortfall) noexcept;
/// Lower-case name of @p paused_deaths ("defer", "honour").
[[nodiscard]] std::string_view paused_deaths_name(PausedDeaths paused_deaths) noexcept;

/// Parses "lower_is_better" (also "lower", "min", "loss") or "higher_is_better" (also
/// "higher", "max", "reward"); throws InvalidArgument listing the valid names.
[[nodiscard]] MetricDirection parse_direction(std::string_view name);
/// Parses a trigger name ("age", "threshold", "worst_fraction", "custom"); throws
/// InvalidArgument listing the valid names.
[[nodiscard]] DeathReason parse_trigger(std::string_view name);
/// Parses "uniform", "fittest" or "tournament"; throws InvalidArgument otherwise.
[[nodiscard]] SelectionKind parse_selection(std::string_view name);
/// Parses "mean", "weighted", "best" or "reset"; throws InvalidArgument otherwise.
[[nodiscard]] MixingKind parse_mixing(std::string_view name);
/// Parses "rank" or "softmax"; throws InvalidArgument otherwise.
[[nodiscard]] FitnessWeighting parse_weighting(std::string_view name);
/// Parses "defer", "clamp" or "error"; throws InvalidArgument otherwise.
[[nodiscard]] Shortfall parse_shortfall(std::string_view name);
/// Parses "defer" or "honour" (also "honor"); throws InvalidArgument otherwise.
[[nodiscard]] PausedDeaths parse_paused_deaths(std::string_view name);

/// True when metric @p a is strictly better than @p b. NaN is worse than every number.
[[nodiscard]] bool is_better(MetricDirection direction, double a, double b) noexcept;

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

/// Worst-fraction trigger: every @c every steps the agent reads all rosters one-sidedly and
/// dies if it is among the floor(fraction * n) worst of the n ranked agents.
struct WorstFractionTrigger {
  bool enabled = false;     ///< off by default
  double fraction = 0.2;    ///< in [0, 1]
  std::int64_t every = 10;  ///< check cadence in steps, >= 1
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

/// Default SelectionOptions::max_staleness_seconds: far longer than the gap between two
/// publishes of a trainer that publishes every step, short enough that a dead agent's last
/// snapshot stops spreading within a minute.
inline constexpr double kDefaultMaxStalenessSeconds = 60.0;

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
};

/// How donors are mixed.
struct MixingOptions {
  MixingKind kind = MixingKind::mean;                   ///< mixing rule
  FitnessWeighting weighting = FitnessWeighting::rank;  ///< for weighted without weights
  double temperature = 1.0;                             ///< softmax temperature, > 0
  /// Explicit weights for MixingKind::weighted, applied to the donors sorted best first:
  /// exactly k finite values > 0 with a finite sum (normalised by the pull); empty: fitness
  /// weights.
  std::vector<double> weights{};
  double momentum = 0.0;  ///< new = momentum * own + (1 - momentum) * mix, in [0, 1)
  NonFinitePolicy non_finite = NonFinitePolicy::fail;  ///< donors holding NaN/inf
};

/// Publishing cadence. The agent publishes on its first step, right after every rebirth,
/// after a skipped publish, and whenever either condition below is met. With both
/// conditions off (every = 0 and interval_ms = 0) it publishes only when the caller calls
/// publish(), and after rebirths (never on the first step by itself). A paused agent
/// ignores the cadence (see AgentInterface::pause).
struct PublishOptions {
  std::int64_t every = 1;    ///< publish every N steps (0: no step-based publishing)
  double interval_ms = 0.0;  ///< publish when this many ms passed since the last (0: off)
  /// After a rebirth, a publish that a reader's pin skips is retried (letting MPI progress
  /// between tries) for up to this many ms, so that the reborn parameters replace the dead
  /// ones in the roster at once; past it the publish stays pending for the next step.
  /// 0: one try. Publishes outside a rebirth never wait.
  double rebirth_wait_ms = 50.0;
};

/// How an agent reads other agents inside step(): the bound on its waiting and the pull's
/// read settings. Same-node (shared-memory) reads never wait; these bound RMA reads.
struct ReadOptions {
  /// Bound, in seconds, on the time one step() waits for other agents over RMA: the roster
  /// reads and every pull attempt of the step share it (0: no bound). A rebirth that cannot
  /// finish within it is a deferred death with the parameters unchanged (its note says
  /// "deadline"); the death stays pending for the next step.
  double timeout_seconds = 0.0;
  /// Bound on one roster read over RMA (every agent's, at a death or a worst-fraction
  /// check), within timeout_seconds; agents that have not answered by then are neither
  /// eligible as donors nor ranked in that step (0: only timeout_seconds bounds it).
  double roster_timeout_seconds = 0.0;
  ReadMode read_mode = ReadMode::automatic;  ///< PullOptions::read_mode of the rebirth's pulls
  unsigned optimistic_attempts = 4;          ///< PullOptions::optimistic_attempts
  std::size_t chunk_bytes = 0;  ///< PullOptions::chunk_bytes (0: library default; else >= 256)
  /// PullOptions::landing of the rebirth's pulls. automatic: Landing::direct when a pull
  /// that fails midway cannot leave the agent training on partly written parameters, i.e.
  /// mixing.momentum is 0 (a later pull rewrites every element) and AgentOptions::reset is
  /// set (the way out when no donor can be read); else transactional. direct: needs a reset
  /// callback. After a PartialPullError the agent tries other donors (momentum 0) and, if no
  /// pull succeeds, re-initialises the parameters with the reset callback (a rebirth by
  /// reset, its note says "partial pull"): it never trains on partly written parameters.
  Landing landing = Landing::automatic;
};

/// How an agent serves the agents that read it over RMA (on MPICH's ch4:ucx an MPI_Get is
/// served only while its target is inside MPI). See docs/rma-semantics.md.
struct ServeOptions {
  /// step() lets MPI progress once (one MPI_Iprobe) when some rank reads this agent over
  /// RMA (ParameterWindow::has_rma_readers()), so a trainer loop without other MPI calls
  /// still serves its readers once per step.
  bool progress_in_step = true;
  /// Start the window's progress thread (WindowOptions::progress_thread): readers are served
  /// while the trainer computes, at the price of a thread polling MPI every
  /// progress_interval_us (needs MPI_Init_thread with MPI_THREAD_MULTIPLE).
  bool progress_thread = false;
  unsigned progress_interval_us = 200;  ///< WindowOptions::progress_interval_us of that thread
};

/// Called after a rebirth wrote the new parameters and before they are republished: reset
/// optimizer state, learning-rate schedules. @p event carries the hyperparameters before
/// (StepEvent::hyper_before) and after (StepEvent::hyper) the rebirth's exploit and explore;
/// apply the latter to the trainer. May modify @p params.
using RebirthCallback =
    std::function<void(const StepEvent& event, std::span<const LayerRef> params)>;

/// Re-initialises @p params for MixingKind::reset; @p seed comes from the agent's stream.
using ResetCallback = std::function<void(std::span<const LayerRef> params, std::uint64_t seed)>;

/// Called by step() and publish() at most once per call, right before the agent first reads
/// or writes the caller's parameters (a publish, a pull, the reset callback): a step that
/// neither publishes nor attempts a rebirth never calls it. For callers whose parameters are
/// host copies of memory the agent cannot read (e.g. the LibTorch adapter's copies of GPU
/// tensors): fill the copies here, so that steps that move no data copy nothing. The
/// parameters passed to step() must already be valid memory of the right size; only their
/// values may be stale until this is called. If it throws, the call throws (see step()).
using PrepareParamsCallback = std::function<void()>;

/// Everything an Agent is configured with. Checked by validate() at construction.
struct AgentOptions {
  std::uint64_t seed = 0;  ///< with the rank, seeds every per-agent random stream
  MetricDirection direction = MetricDirection::lower_is_better;  ///< metric direction
  TriggerOptions triggers{};                                     ///< who dies
  SelectionOptions selection{};                                  ///< who donates
  MixingOptions mixing{};                                        ///< how donors are mixed
  ExploreOptions explore{};      ///< how hyperparameters are inherited and explored on a rebirth
  PublishOptions publish{};      ///< when parameters are published
  ReadOptions read{};            ///< how step() reads others (deadline, read mode, chunks)
  ServeOptions serve{};          ///< how this agent serves its RMA readers (progress)
  RebirthCallback on_rebirth{};  ///< optional rebirth notification
  ResetCallback reset{};         ///< required by MixingKind::reset
  /// Optional: fills the parameters' values on demand (see PrepareParamsCallback).
  PrepareParamsCallback prepare_params{};
  /// Deaths decided while the agent is paused: kept pending until resume() (defer), or
  /// carried out at once with the republish held until resume() (honour).
  PausedDeaths paused_deaths = PausedDeaths::defer;
  /// Path of the JSON-lines event log ("{rank}" is replaced by the rank); empty: no log.
  std::string event_log{};
  /// Checkpoints saved by step() (docs/checkpoints.md); off by default.
  CheckpointOptions checkpoint{};
};

/// Checks @p options for a population of @p population agents; throws InvalidArgument
/// naming the first bad field (lo > hi, negative ages, fraction outside [0, 1], k <= 0,
/// k > population - 1 without clamping, weights not matching k, momentum outside [0, 1),
/// reset without a callback, negative publish cadence, bad explore options, ...).
void validate(const AgentOptions& options, int population);
/// The landing an agent configured with @p options gives its rebirth pulls (resolves
/// ReadOptions::landing = automatic, see there).
[[nodiscard]] Landing rebirth_landing(const AgentOptions& options) noexcept;
/// Same, and checks the explore rules against @p layout's hyperparameters.
void validate(const AgentOptions& options, int population, const Layout& layout);

/// Builds options from string key/value pairs (see docs/agent.md for the keys), e.g.
/// {"triggers", "age,worst_fraction"}, {"age", "50..150"}, {"selection", "tournament"}.
/// Unknown keys, unknown policy names and malformed numbers throw InvalidArgument.
[[nodiscard]] AgentOptions parse_agent_options(
    const std::map<std::string, std::string, std::less<>>& config);
/// Same, from text "key=value" tokens separated by whitespace, ';' or newlines.
[[nodiscard]] AgentOptions parse_agent_options(std::string_view text);

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

/// The worst floor(@p fraction * n) of the n ranked agents, worst first. Ranked: state
/// active or rebirth (a dying agent still counts with its last metric; fresh, left and
/// paused agents do not), same @p fingerprint;
/// @p self is ranked with @p own_metric whatever its roster says. Ties: the higher rank is
/// worse; NaN is worst.
[[nodiscard]] std::vector<int> worst_ranks(std::span<const RosterEntry> rosters, int self,
                                           double own_metric, std::uint64_t fingerprint,
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

  /// Reads every agent's roster when the worst-fraction trigger needs it.
  using RosterReader = std::function<std::vector<RosterEntry>()>;

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
  [[nodiscard]] DonorChoice select_donors(std::span<const RosterEntry> rosters,
                                          std::uint64_t fingerprint,
                                          std::span<const int> exclude = {}, double now = 0.0);

  /// Mixing weights for donors with @p metrics_best_first (explicit weights, truncated and
  /// renormalised when clamped, or fitness weights). Positive, summing to 1.
  [[nodiscard]] std::vector<double> mixing_weights(
      std::span<const double> metrics_best_first) const;

  /// Marks the rebirth done: age 0, generation + 1, new maximum age, cooldown starts.
  void reborn();
  /// A seed for the reset callback, from its own per-agent stream.
  [[nodiscard]] std::uint64_t next_reset_seed();
  /// The rebirth's hyperparameters: inherit from @p donors (best first, normalised
  /// @p weights) per options().explore, explore them from the agent's explore stream, then
  /// the user's explore function. Call before reborn() (the context's generation is the
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
  /// True when a death is allowed at the current step (past warm-up and cooldown).
  [[nodiscard]] bool death_allowed() const noexcept;

  /// Everything a Policy changes as it runs (population checkpoints, docs/checkpoints.md).
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
  [[nodiscard]] DeathReason decide_now(std::int64_t iteration, double metric,
                                       const RosterReader& rosters, std::uint64_t fingerprint);

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
};

}  // namespace paramwin
