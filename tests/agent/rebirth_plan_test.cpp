// Serial tests of the one rebirth planner (plan_rebirth) and its wire form: what Agent and
// GroupAgent both execute, checked without MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "decision/rebirth_plan.hpp"
#include "paramwin/error.hpp"
#include "paramwin/policy.hpp"

namespace pw = paramwin;
namespace pd = paramwin::detail;

namespace {

constexpr std::uint64_t kFp = 0x1234ULL;

pw::RosterEntry entry(int rank, double metric, double publish_time = 100.0,
                      pw::AgentState state = pw::AgentState::active) {
  pw::RosterEntry e;
  e.rank = rank;
  e.version = 1;
  e.fingerprint = kFp;
  e.status.metric = metric;
  e.status.state = state;
  e.publish_time = publish_time;
  return e;
}

std::vector<pw::RosterEntry> population() {
  // Rank 0 plans; lower metrics are better (the default direction).
  return {entry(0, 5.0), entry(1, 1.0, 99.0), entry(2, 3.0, 98.0), entry(3, 2.0, 97.5)};
}

pw::AgentOptions dies_at(std::int64_t age) {
  pw::AgentOptions o;
  o.seed = 3;
  o.triggers.age = {.enabled = true, .lo = age, .hi = age};
  o.selection = {.kind = pw::SelectionKind::fittest, .k = 2};
  return o;
}

struct Planner {
  pw::Policy policy;
  std::vector<pw::RosterEntry> rosters = population();
  int roster_reads = 0;
  bool hold_deaths = false;  // paused with PausedDeaths::defer

  explicit Planner(const pw::AgentOptions& o) : policy(o, 0, 4) {}

  pd::RebirthPlan plan(bool first = true, std::vector<int> exclude = {}, bool due = false) {
    const std::vector<int> ex = std::move(exclude);
    return pd::plan_rebirth(policy, pd::PlanInput{.iteration = policy.steps() + 1,
                                                  .metric = 5.0,
                                                  .fingerprint = kFp,
                                                  .first_attempt = first,
                                                  .publish_due = due,
                                                  .hold_deaths = hold_deaths,
                                                  .exclude = ex,
                                                  .rosters =
                                                      [this] {
                                                        ++roster_reads;
                                                        return rosters;
                                                      },
                                                  .now = [] { return 100.0; }});
  }
};

}  // namespace

TEST(RebirthPlan, NoDeathMeansNoActionAndNoRosterRead) {
  Planner p(dies_at(3));
  const pd::RebirthPlan plan = p.plan(true, {}, true);
  EXPECT_EQ(plan.action, pd::PlanAction::none);
  EXPECT_EQ(plan.reason, pw::DeathReason::none);
  EXPECT_TRUE(plan.publish_due);
  EXPECT_EQ(plan.counters.steps, 1);
  EXPECT_EQ(plan.counters.age, 1);
  EXPECT_EQ(plan.counters.max_age, 3);
  EXPECT_TRUE(plan.donors.empty());
  EXPECT_EQ(p.roster_reads, 0);
}

