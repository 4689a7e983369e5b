// Roster-based decisions: who may donate, who is in the worst fraction, fitness weights.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "decision/eligibility.hpp"
#include "paramwin/error.hpp"
#include "paramwin/policy.hpp"

namespace paramwin {

double staleness_seconds(const RosterEntry& entry, double now) noexcept {
  return entry.version == 0 ? 0.0 : std::max(0.0, now - entry.publish_time);
}

namespace detail {

Ineligible ineligibility(const RosterEntry& e, int self, std::uint64_t fingerprint,
                         double max_staleness_seconds, double now) noexcept {
  if (e.rank == self) return Ineligible::self;
  if (!e.answered) return Ineligible::no_answer;
  if (e.version == 0) return Ineligible::never_published;
  if (e.fingerprint != fingerprint) return Ineligible::incompatible;
  if (e.status.state == AgentState::rebirth) return Ineligible::mid_rebirth;
  if (e.status.state == AgentState::left) return Ineligible::left;
  if (e.status.state == AgentState::paused) return Ineligible::paused;
  if (e.suspect) return Ineligible::suspect;
  if (max_staleness_seconds > 0.0 && staleness_seconds(e, now) > max_staleness_seconds) {
    return Ineligible::stale;
  }
  return Ineligible::none;
}

std::string describe(Ineligible why, const RosterEntry& e, double max_staleness_seconds,
                     double now) {
  switch (why) {
    case Ineligible::none:
    case Ineligible::self: return "";
    case Ineligible::no_answer: return "did not answer the roster read in time";
    case Ineligible::never_published: return "never published";
    case Ineligible::incompatible: return "incompatible layout";
    case Ineligible::mid_rebirth: return "mid-rebirth";
    case Ineligible::left: return "left";
    case Ineligible::paused: return "paused";
    case Ineligible::suspect: return "suspect: " + e.suspect_reason;
    case Ineligible::stale:
      return "stale (no publish for " + std::to_string(staleness_seconds(e, now)) +
             " s > max_staleness_seconds " + std::to_string(max_staleness_seconds) + ")";
  }
  return "";
}

}  // namespace detail

std::vector<int> eligible_donors(std::span<const RosterEntry> rosters, int self,
                                 std::uint64_t fingerprint, double max_staleness_seconds,
                                 double now) {
  std::vector<int> out;
  for (const RosterEntry& e : rosters) {
    if (detail::ineligibility(e, self, fingerprint, max_staleness_seconds, now) ==
        detail::Ineligible::none) {
      out.push_back(e.rank);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// InvalidArgument naming @p what unless @p fraction is in [0, 1].
void check_fraction(const char* what, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw InvalidArgument(std::string("paramwin: ") + what + ": fraction " +
                          std::to_string(fraction) + " is outside [0, 1]");
  }
}

}  // namespace

std::size_t quantile_count(std::size_t n, double fraction) {
  check_fraction("quantile_count", fraction);
  if (n < 2 || fraction == 0.0) return 0;
  // The tolerance keeps products that are integers in exact arithmetic (0.3 * 10) from
  // rounding up to the next count.
  const auto count = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(n) - 1e-9));
  return std::min(count, n / 2);
}

namespace {

// Whether @p e is ranked besides self: it answered, is no suspect, has the same layout and
// is active or mid-rebirth.
bool rankable(const RosterEntry& e, std::uint64_t fingerprint) {
  return e.answered && !e.suspect && e.fingerprint == fingerprint &&
         (e.status.state == AgentState::active || e.status.state == AgentState::rebirth);
}

struct Ranked {
  int rank;
  double metric;
};

// The ranked agents, worst first; equal metrics: the higher rank is worse, so every reader
// orders the same roster the same way.
std::vector<Ranked> rank_worst_first(std::span<const RosterEntry> rosters, int self,
                                     double own_metric, std::uint64_t fingerprint,
                                     MetricDirection direction) {
  std::vector<Ranked> ranked;
  bool self_seen = false;
  for (const RosterEntry& e : rosters) {
    if (e.rank == self) {
      ranked.push_back({self, own_metric});
      self_seen = true;
    } else if (rankable(e, fingerprint)) {
      ranked.push_back({e.rank, e.status.metric});
    }
  }
  if (!self_seen) {
    ranked.push_back({self, own_metric});
  }
  std::sort(ranked.begin(), ranked.end(), [direction](const Ranked& a, const Ranked& b) {
    if (is_better(direction, b.metric, a.metric)) return true;
    if (is_better(direction, a.metric, b.metric)) return false;
    return a.rank > b.rank;
  });
  return ranked;
}

}  // namespace

