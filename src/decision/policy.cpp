// Policy: age, warm-up, cooldown, triggers, donor selection and mixing weights.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "decision/eligibility.hpp"
#include "decision/pb2.hpp"
#include "decision/random.hpp"
#include "paramwin/error.hpp"
#include "paramwin/policy.hpp"

namespace paramwin {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27U)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31U);
}

// Independent streams per (seed, rank, purpose): an age sequence does not depend on how many
// selections happened, so drawn ages are reproducible whatever the population's timing.
std::mt19937_64 stream(std::uint64_t seed, int rank, std::uint64_t purpose) {
  const std::uint64_t s =
      splitmix64(splitmix64(seed) ^ splitmix64(static_cast<std::uint64_t>(rank) + 1) ^
                 splitmix64(purpose * 0x632be59bd9b4e019ULL));
  return std::mt19937_64(s);
}

using detail::below;

}  // namespace

Policy::Policy(AgentOptions options, int rank, int population)
    : options_(std::move(options)), rank_(rank), population_(population) {
  validate(options_, population_);
  if (rank_ < 0 || rank_ >= population_) {
    throw InvalidArgument("paramwin: Policy: rank " + std::to_string(rank_) +
                          " is outside the population [0, " + std::to_string(population_) + ")");
  }
  age_rng_ = stream(options_.seed, rank_, 1);
  select_rng_ = stream(options_.seed, rank_, 2);
  reset_rng_ = stream(options_.seed, rank_, 3);
  explore_rng_ = stream(options_.seed, rank_, 4);
  max_age_ = draw_max_age();
  if (options_.explore.kind == ExploreKind::pb2) {
    pb2_ = std::make_unique<detail::Pb2Explorer>(options_.explore.rules, options_.explore.pb2,
                                                 options_.direction);
  }
}

Policy::Policy(const Policy& other)
    : options_(other.options_),
      rank_(other.rank_),
      population_(other.population_),
      age_rng_(other.age_rng_),
      select_rng_(other.select_rng_),
      reset_rng_(other.reset_rng_),
      explore_rng_(other.explore_rng_),
      steps_(other.steps_),
      age_(other.age_),
      max_age_(other.max_age_),
      rebirth_step_(other.rebirth_step_),
      generation_(other.generation_),
      pending_(other.pending_),
      reports_(other.reports_),
      pb2_(other.pb2_ ? std::make_unique<detail::Pb2Explorer>(*other.pb2_) : nullptr),
      explore_note_(other.explore_note_) {}

