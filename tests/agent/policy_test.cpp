// Serial tests of the policies: age draws, triggers, warm-up, cooldown, selection, weights,
// validation and configuration from strings, event JSON and statistics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <vector>

#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/policy.hpp"

namespace pw = paramwin;

namespace {

constexpr std::uint64_t kFp = 0xabcdefULL;

pw::RosterEntry entry(int rank, double metric, std::uint64_t version = 1,
                      pw::AgentState state = pw::AgentState::active, std::uint64_t fp = kFp) {
  pw::RosterEntry e;
  e.rank = rank;
  e.version = version;
  e.fingerprint = fp;
  e.status.metric = metric;
  e.status.state = state;
  return e;
}

pw::AgentOptions age_only(std::int64_t lo, std::int64_t hi, std::uint64_t seed = 1) {
  pw::AgentOptions o;
  o.seed = seed;
  o.triggers.age = {.enabled = true, .lo = lo, .hi = hi};
  o.selection.k = 1;
  return o;
}

std::vector<std::int64_t> max_ages(const pw::AgentOptions& o, int rank, int n) {
  pw::Policy p(o, rank, 4);
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(p.max_age());
    p.reborn();
  }
  return out;
}

pw::DeathReason step(pw::Policy& p, double metric = 0.0,
                     const std::vector<pw::RosterEntry>& rosters = {}) {
  return p.decide(
      p.steps() + 1, metric, [&] { return rosters; }, kFp);
}

// --- age ----------------------------------------------------------------------------------

TEST(AgeTrigger, DrawsStayInsideTheRangeAndCoverIt) {
  const auto ages = max_ages(age_only(5, 9), 0, 2000);
  std::set<std::int64_t> seen(ages.begin(), ages.end());
  EXPECT_EQ(seen, (std::set<std::int64_t>{5, 6, 7, 8, 9}));
  const auto defaults = max_ages(pw::AgentOptions{}, 1, 2000);
  for (std::int64_t a : defaults) {
    ASSERT_GE(a, 50);
    ASSERT_LE(a, 150);
  }
  const auto single = max_ages(age_only(7, 7), 2, 10);
  EXPECT_EQ(single, std::vector<std::int64_t>(10, 7));
}

TEST(AgeTrigger, DrawsAreReproducibleFromTheSeedAndDifferPerAgent) {
  EXPECT_EQ(max_ages(age_only(50, 150, 42), 1, 50), max_ages(age_only(50, 150, 42), 1, 50));
  EXPECT_NE(max_ages(age_only(50, 150, 42), 1, 50), max_ages(age_only(50, 150, 43), 1, 50));
  EXPECT_NE(max_ages(age_only(50, 150, 42), 1, 50), max_ages(age_only(50, 150, 42), 2, 50));
}

TEST(AgeTrigger, DiesExactlyAtTheDrawnAgeAndStaysPendingUntilReborn) {
  pw::Policy p(age_only(3, 12, 9), 0, 4);
  for (int life = 0; life < 20; ++life) {
    const std::int64_t max_age = p.max_age();
    for (std::int64_t a = 1; a < max_age; ++a) {
      ASSERT_EQ(step(p), pw::DeathReason::none) << "age " << a << " max " << max_age;
    }
    ASSERT_EQ(step(p), pw::DeathReason::age);
    EXPECT_EQ(p.age(), max_age);
    // Not reborn (e.g. deferred): the death stays due.
    EXPECT_EQ(step(p), pw::DeathReason::age);
    EXPECT_EQ(p.pending(), pw::DeathReason::age);
    const std::uint64_t gen = p.generation();
    p.reborn();
    EXPECT_EQ(p.generation(), gen + 1);
    EXPECT_EQ(p.age(), 0);
    EXPECT_EQ(p.pending(), pw::DeathReason::none);
  }
}

// --- threshold ----------------------------------------------------------------------------

TEST(ThresholdTrigger, HonoursTheMetricDirection) {
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.threshold = {.enabled = true, .value = 1.0};
  o.selection.k = 1;
  {
    pw::Policy loss(o, 0, 4);  // lower is better: a loss above 1 dies
    EXPECT_EQ(step(loss, 0.5), pw::DeathReason::none);
    EXPECT_EQ(step(loss, 1.0), pw::DeathReason::none);  // equal is not worse
    EXPECT_EQ(step(loss, 1.5), pw::DeathReason::threshold);
  }
  {
    pw::Policy nan_loss(o, 0, 4);
    EXPECT_EQ(step(nan_loss, std::nan("")), pw::DeathReason::threshold);  // diverged
  }
  o.direction = pw::MetricDirection::higher_is_better;
  {
    pw::Policy reward(o, 0, 4);  // higher is better: a reward below 1 dies
    EXPECT_EQ(step(reward, 1.5), pw::DeathReason::none);
    EXPECT_EQ(step(reward, 1.0), pw::DeathReason::none);
    EXPECT_EQ(step(reward, 0.5), pw::DeathReason::threshold);
  }
}

// --- warm-up and cooldown -----------------------------------------------------------------

