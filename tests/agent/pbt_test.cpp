// Serial tests of PBT as Ray Tune users know it (issue 26): the quantile count (ceil, capped
// at n / 2), the worst-fraction trigger with 2-3 agents and after agents left, truncation
// selection (uniform over the top quantile), the custom selection hook, the pbt preset and
// its string form, perturbations not clamped to the resampling range, and validation.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "paramwin/agent_options.hpp"
#include "paramwin/error.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/policy.hpp"

namespace pw = paramwin;

namespace {

constexpr std::uint64_t kFp = 0x5eedULL;

pw::RosterEntry entry(int rank, double metric, pw::AgentState state = pw::AgentState::active) {
  pw::RosterEntry e;
  e.rank = rank;
  e.version = 1;
  e.fingerprint = kFp;
  e.status.metric = metric;
  e.status.state = state;
  return e;
}

// n agents whose metric is their rank (lower is better: rank 0 is the best).
std::vector<pw::RosterEntry> ranked_population(int n) {
  std::vector<pw::RosterEntry> r;
  for (int i = 0; i < n; ++i) r.push_back(entry(i, static_cast<double>(i)));
  return r;
}

void expect_invalid(const pw::AgentOptions& o, const std::string& needle, int population = 4) {
  try {
    pw::validate(o, population);
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

pw::AgentOptions truncation(double quantile = 0.0) {
  pw::AgentOptions o = pw::AgentOptions::pbt();
  o.triggers.worst_fraction.every = 1;
  o.selection.quantile = quantile;
  o.seed = 11;
  return o;
}

// Pearson's chi-square statistic of @p counts against equal expected counts.
double chi_square(const std::vector<int>& counts) {
  double total = 0.0;
  for (const int c : counts) total += c;
  const double expected = total / static_cast<double>(counts.size());
  double x2 = 0.0;
  for (const int c : counts) x2 += (c - expected) * (c - expected) / expected;
  return x2;
}

}  // namespace

// --- the count ----------------------------------------------------------------------------

TEST(QuantileCount, CeilCappedAtHalfAsRayTune) {
  struct Row {
    std::size_t n;
    double q;
    std::size_t want;
  };
  const std::array rows{Row{0, 0.25, 0}, Row{1, 0.25, 0}, Row{2, 0.25, 1}, Row{3, 0.25, 1},
                        Row{4, 0.25, 1}, Row{5, 0.25, 2}, Row{8, 0.25, 2}, Row{9, 0.25, 3},
                        Row{10, 0.25, 3}, Row{2, 0.01, 1}, Row{3, 0.5, 1}, Row{7, 0.5, 3},
                        Row{4, 1.0, 2}, Row{5, 1.0, 2}, Row{8, 0.0, 0},
                        // Products that are integers in exact arithmetic do not round up: 0.3 * 10
                        // is 3.0000000000000004 in binary, and the count is 3, not 4.
                        Row{10, 0.3, 3}, Row{10, 0.2, 2}, Row{20, 0.15, 3}};
  for (const Row& r : rows) {
    EXPECT_EQ(pw::quantile_count(r.n, r.q), r.want) << "n " << r.n << " q " << r.q;
  }
  EXPECT_THROW((void)pw::quantile_count(4, 1.5), pw::InvalidArgument);
  EXPECT_THROW((void)pw::quantile_count(4, std::nan("")), pw::InvalidArgument);
}

TEST(WorstFractionTrigger, FiresWithTwoAndThreeAgentsAndAfterAgentsLeft) {
  pw::AgentOptions o = pw::AgentOptions::pbt();  // fraction 0.25
  o.triggers.worst_fraction.every = 1;
  // Two agents: the worse of the two dies (floor(0.25 * 2) = 0 would never kill).
  {
    pw::Policy p(o, 1, 2);
    const std::vector<pw::RosterEntry> r = ranked_population(2);
    EXPECT_EQ(p.decide(
                  1, 1.0, [&] { return r; }, kFp),
              pw::DeathReason::worst_fraction);
    pw::Policy best(o, 0, 2);
    EXPECT_EQ(best.decide(
                  1, 0.0, [&] { return r; }, kFp),
              pw::DeathReason::none);
  }
  // Three agents.
  {
    pw::Policy p(o, 2, 3);
    const std::vector<pw::RosterEntry> r = ranked_population(3);
    EXPECT_EQ(p.decide(
                  1, 2.0, [&] { return r; }, kFp),
              pw::DeathReason::worst_fraction);
  }
  // Four agents, of which one finished (left) with the worst metric: three remain ranked, and
  // the worst of those dies; the agent that left is skipped.
  {
    std::vector<pw::RosterEntry> r = ranked_population(4);
    r[3].status.state = pw::AgentState::left;
    pw::Policy p(o, 2, 4);
    EXPECT_EQ(p.decide(
                  1, 2.0, [&] { return r; }, kFp),
              pw::DeathReason::worst_fraction);
    EXPECT_EQ(pw::worst_ranks(r, 2, 2.0, kFp, pw::MetricDirection::lower_is_better, 0.25),
              std::vector<int>{2});
  }
  // Eight agents, fraction 0.25: the worst two.
  const std::vector<pw::RosterEntry> r8 = ranked_population(8);
  EXPECT_EQ(pw::worst_ranks(r8, 0, 0.0, kFp, pw::MetricDirection::lower_is_better, 0.25),
            (std::vector<int>{7, 6}));
  EXPECT_EQ(pw::best_ranks(r8, 0, 0.0, kFp, pw::MetricDirection::lower_is_better, 0.25),
            (std::vector<int>{0, 1}));
  EXPECT_EQ(pw::best_ranks(r8, 0, 0.0, kFp, pw::MetricDirection::higher_is_better, 0.25),
            (std::vector<int>{7, 6}));
}

// --- truncation selection -----------------------------------------------------------------

TEST(TruncationSelection, UniformOverTheTopQuantileOnly) {
  // Eight agents, rank 7 the worst, dies. Quantile 0.25: the top two, each half the time.
  // 4,000 draws: each count has sd sqrt(4000 / 4) = 31.6; 6 sd is 190. Fittest selection
  // (always rank 0) or uniform selection over all seven (about 571 each) both fail.
  for (const double q : {0.25, 0.5}) {
    pw::Policy p(truncation(q), 7, 8);
    const std::vector<pw::RosterEntry> r = ranked_population(8);
    const std::size_t top = pw::quantile_count(8, q);
    std::vector<int> counts(top, 0);
    const int draws = 4000;
    for (int i = 0; i < draws; ++i) {
      const pw::DonorChoice c = p.select_donors(r, kFp);
      ASSERT_EQ(c.ranks.size(), 1U);
      ASSERT_GE(c.ranks[0], 0);
      ASSERT_LT(static_cast<std::size_t>(c.ranks[0]), top) << "donor outside the top quantile";
      ++counts[static_cast<std::size_t>(c.ranks[0])];
      EXPECT_EQ(c.candidates, top);
    }
    // Chi-square with top - 1 degrees of freedom; 1 dof: P(X2 > 25) = 6e-7; 3 dof:
    // P(X2 > 30) = 1.4e-6. A fixed seed makes it deterministic; any seed passes these.
    EXPECT_LT(chi_square(counts), top == 2 ? 25.0 : 30.0) << "q " << q;
    for (const int c : counts) EXPECT_GT(c, draws / static_cast<int>(top) - 200);
  }
}

TEST(TruncationSelection, SkipsIneligibleTopAgentsAndSelfAndDefers) {
  // Rank 0 (the best) is mid-rebirth: the other top agent is the only candidate.
  std::vector<pw::RosterEntry> r = ranked_population(8);
  r[0].status.state = pw::AgentState::rebirth;
  pw::Policy p(truncation(), 7, 8);
  for (int i = 0; i < 50; ++i) {
    const pw::DonorChoice c = p.select_donors(r, kFp);
    ASSERT_EQ(c.ranks, std::vector<int>{1});
  }
  // Both top agents excluded (a failed pull, and mid-rebirth): defer, saying why.
  const std::vector<int> exclude{1};
  const pw::DonorChoice none = p.select_donors(r, kFp, exclude);
  EXPECT_TRUE(none.ranks.empty());
  EXPECT_NE(none.shortfall.find("rank 2 not in the top quantile"), std::string::npos)
      << none.shortfall;
  // An agent of the top quantile that dies (another trigger) never picks itself.
  pw::AgentOptions o = truncation();
  o.triggers.age = {.enabled = true, .lo = 1, .hi = 1};
  pw::Policy top(o, 0, 8);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(top.select_donors(ranked_population(8), kFp).ranks, std::vector<int>{1});
  }
}

// --- custom selection ---------------------------------------------------------------------

TEST(CustomSelection, SeesTheCandidatesBestFirstAndChooses) {
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.worst_fraction = {.enabled = true, .fraction = 0.25, .every = 1};
  o.selection.kind = pw::SelectionKind::custom;
  o.selection.k = 2;
  std::vector<std::uint64_t> seeds;
  o.selection.custom = [&](const pw::SelectionContext& c) {
    EXPECT_EQ(c.rank, 3);
    EXPECT_EQ(c.population, 4);
    EXPECT_EQ(c.want, 2U);
    EXPECT_EQ(c.direction, pw::MetricDirection::lower_is_better);
    std::vector<int> ranks;
    for (const pw::SelectionCandidate& s : c.candidates) ranks.push_back(s.rank);
    EXPECT_EQ(ranks, (std::vector<int>{2, 0, 1}));  // best first
    EXPECT_DOUBLE_EQ(c.candidates[0].metric, 0.5);
    seeds.push_back(c.seed);
    return std::vector<int>{1, 2};  // the best and the worst candidates
  };
  pw::Policy p(o, 3, 4);
  const std::vector<pw::RosterEntry> r{entry(0, 1.0), entry(1, 2.0), entry(2, 0.5), entry(3, 9.0)};
  const pw::DonorChoice c = p.select_donors(r, kFp);
  EXPECT_EQ(c.ranks, (std::vector<int>{2, 1}));  // returned best first
  EXPECT_EQ(c.metrics, (std::vector<double>{0.5, 2.0}));
  (void)p.select_donors(r, kFp);
  ASSERT_EQ(seeds.size(), 2U);
  EXPECT_NE(seeds[0], seeds[1]);  // a fresh seed per call, from the selection stream
}

TEST(CustomSelection, BadReturnsThrowAndEmptyDefers) {
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.worst_fraction = {.enabled = true, .fraction = 0.25, .every = 1};
  o.selection.kind = pw::SelectionKind::custom;
  o.selection.k = 1;
  std::vector<int> answer;
  o.selection.custom = [&](const pw::SelectionContext&) { return answer; };
  pw::Policy p(o, 0, 3);
  const std::vector<pw::RosterEntry> r = ranked_population(3);
  answer = {0};  // itself: not a candidate
  EXPECT_THROW((void)p.select_donors(r, kFp), pw::InvalidArgument);
  answer = {1, 2};  // more than wanted
  EXPECT_THROW((void)p.select_donors(r, kFp), pw::InvalidArgument);
  answer = {7};
  try {
    (void)p.select_donors(r, kFp);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 7, which is not a candidate (candidates: 1, 2)"),
              std::string::npos)
        << e.what();
  }
  answer = {};
  const pw::DonorChoice none = p.select_donors(r, kFp);
  EXPECT_TRUE(none.ranks.empty());
  EXPECT_EQ(none.shortfall, "the custom selection chose no donor");
  o.selection.k = 2;
  answer = {1, 1};
  pw::Policy twice(o, 0, 3);
  EXPECT_THROW((void)twice.select_donors(r, kFp), pw::InvalidArgument);
}

