// Policy: age, warm-up, cooldown, triggers, donor selection and mixing weights.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "agent/pb2.hpp"
#include "agent/random.hpp"
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
    pb2_ = detail::Pb2Slot(std::make_unique<detail::Pb2Explorer>(options_.explore.rules,
                                                                 options_.explore.pb2,
                                                                 options_.direction));
  }
}

void Policy::observe(std::span<const RosterEntry> rosters, std::uint64_t fingerprint) {
  if (pb2_.get() != nullptr) pb2_.get()->observe(rosters, fingerprint);
}

void Policy::observe_rebirth(std::int64_t iteration, double metric, const Hyperparameters& hyper) {
  if (pb2_.get() != nullptr) {
    pb2_.get()->start_interval(rank_, generation_, iteration, metric, hyper);
  }
}

std::size_t Policy::pb2_observations() const noexcept {
  return pb2_.get() != nullptr ? pb2_.get()->observations().size() : 0;
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
  try {
    return decide_now(iteration, metric, rosters, fingerprint);
  } catch (...) {
    // A throwing custom trigger or roster read leaves the policy as if the step never ran.
    --steps_;
    --age_;
    throw;
  }
}

DeathReason Policy::decide_now(std::int64_t iteration, double metric, const RosterReader& rosters,
                               std::uint64_t fingerprint) {
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
    const std::vector<int> worst =
        worst_ranks(all, rank_, metric, fingerprint, options_.direction, t.worst_fraction.fraction);
    if (std::find(worst.begin(), worst.end(), rank_) != worst.end()) {
      reason = DeathReason::worst_fraction;
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

DonorChoice Policy::select_donors(std::span<const RosterEntry> rosters, std::uint64_t fingerprint,
                                  std::span<const int> exclude, double now) {
  const double bound = options_.selection.max_staleness_seconds;
  std::vector<int> eligible = eligible_donors(rosters, rank_, fingerprint, bound, now);
  std::erase_if(eligible, [&](int r) {
    return std::find(exclude.begin(), exclude.end(), r) != exclude.end();
  });
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

  const SelectionOptions& s = options_.selection;
  // Truncation: only the eligible agents of the top quantile are candidates.
  std::vector<int> outside_top;
  if (s.kind == SelectionKind::truncation) {
    double own = std::nan("");
    for (const RosterEntry& e : rosters) {
      if (e.rank == rank_) own = e.status.metric;
    }
    const std::vector<int> top = best_ranks(rosters, rank_, own, fingerprint, options_.direction,
                                            selection_quantile(options_));
    std::erase_if(eligible, [&](int r) {
      if (std::find(top.begin(), top.end(), r) != top.end()) return false;
      outside_top.push_back(r);
      return true;
    });
  }

  DonorChoice choice;
  choice.candidates = eligible.size();
  auto want = static_cast<std::size_t>(s.k);
  if (eligible.size() < want) {
    std::string why = "need " + std::to_string(s.k) + " donor(s) but only " +
                      std::to_string(eligible.size()) + " eligible";
    std::string skipped;
    for (const RosterEntry& e : rosters) {
      if (e.rank == rank_) continue;
      std::string reason;
      if (std::find(exclude.begin(), exclude.end(), e.rank) != exclude.end()) reason = "excluded";
      else if (!e.answered) reason = "did not answer the roster read in time";
      else if (e.version == 0) reason = "never published";
      else if (e.fingerprint != fingerprint) reason = "incompatible layout";
      else if (e.status.state == AgentState::rebirth) reason = "mid-rebirth";
      else if (e.status.state == AgentState::left) reason = "left";
      else if (e.status.state == AgentState::paused) reason = "paused";
      else if (bound > 0.0 && staleness_seconds(e, now) > bound) {
        reason = "stale (no publish for " + std::to_string(staleness_seconds(e, now)) +
                 " s > max_staleness_seconds " + std::to_string(bound) + ")";
      } else if (std::find(outside_top.begin(), outside_top.end(), e.rank) != outside_top.end()) {
        reason = "not in the top quantile";
      }
      if (!reason.empty()) {
        skipped += (skipped.empty() ? "" : ", ") + std::string("rank ") + std::to_string(e.rank) +
                   " " + reason;
      }
    }
    if (!skipped.empty()) why += " (" + skipped + ")";
    choice.shortfall = why;
    switch (s.shortfall) {
      case Shortfall::error:
        throw DonorError(-1, "paramwin: agent " + std::to_string(rank_) + ": " + why +
                                 "; set selection.shortfall to clamp or defer to tolerate this");
      case Shortfall::defer: return choice;
      case Shortfall::clamp: want = eligible.size(); break;
    }
  }

  std::vector<int> chosen;
  chosen.reserve(want);
  switch (s.kind) {
    case SelectionKind::truncation:  // uniform among the top quantile's eligible agents
    case SelectionKind::uniform: {
      std::vector<int> pool = eligible;
      for (std::size_t i = 0; i < want; ++i) {
        const std::size_t j = i + static_cast<std::size_t>(below(select_rng_, pool.size() - i));
        std::swap(pool[i], pool[j]);
        chosen.push_back(pool[i]);
      }
      break;
    }
    case SelectionKind::fittest: {
      std::vector<int> pool = eligible;
      std::sort(pool.begin(), pool.end(), better);
      chosen.assign(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(want));
      break;
    }
    case SelectionKind::tournament: {
      std::vector<int> pool = eligible;
      for (std::size_t pick = 0; pick < want; ++pick) {
        const std::size_t t = std::min(static_cast<std::size_t>(s.tournament_size), pool.size());
        std::vector<std::size_t> idx(pool.size());
        for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        std::size_t winner = 0;
        for (std::size_t i = 0; i < t; ++i) {
          const std::size_t j = i + static_cast<std::size_t>(below(select_rng_, idx.size() - i));
          std::swap(idx[i], idx[j]);
          if (i == 0 || better(pool[idx[i]], pool[winner])) winner = idx[i];
        }
        chosen.push_back(pool[winner]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(winner));
      }
      break;
    }
    case SelectionKind::custom:
      if (want > 0) {
        chosen = custom_choice(eligible, want, metric_of, better);
        if (chosen.empty()) {
          choice.shortfall = "the custom selection chose no donor";
          return choice;
        }
      }
      break;
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
      state.pending > DeathReason::custom) {
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
  if (pb2_.get() != nullptr) {
    const detail::Pb2Result r = pb2_.get()->explore(out, explore_rng_);
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
