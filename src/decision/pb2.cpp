// PB2's explore: observations from roster reads, normalisation, the GP-UCB choice.
#include "decision/pb2.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "decision/random.hpp"
#include "paramwin/error.hpp"
#include "paramwin/policy.hpp"

namespace paramwin::detail {

namespace {

// UCB's constants, as Ray Tune's PB2 (pb2_utils.UCB): beta = c1 + max(0, log(c2 n)).
constexpr double kBetaC1 = 0.2;
constexpr double kBetaC2 = 0.4;
// Targets are standardised and clipped to [-kClip, kClip], as Ray Tune's PB2 does.
constexpr double kClip = 2.0;
// The acquisition's local refinement: this many best candidates, steps from kStep0 halved
// down to kStepMin.
constexpr std::size_t kRefined = 5;
constexpr double kStep0 = 0.1;
constexpr double kStepMin = 1e-3;

bool log_scale(const HyperRule& r) {
  return r.scale == HyperScale::log || r.distribution == HyperDistribution::log_uniform;
}

std::pair<double, double> bounds_of(const HyperRule& r) {
  if (r.distribution == HyperDistribution::choice && !r.choices.empty()) {
    const auto [lo, hi] = std::minmax_element(r.choices.begin(), r.choices.end());
    return {*lo, *hi};
  }
  return {r.lo, r.hi};
}

bool use_log(const HyperRule& r, double lo) { return log_scale(r) && lo > 0.0; }

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

double acquisition(const TimeVaryingGp& gp, double t, double sqrt_beta, std::span<const double> z) {
  const TimeVaryingGp::Prediction p = gp.predict(t, z);
  return p.mean + sqrt_beta * std::sqrt(p.variance);
}

// The rule values of @p hyper, normalised; nullopt when one is missing or not finite.
std::optional<std::vector<double>> normalised(const std::vector<HyperRule>& rules,
                                              const Hyperparameters& hyper) {
  std::vector<double> z;
  z.reserve(rules.size());
  for (const HyperRule& r : rules) {
    const std::optional<std::size_t> i = hyper.find(r.name);
    if (!i) return std::nullopt;
    const double v = hyper.as_double(*i);
    if (!std::isfinite(v)) return std::nullopt;
    z.push_back(pb2_normalize(r, v));
  }
  return z;
}

std::size_t nearest(const std::vector<double>& choices, double v) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < choices.size(); ++i) {
    if (std::fabs(choices[i] - v) < std::fabs(choices[best] - v)) best = i;
  }
  return best;
}

}  // namespace

double pb2_normalize(const HyperRule& rule, double v) noexcept {
  const auto [lo, hi] = bounds_of(rule);
  if (!(hi > lo)) return 0.0;
  double z = 0.0;
  if (use_log(rule, lo)) {
    z = v > 0.0 ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : 0.0;
  } else {
    z = (v - lo) / (hi - lo);
  }
  return std::clamp(z, 0.0, 1.0);
}

double pb2_denormalize(const HyperRule& rule, double z) noexcept {
  const auto [lo, hi] = bounds_of(rule);
  if (!(hi > lo)) return lo;
  z = std::clamp(z, 0.0, 1.0);
  if (use_log(rule, lo)) {
    return std::clamp(std::exp(std::log(lo) + z * (std::log(hi) - std::log(lo))), lo, hi);
  }
  return std::clamp(lo + z * (hi - lo), lo, hi);
}

double pb2_beta(std::size_t n) noexcept {
  return kBetaC1 + std::max(0.0, std::log(kBetaC2 * static_cast<double>(n)));
}

std::vector<double> ucb_argmax(const TimeVaryingGp& gp, double t, double beta,
                               std::size_t candidates, std::span<const double> start,
                               std::mt19937_64& rng, double& value) {
  const std::size_t dim = start.size();
  const double sqrt_beta = std::sqrt(std::max(beta, 0.0));
  std::vector<std::vector<double>> points;
  points.reserve(candidates + 1);
  std::vector<double> first(start.begin(), start.end());
  for (double& z : first) z = std::clamp(z, 0.0, 1.0);
  points.push_back(std::move(first));
  for (std::size_t c = 0; c < candidates; ++c) {
    std::vector<double> z(dim);
    for (double& v : z) v = unit(rng);
    points.push_back(std::move(z));
  }
  std::vector<double> scores(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    scores[i] = acquisition(gp, t, sqrt_beta, points[i]);
  }
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });

  std::vector<double> best;
  double best_score = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < std::min(kRefined, order.size()); ++k) {
    std::vector<double> z = points[order[k]];
    double s = scores[order[k]];
    for (double h = kStep0; h >= kStepMin;) {
      bool moved = false;
      for (std::size_t d = 0; d < dim; ++d) {
        for (const double sign : {1.0, -1.0}) {
          std::vector<double> trial = z;
          trial[d] = std::clamp(z[d] + sign * h, 0.0, 1.0);
          if (trial[d] == z[d]) continue;
          const double ts = acquisition(gp, t, sqrt_beta, trial);
          if (ts > s) {
            z = std::move(trial);
            s = ts;
            moved = true;
          }
        }
      }
      if (!moved) h /= 2.0;
    }
    if (s > best_score) {
      best_score = s;
      best = std::move(z);
    }
  }
  value = best_score;
  return best;
}

Pb2Explorer::Pb2Explorer(std::vector<HyperRule> rules, Pb2Options options,
                         MetricDirection direction)
    : rules_(std::move(rules)), options_(options), direction_(direction) {}

