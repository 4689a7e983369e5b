// Agents made of several ranks: the split (AgentGroups), the shard cut (ShardPlan), exact
// shard-parallel rebirths (GroupAgent), decisions consistent inside an agent, bad group
// configurations, and the population report.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

// ---------------------------------------------------------------------------------------------
// AgentGroups

TEST(AgentGroups, UniformSplitGivesEveryRankItsAgentAndShardPeers) {
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  for (int g = 1; g <= n; ++g) {
    if (n % g != 0) continue;
    pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
    EXPECT_EQ(groups.role(), pw::Role::agent);
    EXPECT_EQ(groups.agents(), n / g);
    EXPECT_EQ(groups.agent(), rank / g);
    EXPECT_EQ(groups.rank_in_agent(), rank % g);
    EXPECT_EQ(groups.agent_size(), g);
    EXPECT_TRUE(groups.uniform());
    int size = 0;
    int r = 0;
    MPI_Comm_size(groups.agent_comm(), &size);
    MPI_Comm_rank(groups.agent_comm(), &r);
    EXPECT_EQ(size, g);
    EXPECT_EQ(r, rank % g);
    MPI_Comm_size(groups.shard_comm(), &size);
    MPI_Comm_rank(groups.shard_comm(), &r);
    EXPECT_EQ(size, n / g);
    EXPECT_EQ(r, rank / g) << "shard peers are ordered by agent id";
    MPI_Comm_size(groups.training_comm(), &size);
    EXPECT_EQ(size, n);
    const std::vector<int> members = groups.agent_ranks(groups.agent());
    ASSERT_EQ(members.size(), static_cast<std::size_t>(g));
    EXPECT_EQ(members[static_cast<std::size_t>(rank % g)], rank);
  }
}

TEST(AgentGroups, BufferRanksAndCoordinatorAreSetAside) {
  PARAMWIN_REQUIRE_RANKS(4);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  // n - 2 training ranks in agents of 1 (n = 4: agents 0 and 1), one buffer, one coordinator.
  pw::AgentGroups groups(MPI_COMM_WORLD,
                         {.ranks_per_agent = 1, .buffer_ranks = 1, .coordinator = true});
  EXPECT_EQ(groups.agents(), n - 2);
  EXPECT_EQ(groups.coordinator_rank(), n - 1);
  EXPECT_EQ(groups.buffer_ranks(), std::vector<int>{n - 2});
  if (rank < n - 2) {
    EXPECT_EQ(groups.role(), pw::Role::agent);
    EXPECT_EQ(groups.agent(), rank);
    EXPECT_NE(groups.agent_comm(), MPI_COMM_NULL);
  } else {
    EXPECT_EQ(groups.role(), rank == n - 1 ? pw::Role::coordinator : pw::Role::buffer);
    EXPECT_EQ(groups.agent(), -1);
    EXPECT_EQ(groups.rank_in_agent(), -1);
    EXPECT_EQ(groups.agent_comm(), MPI_COMM_NULL);
    EXPECT_EQ(groups.shard_comm(), MPI_COMM_NULL);
    EXPECT_EQ(groups.training_comm(), MPI_COMM_NULL);
    // Buffer ranks and the coordinator cannot be agents.
    EXPECT_THROW(
        {
          try {
            pw::Layout l;
            l.add("w", std::size_t{4});
            pw::GroupAgent a(groups, l);
          } catch (const pw::InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("not an agent rank"), std::string::npos)
                << e.what();
            throw;
          }
        },
        pw::InvalidArgument);
  }
  int size = 0;
  MPI_Comm_size(groups.role_comm(), &size);
  EXPECT_EQ(size, rank < n - 2 ? n - 2 : 1);
}

