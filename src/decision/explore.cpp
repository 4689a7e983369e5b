// Exploit (inherit from donors) and explore (perturb, resample, clamp) of hyperparameters.
#include "paramwin/explore.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "decision/random.hpp"
#include "paramwin/error.hpp"
#include "paramwin/layout.hpp"

namespace paramwin {

namespace {

std::string where(const HyperRule& r) { return "paramwin: explore rule '" + r.name + "': "; }

std::string num(double v) {
  std::string s = std::to_string(v);
  // std::to_string prints 1e-05 as 0.000010: keep small numbers readable.
  if (v != 0.0 && std::fabs(v) < 1e-3) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    s = buf;
  }
  return s;
}

bool integral(double v) { return std::isfinite(v) && v == std::trunc(v); }

bool log_scale(const HyperRule& r) {
  return r.scale == HyperScale::log || r.distribution == HyperDistribution::log_uniform;
}

// The clamp bounds: clamp_lo/clamp_hi; a rule without a distribution has no range to
// resample from, and its lo/hi clamp too (as they always did).
double clamp_to(const HyperRule& r, double v) {
  if (std::isfinite(r.clamp_lo)) v = std::max(v, r.clamp_lo);
  if (std::isfinite(r.clamp_hi)) v = std::min(v, r.clamp_hi);
  if (r.distribution == HyperDistribution::none) {
    if (std::isfinite(r.lo)) v = std::max(v, r.lo);
    if (std::isfinite(r.hi)) v = std::min(v, r.hi);
  }
  return v;
}

std::size_t nearest_choice(const std::vector<double>& choices, double v) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < choices.size(); ++i) {
    if (std::fabs(choices[i] - v) < std::fabs(choices[best] - v)) best = i;
  }
  return best;
}

// Writes @p v into value @p i, rounding for int64 (saturating at the int64 range).
void store(Hyperparameters& h, std::size_t i, double v) {
  if (h.spec(i).type == HyperType::float64) {
    h.set(i, v);
    return;
  }
  if (std::isnan(v)) return;  // nothing sensible to round: keep the value
  v = std::clamp(std::round(v), -9.223372036854775e18, 9.223372036854775e18);
  h.set(i, v);
}

const HyperRule* rule_for(const ExploreOptions& o, std::string_view name) {
  for (const HyperRule& r : o.rules) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// PB2 (kind pb2): its settings, and a finite box for every rule to normalise by.
void validate_pb2(const ExploreOptions& o) {
  if (o.kind > ExploreKind::pb2) {
    throw InvalidArgument("paramwin: explore.kind is out of range (pbt, pb2)");
  }
  if (o.kind != ExploreKind::pb2) return;
  const Pb2Options& p = o.pb2;
  if (p.window < 2 || p.window > 1000) {
    throw InvalidArgument("paramwin: explore.pb2.window " + std::to_string(p.window) +
                          " is outside [2, 1000] (the GP's fit costs O(window^3))");
  }
  if (p.min_observations < 2 || p.min_observations > p.window) {
    throw InvalidArgument("paramwin: explore.pb2.min_observations " +
                          std::to_string(p.min_observations) + " is outside [2, window " +
                          std::to_string(p.window) + "]");
  }
  if (p.candidates < 1 || p.candidates > 100000) {
    throw InvalidArgument("paramwin: explore.pb2.candidates " + std::to_string(p.candidates) +
                          " is outside [1, 100000]");
  }
  if (o.rules.empty()) {
    throw InvalidArgument("paramwin: explore.kind pb2 needs at least one explore rule (the "
                          "hyperparameters it chooses, with their bounds lo..hi)");
  }
  for (const HyperRule& r : o.rules) {
    if (r.distribution != HyperDistribution::choice &&
        !(std::isfinite(r.lo) && std::isfinite(r.hi))) {
      throw InvalidArgument(where(r) + "explore.kind pb2 needs finite bounds lo..hi (got " +
                            num(r.lo) + ".." + num(r.hi) + ")");
    }
  }
}

}  // namespace