TEST(RebirthPlan, FittestDonorsBestFirstWithMetricsAndStaleness) {
  Planner p(dies_at(1));
  const pd::RebirthPlan plan = p.plan();
  ASSERT_EQ(plan.action, pd::PlanAction::pull);
  EXPECT_EQ(plan.reason, pw::DeathReason::age);
  EXPECT_EQ(plan.donors, (std::vector<int>{1, 3}));
  EXPECT_EQ(plan.metrics, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(plan.staleness, (std::vector<double>{1.0, 2.5}));
  EXPECT_TRUE(plan.weights.empty());  // plain mean
  EXPECT_TRUE(plan.note.empty());
  const pw::PullOptions po = pd::pull_options(plan, p.policy.options().mixing);
  EXPECT_EQ(po.reduction, pw::Reduction::mean);
}

TEST(RebirthPlan, BestMixingKeepsOneDonorAndWeightedMixingWeighsThem) {
  pw::AgentOptions o = dies_at(1);
  o.mixing.kind = pw::MixingKind::best;
  Planner best(o);
  const pd::RebirthPlan b = best.plan();
  EXPECT_EQ(b.donors, (std::vector<int>{1}));
  EXPECT_EQ(b.metrics, (std::vector<double>{1.0}));

  o.mixing.kind = pw::MixingKind::weighted;
  o.mixing.weights = {3.0, 1.0};
  o.mixing.momentum = 0.25;
  Planner weighted(o);
  const pd::RebirthPlan w = weighted.plan();
  ASSERT_EQ(w.weights.size(), 2U);
  EXPECT_DOUBLE_EQ(w.weights[0], 0.75);
  EXPECT_DOUBLE_EQ(w.weights[1], 0.25);
  const pw::PullOptions po = pd::pull_options(w, weighted.policy.options().mixing);
  EXPECT_EQ(po.reduction, pw::Reduction::weighted);
  EXPECT_EQ(po.weights, w.weights);
  EXPECT_EQ(po.momentum, 0.25);
}

TEST(RebirthPlan, RetriesKeepTheDeathAndLeaveExcludedDonorsOut) {
  Planner p(dies_at(1));
  const pd::RebirthPlan first = p.plan();
  ASSERT_EQ(first.donors, (std::vector<int>{1, 3}));
  // The pull from donor 1 failed: the next attempt does not decide again (the policy stays
  // at step 1) and chooses around it.
  const pd::RebirthPlan retry = p.plan(false, {1});
  EXPECT_EQ(retry.reason, pw::DeathReason::age);
  EXPECT_EQ(retry.counters.steps, 1);
  EXPECT_EQ(retry.donors, (std::vector<int>{3, 2}));
  EXPECT_FALSE(retry.publish_due);  // only the first attempt carries the cadence
}

TEST(RebirthPlan, ShortfallDefersOrClampsWithANote) {
  Planner defer(dies_at(1));
  defer.rosters = {entry(0, 5.0), entry(1, 1.0), entry(2, 3.0, 100.0, pw::AgentState::left),
                   entry(3, 2.0, 100.0, pw::AgentState::rebirth)};
  const pd::RebirthPlan d = defer.plan();
  EXPECT_EQ(d.action, pd::PlanAction::defer);
  EXPECT_FALSE(d.note.empty());

  pw::AgentOptions o = dies_at(1);
  o.selection.shortfall = pw::Shortfall::clamp;
  Planner clamp(o);
  clamp.rosters = defer.rosters;
  const pd::RebirthPlan c = clamp.plan();
  EXPECT_EQ(c.action, pd::PlanAction::pull);
  EXPECT_EQ(c.donors, (std::vector<int>{1}));
  EXPECT_EQ(c.note.rfind("clamped: ", 0), 0U) << c.note;
}

TEST(RebirthPlan, APauseHoldsTheDeathWithoutReadingRostersUntilResumed) {
  Planner p(dies_at(1));
  p.hold_deaths = true;
  const pd::RebirthPlan held = p.plan();
  EXPECT_EQ(held.action, pd::PlanAction::defer);
  EXPECT_EQ(held.reason, pw::DeathReason::age);
  EXPECT_EQ(held.note, "paused");
  EXPECT_EQ(p.roster_reads, 0);
  const pd::RebirthPlan still = p.plan();  // the death stays pending while paused
  EXPECT_EQ(still.action, pd::PlanAction::defer);
  EXPECT_EQ(still.reason, pw::DeathReason::age);
  EXPECT_EQ(still.counters.steps, 2);
  p.hold_deaths = false;  // resumed
  const pd::RebirthPlan after = p.plan();
  EXPECT_EQ(after.action, pd::PlanAction::pull);
  EXPECT_EQ(after.reason, pw::DeathReason::age);
  EXPECT_EQ(after.donors, (std::vector<int>{1, 3}));
}

TEST(RebirthPlan, ResetCarriesASeedFromItsOwnStream) {
  pw::AgentOptions o = dies_at(1);
  o.mixing.kind = pw::MixingKind::reset;
  o.reset = [](std::span<const pw::LayerRef>, std::uint64_t) {};
  Planner a(o);
  Planner b(o);
  const pd::RebirthPlan pa = a.plan();
  EXPECT_EQ(pa.action, pd::PlanAction::reset);
  EXPECT_EQ(pa.reset_seed, b.plan().reset_seed);  // same seed, same agent: same stream
  EXPECT_EQ(a.roster_reads, 0);
}

TEST(RebirthPlan, AThrowingRosterReaderPropagatesAndUndoesTheStep) {
  pw::AgentOptions o = dies_at(5);
  o.triggers.worst_fraction = {.enabled = true, .fraction = 0.5, .every = 1};
  pw::Policy policy(o, 0, 4);
  const std::vector<int> none;
  EXPECT_THROW((void)pd::plan_rebirth(policy, pd::PlanInput{.iteration = 1,
                                                            .metric = 0.0,
                                                            .fingerprint = kFp,
                                                            .exclude = none,
                                                            .rosters = []()
                                                                -> std::vector<pw::RosterEntry> {
                                                              throw pw::DonorError(2, "gone");
                                                            },
                                                            .now = [] { return 0.0; }}),
               pw::DonorError);
  EXPECT_EQ(policy.steps(), 0);
}

TEST(RebirthPlanWire, RoundTripsEveryField) {
  pd::RebirthPlan plan;
  plan.action = pd::PlanAction::pull;
  plan.reason = pw::DeathReason::worst_fraction;
  plan.publish_due = true;
  plan.counters = {.steps = 17, .age = 9, .max_age = 120, .generation = 4};
  plan.donors = {7, 2, 5};
  plan.weights = {0.5, 0.25, 0.25};
  plan.metrics = {-1.5, std::numeric_limits<double>::infinity(), 3.0};
  plan.staleness = {0.0, 1e-9, 42.0};
  plan.note = "leader only";
  const std::vector<std::int64_t> words = plan.to_wire(8);
  EXPECT_EQ(words.size(), pd::RebirthPlan::wire_words(8));
  const pd::RebirthPlan back = pd::RebirthPlan::from_wire(words);
  EXPECT_EQ(back.action, plan.action);
  EXPECT_EQ(back.reason, plan.reason);
  EXPECT_TRUE(back.publish_due);
  EXPECT_FALSE(back.donor_error);
  EXPECT_EQ(back.counters.steps, 17);
  EXPECT_EQ(back.counters.age, 9);
  EXPECT_EQ(back.counters.max_age, 120);
  EXPECT_EQ(back.counters.generation, 4U);
  EXPECT_EQ(back.donors, plan.donors);
  EXPECT_EQ(back.weights, plan.weights);
  EXPECT_EQ(back.metrics, plan.metrics);
  EXPECT_EQ(back.staleness, plan.staleness);
  EXPECT_TRUE(back.note.empty());  // not on the wire

  pd::RebirthPlan reset;
  reset.action = pd::PlanAction::reset;
  reset.reset_seed = 0xfedcba9876543210ULL;
  const pd::RebirthPlan r = pd::RebirthPlan::from_wire(reset.to_wire(2));
  EXPECT_EQ(r.reset_seed, reset.reset_seed);
  EXPECT_TRUE(r.weights.empty());  // a plain mean stays a plain mean
  EXPECT_TRUE(r.donors.empty());
}

TEST(RebirthPlanWire, RefusesWrongVersionsSizesAndOverfullPlans) {
  pd::RebirthPlan plan;
  plan.donors = {1, 2, 3};
  EXPECT_THROW((void)plan.to_wire(2), pw::InvalidArgument);
  std::vector<std::int64_t> words = plan.to_wire(4);
  std::vector<std::int64_t> bad_version = words;
  bad_version[0] = 99;
  EXPECT_THROW((void)pd::RebirthPlan::from_wire(bad_version), pw::Error);
  std::vector<std::int64_t> short_message(words.begin(), words.begin() + 5);
  EXPECT_THROW((void)pd::RebirthPlan::from_wire(short_message), pw::Error);
  std::vector<std::int64_t> bad_action = words;
  bad_action[1] = 17;
  EXPECT_THROW((void)pd::RebirthPlan::from_wire(bad_action), pw::Error);
}