TEST(WarmupAndCooldown, NoDeathDuringWarmupNorWithinCooldownOfARebirth) {
  pw::AgentOptions o = age_only(1, 1);
  o.triggers.warmup = 5;
  o.triggers.cooldown = 3;
  pw::Policy p(o, 0, 4);
  for (int s = 1; s <= 5; ++s) {
    EXPECT_FALSE(p.death_allowed());
    EXPECT_EQ(step(p), pw::DeathReason::none) << "warm-up step " << s;
  }
  EXPECT_EQ(step(p), pw::DeathReason::age);  // step 6: first allowed, age 6 >= 1
  EXPECT_EQ(p.steps(), 6);
  p.reborn();
  for (int s = 7; s <= 9; ++s) {
    EXPECT_EQ(step(p), pw::DeathReason::none) << "cooldown step " << s;
  }
  EXPECT_EQ(step(p), pw::DeathReason::age);  // step 10 = rebirth step 6 + cooldown 3 + 1
  p.reborn();
  EXPECT_EQ(step(p), pw::DeathReason::none);
}

TEST(WarmupAndCooldown, ZeroCooldownAllowsTheNextStep) {
  pw::Policy p(age_only(1, 1), 0, 4);
  EXPECT_EQ(step(p), pw::DeathReason::age);
  p.reborn();
  EXPECT_EQ(step(p), pw::DeathReason::age);
}

// --- worst fraction -----------------------------------------------------------------------

TEST(WorstRanks, RanksByMetricTiesByRankNanWorst) {
  std::vector<pw::RosterEntry> r{entry(0, 1.0), entry(1, 3.0), entry(2, 2.0), entry(3, 3.0)};
  using D = pw::MetricDirection;
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 0.5), (std::vector<int>{3, 1}));
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::higher_is_better, 0.5), (std::vector<int>{0, 2}));
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 0.0), std::vector<int>{});
  // ceil(fraction * n), capped at n / 2 (Ray Tune's PBT): fraction 1 kills half.
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 1.0).size(), 2U);
  // ceil(0.3 * 4) = 2; ceil(0.2 * 4) = 1 (floor would kill nobody at 0.2).
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 0.3), (std::vector<int>{3, 1}));
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 0.2), std::vector<int>{3});
  // The caller's own metric overrides its (possibly stale) roster entry.
  EXPECT_EQ(pw::worst_ranks(r, 0, 9.0, kFp, D::lower_is_better, 0.25), std::vector<int>{0});
  // NaN is the worst, in either direction.
  r[2].status.metric = std::nan("");
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 0.25), std::vector<int>{2});
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, D::higher_is_better, 0.25), std::vector<int>{2});
  // All equal: the highest ranks are the worst.
  std::vector<pw::RosterEntry> tie{entry(0, 5), entry(1, 5), entry(2, 5), entry(3, 5)};
  EXPECT_EQ(pw::worst_ranks(tie, 1, 5, kFp, D::lower_is_better, 0.5), (std::vector<int>{3, 2}));
  EXPECT_THROW((void)pw::worst_ranks(r, 0, 1.0, kFp, D::lower_is_better, 1.5), pw::InvalidArgument);
}

TEST(WorstRanks, OnlyRanksActiveOrRebirthAgentsOfTheSameLayout) {
  std::vector<pw::RosterEntry> r{entry(0, 1.0),
                                 entry(1, 9.0, 1, pw::AgentState::left),
                                 entry(2, 8.0, 0, pw::AgentState::fresh),
                                 entry(3, 7.0, 1, pw::AgentState::active, kFp + 1),
                                 entry(4, 6.0, 1, pw::AgentState::rebirth),
                                 entry(5, 2.0),
                                 entry(6, 99.0, 1, pw::AgentState::paused)};
  // Ranked: 0 (1.0), 4 (6.0, mid-rebirth counts with its last metric), 5 (2.0): n = 3, one
  // at each end. Any of the others ranked would be the worst (7.0 and more).
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, pw::MetricDirection::lower_is_better, 1.0),
            (std::vector<int>{4}));
  EXPECT_EQ(pw::best_ranks(r, 0, 1.0, kFp, pw::MetricDirection::lower_is_better, 1.0),
            (std::vector<int>{0}));
  // An agent whose roster read did not answer is not ranked either.
  r[5].answered = false;
  r[5].status.metric = 100.0;
  EXPECT_EQ(pw::worst_ranks(r, 0, 1.0, kFp, pw::MetricDirection::lower_is_better, 0.5),
            (std::vector<int>{4}));
}

TEST(WorstFractionTrigger, ReadsRostersOnlyOnItsCadence) {
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.worst_fraction = {.enabled = true, .fraction = 0.5, .every = 3};
  o.selection.k = 1;
  pw::Policy p(o, 2, 4);
  const std::vector<pw::RosterEntry> r{entry(0, 1.0), entry(1, 2.0), entry(2, 3.0), entry(3, 0.5)};
  int reads = 0;
  const auto reader = [&] {
    ++reads;
    return r;
  };
  EXPECT_EQ(p.decide(1, 3.0, reader, kFp), pw::DeathReason::none);
  EXPECT_EQ(p.decide(2, 3.0, reader, kFp), pw::DeathReason::none);
  EXPECT_EQ(reads, 0);
  EXPECT_EQ(p.decide(3, 3.0, reader, kFp), pw::DeathReason::worst_fraction);
  EXPECT_EQ(reads, 1);
  p.reborn();
  // Rank 2 is now the best; rank 1 and 0 are worst.
  EXPECT_EQ(p.decide(4, 0.1, reader, kFp), pw::DeathReason::none);
  EXPECT_EQ(p.decide(5, 0.1, reader, kFp), pw::DeathReason::none);
  EXPECT_EQ(p.decide(6, 0.1, reader, kFp), pw::DeathReason::none);
  EXPECT_EQ(reads, 2);
}