void validate(const ExploreOptions& o) {
  if (o.inherit > HyperInherit::keep) {
    throw InvalidArgument("paramwin: explore.inherit is out of range (best, mix, keep)");
  }
  if (o.perturb_factors.empty()) {
    throw InvalidArgument("paramwin: explore.perturb_factors is empty; give at least one factor "
                          "(default 0.8, 1.2)");
  }
  for (std::size_t i = 0; i < o.perturb_factors.size(); ++i) {
    const double f = o.perturb_factors[i];
    if (!std::isfinite(f) || f <= 0.0) {
      throw InvalidArgument("paramwin: explore.perturb_factors[" + std::to_string(i) + "] is " +
                            num(f) + "; factors must be finite and > 0");
    }
  }
  if (!(o.resample_probability >= 0.0 && o.resample_probability <= 1.0)) {
    throw InvalidArgument("paramwin: explore.resample_probability " + num(o.resample_probability) +
                          " is outside [0, 1]");
  }
  for (std::size_t i = 0; i < o.rules.size(); ++i) {
    const HyperRule& r = o.rules[i];
    if (r.name.empty()) {
      throw InvalidArgument("paramwin: explore rule " + std::to_string(i) + " has no name");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (o.rules[j].name == r.name) {
        throw InvalidArgument(where(r) + "listed twice (rules " + std::to_string(j) + " and " +
                              std::to_string(i) + ")");
      }
    }
    if (r.distribution > HyperDistribution::choice) {
      throw InvalidArgument(where(r) + "unknown distribution");
    }
    if (r.scale > HyperScale::log) {
      throw InvalidArgument(where(r) + "unknown scale");
    }
    if (std::isnan(r.lo) || std::isnan(r.hi)) {
      throw InvalidArgument(where(r) + "lo and hi must be numbers (infinite: unbounded)");
    }
    if (r.lo > r.hi) {
      throw InvalidArgument(where(r) + "lo " + num(r.lo) + " > hi " + num(r.hi));
    }
    if (std::isnan(r.clamp_lo) || std::isnan(r.clamp_hi)) {
      throw InvalidArgument(where(r) + "clamp_lo and clamp_hi must be numbers (infinite: no "
                                       "clamp)");
    }
    if (r.clamp_lo > r.clamp_hi) {
      throw InvalidArgument(where(r) + "clamp_lo " + num(r.clamp_lo) + " > clamp_hi " +
                            num(r.clamp_hi));
    }
    const bool ranged = r.distribution == HyperDistribution::uniform ||
                        r.distribution == HyperDistribution::log_uniform ||
                        r.distribution == HyperDistribution::int_range;
    if (ranged && !(std::isfinite(r.lo) && std::isfinite(r.hi))) {
      throw InvalidArgument(where(r) + std::string(distribution_name(r.distribution)) +
                            " needs finite bounds lo..hi");
    }
    if (log_scale(r) && std::isfinite(r.lo) && r.lo <= 0.0) {
      throw InvalidArgument(where(r) + "log scale needs positive bounds, got lo " + num(r.lo));
    }
    if (r.distribution == HyperDistribution::int_range && (!integral(r.lo) || !integral(r.hi))) {
      throw InvalidArgument(where(r) + "int range bounds must be integers, got " + num(r.lo) +
                            ".." + num(r.hi));
    }
    if (r.distribution == HyperDistribution::choice) {
      if (r.choices.empty()) {
        throw InvalidArgument(where(r) + "choice needs at least one value");
      }
      for (const double c : r.choices) {
        if (!std::isfinite(c)) {
          throw InvalidArgument(where(r) + "choice value " + num(c) + " is not finite");
        }
        if (log_scale(r) && c <= 0.0) {
          throw InvalidArgument(where(r) + "log scale needs positive choices, got " + num(c));
        }
      }
    } else if (!r.choices.empty()) {
      throw InvalidArgument(where(r) + "choices given with distribution " +
                            std::string(distribution_name(r.distribution)) + " (use choice)");
    }
  }
  validate_pb2(o);
}

void validate(const ExploreOptions& o, const Layout& layout) {
  validate(o);
  const std::vector<HyperSpec>& specs = layout.hyperparameters();
  for (const HyperRule& r : o.rules) {
    const auto it = std::find_if(specs.begin(), specs.end(),
                                 [&](const HyperSpec& s) { return s.name == r.name; });
    if (it == specs.end()) {
      std::string known;
      for (const HyperSpec& s : specs) known += (known.empty() ? "'" : ", '") + s.name + "'";
      throw InvalidArgument(where(r) + "no such hyperparameter in the layout (declared: " +
                            (known.empty() ? "none" : known) + ")");
    }
    const bool is_int = it->type == HyperType::int64;
    if (is_int && (r.distribution == HyperDistribution::uniform ||
                   r.distribution == HyperDistribution::log_uniform)) {
      throw InvalidArgument(where(r) + "int64 hyperparameter with distribution " +
                            std::string(distribution_name(r.distribution)) + " (use int)");
    }
    if (!is_int && r.distribution == HyperDistribution::int_range) {
      throw InvalidArgument(where(r) + "float64 hyperparameter with distribution int (use "
                                       "uniform or log_uniform)");
    }
    if (is_int) {
      for (const double c : r.choices) {
        if (!integral(c)) {
          throw InvalidArgument(where(r) + "int64 hyperparameter with non-integral choice " +
                                num(c));
        }
      }
      if ((std::isfinite(r.lo) && !integral(r.lo)) || (std::isfinite(r.hi) && !integral(r.hi))) {
        throw InvalidArgument(where(r) + "int64 hyperparameter with non-integral bounds " +
                              num(r.lo) + ".." + num(r.hi));
      }
    }
  }
}