namespace {

// The quantile_count(n, fraction) agents at one end of the ranking: the worst first, or the
// best first (@p best).
std::vector<int> quantile_end(const char* what, std::span<const RosterEntry> rosters, int self,
                              double own_metric, std::uint64_t fingerprint,
                              MetricDirection direction, double fraction, bool best) {
  check_fraction(what, fraction);
  const std::vector<Ranked> ranked =
      rank_worst_first(rosters, self, own_metric, fingerprint, direction);
  const std::size_t count = quantile_count(ranked.size(), fraction);
  std::vector<int> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(ranked[best ? ranked.size() - 1 - i : i].rank);
  }
  return out;
}

}  // namespace

std::vector<int> worst_ranks(std::span<const RosterEntry> rosters, int self, double own_metric,
                             std::uint64_t fingerprint, MetricDirection direction,
                             double fraction) {
  return quantile_end("worst_ranks", rosters, self, own_metric, fingerprint, direction, fraction,
                      false);
}

std::vector<int> best_ranks(std::span<const RosterEntry> rosters, int self, double own_metric,
                            std::uint64_t fingerprint, MetricDirection direction, double fraction) {
  return quantile_end("best_ranks", rosters, self, own_metric, fingerprint, direction, fraction,
                      true);
}

namespace {

void check_reports(std::span<const MetricReport> own, const char* what) {
  if (own.empty()) {
    throw InvalidArgument(std::string("paramwin: ") + what +
                          ": no own report (the latest one is the metric being judged)");
  }
  for (std::size_t i = 1; i < own.size(); ++i) {
    if (own[i].iteration <= own[i - 1].iteration) {
      throw InvalidArgument(std::string("paramwin: ") + what +
                            ": own reports must have ascending iterations; report " +
                            std::to_string(i) + " is at iteration " +
                            std::to_string(own[i].iteration) + " after " +
                            std::to_string(own[i - 1].iteration));
    }
  }
}

// Self's report at iteration @p c: the latest at an iteration <= c (null when none is).
const MetricReport* own_at(std::span<const MetricReport> own, std::int64_t c) {
  const auto after =
      std::upper_bound(own.begin(), own.end(), c,
                       [](std::int64_t x, const MetricReport& r) { return x < r.iteration; });
  return after == own.begin() ? nullptr : &*(after - 1);
}

// One ranked agent against self at their common iteration.
struct Pairing {
  int rank;
  double theirs;  // its metric there
  double mine;    // self's metric there
};

// The agents rank_at_same_iteration() ranks besides self, each with the two metrics it is
// compared by; @p out counts the ahead and the unmatched.
std::vector<Pairing> pair_at_same_iteration(std::span<const RosterEntry> rosters, int self,
                                            std::span<const MetricReport> own,
                                            std::uint64_t fingerprint, const char* what,
                                            double fraction, SameIterationRank& out) {
  check_fraction(what, fraction);
  check_reports(own, what);
  const MetricReport& now = own.back();
  std::vector<Pairing> pairs;
  for (const RosterEntry& e : rosters) {
    if (e.rank == self || !rankable(e, fingerprint)) continue;
    MetricReport theirs{.iteration = e.status.iteration, .metric = e.status.metric};
    const MetricReport* mine = nullptr;
    if (theirs.iteration <= now.iteration) {
      mine = own_at(own, theirs.iteration);
    } else if (e.previous && e.previous->iteration <= now.iteration) {
      theirs = *e.previous;
      mine = own_at(own, theirs.iteration);
    } else {
      mine = &now;  // more than one report ahead: its latest metric against ours
      ++out.ahead;
    }
    if (mine == nullptr) {
      ++out.unmatched;
      continue;
    }
    pairs.push_back({.rank = e.rank, .theirs = theirs.metric, .mine = mine->metric});
  }
  return pairs;
}

// How much better the agent of @p p did than self at their common iteration (> 0: better);
// NaN is worse than any number, and two NaNs (or two equal infinities) are level.
double lead(const Pairing& p, MetricDirection direction) {
  const bool their_nan = std::isnan(p.theirs);
  const bool my_nan = std::isnan(p.mine);
  if (their_nan || my_nan) {
    if (their_nan && my_nan) return 0.0;
    return their_nan ? -INFINITY : INFINITY;
  }
  const double d =
      direction == MetricDirection::lower_is_better ? p.mine - p.theirs : p.theirs - p.mine;
  return std::isnan(d) ? 0.0 : d;  // two equal infinities are level
}

}  // namespace