TEST(CustomTrigger, SeesTheContextAndKills) {
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.selection.k = 1;
  std::vector<pw::TriggerContext> seen;
  o.triggers.custom = [&](const pw::TriggerContext& c) {
    seen.push_back(c);
    return c.iteration == 30;
  };
  pw::Policy p(o, 1, 3);
  EXPECT_EQ(p.decide(10, 0.25, {}, kFp), pw::DeathReason::none);
  EXPECT_EQ(p.decide(30, 0.5, {}, kFp), pw::DeathReason::custom);
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[1].rank, 1);
  EXPECT_EQ(seen[1].population, 3);
  EXPECT_EQ(seen[1].step, 2);
  EXPECT_EQ(seen[1].age, 2);
  EXPECT_DOUBLE_EQ(seen[1].metric, 0.5);
}

// --- selection ----------------------------------------------------------------------------

std::vector<pw::RosterEntry> population(int n) {
  std::vector<pw::RosterEntry> r;
  for (int i = 0; i < n; ++i) r.push_back(entry(i, static_cast<double>(i)));
  return r;
}

TEST(EligibleDonors, SkipsSelfUnpublishedRebirthLeftPausedAndOtherLayouts) {
  std::vector<pw::RosterEntry> r{entry(0, 0),
                                 entry(1, 0, 0),
                                 entry(2, 0, 3, pw::AgentState::rebirth),
                                 entry(3, 0, 2, pw::AgentState::left),
                                 entry(4, 0, 1, pw::AgentState::active, 7),
                                 entry(5, 0),
                                 entry(6, 0, 4, pw::AgentState::fresh),
                                 entry(7, 0, 5, pw::AgentState::paused)};
  EXPECT_EQ(pw::eligible_donors(r, 0, kFp), (std::vector<int>{5, 6}));
  EXPECT_EQ(pw::eligible_donors(r, 5, kFp), (std::vector<int>{0, 6}));
}

// A dead agent's last snapshot stays readable over shared memory and its roster still says
// active: only its staleness tells it apart, so the bound is on by default.
TEST(EligibleDonors, DefaultOptionsSkipAnAgentSilentForOverAMinute) {
  const pw::AgentOptions defaults;
  EXPECT_EQ(defaults.selection.max_staleness_seconds, pw::kDefaultMaxStalenessSeconds);
  EXPECT_EQ(pw::kDefaultMaxStalenessSeconds, 60.0);
  std::vector<pw::RosterEntry> r{entry(0, 0), entry(1, 0), entry(2, 0)};
  const double now = 1000.0;
  r[0].publish_time = now - 1.0;
  r[1].publish_time = now - 61.0;  // dead (or hung) for a minute
  r[2].publish_time = now - 59.0;
  pw::AgentOptions o = defaults;
  o.selection.k = 2;
  o.selection.shortfall = pw::Shortfall::clamp;
  pw::Policy p(o, 0, 3);
  const pw::DonorChoice c = p.select_donors(r, kFp, {}, now);
  EXPECT_EQ(c.ranks, std::vector<int>{2});
  EXPECT_NE(c.shortfall.find("rank 1 stale (no publish for 61"), std::string::npos) << c.shortfall;
  o.selection.max_staleness_seconds = 0.0;  // no bound: the dead one is eligible again
  pw::Policy unbounded(o, 0, 3);
  EXPECT_EQ(unbounded.select_donors(r, kFp, {}, now).ranks.size(), 2U);
}

pw::AgentOptions selection(pw::SelectionKind kind, int k, int t = 2,
                           pw::Shortfall shortfall = pw::Shortfall::defer) {
  pw::AgentOptions o;
  o.seed = 5;
  o.selection = {.kind = kind, .k = k, .tournament_size = t, .shortfall = shortfall};
  return o;
}

TEST(UniformSelection, DistinctNeverSelfCoversEveryoneAndIsReproducible) {
  const auto r = population(6);
  pw::Policy p(selection(pw::SelectionKind::uniform, 3), 2, 6);
  pw::Policy q(selection(pw::SelectionKind::uniform, 3), 2, 6);
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) {
    const pw::DonorChoice c = p.select_donors(r, kFp);
    ASSERT_EQ(c.ranks.size(), 3U);
    EXPECT_EQ(c.candidates, 5U);
    EXPECT_TRUE(c.shortfall.empty());
    std::set<int> distinct(c.ranks.begin(), c.ranks.end());
    ASSERT_EQ(distinct.size(), 3U);
    ASSERT_EQ(distinct.count(2), 0U) << "picked self";
    seen.insert(c.ranks.begin(), c.ranks.end());
    // Best first (metric = rank, lower is better).
    ASSERT_TRUE(std::is_sorted(c.ranks.begin(), c.ranks.end()));
    ASSERT_EQ(q.select_donors(r, kFp).ranks, c.ranks) << "same seed, same choices";
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 3, 4, 5}));
  const std::vector<int> exclude{0, 1};
  for (int i = 0; i < 50; ++i) {
    const auto c = p.select_donors(r, kFp, exclude);
    for (int d : c.ranks) ASSERT_TRUE(d >= 3 && d != 2);
  }
}