// --- the preset ---------------------------------------------------------------------------

TEST(PbtPreset, EqualsRayTuneDefaults) {
  const pw::AgentOptions o = pw::AgentOptions::pbt();
  EXPECT_FALSE(o.triggers.age.enabled);
  EXPECT_FALSE(o.triggers.threshold.enabled);
  EXPECT_TRUE(o.triggers.worst_fraction.enabled);
  EXPECT_DOUBLE_EQ(o.triggers.worst_fraction.fraction, 0.25);  // quantile_fraction
  EXPECT_EQ(o.triggers.worst_fraction.every, 10);
  EXPECT_FALSE(o.triggers.worst_fraction.synchronous);  // synch=False
  EXPECT_EQ(o.triggers.warmup, 0);                      // burn_in_period=0
  EXPECT_EQ(o.selection.kind, pw::SelectionKind::truncation);
  EXPECT_EQ(o.selection.k, 1);
  EXPECT_DOUBLE_EQ(pw::selection_quantile(o), 0.25);
  EXPECT_EQ(o.mixing.kind, pw::MixingKind::best);
  EXPECT_EQ(o.explore.inherit, pw::HyperInherit::best);
  EXPECT_DOUBLE_EQ(o.explore.resample_probability, 0.25);
  EXPECT_EQ(o.explore.perturb_factors, (std::vector<double>{0.8, 1.2}));
  for (const int n : {2, 3, 4, 8, 64}) EXPECT_NO_THROW(pw::validate(o, n)) << n;
}