void Pb2Explorer::observe(std::span<const RosterEntry> rosters, std::uint64_t fingerprint) {
  const double sign = direction_ == MetricDirection::higher_is_better ? 1.0 : -1.0;
  for (const RosterEntry& e : rosters) {
    if (!e.answered || e.version == 0 || e.fingerprint != fingerprint ||
        (e.status.state != AgentState::active && e.status.state != AgentState::rebirth) ||
        !std::isfinite(e.status.metric)) {
      continue;
    }
    std::optional<std::vector<double>> z = normalised(rules_, e.hyper);
    if (!z) continue;
    Reading now{.generation = e.status.generation,
                .iteration = e.status.iteration,
                .metric = e.status.metric,
                .z = std::move(*z)};
    const auto it = last_.find(e.rank);
    if (it != last_.end()) {
      const Reading& before = it->second;
      const bool same = before.generation == now.generation && before.z == now.z;
      if (same && now.iteration == before.iteration) continue;  // nothing new
      if (same && now.iteration > before.iteration) {
        const auto span = static_cast<double>(now.iteration - before.iteration);
        window_.push_back(
            Pb2Observation{.rank = e.rank,
                           .time = static_cast<double>(now.iteration),
                           .span = span,
                           .z = now.z,
                           .improvement = sign * (now.metric - before.metric) / span});
        while (window_.size() > options_.window) window_.pop_front();
      }
    }
    last_[e.rank] = std::move(now);
  }
}

void Pb2Explorer::start_interval(int rank, std::uint64_t generation, std::int64_t iteration,
                                 double metric, const Hyperparameters& hyper) {
  std::optional<std::vector<double>> z = normalised(rules_, hyper);
  if (!z || !std::isfinite(metric)) return;
  last_[rank] = Reading{.generation = generation,
                        .iteration = iteration,
                        .metric = metric,
                        .z = std::move(*z)};
}

Pb2Result Pb2Explorer::explore(Hyperparameters& hyper, std::mt19937_64& rng) const {
  Pb2Result result;
  const std::size_t n = window_.size();
  result.observations = n;
  if (n < options_.min_observations) {
    result.note = "pb2: " + std::to_string(n) + " observation(s) < pb2.min_observations " +
                  std::to_string(options_.min_observations) + ": explored by perturb/resample";
    return result;
  }
  const std::size_t dim = rules_.size();
  // Time in intervals (the median interval's iterations), 0 at the latest observation: the
  // kernel's (1 - epsilon)^(|t - t'| / 2) forgets by the number of intervals, as the paper's t.
  std::vector<double> spans;
  spans.reserve(n);
  double latest = window_.front().time;
  for (const Pb2Observation& o : window_) {
    spans.push_back(o.span);
    latest = std::max(latest, o.time);
  }
  std::nth_element(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(n / 2), spans.end());
  const double unit_time = std::max(spans[n / 2], 1.0);
  // Targets standardised (population standard deviation) and clipped, as Ray Tune's PB2.
  double mean = 0.0;
  for (const Pb2Observation& o : window_) mean += o.improvement;
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (const Pb2Observation& o : window_) var += (o.improvement - mean) * (o.improvement - mean);
  const double sd = std::sqrt(var / static_cast<double>(n));
  GpData data;
  data.dim = dim;
  for (const Pb2Observation& o : window_) {
    data.t.push_back((o.time - latest) / unit_time);
    data.x.insert(data.x.end(), o.z.begin(), o.z.end());
    data.y.push_back(std::clamp((o.improvement - mean) / (sd + 1e-8), -kClip, kClip));
  }
  std::optional<std::vector<double>> start = normalised(rules_, hyper);
  if (!start) start = std::vector<double>(dim, 0.5);
  try {
    const GpKernel kernel = fit_kernel(data);
    const TimeVaryingGp gp(std::move(data), kernel);
    const double beta = pb2_beta(n);
    double value = 0.0;
    const std::vector<double> z =
        ucb_argmax(gp, 0.0, beta, options_.candidates, *start, rng, value);
    for (std::size_t r = 0; r < dim; ++r) {
      const HyperRule& rule = rules_[r];
      const std::size_t i = hyper.index_of(rule.name);
      double v = pb2_denormalize(rule, z[r]);
      if (rule.distribution == HyperDistribution::choice)
        v = rule.choices[nearest(rule.choices, v)];
      if (hyper.spec(i).type == HyperType::int64) {
        // Rounded into the bounds (validate() requires integral bounds for int64 rules).
        v = std::clamp(std::round(v), std::ceil(bounds_of(rule).first),
                       std::floor(bounds_of(rule).second));
      }
      hyper.set(i, v);
    }
    result.used_gp = true;
    result.kernel = kernel;
    result.acquisition = value;
    result.note = "pb2: GP-UCB on " + std::to_string(n) + " observations (lengthscale " +
                  fmt(kernel.lengthscale) + ", epsilon " + fmt(kernel.epsilon) + ", variance " +
                  fmt(kernel.variance) + ", noise " + fmt(kernel.noise) + ", beta " + fmt(beta) +
                  ", ucb " + fmt(value) + ")";
  } catch (const Error& e) {
    result.note = std::string("pb2: no GP fit (") + e.what() + "): explored by perturb/resample";
  }
  return result;
}

}  // namespace paramwin::detail