Hyperparameters inherit_hyperparameters(const ExploreOptions& options, const Hyperparameters& own,
                                        std::span<const Hyperparameters> donors,
                                        std::span<const double> weights) {
  Hyperparameters out = own;
  if (donors.empty() || own.empty() || options.inherit == HyperInherit::keep) return out;
  for (const Hyperparameters& d : donors) {
    if (d.size() != own.size()) {
      throw InvalidArgument("paramwin: inherit_hyperparameters: a donor has " +
                            std::to_string(d.size()) + " hyperparameters, this agent " +
                            std::to_string(own.size()));
    }
  }
  if (options.inherit == HyperInherit::best) {
    std::copy(donors.front().words().begin(), donors.front().words().end(), out.words().begin());
    return out;
  }
  if (weights.size() != donors.size()) {
    throw InvalidArgument("paramwin: inherit_hyperparameters: " + std::to_string(weights.size()) +
                          " weights for " + std::to_string(donors.size()) + " donors");
  }
  for (std::size_t i = 0; i < own.size(); ++i) {
    const HyperRule* rule = rule_for(options, own.spec(i).name);
    bool log = rule != nullptr && log_scale(*rule);
    for (const Hyperparameters& d : donors) log = log && d.as_double(i) > 0.0;
    double sum = 0.0;
    double wsum = 0.0;
    for (std::size_t k = 0; k < donors.size(); ++k) {
      const double v = donors[k].as_double(i);
      sum += weights[k] * (log ? std::log(v) : v);
      wsum += weights[k];
    }
    double v = wsum > 0.0 ? sum / wsum : donors.front().as_double(i);
    if (log) v = std::exp(v);
    if (rule != nullptr && rule->distribution == HyperDistribution::choice) {
      v = rule->choices[nearest_choice(rule->choices, v)];
    }
    store(out, i, v);
  }
  return out;
}

void explore_hyperparameters(const ExploreOptions& options, Hyperparameters& hyper,
                             std::mt19937_64& rng) {
  for (const HyperRule& r : options.rules) {
    const std::optional<std::size_t> found = hyper.find(r.name);
    if (!found) {
      throw InvalidArgument(where(r) + "no such hyperparameter");
    }
    const std::size_t i = *found;
    const double current = hyper.as_double(i);
    // Both draws are made whatever they decide, so that every rule consumes the same
    // number of draws: one rule's outcome never shifts another's.
    const double coin = detail::unit(rng);
    const std::uint64_t pick = rng();
    double v = current;
    const bool resample =
        r.distribution != HyperDistribution::none && coin < options.resample_probability;
    if (resample) {
      switch (r.distribution) {
        case HyperDistribution::uniform: v = r.lo + (r.hi - r.lo) * detail::unit(rng); break;
        case HyperDistribution::log_uniform:
          v = std::exp(std::log(r.lo) + (std::log(r.hi) - std::log(r.lo)) * detail::unit(rng));
          break;
        case HyperDistribution::int_range: {
          const auto span = static_cast<std::uint64_t>(r.hi - r.lo) + 1;
          v = r.lo + static_cast<double>(span == 0 ? rng() : detail::below(rng, span));
          break;
        }
        case HyperDistribution::choice: v = r.choices[detail::below(rng, r.choices.size())]; break;
        case HyperDistribution::none: break;
      }
    } else {
      const double factor = options.perturb_factors[pick % options.perturb_factors.size()];
      if (r.distribution == HyperDistribution::choice) {
        std::size_t at = nearest_choice(r.choices, current);
        if (factor < 1.0 && at > 0) --at;
        if (factor > 1.0 && at + 1 < r.choices.size()) ++at;
        v = r.choices[at];
      } else {
        v = current * factor;
      }
    }
    store(hyper, i, clamp_to(r, v));
  }
}

}  // namespace paramwin
