// The string form of AgentOptions: the table of option keys (key, aliases, value, doc,
// setter) that drives parse_agent_options, its "unknown option" message, docs/agent.md's key
// table (checked by the docs_check test) and the Python binding.
#include <array>
#include <charconv>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

#include "paramwin/agent_options.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

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
  if (kind == "perturb") {
    r.distribution = HyperDistribution::none;
    if (!args.empty()) std::tie(r.lo, r.hi) = to_range(key, args);
    return;
  }
  const std::optional<HyperDistribution> d = find_enum<HyperDistribution>(kind);
  if (!d || *d == HyperDistribution::none) {
    bad_value(key, v,
              "an explore rule (perturb, perturb:lo..hi, uniform:lo..hi, log_uniform:lo..hi, "
              "int:lo..hi, choice:a,b,...)");
  }
  r.distribution = *d;
  if (*d != HyperDistribution::choice) {
    std::tie(r.lo, r.hi) = to_range(key, args);
    return;
  }
  r.choices.clear();
  if (args.empty()) bad_value(key, v, "a choice list 'choice:a,b,...'");
  for (std::string_view c : split_list(args)) r.choices.push_back(to_double(key, c));
}

/// An enumeration value of option @p key: any spelling of its name table.
template <NamedEnum E>
E enum_value(std::string_view /*key*/, std::string_view v) {
  return parse_enum<E>(v);
}

std::vector<double> to_doubles(std::string_view key, std::string_view v) {
  std::vector<double> out;
  for (std::string_view x : split_list(v)) out.push_back(to_double(key, x));
  return out;
}

void set_triggers(AgentOptions& o, std::string_view key, std::string_view v) {
  TriggerOptions& t = o.triggers;
  t.age.enabled = t.threshold.enabled = t.worst_fraction.enabled = false;
  if (v == "none" || v.empty()) return;
  for (std::string_view name : split_list(v)) {
    switch (parse_trigger(name)) {
      case DeathReason::age: t.age.enabled = true; break;
      case DeathReason::threshold: t.threshold.enabled = true; break;
      case DeathReason::worst_fraction: t.worst_fraction.enabled = true; break;
      default:
        throw InvalidArgument("paramwin: option '" + std::string(key) +
                              "': 'custom' needs a callable; set AgentOptions::triggers.custom "
                              "in code");
    }
  }
}

void set_age(AgentOptions& o, std::string_view key, std::string_view v) {
  const std::size_t dots = v.find("..");
  const std::size_t sep = dots != std::string_view::npos ? dots : v.find(',');
  if (sep == std::string_view::npos) bad_value(key, v, "a range 'lo..hi' or 'lo,hi'");
  o.triggers.age.lo = to_int<std::int64_t>(key, v.substr(0, sep));
  o.triggers.age.hi =
      to_int<std::int64_t>(key, v.substr(sep + (dots != std::string_view::npos ? 2 : 1)));
}

// preset = pbt | default: every field replaced by the preset's.
void set_preset(AgentOptions& o, std::string_view key, std::string_view v) {
  if (v == "pbt") {
    o = AgentOptions::pbt();
  } else if (v == "default") {
    o = AgentOptions{};
  } else {
    bad_value(key, v, "a preset (pbt, default)");
  }
}

/// One key of the string form with what it sets.
struct KeyRow {
  OptionKey key;
  void (*set)(AgentOptions& o, std::string_view key, std::string_view value);
};