TEST(AgentGroups, ExplicitAssignment) {
  PARAMWIN_REQUIRE_RANKS(4);
  if (pw::test::world_size() != 4) GTEST_SKIP() << "written for 4 ranks";
  const int rank = pw::test::world_rank();
  // Agent 1 = ranks 0 and 2, agent 0 = rank 3, rank 1 is a buffer rank.
  pw::AgentGroups groups(MPI_COMM_WORLD, {.assignment = {1, pw::GroupOptions::kBufferRank, 1, 0}});
  EXPECT_EQ(groups.agents(), 2);
  EXPECT_FALSE(groups.uniform());
  EXPECT_EQ(groups.agent_size(0), 1);
  EXPECT_EQ(groups.agent_size(1), 2);
  EXPECT_EQ(groups.agent_ranks(1), (std::vector<int>{0, 2}));
  const int agent[] = {1, -1, 1, 0};
  const int in_agent[] = {0, -1, 1, 0};
  EXPECT_EQ(groups.agent(), agent[rank]);
  EXPECT_EQ(groups.rank_in_agent(), in_agent[rank]);
  // Sharded agents need equal sizes: a clear error on every agent rank, no hang.
  if (groups.is_agent_rank()) {
    pw::Layout l;
    l.add("w", std::size_t{4});
    try {
      pw::GroupAgent a(groups, l);
      ADD_FAILURE() << "non-uniform agents accepted";
    } catch (const pw::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("differ in size"), std::string::npos) << e.what();
    }
  }
}

