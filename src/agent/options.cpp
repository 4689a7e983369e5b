// Validation of AgentOptions, and AgentOptions from string key/value pairs.
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

void validate(const AgentOptions& o, int population) {
  if (population < 1) {
    bad("population must be >= 1, got " + std::to_string(population));
  }
  const TriggerOptions& t = o.triggers;
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

  const SelectionOptions& s = o.selection;
  if (s.k <= 0) {
    bad("selection.k must be >= 1, got " + std::to_string(s.k));
  }
  if (s.tournament_size <= 0) {
    bad("selection.tournament_size must be >= 1, got " + std::to_string(s.tournament_size));
  }
  if (s.shortfall != Shortfall::defer && s.shortfall != Shortfall::clamp &&
      s.shortfall != Shortfall::error) {
    bad("selection.shortfall is out of range");
  }
  check_non_negative("selection.max_staleness_seconds", s.max_staleness_seconds);

  const MixingOptions& m = o.mixing;
  if (m.kind != MixingKind::reset && any_trigger(t) && s.shortfall != Shortfall::clamp &&
      s.k > population - 1) {
    bad("selection.k = " + std::to_string(s.k) + " but only " + std::to_string(population - 1) +
        " other agent(s) can donate in a population of " + std::to_string(population) +
        " (lower k, or set selection.shortfall = Shortfall::clamp)");
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
  if (m.non_finite != NonFinitePolicy::fail && m.non_finite != NonFinitePolicy::skip_donor &&
      m.non_finite != NonFinitePolicy::allow) {
    bad("mixing.non_finite is out of range");
  }

  const PublishOptions& p = o.publish;
  if (p.every < 0) {
    bad("publish.every must be >= 0, got " + std::to_string(p.every));
  }
  check_non_negative("publish.interval_ms", p.interval_ms);
  check_non_negative("publish.rebirth_wait_ms", p.rebirth_wait_ms);
  const CheckpointOptions& c = o.checkpoint;
  if (c.every < 0) bad("checkpoint.every must be >= 0, got " + std::to_string(c.every));
  check_non_negative("checkpoint.every_seconds", c.every_seconds);
  if (c.keep < 0) bad("checkpoint.keep must be >= 0, got " + std::to_string(c.keep));
  if (c.path.empty()) bad("checkpoint.path is empty");
  if ((c.every > 0 || c.every_seconds > 0.0) && c.path.find("{step}") == std::string::npos) {
    bad("checkpoint.path '" + c.path +
        "' has no {step}: saves from step() need one file name per step count");
  }
  const ReadOptions& r = o.read;
  check_non_negative("read.timeout_seconds", r.timeout_seconds);
  check_non_negative("read.roster_timeout_seconds", r.roster_timeout_seconds);
  if (r.read_mode > ReadMode::pinned) {
    bad("read.read_mode holds an out-of-range enumerator");
  }
  if (r.landing > Landing::direct) {
    bad("read.landing holds an out-of-range enumerator");
  }
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
  // every = 0 with interval_ms = 0 is valid: publish only when the caller calls publish()
  // (and after rebirths).
  if (o.paused_deaths != PausedDeaths::defer && o.paused_deaths != PausedDeaths::honour) {
    bad("paused_deaths is out of range");
  }
  validate(o.explore);
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

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_value(std::string_view key, std::string_view value, std::string_view what) {
  throw InvalidArgument("paramwin: option '" + std::string(key) + "': '" + std::string(value) +
                        "' is not " + std::string(what));
}

template <class Int>
Int to_int(std::string_view key, std::string_view v) {
  v = trim(v);
  Int out{};
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty()) {
    bad_value(key, v, "an integer");
  }
  return out;
}

double to_double(std::string_view key, std::string_view v) {
  v = trim(v);
  double out = 0.0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty()) {
    bad_value(key, v, "a number");
  }
  return out;
}

bool to_bool(std::string_view key, std::string_view v) {
  v = trim(v);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  bad_value(key, v, "a boolean (true/false)");
}

