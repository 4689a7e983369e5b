// HierarchicalAveragingAgent (DASO's hierarchy over AgentGroups): the in-group mean is exact
// every step and leaves every rank of a group with the same values; a leader's round across
// groups equals the exact weighted mix of the group means its peers published (gathered at
// the end), and reaches the whole group; finish() leaves every training rank equal (the
// global mean without training); bad input throws on every rank concerned, with nothing
// changed, and a leader's failure reaches its group instead of leaving it waiting.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 6;  // float64: the means are compared to 1e-12

pw::Layout layout() {
  pw::Layout l;
  l.add("x", kN, pw::DType::float64);
  return l;
}

/// Groups of two ranks (one group on two ranks, two groups on four).
pw::AgentGroups pairs() { return {MPI_COMM_WORLD, pw::GroupOptions{.ranks_per_agent = 2}}; }

std::vector<double> initial(int rank) {
  std::vector<double> v(kN);
  for (std::size_t i = 0; i < kN; ++i) {
    v[i] = std::fmod(0.31 * (rank + 1) + 0.17 * static_cast<double>(i), 1.0);
  }
  return v;
}

void train(std::vector<double>& v, int rank, int step) {
  for (std::size_t i = 0; i < kN; ++i) {
    v[i] += 0.01 * std::sin(0.7 * step + 1.3 * rank + static_cast<double>(i));
  }
}

/// Every rank's vector on @p comm, in rank order.
std::vector<std::vector<double>> all_of(const std::vector<double>& v, MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  std::vector<double> flat(kN * static_cast<std::size_t>(n));
  MPI_Allgather(v.data(), static_cast<int>(kN), MPI_DOUBLE, flat.data(), static_cast<int>(kN),
                MPI_DOUBLE, comm);
  std::vector<std::vector<double>> out;
  for (std::size_t r = 0; r < static_cast<std::size_t>(n); ++r) {
    out.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(r * kN),
                     flat.begin() + static_cast<std::ptrdiff_t>((r + 1) * kN));
  }
  return out;
}

std::vector<double> mean_of(const std::vector<std::vector<double>>& vs) {
  std::vector<double> m(kN, 0.0);
  for (const auto& v : vs) {
    for (std::size_t i = 0; i < kN; ++i) {
      m[i] += v[i];
    }
  }
  for (double& x : m) {
    x /= static_cast<double>(vs.size());
  }
  return m;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const char* what,
                 int step) {
  for (std::size_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12) << what << ", step " << step << ", element " << i;
  }
}

struct LeaderStep {
  std::vector<double> group_mean;  // the in-group mean before the round across groups
  std::vector<double> after;
  pw::AveragingRound round;
};