SameIterationRank rank_at_same_iteration(std::span<const RosterEntry> rosters, int self,
                                         std::span<const MetricReport> own_reports,
                                         std::uint64_t fingerprint, MetricDirection direction,
                                         double fraction) {
  SameIterationRank out;
  const std::vector<Pairing> pairs =
      pair_at_same_iteration(rosters, self, own_reports, fingerprint, "rank_at_same_iteration",
                             fraction, out);
  out.ranked = 1 + pairs.size();
  for (const Pairing& p : pairs) {
    const bool worse = is_better(direction, p.mine, p.theirs) ||
                       (!is_better(direction, p.theirs, p.mine) && p.rank > self);
    if (worse) ++out.worse;
  }
  out.count = quantile_count(out.ranked, fraction);
  out.worst = out.worse < out.count;
  return out;
}

std::vector<int> best_at_same_iteration(std::span<const RosterEntry> rosters, int self,
                                        std::span<const MetricReport> own_reports,
                                        std::uint64_t fingerprint, MetricDirection direction,
                                        double fraction) {
  SameIterationRank counts;
  std::vector<Pairing> pairs = pair_at_same_iteration(rosters, self, own_reports, fingerprint,
                                                      "best_at_same_iteration", fraction, counts);
  const std::size_t count = quantile_count(1 + pairs.size(), fraction);
  // Self against itself: a lead of 0 (lead() makes two NaNs or equal infinities level).
  pairs.push_back(
      {.rank = self, .theirs = own_reports.back().metric, .mine = own_reports.back().metric});
  std::vector<std::pair<double, int>> ranked;
  ranked.reserve(pairs.size());
  for (const Pairing& p : pairs) ranked.emplace_back(lead(p, direction), p.rank);
  // Best first: the largest lead; equal leads, the lower rank (worst_ranks' ties reversed).
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  });
  std::vector<int> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) out.push_back(ranked[i].second);
  return out;
}

std::vector<double> fitness_weights(std::span<const double> metrics, MetricDirection direction,
                                    FitnessWeighting weighting, double temperature) {
  const std::size_t n = metrics.size();
  std::vector<double> w(n, 0.0);
  if (n == 0) {
    return w;
  }
  if (weighting == FitnessWeighting::rank) {
    // Order best first; a group of equal metrics shares the mean of its positions' weights.
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    const auto better = [&](std::size_t a, std::size_t b) {
      const double ma = std::isfinite(metrics[a]) ? metrics[a] : std::nan("");
      const double mb = std::isfinite(metrics[b]) ? metrics[b] : std::nan("");
      return is_better(direction, ma, mb);
    };
    std::stable_sort(order.begin(), order.end(), better);
    std::size_t i = 0;
    while (i < n) {
      std::size_t j = i + 1;
      while (j < n && !better(order[i], order[j]) && !better(order[j], order[i])) ++j;
      // Positions i..j-1 weigh n-i .. n-j+1; their mean:
      const double mean = (static_cast<double>(n - i) + static_cast<double>(n - j + 1)) / 2.0;
      for (std::size_t p = i; p < j; ++p) w[order[p]] = mean;
      i = j;
    }
  } else {
    if (!(temperature > 0.0) || !std::isfinite(temperature)) {
      throw InvalidArgument("paramwin: fitness_weights: temperature must be finite and > 0");
    }
    std::vector<double> score(n);
    double best = -INFINITY;
    double worst = INFINITY;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isfinite(metrics[i])) {
        score[i] = direction == MetricDirection::lower_is_better ? -metrics[i] : metrics[i];
        best = std::max(best, score[i]);
        worst = std::min(worst, score[i]);
      }
    }
    if (!std::isfinite(best)) {
      best = worst = 0.0;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const double s = std::isfinite(metrics[i]) ? score[i] : worst;
      // Floor keeps every weight positive even when exp underflows.
      w[i] = std::max(std::exp((s - best) / temperature), 1e-300);
    }
  }
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= sum;
  return w;
}

}  // namespace paramwin