std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t comma = v.find(',');
    out.push_back(trim(v.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

NonFinitePolicy parse_non_finite(std::string_view v) {
  if (v == "fail") return NonFinitePolicy::fail;
  if (v == "skip_donor" || v == "skip") return NonFinitePolicy::skip_donor;
  if (v == "allow") return NonFinitePolicy::allow;
  throw InvalidArgument("paramwin: unknown non-finite policy '" + std::string(v) +
                        "' (valid: fail, skip_donor, allow)");
}

Landing parse_landing(std::string_view v) {
  if (v == "automatic" || v == "auto") return Landing::automatic;
  if (v == "transactional") return Landing::transactional;
  if (v == "direct") return Landing::direct;
  throw InvalidArgument("paramwin: unknown landing '" + std::string(v) +
                        "' (valid: automatic, transactional, direct)");
}

ReadMode parse_read_mode(std::string_view v) {
  if (v == "automatic" || v == "auto") return ReadMode::automatic;
  if (v == "optimistic") return ReadMode::optimistic;
  if (v == "pinned") return ReadMode::pinned;
  throw InvalidArgument("paramwin: unknown read mode '" + std::string(v) +
                        "' (valid: automatic, optimistic, pinned)");
}

// "lo..hi" (or "lo,hi") as two numbers.
std::pair<double, double> to_range(std::string_view key, std::string_view v) {
  std::size_t sep = v.find("..");
  std::size_t skip = 2;
  if (sep == std::string_view::npos) {
    sep = v.find(',');
    skip = 1;
  }
  if (sep == std::string_view::npos) bad_value(key, v, "a range 'lo..hi'");
  return {to_double(key, v.substr(0, sep)), to_double(key, v.substr(sep + skip))};
}

HyperRule& rule_named(ExploreOptions& x, std::string_view name) {
  for (HyperRule& r : x.rules) {
    if (r.name == name) return r;
  }
  x.rules.push_back(HyperRule{.name = std::string(name)});
  return x.rules.back();
}

// explore.NAME = perturb | perturb:LO..HI | uniform:LO..HI | log_uniform:LO..HI | int:LO..HI
//              | choice:A,B,...
void parse_rule(std::string_view key, std::string_view v, HyperRule& r) {
  const std::size_t colon = v.find(':');
  const std::string_view kind = trim(v.substr(0, colon));
  const std::string_view args =
      colon == std::string_view::npos ? std::string_view() : trim(v.substr(colon + 1));
  const auto ranged = [&](HyperDistribution d) {
    r.distribution = d;
    std::tie(r.lo, r.hi) = to_range(key, args);
  };
  if (kind == "perturb") {
    r.distribution = HyperDistribution::none;
    if (!args.empty()) std::tie(r.lo, r.hi) = to_range(key, args);
  } else if (kind == "uniform") {
    ranged(HyperDistribution::uniform);
  } else if (kind == "log_uniform" || kind == "loguniform") {
    ranged(HyperDistribution::log_uniform);
  } else if (kind == "int" || kind == "int_range" || kind == "randint") {
    ranged(HyperDistribution::int_range);
  } else if (kind == "choice") {
    r.distribution = HyperDistribution::choice;
    r.choices.clear();
    if (args.empty()) bad_value(key, v, "a choice list 'choice:a,b,...'");
    for (std::string_view c : split_list(args)) r.choices.push_back(to_double(key, c));
  } else {
    bad_value(key, v,
              "an explore rule (perturb, perturb:lo..hi, uniform:lo..hi, log_uniform:lo..hi, "
              "int:lo..hi, choice:a,b,...)");
  }
}

}  // namespace

AgentOptions parse_agent_options(const std::map<std::string, std::string, std::less<>>& config) {
  AgentOptions o;
  for (const auto& [key, raw] : config) {
    const std::string_view v = trim(raw);
    if (key == "seed") {
      o.seed = to_int<std::uint64_t>(key, v);
    } else if (key == "direction") {
      o.direction = parse_direction(v);
    } else if (key == "triggers") {
      o.triggers.age.enabled = false;
      o.triggers.threshold.enabled = false;
      o.triggers.worst_fraction.enabled = false;
      if (v != "none" && !v.empty()) {
        for (std::string_view name : split_list(v)) {
          switch (parse_trigger(name)) {
            case DeathReason::age: o.triggers.age.enabled = true; break;
            case DeathReason::threshold: o.triggers.threshold.enabled = true; break;
            case DeathReason::worst_fraction: o.triggers.worst_fraction.enabled = true; break;
            default:
              throw InvalidArgument("paramwin: option 'triggers': 'custom' needs a callable; "
                                    "set AgentOptions::triggers.custom in code");
          }
        }
      }
    } else if (key == "age") {
      std::size_t sep = v.find("..");
      std::size_t skip = 2;
      if (sep == std::string_view::npos) {
        sep = v.find(',');
        skip = 1;
      }
      if (sep == std::string_view::npos) {
        bad_value(key, v, "a range 'lo..hi' or 'lo,hi'");
      }
      o.triggers.age.lo = to_int<std::int64_t>(key, v.substr(0, sep));
      o.triggers.age.hi = to_int<std::int64_t>(key, v.substr(sep + skip));
    } else if (key == "age_lo") {
      o.triggers.age.lo = to_int<std::int64_t>(key, v);
    } else if (key == "age_hi") {
      o.triggers.age.hi = to_int<std::int64_t>(key, v);
    } else if (key == "threshold") {
      o.triggers.threshold.value = to_double(key, v);
    } else if (key == "worst_fraction" || key == "fraction") {
      o.triggers.worst_fraction.fraction = to_double(key, v);
    } else if (key == "worst_every") {
      o.triggers.worst_fraction.every = to_int<std::int64_t>(key, v);
    } else if (key == "warmup") {
      o.triggers.warmup = to_int<std::int64_t>(key, v);
    } else if (key == "cooldown") {
      o.triggers.cooldown = to_int<std::int64_t>(key, v);
    } else if (key == "selection") {
      o.selection.kind = parse_selection(v);
    } else if (key == "k") {
      o.selection.k = to_int<int>(key, v);
    } else if (key == "tournament_size") {
      o.selection.tournament_size = to_int<int>(key, v);
    } else if (key == "max_staleness_seconds" || key == "max_staleness") {
      o.selection.max_staleness_seconds = to_double(key, v);
    } else if (key == "shortfall") {
      o.selection.shortfall = parse_shortfall(v);
    } else if (key == "clamp") {
      o.selection.shortfall = to_bool(key, v) ? Shortfall::clamp : Shortfall::defer;
    } else if (key == "mixing") {
      o.mixing.kind = parse_mixing(v);
    } else if (key == "weighting") {
      o.mixing.weighting = parse_weighting(v);
    } else if (key == "temperature") {
      o.mixing.temperature = to_double(key, v);
    } else if (key == "weights") {
      o.mixing.weights.clear();
      for (std::string_view w : split_list(v)) {
        o.mixing.weights.push_back(to_double(key, w));
      }
    } else if (key == "momentum") {
      o.mixing.momentum = to_double(key, v);
    } else if (key == "non_finite") {
      o.mixing.non_finite = parse_non_finite(v);
    } else if (key == "checkpoint_every") {
      o.checkpoint.every = to_int<std::int64_t>(key, v);
    } else if (key == "checkpoint_every_seconds") {
      o.checkpoint.every_seconds = to_double(key, v);
    } else if (key == "checkpoint_path") {
      o.checkpoint.path = v;
    } else if (key == "checkpoint_keep") {
      o.checkpoint.keep = to_int<int>(key, v);
    } else if (key == "checkpoint_async") {
      o.checkpoint.async = to_bool(key, v);
    } else if (key == "publish_every") {
      o.publish.every = to_int<std::int64_t>(key, v);
    } else if (key == "publish_interval_ms") {
      o.publish.interval_ms = to_double(key, v);
    } else if (key == "publish_rebirth_wait_ms") {
      o.publish.rebirth_wait_ms = to_double(key, v);
    } else if (key == "read_timeout_seconds") {
      o.read.timeout_seconds = to_double(key, v);
    } else if (key == "roster_timeout_seconds") {
      o.read.roster_timeout_seconds = to_double(key, v);
    } else if (key == "read_mode") {
      o.read.read_mode = parse_read_mode(v);
    } else if (key == "optimistic_attempts") {
      o.read.optimistic_attempts = to_int<unsigned>(key, v);
    } else if (key == "landing") {
      o.read.landing = parse_landing(v);
    } else if (key == "chunk_bytes") {
      o.read.chunk_bytes = to_int<std::size_t>(key, v);
    } else if (key == "progress_in_step") {
      o.serve.progress_in_step = to_bool(key, v);
    } else if (key == "progress_thread") {
      o.serve.progress_thread = to_bool(key, v);
    } else if (key == "progress_interval_us") {
      o.serve.progress_interval_us = to_int<unsigned>(key, v);
    } else if (key == "paused_deaths") {
      o.paused_deaths = parse_paused_deaths(v);
    } else if (key == "event_log") {
      o.event_log = std::string(v);
    } else if (key == "hyper_inherit") {
      o.explore.inherit = parse_inherit(v);
    } else if (key == "perturb_factors") {
      o.explore.perturb_factors.clear();
      for (std::string_view f : split_list(v)) {
        o.explore.perturb_factors.push_back(to_double(key, f));
      }
    } else if (key == "resample_probability") {
      o.explore.resample_probability = to_double(key, v);
    } else if (key.starts_with("explore.") && key.size() > 8) {
      parse_rule(key, v, rule_named(o.explore, std::string_view(key).substr(8)));
    } else if (key.starts_with("explore_scale.") && key.size() > 14) {
      HyperRule& r = rule_named(o.explore, std::string_view(key).substr(14));
      if (v == "log") {
        r.scale = HyperScale::log;
      } else if (v == "linear") {
        r.scale = HyperScale::linear;
      } else {
        bad_value(key, v, "a scale (linear, log)");
      }
    } else {
      throw InvalidArgument(
          "paramwin: unknown option '" + key +
          "' (valid: seed, direction, triggers, age, age_lo, age_hi, threshold, worst_fraction, "
          "worst_every, warmup, cooldown, selection, k, tournament_size, max_staleness_seconds, "
          "shortfall, clamp, "
          "mixing, weighting, temperature, weights, momentum, non_finite, publish_every, "
          "publish_interval_ms, publish_rebirth_wait_ms, paused_deaths, read_timeout_seconds, "
          "roster_timeout_seconds, read_mode, optimistic_attempts, chunk_bytes, landing, "
          "progress_in_step, progress_thread, progress_interval_us, event_log, checkpoint_every, "
          "checkpoint_every_seconds, checkpoint_path, checkpoint_keep, checkpoint_async, "
          "hyper_inherit, "
          "perturb_factors, resample_probability, explore.NAME, explore_scale.NAME)");
    }
  }
  return o;
}

AgentOptions parse_agent_options(std::string_view text) {
  std::map<std::string, std::string, std::less<>> config;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' ||
                               text[i] == '\r' || text[i] == ';')) {
      ++i;
    }
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\t' && text[j] != '\n' &&
           text[j] != '\r' && text[j] != ';') {
      ++j;
    }
    if (j > i) {
      const std::string_view token = text.substr(i, j - i);
      const std::size_t eq = token.find('=');
      if (eq == std::string_view::npos || eq == 0) {
        throw InvalidArgument("paramwin: option token '" + std::string(token) +
                              "' is not key=value");
      }
      const auto [it, inserted] =
          config.emplace(std::string(token.substr(0, eq)), std::string(token.substr(eq + 1)));
      if (!inserted) {
        throw InvalidArgument("paramwin: option '" + it->first + "' given twice");
      }
    }
    i = j;
  }
  return parse_agent_options(config);
}

}  // namespace paramwin