using K = std::string_view;
// The string form of AgentOptions, one row per key, in docs/agent.md's order. A key ending
// in ".NAME" is a prefix: "explore.lr" sets the rule of hyperparameter "lr".
constexpr KeyRow kKeys[] = {
    {{"preset", "", "pbt|default", "starts from a preset (applied before every other key)"},
     set_preset},
    {{"seed", "", "integer", "seeds every per-agent random stream (with the rank)"},
     [](AgentOptions& o, K k, K v) { o.seed = to_int<std::uint64_t>(k, v); }},
    {{"direction", "", "lower_is_better|higher_is_better", "which way the metric improves"},
     [](AgentOptions& o, K k, K v) { o.direction = enum_value<MetricDirection>(k, v); }},
    {{"triggers", "", "list of age, threshold, worst_fraction; none",
      "the enabled death triggers (the others off)"},
     set_triggers},
    {{"age", "", "lo..hi", "range of the drawn maximum age, in steps"}, set_age},
    {{"age_lo", "", "integer", "smallest maximum age"},
     [](AgentOptions& o, K k, K v) { o.triggers.age.lo = to_int<std::int64_t>(k, v); }},
    {{"age_hi", "", "integer", "largest maximum age"},
     [](AgentOptions& o, K k, K v) { o.triggers.age.hi = to_int<std::int64_t>(k, v); }},
    {{"threshold", "", "number", "threshold trigger: dies when the metric is worse"},
     [](AgentOptions& o, K k, K v) { o.triggers.threshold.value = to_double(k, v); }},
    {{"worst_fraction", "fraction", "number in [0, 1]", "worst-fraction trigger: the fraction"},
     [](AgentOptions& o, K k, K v) { o.triggers.worst_fraction.fraction = to_double(k, v); }},
    {{"worst_every", "", "integer", "worst-fraction trigger: check every N steps"},
     [](AgentOptions& o, K k, K v) {
       o.triggers.worst_fraction.every = to_int<std::int64_t>(k, v);
     }},
    {{"sync", "synch", "boolean", "worst-fraction trigger: synchronous (one agreed ranking)"},
     [](AgentOptions& o, K k, K v) { o.triggers.worst_fraction.synchronous = to_bool(k, v); }},
    {{"same_iteration", "", "boolean",
      "worst-fraction trigger, asynchronous: compare agents at the same iteration"},
     [](AgentOptions& o, K k, K v) { o.triggers.worst_fraction.same_iteration = to_bool(k, v); }},
    {{"warmup", "", "integer", "no deaths during the first N steps"},
     [](AgentOptions& o, K k, K v) { o.triggers.warmup = to_int<std::int64_t>(k, v); }},
    {{"cooldown", "", "integer", "no death within N steps after a rebirth"},
     [](AgentOptions& o, K k, K v) { o.triggers.cooldown = to_int<std::int64_t>(k, v); }},
    {{"selection", "", "uniform|fittest|tournament|truncation|custom", "how donors are chosen"},
     [](AgentOptions& o, K k, K v) { o.selection.kind = enum_value<SelectionKind>(k, v); }},
    {{"k", "", "integer", "donors per rebirth"},
     [](AgentOptions& o, K k, K v) { o.selection.k = to_int<int>(k, v); }},
    {{"tournament_size", "", "integer", "entrants per tournament"},
     [](AgentOptions& o, K k, K v) { o.selection.tournament_size = to_int<int>(k, v); }},
    {{"selection_quantile", "", "number in [0, 1]",
      "truncation: the top quantile donors come from (0: worst_fraction's)"},
     [](AgentOptions& o, K k, K v) { o.selection.quantile = to_double(k, v); }},
    {{"max_staleness_seconds", "max_staleness", "seconds",
      "donors published longer ago are skipped (0: no bound)"},
     [](AgentOptions& o, K k, K v) { o.selection.max_staleness_seconds = to_double(k, v); }},
    {{"shortfall", "", "defer|clamp|error", "too few eligible donors at a death"},
     [](AgentOptions& o, K k, K v) { o.selection.shortfall = enum_value<Shortfall>(k, v); }},
    {{"clamp", "", "boolean", "true: shortfall=clamp; false: shortfall=defer"},
     [](AgentOptions& o, K k, K v) {
       o.selection.shortfall = to_bool(k, v) ? Shortfall::clamp : Shortfall::defer;
     }},
    {{"mixing", "", "mean|weighted|best|reset", "how the donors' parameters are mixed"},
     [](AgentOptions& o, K k, K v) { o.mixing.kind = enum_value<MixingKind>(k, v); }},
    {{"weighting", "", "rank|softmax", "fitness weights of weighted mixing"},
     [](AgentOptions& o, K k, K v) { o.mixing.weighting = enum_value<FitnessWeighting>(k, v); }},
    {{"temperature", "", "number", "softmax temperature"},
     [](AgentOptions& o, K k, K v) { o.mixing.temperature = to_double(k, v); }},
    {{"weights", "", "list of numbers", "explicit weights of weighted mixing, best donor first"},
     [](AgentOptions& o, K k, K v) { o.mixing.weights = to_doubles(k, v); }},
    {{"momentum", "", "number in [0, 1)", "new = momentum * own + (1 - momentum) * mix"},
     [](AgentOptions& o, K k, K v) { o.mixing.momentum = to_double(k, v); }},
    {{"non_finite", "", "fail|skip_donor|allow", "donors holding NaN or infinity"},
     [](AgentOptions& o, K k, K v) { o.mixing.non_finite = enum_value<NonFinitePolicy>(k, v); }},
    {{"hyper_inherit", "", "best|mix|keep", "whose hyperparameters a reborn agent takes"},
     [](AgentOptions& o, K k, K v) { o.explore.inherit = enum_value<HyperInherit>(k, v); }},
    {{"perturb_factors", "", "list of numbers", "a perturbation multiplies by one of these"},
     [](AgentOptions& o, K k, K v) { o.explore.perturb_factors = to_doubles(k, v); }},
    {{"resample_probability", "", "number in [0, 1]",
      "chance that a rule resamples instead of perturbing"},
     [](AgentOptions& o, K k, K v) { o.explore.resample_probability = to_double(k, v); }},
    {{"explore.NAME", "",
      "perturb[:lo..hi]|uniform:lo..hi|log_uniform:lo..hi|int:lo..hi|choice:a,b,...",
      "the explore rule of hyperparameter NAME"},
     [](AgentOptions& o, K k, K v) { parse_rule(k, v, rule_named(o.explore, k.substr(8))); }},
    {{"explore_scale.NAME", "", "linear|log", "the mixing scale of hyperparameter NAME"},
     [](AgentOptions& o, K k, K v) {
       rule_named(o.explore, k.substr(14)).scale = enum_value<HyperScale>(k, v);
     }},
    {{"explore_clamp.NAME", "", "lo..hi", "bounds explored values of NAME are clamped to"},
     [](AgentOptions& o, K k, K v) {
       HyperRule& r = rule_named(o.explore, k.substr(14));
       std::tie(r.clamp_lo, r.clamp_hi) = to_range(k, v);
     }},
    {{"explore_kind", "", "pbt|pb2", "explore by perturb/resample (pbt) or PB2's GP bandit"},
     [](AgentOptions& o, K k, K v) { o.explore.kind = enum_value<ExploreKind>(k, v); }},
    {{"pb2_window", "", "integer", "PB2: observations kept (the most recent)"},
     [](AgentOptions& o, K k, K v) { o.explore.pb2.window = to_int<std::size_t>(k, v); }},
    {{"pb2_min_observations", "", "integer", "PB2: fewer observations fall back to pbt's explore"},
     [](AgentOptions& o, K k, K v) { o.explore.pb2.min_observations = to_int<std::size_t>(k, v); }},
    {{"pb2_candidates", "", "integer", "PB2: random candidates of the acquisition's search"},
     [](AgentOptions& o, K k, K v) { o.explore.pb2.candidates = to_int<std::size_t>(k, v); }},
    {{"publish_every", "", "integer", "publish every N steps (0: not by steps)"},
     [](AgentOptions& o, K k, K v) { o.publish.every = to_int<std::int64_t>(k, v); }},
    {{"publish_interval_ms", "", "milliseconds", "publish when this long passed (0: off)"},
     [](AgentOptions& o, K k, K v) { o.publish.interval_ms = to_double(k, v); }},
    {{"publish_rebirth_wait_ms", "", "milliseconds",
      "retry a pinned publish after a rebirth this long"},
     [](AgentOptions& o, K k, K v) { o.publish.rebirth_wait_ms = to_double(k, v); }},
    {{"publish_defer_rebirth", "", "boolean",
      "a rebirth's republish waits for the agent's next step"},
     [](AgentOptions& o, K k, K v) { o.publish.defer_rebirth = to_bool(k, v); }},
    {{"read_timeout_seconds", "", "seconds",
      "bound on a step's waiting for others over RMA (0: none)"},
     [](AgentOptions& o, K k, K v) { o.read.timeout_seconds = to_double(k, v); }},
    {{"roster_timeout_seconds", "", "seconds", "bound on one roster read over RMA (0: none)"},
     [](AgentOptions& o, K k, K v) { o.read.roster_timeout_seconds = to_double(k, v); }},
    {{"read_mode", "", "auto|optimistic|pinned", "how the rebirth's pulls read their donors"},
     [](AgentOptions& o, K k, K v) { o.read.read_mode = enum_value<ReadMode>(k, v); }},
    {{"optimistic_attempts", "", "integer", "lock-free tries before a donor is pinned"},
     [](AgentOptions& o, K k, K v) { o.read.optimistic_attempts = to_int<unsigned>(k, v); }},
    {{"chunk_bytes", "", "integer", "bytes per chunk of staged reads (0: library default)"},
     [](AgentOptions& o, K k, K v) { o.read.chunk_bytes = to_int<std::size_t>(k, v); }},
    {{"landing", "", "auto|transactional|direct", "where the rebirth's RMA reads land"},
     [](AgentOptions& o, K k, K v) { o.read.landing = enum_value<Landing>(k, v); }},
    {{"progress_in_step", "", "boolean", "step() lets MPI progress once for RMA readers"},
     [](AgentOptions& o, K k, K v) { o.serve.progress_in_step = to_bool(k, v); }},
    {{"progress_thread", "", "boolean", "a thread serves RMA readers while the trainer computes"},
     [](AgentOptions& o, K k, K v) { o.serve.progress_thread = to_bool(k, v); }},
    {{"progress_interval_us", "", "microseconds", "sleep between two polls of that thread"},
     [](AgentOptions& o, K k, K v) { o.serve.progress_interval_us = to_int<unsigned>(k, v); }},
    {{"paused_deaths", "", "defer|honour", "what a paused agent does with a death"},
     [](AgentOptions& o, K k, K v) { o.paused_deaths = enum_value<PausedDeaths>(k, v); }},
    {{"event_log", "", "path", "JSON-lines event log ({rank} is replaced by the rank)"},
     [](AgentOptions& o, K /*k*/, K v) { o.event_log = std::string(v); }},
    {{"checkpoint_every", "", "integer", "step() saves a checkpoint every N steps (0: off)"},
     [](AgentOptions& o, K k, K v) { o.checkpoint.every = to_int<std::int64_t>(k, v); }},
    {{"checkpoint_every_seconds", "", "seconds", "step() saves when this long passed (0: off)"},
     [](AgentOptions& o, K k, K v) { o.checkpoint.every_seconds = to_double(k, v); }},
    {{"checkpoint_path", "", "path pattern with {step}", "where step() saves"},
     [](AgentOptions& o, K /*k*/, K v) { o.checkpoint.path = std::string(v); }},
    {{"checkpoint_keep", "", "integer", "checkpoints kept (older ones deleted; 0: all)"},
     [](AgentOptions& o, K k, K v) { o.checkpoint.keep = to_int<int>(k, v); }},
    {{"checkpoint_async", "", "boolean", "saves write in the background after a copy"},
     [](AgentOptions& o, K k, K v) { o.checkpoint.async = to_bool(k, v); }},
};