Policy& Policy::operator=(const Policy& other) {
  if (this != &other) {
    Policy copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Policy::Policy(Policy&& other) noexcept = default;
Policy& Policy::operator=(Policy&& other) noexcept = default;
Policy::~Policy() = default;

void Policy::observe(std::span<const RosterEntry> rosters, std::uint64_t fingerprint) {
  if (pb2_ != nullptr) pb2_->observe(rosters, fingerprint);
}

void Policy::observe_rebirth(std::int64_t iteration, double metric, const Hyperparameters& hyper) {
  if (pb2_ != nullptr) {
    pb2_->start_interval(rank_, generation_, iteration, metric, hyper);
  }
}

std::size_t Policy::pb2_observations() const noexcept {
  return pb2_ != nullptr ? pb2_->observations().size() : 0;
}

std::int64_t Policy::draw_max_age() {
  const AgeTrigger& a = options_.triggers.age;
  const auto span = static_cast<std::uint64_t>(a.hi - a.lo) + 1;
  return a.lo + static_cast<std::int64_t>(below(age_rng_, span));
}

bool Policy::death_allowed() const noexcept {
  const TriggerOptions& t = options_.triggers;
  if (steps_ <= t.warmup) {
    return false;
  }
  return generation_ == 0 || steps_ - rebirth_step_ > t.cooldown;
}

DeathReason Policy::decide(std::int64_t iteration, double metric, const RosterReader& rosters,
                           std::uint64_t fingerprint) {
  ++steps_;
  ++age_;
  const std::vector<MetricReport> reports = reports_;
  record_report(iteration, metric);
  try {
    return decide_now(iteration, metric, rosters, fingerprint);
  } catch (...) {
    // A throwing custom trigger or roster read leaves the policy as if the step never ran.
    --steps_;
    --age_;
    reports_ = reports;
    throw;
  }
}

void Policy::record_report(std::int64_t iteration, double metric) {
  if (!options_.triggers.worst_fraction.same_iteration) return;
  // The same iteration again replaces its report; an earlier one (a trainer that went back)
  // starts the history anew.
  if (!reports_.empty() && reports_.back().iteration >= iteration) {
    if (reports_.back().iteration > iteration) reports_.clear();
    else reports_.pop_back();
  }
  reports_.push_back({.iteration = iteration, .metric = metric});
  if (reports_.size() > kReportHistory) reports_.erase(reports_.begin());
}

DeathReason Policy::decide_now(std::int64_t iteration, double metric, const RosterReader& rosters,
                               std::uint64_t fingerprint) {
  if (pending_ == DeathReason::joined) {
    return pending_;  // a replacement's first step: no warm-up or cooldown holds it
  }
  if (!death_allowed()) {
    return DeathReason::none;
  }
  if (pending_ != DeathReason::none) {
    return pending_;
  }
  const TriggerOptions& t = options_.triggers;
  DeathReason reason = DeathReason::none;
  if (t.age.enabled && age_ >= max_age_) {
    reason = DeathReason::age;
  } else if (t.threshold.enabled && is_better(options_.direction, t.threshold.value, metric)) {
    reason = DeathReason::threshold;
  } else if (t.worst_fraction.enabled && steps_ % t.worst_fraction.every == 0 &&
             t.worst_fraction.fraction > 0.0) {
    const std::vector<RosterEntry> all = rosters ? rosters() : std::vector<RosterEntry>{};
    if (t.worst_fraction.same_iteration) {
      if (rank_at_same_iteration(all, rank_, reports_, fingerprint, options_.direction,
                                 t.worst_fraction.fraction)
              .worst) {
        reason = DeathReason::worst_fraction;
      }
    } else {
      const std::vector<int> worst = worst_ranks(all, rank_, metric, fingerprint,
                                                 options_.direction, t.worst_fraction.fraction);
      if (std::find(worst.begin(), worst.end(), rank_) != worst.end()) {
        reason = DeathReason::worst_fraction;
      }
    }
  }
  if (reason == DeathReason::none && t.custom) {
    const TriggerContext ctx{.rank = rank_,
                             .population = population_,
                             .iteration = iteration,
                             .step = steps_,
                             .age = age_,
                             .max_age = max_age_,
                             .metric = metric,
                             .generation = generation_};
    if (t.custom(ctx)) {
      reason = DeathReason::custom;
    }
  }
  pending_ = reason;
  return reason;
}

std::vector<int> Policy::custom_choice(std::vector<int> eligible, std::size_t want,
                                       const std::function<double(int)>& metric_of,
                                       const std::function<bool(int, int)>& better) {
  std::sort(eligible.begin(), eligible.end(), better);
  std::vector<SelectionCandidate> candidates;
  candidates.reserve(eligible.size());
  for (const int r : eligible) candidates.push_back({.rank = r, .metric = metric_of(r)});
  // Drawn whatever the function does with it, so that later draws do not depend on it.
  const std::uint64_t seed = select_rng_();
  const SelectionContext context{.rank = rank_,
                                 .population = population_,
                                 .direction = options_.direction,
                                 .want = want,
                                 .candidates = candidates,
                                 .seed = seed};
  std::vector<int> chosen = options_.selection.custom(context);
  if (chosen.size() > want) {
    throw InvalidArgument("paramwin: selection.custom returned " + std::to_string(chosen.size()) +
                          " donors; at most " + std::to_string(want) + " were wanted");
  }
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const int r = chosen[i];
    if (std::find(eligible.begin(), eligible.end(), r) == eligible.end()) {
      std::string valid;
      for (const int c : eligible) valid += (valid.empty() ? "" : ", ") + std::to_string(c);
      throw InvalidArgument("paramwin: selection.custom returned rank " + std::to_string(r) +
                            ", which is not a candidate (candidates: " + valid + ")");
    }
    if (std::find(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(i), r) !=
        chosen.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw InvalidArgument("paramwin: selection.custom returned rank " + std::to_string(r) +
                            " twice");
    }
  }
  return chosen;
}

namespace {

bool contains(std::span<const int> ranks, int r) {
  return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
}

// Why select_donors found fewer than k donors: the count, then every other agent left out
// and why (detail::ineligibility's reasons, plus "excluded" and "not in the top quantile").
std::string shortfall_message(std::span<const RosterEntry> rosters, int self,
                              std::uint64_t fingerprint, std::span<const int> exclude,
                              std::span<const int> outside_top, double bound, double now, int k,
                              std::size_t eligible) {
  std::string why =
      "need " + std::to_string(k) + " donor(s) but only " + std::to_string(eligible) + " eligible";
  std::string skipped;
  for (const RosterEntry& e : rosters) {
    if (e.rank == self) continue;
    std::string reason;
    if (contains(exclude, e.rank)) {
      reason = "excluded";
    } else {
      reason =
          detail::describe(detail::ineligibility(e, self, fingerprint, bound, now), e, bound, now);
      if (reason.empty() && contains(outside_top, e.rank)) reason = "not in the top quantile";
    }
    if (!reason.empty()) {
      skipped += (skipped.empty() ? "" : ", ") + std::string("rank ") + std::to_string(e.rank) +
                 " " + reason;
    }
  }
  if (!skipped.empty()) why += " (" + skipped + ")";
  return why;
}

// @p want donors of @p eligible for the kinds drawn from the selection stream (uniform,
// truncation: uniform among the top quantile's eligible agents; fittest; tournament).
std::vector<int> draw_donors(const SelectionOptions& s, const std::vector<int>& eligible,
                             std::size_t want, std::mt19937_64& rng,
                             const std::function<bool(int, int)>& better) {
  std::vector<int> chosen;
  chosen.reserve(want);
  std::vector<int> pool = eligible;
  switch (s.kind) {
    case SelectionKind::truncation:
    case SelectionKind::uniform:
      for (std::size_t i = 0; i < want; ++i) {
        const std::size_t j = i + static_cast<std::size_t>(below(rng, pool.size() - i));
        std::swap(pool[i], pool[j]);
        chosen.push_back(pool[i]);
      }
      break;
    case SelectionKind::fittest:
      std::sort(pool.begin(), pool.end(), better);
      chosen.assign(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(want));
      break;
    case SelectionKind::tournament:
      for (std::size_t pick = 0; pick < want; ++pick) {
        const std::size_t t = std::min(static_cast<std::size_t>(s.tournament_size), pool.size());
        std::vector<std::size_t> idx(pool.size());
        for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        std::size_t winner = 0;
        for (std::size_t i = 0; i < t; ++i) {
          const std::size_t j = i + static_cast<std::size_t>(below(rng, idx.size() - i));
          std::swap(idx[i], idx[j]);
          if (i == 0 || better(pool[idx[i]], pool[winner])) winner = idx[i];
        }
        chosen.push_back(pool[winner]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(winner));
      }
      break;
    case SelectionKind::custom: break;  // the caller's Policy::custom_choice
  }
  return chosen;
}

}  // namespace

DonorChoice Policy::select_donors(std::span<const RosterEntry> rosters, std::uint64_t fingerprint,
                                  std::span<const int> exclude, double now) {
  const SelectionOptions& s = options_.selection;
  const double bound = s.max_staleness_seconds;
  std::vector<int> eligible = eligible_donors(rosters, rank_, fingerprint, bound, now);
  std::erase_if(eligible, [&](int r) { return contains(exclude, r); });
  const auto metric_of = [&](int r) {
    for (const RosterEntry& e : rosters) {
      if (e.rank == r) return e.status.metric;
    }
    return 0.0;
  };
  // Best first; equal metrics: the lower rank first (deterministic).
  const auto better = [&](int a, int b) {
    const double ma = metric_of(a);
    const double mb = metric_of(b);
    if (is_better(options_.direction, ma, mb)) return true;
    if (is_better(options_.direction, mb, ma)) return false;
    return a < b;
  };

  // Truncation: only the eligible agents of the top quantile are candidates.
  std::vector<int> outside_top;
  if (s.kind == SelectionKind::truncation) {
    std::vector<int> top;
    if (options_.triggers.worst_fraction.same_iteration && !reports_.empty()) {
      top = best_at_same_iteration(rosters, rank_, reports_, fingerprint, options_.direction,
                                   selection_quantile(options_));
    } else {
      double own = std::nan("");
      for (const RosterEntry& e : rosters) {
        if (e.rank == rank_) own = e.status.metric;
      }
      top = best_ranks(rosters, rank_, own, fingerprint, options_.direction,
                       selection_quantile(options_));
    }
    std::erase_if(eligible, [&](int r) {
      if (contains(top, r)) return false;
      outside_top.push_back(r);
      return true;
    });
  }

  DonorChoice choice;
  choice.candidates = eligible.size();
  auto want = static_cast<std::size_t>(s.k);
  if (eligible.size() < want) {
    choice.shortfall = shortfall_message(rosters, rank_, fingerprint, exclude, outside_top, bound,
                                         now, s.k, eligible.size());
    switch (s.shortfall) {
      case Shortfall::error:
        throw DonorError(-1, "paramwin: agent " + std::to_string(rank_) + ": " + choice.shortfall +
                                 "; set selection.shortfall to clamp or defer to tolerate this");
      case Shortfall::defer: return choice;
      case Shortfall::clamp: want = eligible.size(); break;
    }
  }

  std::vector<int> chosen;
  if (s.kind != SelectionKind::custom) {
    chosen = draw_donors(s, eligible, want, select_rng_, better);
  } else if (want > 0) {
    chosen = custom_choice(eligible, want, metric_of, better);
    if (chosen.empty()) {
      choice.shortfall = "the custom selection chose no donor";
      return choice;
    }
  }
  std::sort(chosen.begin(), chosen.end(), better);
  choice.ranks = chosen;
  for (int r : chosen) choice.metrics.push_back(metric_of(r));
  return choice;
}

std::vector<double> Policy::mixing_weights(std::span<const double> metrics_best_first) const {
  const MixingOptions& m = options_.mixing;
  if (!m.weights.empty()) {
    const std::size_t n = std::min(metrics_best_first.size(), m.weights.size());
    std::vector<double> w(m.weights.begin(), m.weights.begin() + static_cast<std::ptrdiff_t>(n));
    double sum = 0.0;
    for (double x : w) sum += x;
    for (double& x : w) x /= sum;
    return w;
  }
  return fitness_weights(metrics_best_first, options_.direction, m.weighting, m.temperature);
}

void Policy::reborn() {
  // The reports so far were the dead agent's: none of them is this one's to be ranked by.
  reports_.clear();
  age_ = 0;
  ++generation_;
  max_age_ = draw_max_age();
  rebirth_step_ = steps_;
  pending_ = DeathReason::none;
}

Policy::State Policy::state() const {
  std::ostringstream out;
  out << age_rng_ << ' ' << select_rng_ << ' ' << reset_rng_ << ' ' << explore_rng_;
  return State{.streams = out.str(),
               .steps = steps_,
               .age = age_,
               .max_age = max_age_,
               .rebirth_step = rebirth_step_,
               .generation = generation_,
               .pending = pending_};
}

void Policy::restore(const State& state) {
  std::istringstream in(state.streams);
  std::mt19937_64 age;
  std::mt19937_64 select;
  std::mt19937_64 reset;
  std::mt19937_64 explore;
  in >> age >> select >> reset >> explore;
  if (in.fail()) {
    throw InvalidArgument("paramwin: Policy::restore: the random streams do not parse");
  }
  if (state.steps < 0 || state.age < 0 || state.age > state.steps || state.max_age < 1 ||
      state.rebirth_step < 0 || state.rebirth_step > state.steps ||
      state.pending > DeathReason::joined) {
    throw InvalidArgument("paramwin: Policy::restore: counters out of range (steps " +
                          std::to_string(state.steps) + ", age " + std::to_string(state.age) +
                          ", max age " + std::to_string(state.max_age) + ")");
  }
  age_rng_ = age;
  select_rng_ = select;
  reset_rng_ = reset;
  explore_rng_ = explore;
  steps_ = state.steps;
  age_ = state.age;
  max_age_ = state.max_age;
  rebirth_step_ = state.rebirth_step;
  generation_ = state.generation;
  pending_ = state.pending;
}

std::uint64_t Policy::next_reset_seed() { return reset_rng_(); }

Hyperparameters Policy::exploit_explore(const Hyperparameters& own,
                                        std::span<const Hyperparameters> donors,
                                        std::span<const double> weights) {
  explore_note_.clear();
  if (own.empty()) return own;
  const ExploreOptions& x = options_.explore;
  Hyperparameters out = inherit_hyperparameters(x, own, donors, weights);
  bool explored = false;
  if (pb2_ != nullptr) {
    const detail::Pb2Result r = pb2_->explore(out, explore_rng_);
    explore_note_ = r.note;
    explored = r.used_gp;
  }
  if (!explored) explore_hyperparameters(x, out, explore_rng_);
  // Drawn whether or not a custom function is set: the built-in draws that follow do not
  // depend on it.
  const std::uint64_t seed = explore_rng_();
  if (x.custom) {
    const ExploreContext context{.rank = rank_,
                                 .generation = generation_ + 1,
                                 .before = &own,
                                 .donors = donors,
                                 .weights = weights,
                                 .seed = seed};
    x.custom(context, out);
    if (!(out.specs().size() == own.specs().size() &&
          std::equal(out.specs().begin(), out.specs().end(), own.specs().begin()))) {
      throw InvalidArgument("paramwin: explore.custom changed the hyperparameters' declarations");
    }
  }
  return out;
}

}  // namespace paramwin
