#pragma once
/// @file agent_options.hpp
/// Everything an agent is configured with (AgentOptions: triggers (triggers.hpp), selection
/// (selection_options.hpp), mixing, explore, publishing, reads, serving, callbacks,
/// checkpoints), its validation, its string form, and the table of its option keys.

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
#include "paramwin/selection_options.hpp"
#include "paramwin/triggers.hpp"

namespace paramwin {

class Layout;
class LayerRef;
struct StepEvent;

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

/// Publishing cadence. The agent publishes on its first step, right after every rebirth (or
/// in the step after it: defer_rebirth), after a skipped publish, and whenever either
/// condition below is met. With both conditions off (every = 0 and interval_ms = 0) it
/// publishes only when the caller calls publish(), and after rebirths (never on the first
/// step by itself). A paused agent ignores the cadence (see AgentInterface::pause).
struct PublishOptions {
  std::int64_t every = 1;    ///< publish every N steps (0: no step-based publishing)
  double interval_ms = 0.0;  ///< publish when this many ms passed since the last (0: off)
  /// After a rebirth, a publish that a reader's pin skips is retried (letting MPI progress
  /// between tries) for up to this many ms, so that the reborn parameters replace the dead
  /// ones in the roster at once; past it the publish stays pending for the next step.
  /// 0: one try. Other publishes never wait (the deferred one of defer_rebirth, the
  /// rebirth's own, does).
  double rebirth_wait_ms = 50.0;
  /// Leave the rebirth's republish to the agent's next step (which publishes whatever the
  /// cadence says): the rebirth's step then moves the donors' parameters (and inherited
  /// optimizer state) once, into the caller's memory, instead of twice — the pull, and the
  /// copy into the agent's own slot, which its next training step would overwrite anyway
  /// with every = 1. Until that publish the agent is no donor (mid-rebirth in the roster);
  /// it is still ranked with the metric it reported. false: the rebirth's step publishes.
  bool defer_rebirth = false;
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
/// the caller's parameters (a publish, a pull with MixingOptions::momentum, any pull of a
/// device window, the reset callback): a step that neither publishes nor attempts a rebirth
/// never calls it, nor does a rebirth whose pull overwrites the parameters whole (no
/// momentum, host window), its republish included: they then hold the mix, newer than the
/// caller's copies (a failed pull leaves them to the publish). For callers whose parameters are
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