/// Expects InvalidArgument containing @p text from AgentGroups(MPI_COMM_WORLD, o) on every rank.
void expect_bad(const pw::GroupOptions& o, const std::string& text) {
  try {
    pw::AgentGroups groups(MPI_COMM_WORLD, o);
    ADD_FAILURE() << "accepted; expected an error containing \"" << text << "\"";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(AgentGroups, BadConfigurationsAreRejectedOnEveryRank) {
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  expect_bad({.ranks_per_agent = 0}, "ranks_per_agent = 0 must be >= 1");
  expect_bad({.ranks_per_agent = n + 1}, "not a multiple of ranks_per_agent");
  expect_bad({.ranks_per_agent = 1, .buffer_ranks = n}, "need at least one");
  expect_bad({.ranks_per_agent = 1, .buffer_ranks = -1}, "buffer_ranks = -1");
  expect_bad({.assignment = std::vector<int>(static_cast<std::size_t>(n) + 1, 0)},
             "entries, the communicator has");
  expect_bad({.assignment = std::vector<int>(static_cast<std::size_t>(n), -7)},
             "expected an agent id");
  if (n >= 2) {
    std::vector<int> gap(static_cast<std::size_t>(n), 0);
    gap[0] = 2;  // ids 0 and 2, no 1
    expect_bad({.assignment = gap}, "no rank has id 1");
    std::vector<int> two(static_cast<std::size_t>(n), pw::GroupOptions::kCoordinatorRank);
    two[0] = 0;
    if (n >= 3) expect_bad({.assignment = two}, "coordinators");
    // Options that differ across ranks would split inconsistently: refused everywhere.
    expect_bad({.ranks_per_agent = rank == 0 ? 1 : n}, "differ across ranks");
  }
}

// ---------------------------------------------------------------------------------------------
// ShardPlan

TEST(ShardPlan, EveryElementInExactlyOneShardAndBalanced) {
  pw::Layout l;
  l.add("w", std::size_t{1001}).add("s", std::vector<std::size_t>{}).add("e", std::size_t{0});
  l.add("b", std::size_t{7}, pw::DType::float64);
  for (int g = 1; g <= 5; ++g) {
    const pw::ShardPlan plan(l, g);
    for (std::size_t layer = 0; layer < l.size(); ++layer) {
      std::size_t next = 0;
      for (int s = 0; s < g; ++s) {
        EXPECT_EQ(plan.first(layer, s), next) << "contiguous, in shard order";
        next += plan.count(layer, s);
        EXPECT_LE(plan.count(layer, s), l[layer].count / static_cast<std::size_t>(g) + 1);
        EXPECT_EQ(plan.shard_layout(s)[layer].name, l[layer].name);
        EXPECT_EQ(plan.shard_layout(s)[layer].dtype, l[layer].dtype);
        EXPECT_EQ(plan.shard_layout(s)[layer].count, plan.count(layer, s));
      }
      EXPECT_EQ(next, l[layer].count);
    }
  }
  EXPECT_THROW(pw::ShardPlan(l, 0), pw::InvalidArgument);
  EXPECT_THROW((void)pw::ShardPlan(l, 2).shard_layout(2), pw::InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// GroupAgent

pw::Layout model() {
  pw::Layout l;
  l.add("w", std::size_t{1001});               // uneven cut
  l.add("scale", std::vector<std::size_t>{});  // 0-dim: one shard holds it
  l.add("b", std::size_t{5}, pw::DType::float64);
  l.add("empty", std::size_t{0});
  l.add("h", std::size_t{3}, pw::DType::bfloat16);  // smaller than some g
  return l;
}

/// Exact in every dtype: what agent @p agent publishes at epoch @p epoch.
double formula(int agent, std::uint64_t epoch, std::size_t layer, std::size_t i) {
  if (layer == 4)
    return static_cast<double>(agent * 8 + static_cast<int>(epoch % 4) * 2 + static_cast<int>(i));
  return static_cast<double>(agent * 100000 + static_cast<int>(epoch % 50) * 1000 +
                             static_cast<int>(layer) * 100 + static_cast<int>(i % 97));
}

struct Model {
  std::vector<float> w = std::vector<float>(1001);
  std::vector<float> scale = std::vector<float>(1);
  std::vector<double> b = std::vector<double>(5);
  std::vector<float> empty;
  std::vector<pw::bfloat16> h = std::vector<pw::bfloat16>(3);
  void fill(int agent, std::uint64_t epoch) {
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(formula(agent, epoch, 0, i));
    scale[0] = static_cast<float>(formula(agent, epoch, 1, 0));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = formula(agent, epoch, 2, i) + 0.25;
    for (std::size_t i = 0; i < h.size(); ++i)
      h[i] = pw::to_bfloat16(static_cast<float>(formula(agent, epoch, 4, i)));
  }
  std::vector<pw::LayerRef> refs() { return {w, scale, b, empty, h}; }
  std::vector<pw::ConstLayerRef> crefs() const { return {w, scale, b, empty, h}; }
  /// True when this equals the mean of @p donors' formulas at their epochs.
  bool is_mean_of(const std::vector<std::pair<int, std::uint64_t>>& donors) const {
    const double k = static_cast<double>(donors.size());
    auto mean = [&](std::size_t layer, std::size_t i) {
      double s = 0.0;
      for (const auto& [a, e] : donors) s += formula(a, e, layer, i);
      return s / k;
    };
    for (std::size_t i = 0; i < w.size(); ++i)
      if (w[i] != static_cast<float>(mean(0, i))) return false;
    if (scale[0] != static_cast<float>(mean(1, 0))) return false;
    for (std::size_t i = 0; i < b.size(); ++i)
      if (b[i] != mean(2, i) + 0.25) return false;
    for (std::size_t i = 0; i < h.size(); ++i)
      if (pw::to_float(h[i]) != static_cast<float>(mean(4, i))) return false;
    return true;
  }
  std::uint64_t checksum() const {
    std::uint64_t c = 1469598103934665603ULL;
    auto mix = [&c](const void* p, std::size_t n) {
      const auto* bytes = static_cast<const unsigned char*>(p);
      for (std::size_t i = 0; i < n; ++i) c = (c ^ bytes[i]) * 1099511628211ULL;
    };
    mix(w.data(), w.size() * 4);
    mix(scale.data(), 4);
    mix(b.data(), b.size() * 8);
    mix(h.data(), h.size() * 2);
    return c;
  }
};

/// Runs with g ranks per agent on the whole world; returns false (skip) when n % g != 0.
bool split_ok(int g) { return pw::test::world_size() % g == 0 && pw::test::world_size() / g >= 2; }

class GroupAgentTest : public ::testing::TestWithParam<int> {};

TEST_P(GroupAgentTest, RebirthIsTheExactMeanOfTheDonorAgentsShards) {
  const int g = GetParam();
  if (!split_ok(g)) GTEST_SKIP() << "needs at least 2 agents of " << g << " ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  const int agents = groups.agents();
  const int k = std::min(2, agents - 1);
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  // Agent 0 dies at its second step, the others never.
  o.triggers.custom = [](const pw::TriggerContext& c) { return c.rank == 0 && c.step == 2; };
  o.selection = {.kind = pw::SelectionKind::uniform, .k = k};
  o.publish.every = 1000;  // only the first publish and rebirths: donors stay at epoch 1
  pw::GroupAgent agent(groups, model(), o);
  EXPECT_EQ(agent.ranks_per_agent(), g);
  EXPECT_EQ(agent.window().size(), agents);
  EXPECT_EQ(agent.window().rank(), groups.agent());
  // The window holds one shard: about 1/g of the model.
  EXPECT_EQ(agent.window().layout().total_bytes(), agent.plan().bytes(groups.rank_in_agent()));

  Model m;
  m.fill(groups.agent(), 1);
  (void)agent.publish(m.crefs());
  EXPECT_EQ(agent.epoch(), 1U);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int s = 1; s <= 3; ++s) {
    const pw::StepEvent ev = agent.step(s, 1.0, m.refs());
    EXPECT_EQ(ev.rank, groups.agent());
    if (groups.agent() == 0 && s == 2) {
      ASSERT_TRUE(ev.died) << ev.note;
      ASSERT_EQ(ev.donors.size(), static_cast<std::size_t>(k));
      std::vector<std::pair<int, std::uint64_t>> donors;
      for (const pw::DonorRecord& d : ev.donors) {
        EXPECT_NE(d.rank, 0);
        EXPECT_EQ(d.version, 1U) << "the donors published epoch 1 only";
        donors.emplace_back(d.rank, d.version);
      }
      EXPECT_TRUE(m.is_mean_of(donors)) << "rebirth is not the mean of its recorded donors";
      EXPECT_EQ(ev.generation, 1U);
      EXPECT_GT(ev.bytes, 0U);
      EXPECT_TRUE(ev.published);
    } else {
      EXPECT_FALSE(ev.died);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // Every rank of agent 0 holds the same replica.
  const std::uint64_t mine = m.checksum();
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, groups.agent_comm());
  MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, groups.agent_comm());
  EXPECT_EQ(lo, hi) << "ranks of one agent disagree after the rebirth";
}

TEST_P(GroupAgentTest, MomentumAndWeightsMixShardwise) {
  const int g = GetParam();
  if (!split_ok(g)) GTEST_SKIP() << "needs at least 2 agents of " << g << " ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [](const pw::TriggerContext& c) { return c.rank == 0 && c.step == 1; };
  o.publish.every = 1000;
  o.selection = {.kind = pw::SelectionKind::uniform, .k = 1};
  o.mixing.momentum = 0.5;
  pw::GroupAgent agent(groups, model(), o);
  Model m;
  m.fill(groups.agent(), 2);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  const Model before = m;
  const pw::StepEvent ev = agent.step(0, 1.0, m.refs());
  if (groups.agent() == 0) {
    ASSERT_TRUE(ev.died) << ev.note;
    const int d = ev.donors.at(0).rank;
    for (std::size_t i = 0; i < m.w.size(); ++i) {
      ASSERT_EQ(m.w[i], static_cast<float>(0.5 * before.w[i] + 0.5 * formula(d, 2, 0, i))) << i;
    }
    EXPECT_EQ(m.b[3], 0.5 * before.b[3] + 0.5 * (formula(d, 2, 2, 3) + 0.25));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(GroupAgentTest, DecisionsAreSharedAndEveryRebirthIsExact) {
  const int g = GetParam();
  if (!split_ok(g)) GTEST_SKIP() << "needs at least 2 agents of " << g << " ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  const int agents = groups.agents();
  const int k = std::min(2, agents - 1);
  long long checked = 0;
  long long wrong = 0;
  pw::GroupAgent* self = nullptr;
  pw::AgentOptions o;
  o.seed = 11;
  o.triggers.age = {.enabled = true, .lo = 2, .hi = 4};
  o.selection = {.kind = pw::SelectionKind::uniform, .k = k};
  o.on_rebirth = [&](const pw::StepEvent& ev, std::span<const pw::LayerRef> params) {
    Model got;
    got.w.assign(static_cast<const float*>(params[0].data()),
                 static_cast<const float*>(params[0].data()) + 1001);
    got.scale[0] = *static_cast<const float*>(params[1].data());
    got.b.assign(static_cast<const double*>(params[2].data()),
                 static_cast<const double*>(params[2].data()) + 5);
    got.h.assign(static_cast<const pw::bfloat16*>(params[4].data()),
                 static_cast<const pw::bfloat16*>(params[4].data()) + 3);
    std::vector<std::pair<int, std::uint64_t>> donors;
    for (const pw::DonorRecord& d : ev.donors) donors.emplace_back(d.rank, d.version);
    const bool ok = static_cast<int>(donors.size()) == k && got.is_mean_of(donors);
    ++checked;
    wrong += ok ? 0 : 1;
    EXPECT_TRUE(ok) << "agent " << ev.rank << " step " << ev.step;
    // Back to this agent's own formula at the epoch about to be published.
    Model own;
    own.fill(ev.rank, self->epoch());
    std::copy(own.w.begin(), own.w.end(), static_cast<float*>(params[0].data()));
    *static_cast<float*>(params[1].data()) = own.scale[0];
    std::copy(own.b.begin(), own.b.end(), static_cast<double*>(params[2].data()));
    std::copy(own.h.begin(), own.h.end(), static_cast<pw::bfloat16*>(params[4].data()));
  };
  pw::GroupAgent agent(groups, model(), o);
  self = &agent;
  Model m;
  m.fill(groups.agent(), 1);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  constexpr int kSteps = 60;
  for (int s = 0; s < kSteps; ++s) {
    m.fill(groups.agent(), agent.epoch() + 1);  // what the next publish will carry
    // Ranks report different metrics; the agent's metric is their mean.
    const double metric = 1.0 + groups.rank_in_agent();
    const pw::StepEvent ev = agent.step(s, metric, m.refs());
    EXPECT_DOUBLE_EQ(ev.metric, 1.0 + (g - 1) / 2.0);
    // Same decision on every rank of the agent.
    std::int64_t mine[6] = {ev.died,     static_cast<std::int64_t>(ev.reason),
                            ev.deferred, static_cast<std::int64_t>(ev.generation),
                            ev.step,     ev.donors.empty() ? -1 : ev.donors[0].rank};
    std::int64_t lo[6];
    std::int64_t hi[6];
    MPI_Allreduce(mine, lo, 6, MPI_INT64_T, MPI_MIN, groups.agent_comm());
    MPI_Allreduce(mine, hi, 6, MPI_INT64_T, MPI_MAX, groups.agent_comm());
    for (int i = 0; i < 6; ++i) ASSERT_EQ(lo[i], hi[i]) << "field " << i << " at step " << s;
    const std::uint64_t sum = m.checksum();
    std::uint64_t slo = 0;
    std::uint64_t shi = 0;
    MPI_Allreduce(&sum, &slo, 1, MPI_UINT64_T, MPI_MIN, groups.agent_comm());
    MPI_Allreduce(&sum, &shi, 1, MPI_UINT64_T, MPI_MAX, groups.agent_comm());
    ASSERT_EQ(slo, shi) << "replicas differ inside agent " << groups.agent() << " at step " << s;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(checked, agent.stats().deaths());
  EXPECT_GE(agent.stats().deaths() + agent.stats().deferred(), kSteps / 5);  // ages <= 4
  EXPECT_EQ(agent.generation(), static_cast<std::uint64_t>(agent.stats().deaths()));
  EXPECT_EQ(agent.window().roster(agent.agent()).status.generation, agent.generation());

  // The population report: deaths counted once per agent, timers from every rank.
  const pw::PopulationReport rep =
      pw::gather_report(groups.training_comm(), agent.stats(), agent.leader());
  std::int64_t deaths = agent.leader() ? agent.stats().deaths() : 0;
  std::int64_t all_deaths = 0;
  MPI_Allreduce(&deaths, &all_deaths, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(rep.total_deaths(), all_deaths);
  EXPECT_EQ(rep.deaths[static_cast<std::size_t>(pw::DeathReason::age)], all_deaths);
  EXPECT_EQ(rep.agents, agents);
  EXPECT_EQ(rep.ranks, pw::test::world_size());
  EXPECT_EQ(rep.steps, static_cast<std::int64_t>(agents) * kSteps);
  ASSERT_EQ(rep.phases.size(), 6U);
  EXPECT_EQ(rep.phases[5].name, "rebirth");
  for (const pw::PhaseReport& p : rep.phases) {
    EXPECT_LE(p.min, p.median);
    EXPECT_LE(p.median, p.max);
    EXPECT_GE(p.imbalance, 0.0);
  }
  EXPECT_EQ(rep.phases[static_cast<std::size_t>(pw::Phase::assemble)].samples > 0,
            g > 1 && all_deaths > 0);
  const std::string json = rep.to_json();
  for (const char* key : {"\"deaths\":{\"age\":", "\"phases\":{\"decide\":", "\"imbalance\":",
                          "\"bytes_pulled\":", "\"rebirth\":{"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " missing in " << json;
  }
  std::ostringstream table;
  rep.write_table(table);
  EXPECT_NE(table.str().find("imbalance"), std::string::npos);
  if (pw::test::world_rank() == 0) {
    std::printf("[ groups  ] g=%d: %lld rebirths verified, 0 wrong expected\n%s", g,
                static_cast<long long>(all_deaths), table.str().c_str());
  }
}

TEST_P(GroupAgentTest, ShardsFromDifferentPublishesAreNeverMixed) {
  const int g = GetParam();
  if (g < 2 || !split_ok(g)) GTEST_SKIP() << "needs at least 2 agents of at least 2 ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  bool die = false;
  o.triggers.custom = [&die](const pw::TriggerContext& c) { return die && c.rank == 0; };
  o.publish.every = 1000;
  o.selection = {.kind = pw::SelectionKind::uniform, .k = 1, .shortfall = pw::Shortfall::defer};
  pw::GroupAgent agent(groups, model(), o);
  Model m;
  m.fill(groups.agent(), 1);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  // Every donor agent's shard 0 gets a publish its other shards never get: torn across shards.
  if (groups.agent() != 0 && groups.rank_in_agent() == 0) {
    Model other;
    other.fill(groups.agent(), 7);
    const std::vector<pw::ConstLayerRef> full = other.crefs();
    std::vector<pw::ConstLayerRef> shard;
    for (std::size_t l = 0; l < full.size(); ++l) {
      const std::size_t es = pw::dtype_size(agent.plan().full()[l].dtype);
      shard.emplace_back(std::string_view{},
                         static_cast<const std::byte*>(full[l].data()) +
                             agent.plan().first(l, 0) * es,
                         agent.plan().count(l, 0), agent.plan().full()[l].dtype);
    }
    ASSERT_TRUE(agent.window().publish(shard, 777).published);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  die = true;
  const Model before = m;
  pw::StepEvent ev = agent.step(0, 1.0, m.refs());
  if (groups.agent() == 0) {
    EXPECT_FALSE(ev.died);
    EXPECT_TRUE(ev.deferred);
    EXPECT_EQ(m.checksum(), before.checksum()) << "a refused rebirth changed the parameters";
    if (agent.leader()) {
      EXPECT_NE(ev.note.find("different publishes"), std::string::npos) << ev.note;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // A regular group publish brings every shard to the same epoch again.
  if (groups.agent() != 0) {
    m.fill(groups.agent(), 9);
    (void)agent.publish(m.crefs());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ev = agent.step(1, 1.0, m.refs());
  if (groups.agent() == 0) {
    ASSERT_TRUE(ev.died) << ev.note;
    EXPECT_TRUE(m.is_mean_of({{ev.donors[0].rank, 9}}));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The same checks with the gather agents spread over several nodes use (MPI_Bcast of
// datatypes over the caller's layers instead of copies from the peers' shared scratch).
TEST(GroupAgentBroadcastGather, RebirthsAreExactWithoutSharedScratch) {
  if (!split_ok(2)) GTEST_SKIP() << "needs at least 2 agents of 2 ranks";
  setenv("PARAMWIN_GROUP_GATHER", "broadcast", 1);
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [](const pw::TriggerContext& c) { return c.rank == 0 && c.step % 2 == 1; };
  o.selection.k = 1;
  o.publish.every = 1000;
  pw::GroupAgent agent(groups, model(), o);
  unsetenv("PARAMWIN_GROUP_GATHER");
  Model m;
  m.fill(groups.agent(), 3);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int s = 0; s < 4; ++s) {
    const pw::StepEvent ev = agent.step(s, 1.0, m.refs());
    if (groups.agent() == 0 && s % 2 == 0) {
      ASSERT_TRUE(ev.died) << ev.note;
      EXPECT_TRUE(m.is_mean_of({{ev.donors[0].rank, 3}}));
      EXPECT_GT(ev.seconds.assemble, 0.0);
      m.fill(0, 3);  // back to its own values
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

INSTANTIATE_TEST_SUITE_P(RanksPerAgent, GroupAgentTest, ::testing::Values(1, 2),
                         [](const auto& param_info) {
                           std::string name = std::to_string(param_info.param);
                           return name.insert(0, 1, 'g');
                         });

TEST(GroupAgentBadInput, BadParametersOnOneRankFailOnEveryRankOfTheAgent) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int g = pw::test::world_size() % 2 == 0 && pw::test::world_size() >= 4 ? 2 : 1;
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  pw::AgentOptions o;
  o.selection.k = 1;
  pw::GroupAgent agent(groups, model(), o);
  Model m;
  m.fill(groups.agent(), 1);
  const std::uint64_t before = agent.epoch();
  std::vector<pw::LayerRef> refs = m.refs();
  std::vector<float> short_w(10);
  if (groups.rank_in_agent() == g - 1) refs[0] = pw::LayerRef(short_w);
  try {
    (void)agent.step(0, 1.0, refs);
    ADD_FAILURE() << "bad parameters accepted";
  } catch (const pw::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("expects 1001 elements, got 10") != std::string::npos ||
                what.find("another rank of agent") != std::string::npos)
        << what;
  }
  EXPECT_EQ(agent.steps(), 0);
  EXPECT_EQ(agent.epoch(), before);
  // Still usable afterwards.
  const pw::StepEvent ev = agent.step(0, 1.0, m.refs());
  EXPECT_EQ(ev.step, 1);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GroupAgentBadInput, LayoutMismatchAcrossTrainingRanksFailsEverywhere) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int g = pw::test::world_size() % 2 == 0 && pw::test::world_size() >= 4 ? 2 : 1;
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  pw::Layout l = model();
  if (pw::test::world_rank() == pw::test::world_size() - 1) l.add("extra", std::size_t{3});
  pw::AgentOptions o;
  o.selection.k = 1;
  try {
    pw::GroupAgent agent(groups, l, o);
    ADD_FAILURE() << "mismatched layouts accepted";
  } catch (const pw::LayoutMismatch& e) {
    EXPECT_NE(std::string(e.what()).find("extra"), std::string::npos) << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(GroupAgentBadInput, LiveExposureAndInvalidOptionsAreRefusedEverywhere) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 1});
  pw::AgentOptions good;
  good.selection.k = 1;
  try {
    pw::GroupAgent agent(groups, model(), good, {.exposure = pw::Exposure::live});
    ADD_FAILURE() << "live exposure accepted";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("Exposure::live"), std::string::npos) << e.what();
  }
  pw::AgentOptions bad = good;
  if (pw::test::world_rank() == 0) bad.selection.k = 0;  // invalid on one rank only
  try {
    pw::GroupAgent agent(groups, model(), bad);
    ADD_FAILURE() << "invalid options accepted";
  } catch (const pw::InvalidArgument& e) {
    SUCCEED() << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
