// Serial tests of the worst-fraction check at the same iteration
// (WorstFractionTrigger::same_iteration, rank_at_same_iteration): the first agent past a shift
// of the metric is compared with the others' reports at its previous iteration, an agent one
// report ahead by its previous report, one further ahead by its latest; agents behind the
// reports since a rebirth are not ranked; the Policy keeps, bounds, restores and clears its
// reports; the top quantile (best_at_same_iteration) orders agents by their lead at the common
// iteration, and truncation draws from it; bad inputs are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paramwin/agent_options.hpp"
#include "paramwin/error.hpp"
#include "paramwin/policy.hpp"

namespace pw = paramwin;

namespace {

constexpr std::uint64_t kFp = 0x5eedULL;
constexpr auto kHigher = pw::MetricDirection::higher_is_better;

// Rank @p rank's roster: its latest report (@p iteration, @p metric), and @p previous.
pw::RosterEntry at(int rank, std::int64_t iteration, double metric,
                   std::optional<pw::MetricReport> previous = std::nullopt) {
  pw::RosterEntry e;
  e.rank = rank;
  e.version = 1;
  e.fingerprint = kFp;
  e.status.iteration = iteration;
  e.status.metric = metric;
  e.status.state = pw::AgentState::active;
  e.previous = previous;
  return e;
}

// @p call throws InvalidArgument with @p needle in its message.
template <class Call>
void expect_invalid(const Call& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

pw::AgentOptions same_iteration_options() {
  pw::AgentOptions o = pw::AgentOptions::pbt();  // fraction 0.25
  o.direction = kHigher;
  o.triggers.worst_fraction.every = 1;
  o.triggers.worst_fraction.same_iteration = true;
  return o;
}

}  // namespace

// A stream shifts at iteration 2100: rank 0 is the first to report after it (0.60, its
// accuracy on the new images), the others still report their iteration-2000 accuracies.
// Their latest reports make rank 0 the worst; at iteration 2000 it was the best.
TEST(SameIteration, TheFirstPastAShiftIsComparedAtThePreviousIteration) {
  const std::vector<pw::RosterEntry> r{at(0, 2200, 0.60), at(1, 2000, 0.84), at(2, 2000, 0.83),
                                       at(3, 2000, 0.82)};
  EXPECT_EQ(pw::worst_ranks(r, 0, 0.60, kFp, kHigher, 0.25), std::vector<int>{0});
  const std::vector<pw::MetricReport> own{{.iteration = 1800, .metric = 0.80},
                                          {.iteration = 2000, .metric = 0.85},
                                          {.iteration = 2200, .metric = 0.60}};
  const pw::SameIterationRank k = pw::rank_at_same_iteration(r, 0, own, kFp, kHigher, 0.25);
  EXPECT_FALSE(k.worst);
  EXPECT_EQ(k.ranked, 4U);
  EXPECT_EQ(k.worse, 3U);
  EXPECT_EQ(k.count, 1U);
  EXPECT_EQ(k.ahead, 0U);
  EXPECT_EQ(k.unmatched, 0U);
  // Had it been the worst at 2000, it would be the worst now.
  const std::vector<pw::MetricReport> weak{{.iteration = 2000, .metric = 0.81},
                                           {.iteration = 2200, .metric = 0.60}};
  EXPECT_TRUE(pw::rank_at_same_iteration(r, 0, weak, kFp, kHigher, 0.25).worst);
}

// The last agent to reach 2000 meets one that is past the shift already: that one's report
// at 2000 is its roster's previous report, not its latest (0.50 on the new images).
TEST(SameIteration, AnAgentOneReportAheadIsComparedByItsPreviousReport) {
  const std::vector<pw::RosterEntry> r{at(0, 2000, 0.80),
                                       at(1, 2200, 0.50,
                                          pw::MetricReport{.iteration = 2000, .metric = 0.90}),
                                       at(2, 2000, 0.85), at(3, 2000, 0.88)};
  const std::vector<pw::MetricReport> own{{.iteration = 2000, .metric = 0.80}};
  EXPECT_EQ(pw::worst_ranks(r, 0, 0.80, kFp, kHigher, 0.25), std::vector<int>{1});
  const pw::SameIterationRank k = pw::rank_at_same_iteration(r, 0, own, kFp, kHigher, 0.25);
  EXPECT_TRUE(k.worst);
  EXPECT_EQ(k.ranked, 4U);
  EXPECT_EQ(k.worse, 0U);
  EXPECT_EQ(k.ahead, 0U);
}

// Without a previous report at or before this agent's iteration, an agent ahead is compared
// by its latest metric with this agent's latest (Ray Tune's rule for that pair).
TEST(SameIteration, AnAgentFurtherAheadIsComparedByItsLatestMetric) {
  const std::vector<pw::RosterEntry> r{at(0, 1000, 0.70),
                                       at(1, 2400, 0.90,
                                          pw::MetricReport{.iteration = 2200, .metric = 0.89}),
                                       at(2, 1200, 0.65)};
  const std::vector<pw::MetricReport> own{{.iteration = 1000, .metric = 0.70}};
  const pw::SameIterationRank k = pw::rank_at_same_iteration(r, 0, own, kFp, kHigher, 0.25);
  EXPECT_EQ(k.ahead, 2U);
  EXPECT_EQ(k.ranked, 3U);
  EXPECT_EQ(k.worse, 1U);  // rank 2's 0.65
  EXPECT_FALSE(k.worst);
  // An agent with no previous report at all is the same case.
  const std::vector<pw::RosterEntry> fresh_ahead{at(0, 1000, 0.70), at(1, 1200, 0.90)};
  const pw::SameIterationRank f =
      pw::rank_at_same_iteration(fresh_ahead, 0, own, kFp, kHigher, 0.25);
  EXPECT_EQ(f.ahead, 1U);
  EXPECT_TRUE(f.worst);
}

// Reports are matched by the latest one at or before the other agent's iteration; an agent
// behind every one of them (this agent was reborn since) is not ranked, and with nobody else
// ranked nobody is the worst.
TEST(SameIteration, AgentsBehindTheReportsSinceARebirthAreNotRanked) {
  const std::vector<pw::MetricReport> own{{.iteration = 2000, .metric = 0.50},
                                          {.iteration = 2200, .metric = 0.40}};
  const std::vector<pw::RosterEntry> behind{at(0, 2200, 0.40), at(1, 1800, 0.90),
                                            at(2, 1900, 0.90)};
  const pw::SameIterationRank k = pw::rank_at_same_iteration(behind, 0, own, kFp, kHigher, 0.5);
  EXPECT_EQ(k.unmatched, 2U);
  EXPECT_EQ(k.ranked, 1U);
  EXPECT_EQ(k.count, 0U);
  EXPECT_FALSE(k.worst);
  // Rank 1 at 2100 is matched with the report at 2000 (0.50 against 0.55: worse).
  const std::vector<pw::RosterEntry> between{at(0, 2200, 0.40), at(1, 2100, 0.55)};
  const pw::SameIterationRank b = pw::rank_at_same_iteration(between, 0, own, kFp, kHigher, 0.5);
  EXPECT_EQ(b.ranked, 2U);
  EXPECT_TRUE(b.worst);
}

// The agents worst_ranks() leaves out are left out here too; ties go against the higher
// rank and NaN is the worst, as there.
TEST(SameIteration, SkipsWhomWorstRanksSkipsAndBreaksTiesTheSameWay) {
  std::vector<pw::RosterEntry> r{at(0, 10, 0.5), at(1, 10, 0.1), at(2, 10, 0.1),
                                 at(3, 10, 0.1), at(4, 10, 0.1), at(5, 10, 0.1)};
  r[1].status.state = pw::AgentState::paused;
  r[2].status.state = pw::AgentState::left;
  r[3].answered = false;
  r[4].suspect = true;
  r[5].fingerprint = kFp + 1;
  const std::vector<pw::MetricReport> own{{.iteration = 10, .metric = 0.5}};
  const pw::SameIterationRank k = pw::rank_at_same_iteration(r, 0, own, kFp, kHigher, 0.25);
  EXPECT_EQ(k.ranked, 1U);
  EXPECT_FALSE(k.worst);
  const std::vector<pw::RosterEntry> tie{at(0, 10, 0.5), at(1, 10, 0.5)};
  EXPECT_FALSE(pw::rank_at_same_iteration(tie, 0, own, kFp, kHigher, 0.25).worst);
  const std::vector<pw::MetricReport> own1{{.iteration = 10, .metric = 0.5}};
  EXPECT_TRUE(pw::rank_at_same_iteration(tie, 1, own1, kFp, kHigher, 0.25).worst);
  const std::vector<pw::RosterEntry> nan{at(0, 10, 0.5), at(1, 10, std::nan(""))};
  EXPECT_FALSE(pw::rank_at_same_iteration(nan, 0, own, kFp, kHigher, 0.25).worst);
  const std::vector<pw::RosterEntry> other{at(0, 10, std::nan("")), at(1, 10, 0.5)};
  const std::vector<pw::MetricReport> own_nan{{.iteration = 10, .metric = std::nan("")}};
  EXPECT_TRUE(pw::rank_at_same_iteration(other, 0, own_nan, kFp, kHigher, 0.25).worst);
}

TEST(SameIteration, RefusesMissingOrUnorderedReportsAndBadFractions) {
  const std::vector<pw::RosterEntry> r{at(0, 10, 0.5), at(1, 10, 0.4)};
  const auto throws = [&](std::span<const pw::MetricReport> own, double fraction,
                          const std::string& needle) {
    expect_invalid([&] { (void)pw::rank_at_same_iteration(r, 0, own, kFp, kHigher, fraction); },
                   needle);
  };
  throws({}, 0.25, "no own report");
  const std::vector<pw::MetricReport> back{{.iteration = 10, .metric = 0.5},
                                           {.iteration = 10, .metric = 0.6}};
  throws(back, 0.25, "report 1 is at iteration 10 after 10");
  const std::vector<pw::MetricReport> one{{.iteration = 10, .metric = 0.5}};
  throws(one, 1.5, "fraction 1.500000 is outside [0, 1]");
  throws(one, std::nan(""), "outside [0, 1]");
}

// The Policy keeps its reports (a repeated iteration replaces one, an earlier one restarts
// the history, at most kReportHistory), clears them at a rebirth and restores them when the
// roster read throws; it decides with them.
TEST(SameIteration, ThePolicyKeepsItsReportsSinceItsLatestRebirth) {
  pw::Policy p(same_iteration_options(), 0, 4);
  std::vector<pw::RosterEntry> r{at(0, 0, 0.0), at(1, 100, 0.84), at(2, 100, 0.83),
                                 at(3, 100, 0.82)};
  const auto read = [&] { return r; };
  EXPECT_EQ(p.decide(100, 0.85, read, kFp), pw::DeathReason::none);
  EXPECT_EQ(p.decide(200, 0.60, read, kFp), pw::DeathReason::none);  // ranked at 100: the best
  ASSERT_EQ(p.reports().size(), 2U);
  EXPECT_EQ(p.reports().back().iteration, 200);
  // The same iteration again replaces its report.
  EXPECT_EQ(p.decide(200, 0.61, read, kFp), pw::DeathReason::none);
  ASSERT_EQ(p.reports().size(), 2U);
  EXPECT_DOUBLE_EQ(p.reports().back().metric, 0.61);
  // A roster read that throws leaves the reports as they were.
  EXPECT_THROW((void)p.decide(
                   300, 0.1,
                   [&]() -> std::vector<pw::RosterEntry> { throw pw::Error("read failed"); }, kFp),
               pw::Error);
  EXPECT_EQ(p.reports().size(), 2U);
  // Everyone at 200 now, rank 0 the worst there: it dies.
  r = {at(0, 200, 0.61), at(1, 200, 0.70), at(2, 200, 0.71), at(3, 200, 0.72)};
  EXPECT_EQ(p.decide(200, 0.61, read, kFp), pw::DeathReason::worst_fraction);
  p.reborn();
  EXPECT_TRUE(p.reports().empty());
  // An earlier iteration (a trainer that went back) restarts the history.
  pw::Policy q(same_iteration_options(), 0, 4);
  for (std::int64_t i = 1; i <= 100; ++i) (void)q.decide(i, 0.5, nullptr, kFp);
  EXPECT_EQ(q.reports().size(), pw::Policy::kReportHistory);
  EXPECT_EQ(q.reports().front().iteration, 100 - 64 + 1);
  (void)q.decide(5, 0.5, nullptr, kFp);
  ASSERT_EQ(q.reports().size(), 1U);
  EXPECT_EQ(q.reports().front().iteration, 5);
  // Copies keep the reports.
  const pw::Policy copy(q);
  EXPECT_EQ(copy.reports().size(), 1U);
  // Without the option, nothing is kept.
  pw::AgentOptions latest = same_iteration_options();
  latest.triggers.worst_fraction.same_iteration = false;
  pw::Policy l(latest, 0, 4);
  (void)l.decide(1, 0.5, nullptr, kFp);
  EXPECT_TRUE(l.reports().empty());
}

TEST(SameIteration, OptionIsParsedAndValidated) {
  EXPECT_TRUE(pw::parse_agent_options("preset=pbt same_iteration=true")
                  .triggers.worst_fraction.same_iteration);
  EXPECT_THROW((void)pw::parse_agent_options("preset=pbt same_iteration=sometimes"),
               pw::InvalidArgument);
  pw::AgentOptions o = same_iteration_options();
  EXPECT_NO_THROW(pw::validate(o, 4));
  o.triggers.worst_fraction.synchronous = true;
  expect_invalid([&] { pw::validate(o, 4); }, "already ranks every agent at the same iteration");
  o = {};
  o.triggers.worst_fraction.same_iteration = true;
  expect_invalid([&] { pw::validate(o, 4); }, "the worst-fraction trigger is not enabled");
}

// The top quantile of the same ranking: each agent by its lead over this one at their common
// iteration. By the latest reports the agent behind the shift is the best; by the leads, the
// agent that was ahead of this one at 2000 by the most.
TEST(SameIteration, TheTopQuantileIsTheLargestLeadAtTheCommonIteration) {
  const std::vector<pw::RosterEntry> r{at(0, 2200, 0.55), at(1, 2000, 0.86),
                                       at(2, 2400, 0.70,
                                          pw::MetricReport{.iteration = 2200, .metric = 0.66}),
                                       at(3, 2200, 0.58)};
  const std::vector<pw::MetricReport> own{{.iteration = 2000, .metric = 0.85},
                                          {.iteration = 2200, .metric = 0.55}};
  EXPECT_EQ(pw::best_ranks(r, 0, 0.55, kFp, kHigher, 0.25), std::vector<int>{1});
  // Leads: rank 1 +0.01 (at 2000), rank 2 +0.11 (its previous report, at 2200), rank 3 +0.03.
  EXPECT_EQ(pw::best_at_same_iteration(r, 0, own, kFp, kHigher, 0.5), (std::vector<int>{2, 3}));
  EXPECT_EQ(pw::best_at_same_iteration(r, 0, own, kFp, kHigher, 0.25), std::vector<int>{2});
  // Lower is better: the leads change sign; self (lead 0) is then among the best.
  const std::vector<pw::RosterEntry> losses{at(0, 10, 1.0), at(1, 10, 2.0), at(2, 10, 0.5),
                                            at(3, 10, std::nan(""))};
  const std::vector<pw::MetricReport> mine{{.iteration = 10, .metric = 1.0}};
  EXPECT_EQ(pw::best_at_same_iteration(losses, 0, mine, kFp, pw::MetricDirection::lower_is_better,
                                       0.5),
            (std::vector<int>{2, 0}));
  // Equal leads: the lower rank first.
  const std::vector<pw::RosterEntry> level{at(0, 10, 1.0), at(2, 10, 1.5), at(1, 10, 1.5)};
  EXPECT_EQ(pw::best_at_same_iteration(level, 0, mine, kFp, pw::MetricDirection::higher_is_better,
                                       0.25),
            std::vector<int>{1});
  // Two equal infinities are level (a loss that overflowed on both): the lower rank first.
  const std::vector<pw::RosterEntry> inf{at(0, 10, INFINITY), at(1, 10, INFINITY), at(2, 10, 3.0)};
  const std::vector<pw::MetricReport> overflowed{{.iteration = 10, .metric = INFINITY}};
  const auto lower = pw::MetricDirection::lower_is_better;
  EXPECT_EQ(pw::best_at_same_iteration(inf, 1, overflowed, kFp, lower, 0.5), std::vector<int>{2});
  const std::vector<pw::RosterEntry> both_inf{at(0, 10, INFINITY), at(1, 10, INFINITY)};
  EXPECT_EQ(pw::best_at_same_iteration(both_inf, 1, overflowed, kFp, lower, 0.5),
            std::vector<int>{0});
  EXPECT_THROW((void)pw::best_at_same_iteration(r, 0, {}, kFp, kHigher, 0.25), pw::InvalidArgument);
}

// Truncation selection with the option draws from that top quantile: a dying agent after the
// shift never copies the agent that has not reached it.
TEST(SameIteration, TruncationDrawsFromTheTopAtTheCommonIteration) {
  pw::AgentOptions o = same_iteration_options();
  pw::Policy p(o, 0, 4);
  const std::vector<pw::RosterEntry> before{at(0, 0, 0.0), at(1, 2000, 0.86), at(2, 2000, 0.80),
                                            at(3, 2000, 0.81)};
  (void)p.decide(
      2000, 0.85, [&] { return before; }, kFp);
  const std::vector<pw::RosterEntry> after{at(0, 2000, 0.85), at(1, 2000, 0.86),
                                           at(2, 2400, 0.70,
                                              pw::MetricReport{.iteration = 2200, .metric = 0.66}),
                                           at(3, 2200, 0.58)};
  ASSERT_EQ(p.decide(
                2200, 0.55, [&] { return after; }, kFp),
            pw::DeathReason::worst_fraction);
  for (int i = 0; i < 20; ++i) {
    const pw::DonorChoice c = p.select_donors(after, kFp);
    ASSERT_EQ(c.ranks, std::vector<int>{2}) << c.shortfall;
  }
  // Without the option, the latest reports make rank 1 the top.
  o.triggers.worst_fraction.same_iteration = false;
  pw::Policy latest(o, 0, 4);
  std::vector<pw::RosterEntry> with_own = after;
  with_own[0].status.metric = 0.55;
  EXPECT_EQ(latest.select_donors(with_own, kFp).ranks, std::vector<int>{1});
}
