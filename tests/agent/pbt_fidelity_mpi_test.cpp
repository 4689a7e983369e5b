// PBT fidelity under MPI (issue 26), on populations of 4 and 8 with the pbt preset:
// - asynchronous, ranked at the same iteration: after a shift of every agent's metric, the
//   first agent past it is not ranked against the others' reports from before it;
// - asynchronous: every rebirth in the event logs replaces an agent of the bottom
//   quantile_count(n, q) with a copy of an agent of the top quantile, the donors spread
//   uniformly over the top quantile (chi-square over hundreds of deaths), the copy exact;
// - synchronous: two runs with the same seeds write the same event logs (timings, versions
//   and transports aside), every rebirth's membership checked exactly against the agreed
//   ranking of its interval, and the reborn parameters are the donor's of that interval.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kW = 16;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kW);
  l.add_hyperparameter("lr");
  return l;
}

std::string log_path(const std::string& name) {
  return "pbt_fidelity_" + name + "_" + std::to_string(pw::test::world_size()) + "_{rank}.jsonl";
}

std::string rank_path(const std::string& pattern, int rank) {
  std::string p = pattern;
  p.replace(p.find("{rank}"), 6, std::to_string(rank));
  return p;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

/// One death as the event log records it.
struct Death {
  int rank = -1;
  std::int64_t step = 0;
  std::string reason;
  std::vector<int> donors;
};

// One death, read with the library's own schema (step_event_from_json): a line it cannot
// read is a failure of this rank's checks, not an exception that would strand the others.
Death parse_death(const std::string& line) {
  Death d;
  pw::StepEvent e;
  try {
    e = pw::step_event_from_json(line);
  } catch (const pw::InvalidArgument& err) {
    ADD_FAILURE() << err.what() << " in " << line;
    return d;
  }
  EXPECT_TRUE(e.died) << line;
  d.rank = e.rank;
  d.step = e.step;
  d.reason = pw::reason_name(e.reason);
  for (const pw::DonorRecord& donor : e.donors) d.donors.push_back(donor.rank);
  return d;
}

/// The line without what differs between two runs of the same decisions: timings, publish
/// versions and attempts, bytes, transports, staleness (all set to their defaults, and the
/// event written again).
std::string decisions_of(const std::string& line) {
  pw::StepEvent e;
  try {
    e = pw::step_event_from_json(line);
  } catch (const pw::InvalidArgument& err) {
    ADD_FAILURE() << err.what() << " in " << line;
    return line;
  }
  e.version = 0;
  e.bytes = 0;
  e.publish_attempts = 0;
  e.seconds = {};
  e.published = false;
  e.publish_skipped = false;
  for (pw::DonorRecord& donor : e.donors) {
    donor.version = 0;
    donor.bytes = 0;
    donor.transport = pw::Transport::shm;
    donor.staleness_seconds = 0.0;
  }
  return pw::to_json(e);
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

// --- asynchronous -------------------------------------------------------------------------

// Every agent's metric is its rank (lower is better), so the bottom and top quantiles are
// fixed sets whatever the agents' timing: the logs must show exactly those deaths.
void run_async(const std::string& name, double fraction, int steps) {
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  pw::AgentOptions o = pw::parse_agent_options(
      "preset=pbt worst_every=1 warmup=1 seed=7 explore.lr=log_uniform:1e-4..1e-1");
  o.triggers.worst_fraction.fraction = fraction;
  o.event_log = log_path(name);
  const auto own_value = [](int r) { return static_cast<float>(10 * r + 1); };
  const auto own_lr = [](int r) { return 1e-3 * (r + 1); };
  int copies_checked = 0;
  o.on_rebirth = [&](const pw::StepEvent& ev, std::span<const pw::LayerRef> params) {
    ASSERT_EQ(ev.donors.size(), 1U);
    const int donor = ev.donors[0].rank;
    const auto* w = static_cast<const float*>(params[0].data());
    for (std::size_t i = 0; i < kW; ++i) ASSERT_EQ(w[i], own_value(donor)) << "not a copy";
    // The donor's lr (top agents never die: always their own), perturbed or resampled.
    const double lr = ev.hyper.get("lr");
    const double d = own_lr(donor);
    EXPECT_TRUE(lr == d * 0.8 || lr == d * 1.2 || (lr >= 1e-4 && lr <= 1e-1)) << lr;
    ++copies_checked;
  };
  std::int64_t deaths = 0;
  {
    pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
    pw::Hyperparameters h = agent.hyperparameters();
    h.set("lr", own_lr(rank));
    agent.set_hyperparameters(h);
    std::vector<float> w(kW, own_value(rank));
    const std::vector<pw::LayerRef> refs{pw::LayerRef(w)};
    // Warm-up step: everyone publishes and reports its metric before anyone ranks.
    (void)agent.step(0, rank, refs);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int s = 1; s < steps; ++s) {
      std::fill(w.begin(), w.end(), own_value(rank));
      const pw::StepEvent ev = agent.step(s, rank, refs);
      deaths += ev.died ? 1 : 0;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // the top agents stay readable until every pull is done
  }
  EXPECT_EQ(copies_checked, deaths);

  const std::size_t c = pw::quantile_count(static_cast<std::size_t>(n), fraction);
  ASSERT_GE(c, 1U);
  // Exactly the bottom c agents die, at every check after the warm-up.
  const bool bottom = rank >= n - static_cast<int>(c);
  EXPECT_EQ(deaths, bottom ? steps - 1 : 0) << "rank " << rank;
  if (rank != 0) return;
  std::vector<int> counts(c, 0);
  int total = 0;
  for (int r = 0; r < n; ++r) {
    for (const std::string& line : lines_of(rank_path(log_path(name), r))) {
      const Death d = parse_death(line);
      EXPECT_EQ(d.rank, r);
      EXPECT_GE(d.rank, n - static_cast<int>(c)) << "an agent outside the bottom died: " << line;
      EXPECT_EQ(d.reason, "worst_fraction");
      ASSERT_EQ(d.donors.size(), 1U) << line;
      ASSERT_GE(d.donors[0], 0);
      ASSERT_LT(d.donors[0], static_cast<int>(c)) << "donor outside the top quantile: " << line;
      ++counts[static_cast<std::size_t>(d.donors[0])];
      ++total;
    }
  }
  EXPECT_EQ(total, static_cast<int>(c) * (steps - 1));
  if (c >= 2) {
    // Uniform over the top quantile: chi-square with c - 1 degrees of freedom below the
    // 1e-6 tail (1 dof: 24; 3 dof: 31). Fittest-like selection puts every count on one
    // donor (X2 = total * (c - 1)), hundreds here.
    EXPECT_LT(chi_square(counts), c == 2 ? 24.0 : 31.0)
        << "donor counts " << ::testing::PrintToString(counts);
  }
}

TEST(PbtFidelity, AsyncRebirthsReplaceTheBottomWithUniformCopiesOfTheTop) {
  PARAMWIN_REQUIRE_RANKS(4);
  // The preset's quantile 0.25 (4 agents: 1 at each end; 8: 2), then 0.5 (2; 4) for a
  // uniformity test over more donors.
  run_async("async25", 0.25, 201);
  MPI_Barrier(MPI_COMM_WORLD);
  run_async("async50", 0.5, 201);
}

// --- asynchronous, ranked at the same iteration -------------------------------------------

// A metric that shifts for everyone at iteration 2 (every loss jumps by 5), the agents
// reaching it one at a time. Ray Tune's asynchronous rule ranks each one past the shift
// against the others' losses from before it, and it dies; ranked at the same iteration, only
// the agents that were the worst at iteration 1 and are the worst at 2 (the last ranks) die,
// as the agreed ranking of the synchronous mode would decide. Returns the ranks that died.
std::vector<int> deaths_after_a_shift(bool same_iteration) {
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  pw::AgentOptions o = pw::parse_agent_options(
      "preset=pbt worst_every=1 warmup=1 seed=3 explore.lr=log_uniform:1e-4..1e-1");
  o.triggers.worst_fraction.same_iteration = same_iteration;
  bool died = false;
  {
    pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
    std::vector<float> w(kW, static_cast<float>(rank));
    const std::vector<pw::LayerRef> refs{pw::LayerRef(w)};
    (void)agent.step(1, 0.1 + 0.01 * rank, refs);  // the warm-up step: reports, no ranking
    MPI_Barrier(MPI_COMM_WORLD);
    for (int turn = 0; turn < n; ++turn) {
      if (turn == rank) {
        const pw::StepEvent ev = agent.step(2, 5.1 + 0.01 * rank, refs);
        died = ev.died;
        if (died) {
          EXPECT_EQ(ev.reason, pw::DeathReason::worst_fraction);
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  // Everyone's deaths, for every rank to check.
  const int mine = died ? 1 : 0;
  std::vector<int> all(static_cast<std::size_t>(n));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> out;
  for (int r = 0; r < n; ++r) {
    if (all[static_cast<std::size_t>(r)] != 0) out.push_back(r);
  }
  return out;
}

TEST(PbtFidelity, AsyncSameIterationRanksTheFirstPastAShiftAtItsPreviousIteration) {
  PARAMWIN_REQUIRE_RANKS(4);
  const int n = pw::test::world_size();
  // Each agent in its turn is the worst of the latest reports: those that went before it
  // report less than its 5.1x, those still to go their 0.1x of iteration 1. Every agent dies.
  const std::vector<int> latest = deaths_after_a_shift(false);
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) everyone[static_cast<std::size_t>(r)] = r;
  EXPECT_EQ(latest, everyone) << ::testing::PrintToString(latest);
  MPI_Barrier(MPI_COMM_WORLD);
  // Each agent is compared with those behind at iteration 1 and with those ahead at 2: the
  // agents that die are the worst quantile_count(n, 0.25) at both, the last ranks, as the
  // synchronous mode's agreed ranking at 2 would decide.
  const std::vector<int> same = deaths_after_a_shift(true);
  std::vector<int> want;
  for (int r = n - static_cast<int>(pw::quantile_count(static_cast<std::size_t>(n), 0.25)); r < n;
       ++r) {
    want.push_back(r);
  }
  EXPECT_EQ(same, want) << ::testing::PrintToString(same);
}

// --- synchronous --------------------------------------------------------------------------

struct SyncRun {
  std::vector<double> metric;                // per step index, what this agent passed to step()
  std::vector<double> w0;                    // per step index, its w[0] passed to step()
  std::map<std::int64_t, double> reborn_w0;  // policy step -> w[0] right after the pull
};

// A toy training that makes the ranking change: w moves toward 1 at rate lr, the loss is
// (w - 1)^2. Rebirths copy a better agent's w and perturb its lr.
SyncRun run_sync(const std::string& name, int steps) {
  const int rank = pw::test::world_rank();
  pw::AgentOptions o = pw::parse_agent_options(
      "preset=pbt sync=true worst_every=3 seed=99 explore.lr=log_uniform:1e-3..0.3 "
      "explore_clamp.lr=1e-4..0.9");
  o.event_log = log_path(name);
  SyncRun run;
  o.on_rebirth = [&](const pw::StepEvent& ev, std::span<const pw::LayerRef> params) {
    run.reborn_w0[ev.step] = static_cast<const float*>(params[0].data())[0];
  };
  pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
  pw::Hyperparameters h = agent.hyperparameters();
  h.set("lr", 0.002 * (1 + (rank * 7) % 11));
  agent.set_hyperparameters(h);
  std::vector<float> w(kW, 0.0F);
  const std::vector<pw::LayerRef> refs{pw::LayerRef(w)};
  for (int s = 0; s < steps; ++s) {
    const double lr = agent.hyperparameters().get("lr");
    for (float& x : w) x += static_cast<float>(lr * (1.0 - x));
    const double loss = (1.0 - w[0]) * (1.0 - w[0]);
    run.metric.push_back(loss);
    run.w0.push_back(w[0]);
    (void)agent.step(s, loss, refs);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return run;
}

TEST(PbtFidelity, SyncRunsWithTheSameSeedsWriteTheSameEventLogs) {
  PARAMWIN_REQUIRE_RANKS(4);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  constexpr int kSteps = 60;
  constexpr int kEvery = 3;
  const SyncRun a = run_sync("sync_a", kSteps);
  const SyncRun b = run_sync("sync_b", kSteps);

  // Same decisions, same metrics at every step: the parameters too were the same.
  EXPECT_EQ(a.metric, b.metric);
  EXPECT_EQ(a.reborn_w0, b.reborn_w0);
  const std::vector<std::string> la = lines_of(rank_path(log_path("sync_a"), rank));
  const std::vector<std::string> lb = lines_of(rank_path(log_path("sync_b"), rank));
  ASSERT_EQ(la.size(), lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(decisions_of(la[i]), decisions_of(lb[i])) << "line " << i;
  }

  // Exact membership against the agreed ranking of each interval: everyone's metrics.
  std::vector<double> metrics(static_cast<std::size_t>(n) * kSteps);
  std::vector<double> w0(static_cast<std::size_t>(n) * kSteps);
  MPI_Allgather(a.metric.data(), kSteps, MPI_DOUBLE, metrics.data(), kSteps, MPI_DOUBLE,
                MPI_COMM_WORLD);
  MPI_Allgather(a.w0.data(), kSteps, MPI_DOUBLE, w0.data(), kSteps, MPI_DOUBLE, MPI_COMM_WORLD);
  const auto at = [&](const std::vector<double>& v, int r, std::int64_t step) {
    return v[static_cast<std::size_t>(r) * kSteps + static_cast<std::size_t>(step - 1)];
  };
  const std::size_t c = pw::quantile_count(static_cast<std::size_t>(n), 0.25);
  std::size_t deaths = 0;
  for (const std::string& line : la) {
    const Death d = parse_death(line);
    ASSERT_EQ(d.step % kEvery, 0) << "a death between intervals: " << line;
    std::vector<pw::RosterEntry> ranking(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      pw::RosterEntry& e = ranking[static_cast<std::size_t>(r)];
      e.rank = r;
      e.version = 1;
      e.status.metric = at(metrics, r, d.step);
      e.status.state = pw::AgentState::active;
    }
    const std::vector<int> worst = pw::worst_ranks(ranking, rank, at(metrics, rank, d.step), 0,
                                                   pw::MetricDirection::lower_is_better, 0.25);
    const std::vector<int> best = pw::best_ranks(ranking, rank, at(metrics, rank, d.step), 0,
                                                 pw::MetricDirection::lower_is_better, 0.25);
    ASSERT_EQ(worst.size(), c);
    EXPECT_NE(std::find(worst.begin(), worst.end(), rank), worst.end())
        << "step " << d.step << ": the reborn agent was not in the bottom quantile";
    ASSERT_EQ(d.donors.size(), 1U);
    EXPECT_NE(std::find(best.begin(), best.end(), d.donors[0]), best.end())
        << "step " << d.step << ": donor " << d.donors[0] << " not in the top quantile";
    // The copy is the donor's parameters of this very interval.
    ASSERT_EQ(a.reborn_w0.count(d.step), 1U);
    EXPECT_EQ(a.reborn_w0.at(d.step), at(w0, d.donors[0], d.step)) << "step " << d.step;
    ++deaths;
  }
  // Every interval kills the c worst: count them over the population.
  const auto mine = static_cast<long long>(deaths);
  long long all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, static_cast<long long>(c) * (kSteps / kEvery));
}

}  // namespace
