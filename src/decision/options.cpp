// Validation of AgentOptions (the string form is option_keys.cpp).
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

#include "paramwin/error.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/policy.hpp"

namespace paramwin {

namespace {

[[noreturn]] void bad(const std::string& what) {
  throw InvalidArgument("paramwin: AgentOptions: " + what);
}

std::string num(double v) {
  std::string s = std::to_string(v);
  return s;
}

/// Rejects a @p value that is NaN, infinite or negative, naming @p field.
void check_non_negative(const char* field, double value) {
  if (!(value >= 0.0) || !std::isfinite(value)) {
    bad(std::string(field) + " must be finite and >= 0, got " + num(value));
  }
}

bool any_trigger(const TriggerOptions& t) {
  return t.age.enabled || t.threshold.enabled || t.worst_fraction.enabled ||
         static_cast<bool>(t.custom);
}

// Explicit mixing weights: only with 'weighted', one per donor, finite and > 0, and a finite
// sum (a sum that overflows would normalise every weight to 0).
void check_mixing_weights(const MixingOptions& m, int k) {
  if (m.weights.empty()) return;
  if (m.kind != MixingKind::weighted) {
    bad("mixing.weights given but mixing is '" + std::string(mixing_name(m.kind)) +
        "' (weights apply to 'weighted' only)");
  }
  if (m.weights.size() != static_cast<std::size_t>(k)) {
    bad("mixing.weights has " + std::to_string(m.weights.size()) +
        " entries but selection.k = " + std::to_string(k) + " donors");
  }
  for (std::size_t i = 0; i < m.weights.size(); ++i) {
    if (!(m.weights[i] > 0.0) || !std::isfinite(m.weights[i])) {
      bad("mixing.weights[" + std::to_string(i) + "] = " + num(m.weights[i]) +
          " (weights must be finite and > 0)");
    }
  }
  double sum = 0.0;
  for (const double w : m.weights) sum += w;
  if (!std::isfinite(sum)) {
    // Every prefix sums to less, so a clamped selection (fewer donors) cannot overflow.
    bad("mixing.weights sum to infinity (their sum overflows a double); scale them down: "
        "only their ratios matter");
  }
}

}  // namespace

namespace {

void check_triggers(const TriggerOptions& t) {
  if (t.age.lo < 1 || t.age.hi < 1) {
    bad("triggers.age: ages must be >= 1, got [" + std::to_string(t.age.lo) + ", " +
        std::to_string(t.age.hi) + "]");
  }
  if (t.age.lo > t.age.hi) {
    bad("triggers.age: lo " + std::to_string(t.age.lo) + " > hi " + std::to_string(t.age.hi));
  }
  if (t.threshold.enabled && std::isnan(t.threshold.value)) {
    bad("triggers.threshold.value is NaN");
  }
  if (!(t.worst_fraction.fraction >= 0.0 && t.worst_fraction.fraction <= 1.0)) {
    bad("triggers.worst_fraction.fraction " + num(t.worst_fraction.fraction) +
        " is outside [0, 1]");
  }
  if (t.worst_fraction.every < 1) {
    bad("triggers.worst_fraction.every must be >= 1, got " +
        std::to_string(t.worst_fraction.every));
  }
  if (t.warmup < 0) {
    bad("triggers.warmup must be >= 0, got " + std::to_string(t.warmup));
  }
  if (t.cooldown < 0) {
    bad("triggers.cooldown must be >= 0, got " + std::to_string(t.cooldown));
  }
}

// A worst-fraction trigger that can never fire is refused rather than left silent.
void check_worst_fraction(const TriggerOptions& t, int population) {
  const WorstFractionTrigger& w = t.worst_fraction;
  if (w.enabled && w.fraction == 0.0) {
    bad("triggers.worst_fraction is enabled with fraction 0: it can never fire (the worst "
        "ceil(0 * n) agents are none); give a fraction > 0 or disable it");
  }
  if (w.enabled && population < 2) {
    bad("triggers.worst_fraction is enabled in a population of " + std::to_string(population) +
        ": it ranks at least 2 agents, so it can never fire");
  }
  if (w.same_iteration && (!w.enabled || w.synchronous)) {
    bad(std::string("triggers.worst_fraction.same_iteration ranks the asynchronous mode's "
                    "worst-fraction checks: ") +
        (w.enabled ? "the synchronous mode already ranks every agent at the same iteration; "
                     "turn one of them off"
                   : "the worst-fraction trigger is not enabled"));
  }
  if (w.synchronous) {
    if (!w.enabled) {
      bad("triggers.worst_fraction.synchronous needs the worst-fraction trigger enabled (its "
          "'every' is the interval the agents agree at)");
    }
    if (t.age.enabled || t.threshold.enabled || t.custom) {
      bad("triggers.worst_fraction.synchronous: only the worst-fraction trigger may be on (age, "
          "threshold and custom deaths would happen between the agreed intervals); disable "
          "the others");
    }
  }
}

void check_selection_mixing(const AgentOptions& o, int population) {
  const SelectionOptions& s = o.selection;
  if (s.k <= 0) {
    bad("selection.k must be >= 1, got " + std::to_string(s.k));
  }
  if (s.tournament_size <= 0) {
    bad("selection.tournament_size must be >= 1, got " + std::to_string(s.tournament_size));
  }
  if (!enum_valid(s.shortfall)) bad("selection.shortfall is out of range");
  if (!enum_valid(s.kind)) bad("selection.kind is out of range");
  check_non_negative("selection.max_staleness_seconds", s.max_staleness_seconds);
  if (!(s.quantile >= 0.0 && s.quantile <= 1.0)) {
    bad("selection.quantile " + num(s.quantile) + " is outside [0, 1]");
  }
  if (s.kind == SelectionKind::custom && !s.custom) {
    bad("selection 'custom' needs a selection function (SelectionOptions::custom)");
  }
  if (s.kind != SelectionKind::custom && s.custom) {
    bad("selection.custom is set but selection is '" + std::string(selection_name(s.kind)) +
        "' (set selection to custom to use it)");
  }

  const MixingOptions& m = o.mixing;
  if (m.kind != MixingKind::reset && any_trigger(o.triggers) && s.shortfall != Shortfall::clamp &&
      s.k > population - 1) {
    bad("selection.k = " + std::to_string(s.k) + " but only " + std::to_string(population - 1) +
        " other agent(s) can donate in a population of " + std::to_string(population) +
        " (lower k, or set selection.shortfall = Shortfall::clamp)");
  }
  if (s.kind == SelectionKind::truncation && m.kind != MixingKind::reset &&
      any_trigger(o.triggers)) {
    const double q = selection_quantile(o);
    if (q == 0.0) {
      bad("selection 'truncation' with quantile 0 (selection.quantile 0 and worst-fraction "
          "fraction 0): the top quantile is empty, no donor could ever be chosen");
    }
    const std::size_t top = quantile_count(static_cast<std::size_t>(population), q);
    if (s.shortfall != Shortfall::clamp && population >= 2 && static_cast<std::size_t>(s.k) > top) {
      bad("selection.k = " + std::to_string(s.k) + " but the top quantile " + num(q) +
          " of a population of " + std::to_string(population) + " holds only " +
          std::to_string(top) +
          " agent(s) (lower k, raise selection.quantile, or set "
          "selection.shortfall = Shortfall::clamp)");
    }
  }
  if (!(m.momentum >= 0.0 && m.momentum < 1.0)) {
    bad("mixing.momentum " + num(m.momentum) + " is outside [0, 1)");
  }
  if (!(m.temperature > 0.0) || !std::isfinite(m.temperature)) {
    bad("mixing.temperature must be finite and > 0, got " + num(m.temperature));
  }
  check_mixing_weights(m, s.k);
  if (m.kind == MixingKind::reset && !o.reset) {
    bad("mixing 'reset' needs a reset callback (AgentOptions::reset)");
  }
  if (!enum_valid(m.non_finite)) bad("mixing.non_finite is out of range");
}

void check_publish_checkpoint(const PublishOptions& p, const CheckpointOptions& c) {
  // every = 0 with interval_ms = 0 is valid: publish only when the caller calls publish()
  // (and after rebirths).
  if (p.every < 0) {
    bad("publish.every must be >= 0, got " + std::to_string(p.every));
  }
  check_non_negative("publish.interval_ms", p.interval_ms);
  check_non_negative("publish.rebirth_wait_ms", p.rebirth_wait_ms);
  if (c.every < 0) bad("checkpoint.every must be >= 0, got " + std::to_string(c.every));
  check_non_negative("checkpoint.every_seconds", c.every_seconds);
  if (c.keep < 0) bad("checkpoint.keep must be >= 0, got " + std::to_string(c.keep));
  if (c.path.empty()) bad("checkpoint.path is empty");
  if ((c.every > 0 || c.every_seconds > 0.0) && c.path.find("{step}") == std::string::npos) {
    bad("checkpoint.path '" + c.path +
        "' has no {step}: saves from step() need one file name per step count");
  }
}

void check_read_serve(const AgentOptions& o) {
  const ReadOptions& r = o.read;
  check_non_negative("read.timeout_seconds", r.timeout_seconds);
  check_non_negative("read.roster_timeout_seconds", r.roster_timeout_seconds);
  if (!enum_valid(r.read_mode)) bad("read.read_mode holds an out-of-range enumerator");
  if (!enum_valid(r.landing)) bad("read.landing holds an out-of-range enumerator");
  if (r.landing == Landing::direct && !o.reset) {
    bad("read.landing 'direct' needs a reset callback (AgentOptions::reset): a pull that fails "
        "midway leaves the parameters partly written, and the agent re-initialises them when "
        "no other donor can be read");
  }
  if (r.landing == Landing::direct && r.read_mode == ReadMode::optimistic) {
    bad("read.landing 'direct' reads pinned slots; read.read_mode 'optimistic' never pins first");
  }
  if (r.chunk_bytes != 0 && (r.chunk_bytes < kMinChunkBytes || r.chunk_bytes > kMaxChunkBytes)) {
    bad("read.chunk_bytes must be 0 (library default) or in [256, 2^30], got " +
        std::to_string(r.chunk_bytes));
  }
  if (o.serve.progress_thread && (o.serve.progress_interval_us == 0 ||
                                  o.serve.progress_interval_us > kMaxProgressIntervalUs)) {
    bad("serve.progress_interval_us must be in [1, 1000000], got " +
        std::to_string(o.serve.progress_interval_us));
  }
}

}  // namespace

void validate(const AgentOptions& o, int population) {
  if (population < 1) {
    bad("population must be >= 1, got " + std::to_string(population));
  }
  check_triggers(o.triggers);
  check_worst_fraction(o.triggers, population);
  check_selection_mixing(o, population);
  check_publish_checkpoint(o.publish, o.checkpoint);
  check_read_serve(o);
  if (!enum_valid(o.paused_deaths)) bad("paused_deaths is out of range");
  validate(o.explore);
}

double selection_quantile(const AgentOptions& o) noexcept {
  return o.selection.quantile > 0.0 ? o.selection.quantile : o.triggers.worst_fraction.fraction;
}

Landing rebirth_landing(const AgentOptions& o) noexcept {
  if (o.read.landing != Landing::automatic) return o.read.landing;
  return o.mixing.momentum == 0.0 && o.reset && o.read.read_mode != ReadMode::optimistic
             ? Landing::direct
             : Landing::transactional;
}

void validate(const AgentOptions& o, int population, const Layout& layout) {
  validate(o, population);
  validate(o.explore, layout);
}

}  // namespace paramwin