TEST(HierarchicalAveraging, InGroupMeanIsExactAndLeaderMixesReachTheGroup) {
  const int rank = pw::test::world_rank();
  pw::AgentGroups groups = pairs();
  pw::AveragingOptions o;
  o.topology = pw::Topology::all_peers();
  pw::HierarchicalAveragingAgent agent(groups, layout(), o);
  ASSERT_EQ(agent.group(), rank / 2);
  ASSERT_EQ(agent.group_size(), 2);
  ASSERT_EQ(agent.leader(), rank % 2 == 0);
  std::vector<double> v = initial(agent.group());     // the ranks of a group start equal
  std::map<std::uint64_t, std::vector<double>> mine;  // the leader's publishes by version
  const pw::PublishResult first = agent.publish({v});
  if (agent.leader()) {
    ASSERT_TRUE(first.published);
    mine[first.version] = v;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<LeaderStep> steps;
  int mixed = 0;
  for (int t = 1; t <= 20; ++t) {
    train(v, rank, t);
    const std::vector<double> mean = mean_of(all_of(v, groups.agent_comm()));
    const pw::HierarchicalRound r = agent.step({v});
    EXPECT_EQ(r.group, agent.group());
    EXPECT_EQ(r.group_size, 2);
    EXPECT_EQ(r.across.kind, pw::RoundKind::gossip);
    const auto members = all_of(v, groups.agent_comm());
    EXPECT_EQ(members[0], members[1]) << "step " << t << ": the group's ranks differ";
    if (!r.across.applied) {
      expect_near(v, mean, "the in-group mean", t);
    }
    if (agent.leader()) {
      mine[r.across.version] = v;
      steps.push_back({mean, v, r.across});
      mixed += r.across.applied ? 1 : 0;
    } else {
      EXPECT_TRUE(r.across.peers.empty());
      EXPECT_NE(r.across.note.find("leader"), std::string::npos) << r.across.note;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every publish done before the leaders' tables are gathered
  // Every leader's publishes, gathered over the world (members contribute nothing).
  std::vector<double> packed;
  for (const auto& [version, values] : mine) {
    packed.push_back(agent.group());
    packed.push_back(static_cast<double>(version));
    packed.insert(packed.end(), values.begin(), values.end());
  }
  const std::vector<double> all = pw::test::allgather_doubles(packed);
  std::map<std::pair<int, std::uint64_t>, std::vector<double>> table;
  for (std::size_t at = 0; at < all.size(); at += 2 + kN) {
    table[{static_cast<int>(all[at]), static_cast<std::uint64_t>(all[at + 1])}] =
        std::vector<double>(all.begin() + static_cast<std::ptrdiff_t>(at + 2),
                            all.begin() + static_cast<std::ptrdiff_t>(at + 2 + kN));
  }
  for (const LeaderStep& s : steps) {
    if (!s.round.applied) {
      continue;
    }
    std::vector<double> want(kN);
    for (std::size_t i = 0; i < kN; ++i) {
      want[i] = s.round.self_weight * s.group_mean[i];
    }
    for (const pw::AveragingPeer& p : s.round.peers) {
      if (p.skipped != pw::SkipReason::none) {
        continue;
      }
      const auto it = table.find({p.rank, p.version});
      ASSERT_NE(it, table.end()) << "group " << p.rank << " version " << p.version;
      for (std::size_t i = 0; i < kN; ++i) {
        want[i] += p.weight * it->second[i];
      }
    }
    expect_near(s.after, want, "the leader's mix", static_cast<int>(s.round.step));
  }
  if (groups.agents() > 1 && agent.leader()) {
    EXPECT_GT(mixed, 0) << "no round across groups mixed a peer";
  }
  // finish(): every training rank ends equal.
  agent.finish({v});
  const auto everyone = all_of(v, MPI_COMM_WORLD);
  for (const auto& x : everyone) {
    EXPECT_EQ(x, everyone[0]);
  }
}

TEST(HierarchicalAveraging, FinishWithoutTrainingIsTheGlobalMean) {
  const int rank = pw::test::world_rank();
  pw::AgentGroups groups = pairs();
  pw::HierarchicalAveragingAgent agent(groups, layout());
  std::vector<double> v = initial(rank);
  const std::vector<double> mean = mean_of(all_of(v, MPI_COMM_WORLD));
  const pw::HierarchicalRound r = agent.finish({v});
  EXPECT_EQ(r.across.kind, pw::RoundKind::synchronous);
  expect_near(v, mean, "finish()", 0);
}

TEST(HierarchicalAveraging, BadInputThrowsOnEveryRankConcerned) {
  const int rank = pw::test::world_rank();
  pw::AgentGroups groups = pairs();
  pw::AveragingOptions bad;
  bad.interval = 0;
  EXPECT_THROW(pw::HierarchicalAveragingAgent(groups, layout(), bad), pw::InvalidArgument);
  pw::Layout half;
  half.add("x", kN, pw::DType::float16);
  EXPECT_THROW(pw::HierarchicalAveragingAgent(groups, half), pw::InvalidArgument);
  pw::Layout other;
  other.add("x", kN + (rank == 1 ? 1 : 0), pw::DType::float64);
  EXPECT_THROW(pw::HierarchicalAveragingAgent(groups, other), pw::LayoutMismatch);

  pw::HierarchicalAveragingAgent agent(groups, layout());
  std::vector<double> v = initial(rank);
  std::vector<double> shorter(kN - 1, 1.0);
  const std::vector<double> keep = v;
  // Rank 1's parameters are wrong: its group (ranks 0 and 1) throws; nothing changed.
  if (rank < 2) {
    EXPECT_THROW(agent.step({rank == 1 ? pw::LayerRef(shorter) : pw::LayerRef(v)}),
                 pw::InvalidArgument);
    EXPECT_EQ(v, keep);
    EXPECT_EQ(agent.steps(), 0);
  }
  if (agent.leader()) {
    EXPECT_NO_THROW(static_cast<void>(agent.across()));
  } else {
    EXPECT_THROW(static_cast<void>(agent.across()), pw::InvalidArgument);
  }
}

TEST(HierarchicalAveraging, ALeadersFailureReachesItsGroup) {
  pw::AgentGroups groups = pairs();
  pw::AveragingOptions o;
  // Valid for the rounds the options check probes (0..3), then names the agent itself.
  o.topology = pw::Topology::custom_peers([](std::int64_t round, int rank, int size) {
    if (round < 4) {
      return size > 1 ? std::vector<int>{(rank + 1) % size} : std::vector<int>{};
    }
    return std::vector<int>{rank};
  });
  pw::HierarchicalAveragingAgent agent(groups, layout(), o);
  std::vector<double> v = initial(pw::test::world_rank());
  for (int t = 0; t < 4; ++t) {
    agent.step({v});
  }
  try {
    agent.step({v});
    ADD_FAILURE() << "round 4 names the leader itself: every rank of the group must throw";
  } catch (const pw::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("itself"), std::string::npos) << what;
  }
}

}  // namespace
