#pragma once
/// @file agent_options.hpp
/// Everything an agent is configured with (AgentOptions: triggers, selection, mixing,
/// explore, publishing, reads, serving, callbacks, checkpoints), its validation, its string
/// form, and the table of its option keys.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/agent_kinds.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/pull.hpp"

namespace paramwin {

class Layout;
class LayerRef;
struct StepEvent;

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
  /// ranking (one MPI_Allgather of their metrics) and the worst are reborn from it before
  /// any agent goes on (a barrier after the pulls), so that runs with the same seeds make
  /// the same decisions. Collective: every agent must call step() the same number of times
  /// (an agent that leaves early blocks the others at the next interval); only this trigger
  /// may be on; one-rank Agents only (GroupAgent refuses it). See docs/agent.md, "PBT".
  bool synchronous = false;
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

  /// Population-based training as Ray Tune's PopulationBasedTraining does it by default:
  /// age trigger off, worst-fraction trigger on (fraction 0.25 = quantile_fraction, every 10
  /// steps = perturbation_interval, asynchronous), truncation selection of one donor from
  /// the top quantile (the same 0.25), copy mixing (MixingKind::best), hyperparameters
  /// inherited from the donor and explored (resample probability 0.25, factors 0.8 / 1.2,
  /// no clamp). Everything else is the default; override fields after. The string form:
  /// "preset=pbt" (docs/agent.md).
  [[nodiscard]] static AgentOptions pbt();
};

/// Checks @p options for a population of @p population agents; throws InvalidArgument
/// naming the first bad field (lo > hi, negative ages, fraction outside [0, 1], k <= 0,
/// k > population - 1 without clamping, weights not matching k, momentum outside [0, 1),
/// reset without a callback, negative publish cadence, bad explore options, ...).
void validate(const AgentOptions& options, int population);
/// The quantile truncation selection draws donors from: selection.quantile, or the
/// worst-fraction trigger's fraction when that is 0.
[[nodiscard]] double selection_quantile(const AgentOptions& options) noexcept;
/// The landing an agent configured with @p options gives its rebirth pulls (resolves
/// ReadOptions::landing = automatic, see there).
[[nodiscard]] Landing rebirth_landing(const AgentOptions& options) noexcept;
/// Same, and checks the explore rules against @p layout's hyperparameters.
void validate(const AgentOptions& options, int population, const Layout& layout);

/// Builds options from string key/value pairs (see docs/agent.md for the keys), e.g.
/// {"triggers", "age,worst_fraction"}, {"age", "50..150"}, {"selection", "tournament"}.
/// A "preset" key is applied first, whatever its place; the other keys override it.
/// Unknown keys, unknown policy names and malformed numbers throw InvalidArgument.
[[nodiscard]] AgentOptions parse_agent_options(
    const std::map<std::string, std::string, std::less<>>& config);
/// Same, from text "key=value" tokens separated by whitespace, ';' or newlines.
[[nodiscard]] AgentOptions parse_agent_options(std::string_view text);

/// One key of the string form of AgentOptions.
struct OptionKey {
  std::string_view key{};      ///< e.g. "selection"; "explore.NAME" is a prefix taking a name
  std::string_view aliases{};  ///< other spellings, comma separated (may be empty)
  std::string_view value{};    ///< what the value looks like ("integer", "defer|clamp|error")
  std::string_view doc{};      ///< one line: what it sets
};
/// Every key parse_agent_options accepts, in docs/agent.md's order (the same table drives
/// the parser, its "unknown option" message and the Python binding).
[[nodiscard]] std::span<const OptionKey> agent_option_keys() noexcept;
/// Sets the option @p key (a key or alias of agent_option_keys()) of @p options from its
/// string form @p value; InvalidArgument for an unknown key or a malformed value. The key
/// "preset" replaces every field of @p options (callbacks included) with the preset's: set it
/// first.
void set_agent_option(AgentOptions& options, std::string_view key, std::string_view value);

}  // namespace paramwin