TEST(FittestSelection, TakesTheBestKInTheMetricDirection) {
  auto r = population(5);  // metric = rank
  pw::Policy low(selection(pw::SelectionKind::fittest, 2), 0, 5);
  EXPECT_EQ(low.select_donors(r, kFp).ranks, (std::vector<int>{1, 2}));
  auto o = selection(pw::SelectionKind::fittest, 2);
  o.direction = pw::MetricDirection::higher_is_better;
  pw::Policy high(o, 4, 5);
  EXPECT_EQ(high.select_donors(r, kFp).ranks, (std::vector<int>{3, 2}));
  // Ties: the lower rank first; NaN last.
  r[1].status.metric = std::nan("");
  r[3].status.metric = 2.0;
  EXPECT_EQ(low.select_donors(r, kFp).ranks, (std::vector<int>{2, 3}));
}

TEST(TournamentSelection, NeverPicksSelfAndFavoursBetterDonors) {
  const auto r = population(8);
  for (int self = 0; self < 8; ++self) {
    pw::Policy p(selection(pw::SelectionKind::tournament, 3, 3), self, 8);
    for (int i = 0; i < 200; ++i) {
      const auto c = p.select_donors(r, kFp);
      ASSERT_EQ(c.ranks.size(), 3U);
      ASSERT_EQ(std::count(c.ranks.begin(), c.ranks.end(), self), 0) << "self " << self;
      ASSERT_EQ(std::set<int>(c.ranks.begin(), c.ranks.end()).size(), 3U);
    }
  }
  // A tournament as large as the population always crowns the best.
  pw::Policy all(selection(pw::SelectionKind::tournament, 1, 7), 0, 8);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(all.select_donors(r, kFp).ranks, std::vector<int>{1});
  auto o = selection(pw::SelectionKind::tournament, 1, 7);
  o.direction = pw::MetricDirection::higher_is_better;
  pw::Policy high(o, 7, 8);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(high.select_donors(r, kFp).ranks, std::vector<int>{6});
  // Size 2 of 7: better donors win more often than worse ones.
  pw::Policy two(selection(pw::SelectionKind::tournament, 1, 2), 0, 8);
  std::vector<int> wins(8, 0);
  for (int i = 0; i < 4000; ++i)
    ++wins[static_cast<std::size_t>(two.select_donors(r, kFp).ranks[0])];
  EXPECT_GT(wins[1], wins[4]);
  EXPECT_GT(wins[4], wins[7]);
  EXPECT_EQ(wins[7], 0);  // the worst can never win a tournament of two distinct entrants
}

TEST(Shortfall, ErrorClampOrDefer) {
  std::vector<pw::RosterEntry> r{entry(0, 0), entry(1, 1), entry(2, 2, 0),
                                 entry(3, 3, 1, pw::AgentState::rebirth)};
  pw::Policy err(selection(pw::SelectionKind::uniform, 3, 2, pw::Shortfall::error), 0, 4);
  try {
    (void)err.select_donors(r, kFp);
    FAIL() << "expected DonorError";
  } catch (const pw::DonorError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("need 3"), std::string::npos) << what;
    EXPECT_NE(what.find("only 1 eligible"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 2 never published"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 3 mid-rebirth"), std::string::npos) << what;
  }
  pw::Policy clamp(selection(pw::SelectionKind::uniform, 3, 2, pw::Shortfall::clamp), 0, 4);
  const auto c = clamp.select_donors(r, kFp);
  EXPECT_EQ(c.ranks, std::vector<int>{1});
  EXPECT_FALSE(c.shortfall.empty());
  pw::Policy defer(selection(pw::SelectionKind::uniform, 3, 2, pw::Shortfall::defer), 0, 4);
  const auto d = defer.select_donors(r, kFp);
  EXPECT_TRUE(d.ranks.empty());
  EXPECT_EQ(d.candidates, 1U);
  EXPECT_NE(d.shortfall.find("never published"), std::string::npos);
}

// --- weights ------------------------------------------------------------------------------