TEST(PbtPreset, StringFormAppliesThePresetFirstThenOverrides) {
  for (const char* text :
       {"preset=pbt k=1 worst_every=4 sync=true", "worst_every=4 sync=true preset=pbt"}) {
    const pw::AgentOptions o = pw::parse_agent_options(text);
    EXPECT_EQ(o.selection.kind, pw::SelectionKind::truncation) << text;
    EXPECT_FALSE(o.triggers.age.enabled) << text;
    EXPECT_EQ(o.triggers.worst_fraction.every, 4) << text;
    EXPECT_TRUE(o.triggers.worst_fraction.synchronous) << text;
  }
  const pw::AgentOptions q = pw::parse_agent_options(
      "preset=pbt worst_fraction=0.5 selection_quantile=0.125 selection=top_quantile "
      "explore_clamp.lr=1e-4..1e-1");
  EXPECT_DOUBLE_EQ(q.triggers.worst_fraction.fraction, 0.5);
  EXPECT_DOUBLE_EQ(pw::selection_quantile(q), 0.125);
  ASSERT_EQ(q.explore.rules.size(), 1U);
  EXPECT_DOUBLE_EQ(q.explore.rules[0].clamp_lo, 1e-4);
  EXPECT_DOUBLE_EQ(q.explore.rules[0].clamp_hi, 1e-1);
  // set_agent_option: the preset replaces every field.
  pw::AgentOptions o;
  o.seed = 5;
  pw::set_agent_option(o, "preset", "pbt");
  EXPECT_EQ(o.seed, 0U);
  EXPECT_EQ(o.selection.kind, pw::SelectionKind::truncation);
  pw::set_agent_option(o, "synch", "1");
  EXPECT_TRUE(o.triggers.worst_fraction.synchronous);
  pw::set_agent_option(o, "preset", "default");
  EXPECT_EQ(o.selection.kind, pw::SelectionKind::uniform);
  EXPECT_THROW(pw::set_agent_option(o, "preset", "asha"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("selection_quantile=lots"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("explore_clamp.lr=1e-4"), pw::InvalidArgument);
  EXPECT_THROW((void)pw::parse_agent_options("sync=sometimes"), pw::InvalidArgument);
}

// --- explore: perturbation bounds apart from the resampling range ----------------------------

TEST(ExploreBounds, PerturbationsLeaveTheResamplingRangeUnlessClamped) {
  pw::Layout l;
  l.add("w", std::size_t{4});
  l.add_hyperparameter("lr");
  pw::ExploreOptions o;
  o.resample_probability = 0.0;
  o.perturb_factors = {0.8};
  o.rules = {
      {.name = "lr", .distribution = pw::HyperDistribution::log_uniform, .lo = 1e-4, .hi = 1e-1}};
  std::mt19937_64 rng(3);
  pw::Hyperparameters h = l.make_hyperparameters();
  h.set("lr", 1e-4);
  pw::explore_hyperparameters(o, h, rng);
  EXPECT_DOUBLE_EQ(h.get("lr"), 8e-5);  // Ray Tune: 1e-4 * 0.8, not clamped to 1e-4
  o.rules[0].clamp_lo = 1e-4;
  h.set("lr", 1e-4);
  pw::explore_hyperparameters(o, h, rng);
  EXPECT_DOUBLE_EQ(h.get("lr"), 1e-4);
  // A perturb-only rule has no range: its lo/hi clamp, as they always did.
  o.rules = {{.name = "lr", .lo = 1e-4, .hi = 1.0}};
  h.set("lr", 1e-4);
  pw::explore_hyperparameters(o, h, rng);
  EXPECT_DOUBLE_EQ(h.get("lr"), 1e-4);
  // Bad clamp bounds.
  o.rules = {{.name = "lr", .clamp_lo = 2.0, .clamp_hi = 1.0}};
  EXPECT_THROW(pw::validate(o), pw::InvalidArgument);
  o.rules = {{.name = "lr", .clamp_lo = std::nan("")}};
  EXPECT_THROW(pw::validate(o), pw::InvalidArgument);
}

// --- validation ---------------------------------------------------------------------------

TEST(PbtValidate, RefusesConfigurationsThatCanNeverFireOrChoose) {
  pw::AgentOptions o = pw::AgentOptions::pbt();
  o.triggers.worst_fraction.fraction = 0.0;
  expect_invalid(o, "can never fire");
  o = pw::AgentOptions::pbt();
  o.selection.shortfall = pw::Shortfall::clamp;  // no k check: the trigger alone
  expect_invalid(o, "in a population of 1: it ranks at least 2 agents", 1);
  o = pw::AgentOptions::pbt();
  o.selection.quantile = 1.5;
  expect_invalid(o, "selection.quantile 1.500000 is outside [0, 1]");
  o.selection.quantile = std::nan("");
  expect_invalid(o, "selection.quantile");
  o = pw::AgentOptions::pbt();
  o.selection.k = 2;  // the top quantile of 4 holds 1
  expect_invalid(o, "holds only 1 agent(s)");
  EXPECT_NO_THROW(pw::validate(o, 8));  // of 8: 2
  o = pw::AgentOptions::pbt();
  o.triggers.worst_fraction.enabled = false;
  o.triggers.worst_fraction.fraction = 0.0;
  o.triggers.age.enabled = true;
  expect_invalid(o, "the top quantile is empty");
  o = pw::AgentOptions::pbt();
  o.selection.kind = pw::SelectionKind::custom;
  expect_invalid(o, "needs a selection function");
  o.selection.kind = pw::SelectionKind::uniform;
  o.selection.custom = [](const pw::SelectionContext&) { return std::vector<int>{}; };
  expect_invalid(o, "selection.custom is set but selection is 'uniform'");
  o = pw::AgentOptions::pbt();
  o.selection.kind = static_cast<pw::SelectionKind>(9);
  expect_invalid(o, "selection.kind is out of range");
  o = pw::AgentOptions::pbt();
  o.triggers.worst_fraction.synchronous = true;
  EXPECT_NO_THROW(pw::validate(o, 4));
  o.triggers.age.enabled = true;
  expect_invalid(o, "only the worst-fraction trigger may be on");
  o = {};
  o.triggers.worst_fraction.synchronous = true;
  expect_invalid(o, "synchronous needs the worst-fraction trigger enabled");
}