constexpr std::array<OptionKey, std::size(kKeys)> public_keys() {
  std::array<OptionKey, std::size(kKeys)> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = kKeys[i].key;
  return out;
}
constexpr std::array<OptionKey, std::size(kKeys)> kPublicKeys = public_keys();

bool matches(const OptionKey& row, std::string_view key) {
  if (row.key.ends_with(".NAME")) {
    const std::string_view prefix = row.key.substr(0, row.key.size() - 4);
    return key.size() > prefix.size() && key.starts_with(prefix);
  }
  if (key == row.key) return true;
  for (std::string_view a : split_list(row.aliases)) {
    if (!a.empty() && key == a) return true;
  }
  return false;
}

[[noreturn]] void unknown_key(std::string_view key) {
  std::string valid;
  for (const OptionKey& k : kPublicKeys) valid.append(valid.empty() ? "" : ", ").append(k.key);
  throw InvalidArgument("paramwin: unknown option '" + std::string(key) + "' (valid: " + valid +
                        ")");
}

}  // namespace

std::span<const OptionKey> agent_option_keys() noexcept { return kPublicKeys; }

void set_agent_option(AgentOptions& options, std::string_view key, std::string_view value) {
  for (const KeyRow& row : kKeys) {
    if (matches(row.key, key)) {
      row.set(options, key, trim(value));
      return;
    }
  }
  unknown_key(key);
}

AgentOptions parse_agent_options(const std::map<std::string, std::string, std::less<>>& config) {
  AgentOptions o;
  // The preset first, whatever the keys' order: the other keys override its fields.
  const auto preset = config.find("preset");
  if (preset != config.end()) set_agent_option(o, preset->first, preset->second);
  for (const auto& [key, value] : config) {
    if (key != "preset") set_agent_option(o, key, value);
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