void expect_normalised_positive(const std::vector<double>& w) {
  double sum = 0;
  for (double x : w) {
    EXPECT_GT(x, 0.0);
    sum += x;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(FitnessWeights, BetterDonorsWeighMoreInBothDirections) {
  using D = pw::MetricDirection;
  using W = pw::FitnessWeighting;
  const std::vector<double> m{0.1, 0.5, 0.9};
  for (W kind : {W::rank, W::softmax}) {
    const auto low = pw::fitness_weights(m, D::lower_is_better, kind, 0.5);
    expect_normalised_positive(low);
    EXPECT_GT(low[0], low[1]) << pw::weighting_name(kind);  // lowest loss weighs most
    EXPECT_GT(low[1], low[2]);
    const auto high = pw::fitness_weights(m, D::higher_is_better, kind, 0.5);
    expect_normalised_positive(high);
    EXPECT_LT(high[0], high[1]);  // highest reward weighs most
    EXPECT_LT(high[1], high[2]);
    // Order of the input does not matter: weights follow the metrics.
    const auto rev =
        pw::fitness_weights(std::vector<double>{0.9, 0.5, 0.1}, D::lower_is_better, kind, 0.5);
    EXPECT_DOUBLE_EQ(rev[0], low[2]);
    EXPECT_DOUBLE_EQ(rev[2], low[0]);
    // Equal metrics: equal weights; NaN: the smallest, still positive.
    const auto eq = pw::fitness_weights(std::vector<double>{2.0, 2.0}, D::lower_is_better, kind, 1);
    EXPECT_DOUBLE_EQ(eq[0], 0.5);
    EXPECT_DOUBLE_EQ(eq[1], 0.5);
    const auto nan = pw::fitness_weights(std::vector<double>{std::nan(""), 1.0, 3.0},
                                         D::lower_is_better, kind, 1);
    expect_normalised_positive(nan);
    EXPECT_GT(nan[1], nan[2]);
    EXPECT_LE(nan[0], nan[2]);
  }
  // Rank weights are exact: 3/6, 2/6, 1/6.
  const auto r = pw::fitness_weights(m, D::lower_is_better, W::rank, 1.0);
  EXPECT_DOUBLE_EQ(r[0], 3.0 / 6);
  EXPECT_DOUBLE_EQ(r[2], 1.0 / 6);
}

TEST(MixingWeights, ExplicitWeightsAreNormalisedAndTruncatedWhenClamped) {
  auto o = selection(pw::SelectionKind::fittest, 3, 2, pw::Shortfall::clamp);
  o.mixing.kind = pw::MixingKind::weighted;
  o.mixing.weights = {6, 3, 1};
  pw::Policy p(o, 0, 4);
  const auto w = p.mixing_weights(std::vector<double>{1, 2, 3});
  ASSERT_EQ(w.size(), 3U);
  EXPECT_DOUBLE_EQ(w[0], 0.6);
  EXPECT_DOUBLE_EQ(w[2], 0.1);
  const auto two = p.mixing_weights(std::vector<double>{1, 2});
  ASSERT_EQ(two.size(), 2U);
  EXPECT_DOUBLE_EQ(two[0], 6.0 / 9);
  o.mixing.weights.clear();  // fitness weights, best first in, larger first out
  pw::Policy f(o, 0, 4);
  const auto fw = f.mixing_weights(std::vector<double>{1, 2, 3});
  EXPECT_GT(fw[0], fw[1]);
  EXPECT_GT(fw[1], fw[2]);
}

// --- validation ---------------------------------------------------------------------------

void expect_invalid(const pw::AgentOptions& o, const std::string& needle, int population = 4) {
  try {
    pw::validate(o, population);
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_THROW(pw::Policy(o, 0, population), pw::InvalidArgument);
}

TEST(Validate, RejectsBadOptionsWithAClearMessage) {
  EXPECT_NO_THROW(pw::validate(pw::AgentOptions{}, 4));
  pw::AgentOptions o;
  o.triggers.age.lo = 10;
  o.triggers.age.hi = 5;
  expect_invalid(o, "lo 10 > hi 5");
  o = {};
  o.triggers.age.lo = -3;
  expect_invalid(o, "ages must be >= 1");
  o = {};
  o.triggers.worst_fraction.fraction = 1.5;
  expect_invalid(o, "outside [0, 1]");
  o.triggers.worst_fraction.fraction = -0.1;
  expect_invalid(o, "outside [0, 1]");
  o.triggers.worst_fraction.fraction = std::nan("");
  expect_invalid(o, "outside [0, 1]");
  o = {};
  o.triggers.worst_fraction.every = 0;
  expect_invalid(o, "every");
  o = {};
  o.selection.k = 0;
  expect_invalid(o, "selection.k must be >= 1");
  o.selection.k = -2;
  expect_invalid(o, "selection.k must be >= 1");
  o = {};
  o.selection.k = 4;
  expect_invalid(o, "only 3 other agent(s)");
  o.selection.shortfall = pw::Shortfall::clamp;
  EXPECT_NO_THROW(pw::validate(o, 4));
  o = {};
  o.selection.tournament_size = 0;
  expect_invalid(o, "tournament_size");
  o = {};
  o.mixing.kind = pw::MixingKind::weighted;
  o.mixing.weights = {1.0, 2.0, 3.0};
  expect_invalid(o, "3 entries but selection.k = 2");
  o.mixing.weights = {1.0, 0.0};
  expect_invalid(o, "weights[1]");
  o.mixing.weights = {1.0, -1.0};
  expect_invalid(o, "weights[1]");
  o.mixing.kind = pw::MixingKind::mean;
  o.mixing.weights = {1.0, 1.0};
  expect_invalid(o, "weights apply to 'weighted' only");
  o = {};
  o.mixing.momentum = 1.0;
  expect_invalid(o, "momentum");
  o = {};
  o.mixing.kind = pw::MixingKind::reset;
  expect_invalid(o, "reset callback");
  o.reset = [](std::span<const pw::LayerRef>, std::uint64_t) {};
  EXPECT_NO_THROW(pw::validate(o, 1));  // reset needs no donors, even alone
  o = {};
  o.mixing.kind = pw::MixingKind::weighted;
  o.mixing.weighting = pw::FitnessWeighting::softmax;
  o.mixing.temperature = 0.0;
  expect_invalid(o, "temperature");
  o = {};
  o.publish.every = 0;  // with interval_ms = 0: only explicit publish() calls (and rebirths)
  EXPECT_NO_THROW(pw::validate(o, 4));
  o.publish.interval_ms = 50;
  EXPECT_NO_THROW(pw::validate(o, 4));
  o.publish.every = -1;
  expect_invalid(o, "publish.every must be >= 0");
  o = {};
  o.paused_deaths = static_cast<pw::PausedDeaths>(7);
  expect_invalid(o, "paused_deaths is out of range");
  o = {};
  o.triggers.warmup = -1;
  expect_invalid(o, "warmup");
  o = {};
  o.triggers.cooldown = -1;
  expect_invalid(o, "cooldown");
  // A lone agent cannot find donors.
  expect_invalid(pw::AgentOptions{}, "in a population of 1", 1);
}

// --- configuration from strings -----------------------------------------------------------

TEST(ParseOptions, PausedDeathsAndThePausedState) {
  EXPECT_EQ(pw::parse_agent_options("paused_deaths=defer").paused_deaths, pw::PausedDeaths::defer);
  EXPECT_EQ(pw::parse_agent_options("paused_deaths=honor").paused_deaths, pw::PausedDeaths::honour);
  EXPECT_EQ(pw::AgentOptions{}.paused_deaths, pw::PausedDeaths::defer);
  EXPECT_EQ(pw::paused_deaths_name(pw::PausedDeaths::honour), "honour");
  EXPECT_EQ(pw::paused_deaths_name(pw::parse_paused_deaths("defer")), "defer");
  try {
    (void)pw::parse_agent_options("paused_deaths=maybe");
    ADD_FAILURE() << "accepted";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("defer, honour"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pw::state_name(pw::AgentState::paused), "paused");
  EXPECT_EQ(static_cast<int>(pw::AgentState::paused), 4);
  // Manual publishing: every = 0 and interval_ms = 0 from strings too.
  EXPECT_NO_THROW(
      pw::validate(pw::parse_agent_options("publish_every=0 publish_interval_ms=0"), 4));
}

TEST(ParseOptions, ReadsEveryKey) {
  const pw::AgentOptions o = pw::parse_agent_options(
      "seed=17 direction=reward triggers=age,threshold,worst_fraction age=20..40 threshold=0.5;"
      "worst_fraction=0.25 worst_every=5 warmup=10 cooldown=7 selection=tournament k=3\n"
      "tournament_size=4 shortfall=clamp mixing=weighted weighting=softmax temperature=0.5 "
      "weights=3,2,1 momentum=0.25 non_finite=skip_donor publish_every=4 "
      "publish_interval_ms=100 paused_deaths=honour event_log=/tmp/ev_{rank}.jsonl");
  EXPECT_EQ(o.seed, 17U);
  EXPECT_EQ(o.direction, pw::MetricDirection::higher_is_better);
  EXPECT_TRUE(o.triggers.age.enabled);
  EXPECT_TRUE(o.triggers.threshold.enabled);
  EXPECT_TRUE(o.triggers.worst_fraction.enabled);
  EXPECT_EQ(o.triggers.age.lo, 20);
  EXPECT_EQ(o.triggers.age.hi, 40);
  EXPECT_DOUBLE_EQ(o.triggers.threshold.value, 0.5);
  EXPECT_DOUBLE_EQ(o.triggers.worst_fraction.fraction, 0.25);
  EXPECT_EQ(o.triggers.worst_fraction.every, 5);
  EXPECT_EQ(o.triggers.warmup, 10);
  EXPECT_EQ(o.triggers.cooldown, 7);
  EXPECT_EQ(o.selection.kind, pw::SelectionKind::tournament);
  EXPECT_EQ(o.selection.k, 3);
  EXPECT_EQ(o.selection.tournament_size, 4);
  EXPECT_EQ(o.selection.shortfall, pw::Shortfall::clamp);
  EXPECT_EQ(o.mixing.kind, pw::MixingKind::weighted);
  EXPECT_EQ(o.mixing.weighting, pw::FitnessWeighting::softmax);
  EXPECT_DOUBLE_EQ(o.mixing.temperature, 0.5);
  EXPECT_EQ(o.mixing.weights, (std::vector<double>{3, 2, 1}));
  EXPECT_DOUBLE_EQ(o.mixing.momentum, 0.25);
  EXPECT_EQ(o.mixing.non_finite, pw::NonFinitePolicy::skip_donor);
  EXPECT_EQ(o.publish.every, 4);
  EXPECT_DOUBLE_EQ(o.publish.interval_ms, 100.0);
  EXPECT_EQ(o.paused_deaths, pw::PausedDeaths::honour);
  EXPECT_EQ(o.event_log, "/tmp/ev_{rank}.jsonl");
  EXPECT_NO_THROW(pw::validate(o, 8));

  const auto only_wf = pw::parse_agent_options({{"triggers", "worst_fraction"}, {"age", "5,9"}});
  EXPECT_FALSE(only_wf.triggers.age.enabled);
  EXPECT_TRUE(only_wf.triggers.worst_fraction.enabled);
  EXPECT_EQ(only_wf.triggers.age.lo, 5);
  EXPECT_EQ(only_wf.triggers.age.hi, 9);
  for (const char* name : {"mean", "weighted", "best", "reset"}) {
    EXPECT_EQ(pw::mixing_name(pw::parse_mixing(name)), name);
  }
  for (const char* name : {"uniform", "fittest", "tournament", "truncation", "custom"}) {
    EXPECT_EQ(pw::selection_name(pw::parse_selection(name)), name);
  }
  for (const char* name : {"age", "threshold", "worst_fraction", "custom"}) {
    EXPECT_EQ(pw::reason_name(pw::parse_trigger(name)), name);
  }
}

void expect_parse_error(std::string_view text, const std::string& needle) {
  try {
    (void)pw::parse_agent_options(text);
    ADD_FAILURE() << "expected InvalidArgument for '" << text << "'";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ParseOptions, UnknownNamesAndMalformedValuesAreClearErrors) {
  expect_parse_error("selection=uniformly",
                     "unknown selection 'uniformly' (valid: uniform, fittest, tournament, "
                     "truncation, custom");
  expect_parse_error("mixing=average", "unknown mixing 'average'");
  expect_parse_error("triggers=age,oldness", "unknown trigger 'oldness'");
  expect_parse_error("triggers=custom", "needs a callable");
  expect_parse_error("direction=sideways", "unknown metric direction");
  expect_parse_error("weighting=linear", "unknown fitness weighting");
  expect_parse_error("shortfall=maybe", "unknown shortfall policy");
  expect_parse_error("non_finite=ignore", "unknown non-finite policy");
  expect_parse_error("colour=blue", "unknown option 'colour'");
  expect_parse_error("k=two", "option 'k': 'two' is not an integer");
  expect_parse_error("k=2.5", "is not an integer");
  expect_parse_error("momentum=lots", "is not a number");
  expect_parse_error("age=50", "is not a range");
  expect_parse_error("k=2 k=3", "given twice");
  expect_parse_error("k", "is not key=value");
  // Parsed but invalid values are caught by validate(), before any training.
  EXPECT_THROW(pw::validate(pw::parse_agent_options("age=150..50"), 4), pw::InvalidArgument);
  EXPECT_THROW(pw::validate(pw::parse_agent_options("worst_fraction=2"), 4), pw::InvalidArgument);
  EXPECT_THROW(pw::validate(pw::parse_agent_options("k=0"), 4), pw::InvalidArgument);
  EXPECT_THROW(pw::validate(pw::parse_agent_options("mixing=weighted weights=1,2,3"), 4),
               pw::InvalidArgument);
}

// --- events and statistics ----------------------------------------------------------------

pw::StepEvent death_event() {
  pw::StepEvent e;
  e.rank = 3;
  e.iteration = 57;
  e.step = 58;
  e.metric = 0.25;
  e.died = true;
  e.reason = pw::DeathReason::age;
  e.age = 57;
  e.max_age = 57;
  e.next_max_age = 102;
  e.generation = 1;
  e.donors = {{.rank = 0, .version = 41, .metric = 0.125, .weight = 0.5, .bytes = 4096},
              {.rank = 2, .version = 40, .metric = std::nan(""), .weight = 0.5, .bytes = 4096}};
  e.bytes = 8192;
  e.published = true;
  e.version = 59;
  e.seconds = {.decide = 1e-6, .pull = 2e-5, .mix = 3e-6, .publish = 4e-6};
  e.note = "a \"quoted\"\nnote";
  return e;
}

TEST(EventJson, HasEveryFieldAndIsValidJsonText) {
  const std::string j = pw::to_json(death_event());
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.back(), '}');
  EXPECT_EQ(j.find('\n'), std::string::npos);
  for (const char* part :
       {"\"rank\":3", "\"iteration\":57", "\"step\":58", "\"metric\":0.25", "\"died\":true",
        "\"reason\":\"age\"", "\"age\":57", "\"max_age\":57", "\"next_max_age\":102",
        "\"generation\":1", "\"mixing\":\"mean\"",
        "\"donors\":[{\"rank\":0,\"version\":41,\"metric\":0.125,\"weight\":0.5,\"bytes\":4096,"
        "\"transport\":\"shm\",\"skipped\":false,\"staleness_s\":0.0},{\"rank\":2,\"version\":40,"
        "\"metric\":null",
        "\"bytes\":8192", "\"paused\":false", "\"published\":true", "\"publish_skipped\":false",
        "\"version\":59",
        "\"seconds\":{\"decide\":1e-06,\"pull\":2e-05,\"mix\":3e-06,\"publish\":4e-06,\"assemble\":"
        "0.0}",
        "\"note\":\"a \\\"quoted\\\"\\nnote\""}) {
    EXPECT_NE(j.find(part), std::string::npos) << part << "\nin " << j;
  }
}

// Floats keep a fraction ("0.0") and integers none, so a line read back has the same kinds.
TEST(EventJson, ReadsBackWhatItWrites) {
  pw::StepEvent e = death_event();
  e.donors[1].transport = pw::Transport::rma;
  e.donors[1].skipped = true;
  e.donors[1].staleness_seconds = 3.0;
  e.mixing = pw::MixingKind::weighted;
  e.paused = true;
  e.publish_attempts = 2;
  e.seconds.assemble = 0.5;
  const std::string j = pw::to_json(e);
  const pw::StepEvent back = pw::step_event_from_json(j);
  EXPECT_EQ(pw::to_json(back), j);
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.step, 58);
  EXPECT_EQ(back.reason, pw::DeathReason::age);
  EXPECT_EQ(back.mixing, pw::MixingKind::weighted);
  ASSERT_EQ(back.donors.size(), 2U);
  EXPECT_EQ(back.donors[0].version, 41U);
  EXPECT_EQ(back.donors[1].transport, pw::Transport::rma);
  EXPECT_TRUE(back.donors[1].skipped);
  EXPECT_TRUE(std::isnan(back.donors[1].metric));  // written as null
  EXPECT_EQ(back.donors[1].staleness_seconds, 3.0);
  EXPECT_EQ(back.seconds.pull, 2e-5);
  EXPECT_EQ(back.seconds.assemble, 0.5);
  EXPECT_EQ(back.publish_attempts, 2U);
  EXPECT_EQ(back.note, e.note);
  EXPECT_TRUE(back.hyper.empty());
  // A line without the optional fields: no note, hyper_before equal to hyper.
  const pw::StepEvent quiet;
  EXPECT_EQ(pw::to_json(pw::step_event_from_json(pw::to_json(quiet))), pw::to_json(quiet));
  for (const char* bad : {"", "[1]", "{\"rank\":1}", "{\"rank\":", "not json"}) {
    EXPECT_THROW((void)pw::step_event_from_json(bad), pw::InvalidArgument) << bad;
  }
  std::string wrong_kind = j;
  wrong_kind.replace(wrong_kind.find("\"step\":58"), 9, "\"step\":\"58\"");
  EXPECT_THROW((void)pw::step_event_from_json(wrong_kind), pw::InvalidArgument);
}

TEST(EventLog, WritesOneLinePerDeathAndDeferralsOnlyWhenAsked) {
  std::ostringstream out;
  pw::StepEvent quiet;
  pw::StepEvent deferred;
  deferred.deferred = true;
  deferred.reason = pw::DeathReason::threshold;
  {
    pw::EventLog log(out);
    log.write(quiet);
    log.write(death_event());
    log.write(deferred);
    log.write(death_event());
  }
  EXPECT_EQ(out.str(), pw::to_json(death_event()) + "\n" + pw::to_json(death_event()) + "\n");
  std::ostringstream all;
  pw::EventLog with(all, true);
  with.write(deferred);
  EXPECT_EQ(all.str(), pw::to_json(deferred) + "\n");
  pw::EventLog moved(std::move(with));
  EXPECT_FALSE(with.enabled());  // NOLINT(bugprone-use-after-move): specified state
  EXPECT_TRUE(moved.enabled());
  EXPECT_THROW(pw::EventLog("/nonexistent-dir/x.jsonl"), pw::InvalidArgument);
}

TEST(AgentStats, CountsAndTimers) {
  pw::AgentStats s;
  pw::StepEvent quiet;
  quiet.published = true;
  for (double t : {3e-6, 1e-6, 2e-6, 10e-6}) {
    quiet.seconds.decide = t;
    s.record(quiet);
  }
  s.record(death_event());
  pw::StepEvent deferred;
  deferred.deferred = true;
  deferred.publish_skipped = true;
  s.record(deferred);
  EXPECT_EQ(s.steps(), 6);
  EXPECT_EQ(s.deaths(), 1);
  EXPECT_EQ(s.deaths(pw::DeathReason::age), 1);
  EXPECT_EQ(s.deaths(pw::DeathReason::threshold), 0);
  EXPECT_EQ(s.deferred(), 1);
  EXPECT_EQ(s.pulls(), 1);
  EXPECT_EQ(s.donors_used(), 2);
  EXPECT_EQ(s.bytes_pulled(), 8192U);
  EXPECT_EQ(s.publishes(), 5);
  EXPECT_EQ(s.publishes_skipped(), 1);
  const pw::TimerSummary d = s.timer(pw::Phase::decide);
  EXPECT_EQ(d.count, 6U);  // 1, 2, 3, 10 us, 1 us (death), 0 (deferred)
  EXPECT_DOUBLE_EQ(d.min, 0.0);
  EXPECT_DOUBLE_EQ(d.max, 10e-6);
  EXPECT_DOUBLE_EQ(d.median, (1e-6 + 2e-6) / 2);
  EXPECT_EQ(s.timer(pw::Phase::pull).count, 1U);
  EXPECT_DOUBLE_EQ(s.timer(pw::Phase::pull).median, 2e-5);
  EXPECT_EQ(s.timer(pw::Phase::assemble).count, 0U);  // one-rank agents never gather
  // Whole rebirths: every phase of the one step that died.
  const pw::TimerSummary r = s.rebirth_timer();
  EXPECT_EQ(r.count, 1U);
  EXPECT_DOUBLE_EQ(r.total, death_event().seconds.total());
  EXPECT_DOUBLE_EQ(r.total, 1e-6 + 2e-5 + 3e-6 + 4e-6);
  std::ostringstream text;
  s.write_summary(text);
  EXPECT_NE(text.str().find("deaths 1 (age 1"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("pull"), std::string::npos);
}

}  // namespace
