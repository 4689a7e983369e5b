// Population checkpoints of GroupAgent (docs/checkpoints.md, docs/groups.md): agents of g
// ranks save in Agent's format (one group per agent, written by the agents' leaders) and load
// on every rank. A save/load round trip bit for bit on every rank (parameters, counters,
// publish stamp, what the population does next), saves from step() with keep-last-N and
// resume_newest (synchronous and asynchronous), fewer agents than the file (the best by
// metric; a file of one-rank Agents read by agents of 2 ranks), more agents (reborn from
// donors, on the follower ranks too), bad checkpoints and bad parameters refused on every
// rank with nothing changed, and checkpoint options that differ across ranks. The resume
// across processes is group_checkpoint_resume (tests/checkpoint/checkpoint_resume_test.cmake).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "formula_params.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  return pw::test::fresh_checkpoint_dir("group_checkpoint_mpi_test", name);
}

using pw::test::ageing_options;

using Params = pw::test::FormulaParams<12, 3>;

// The agent sizes this world can be cut into (1 and 2 where they divide it).
std::vector<int> group_sizes() {
  std::vector<int> out{1};
  if (pw::test::world_size() % 2 == 0) out.push_back(2);
  return out;
}

// What a step decided, as far as two identical populations must agree.
struct Seen {
  bool died = false;
  std::uint64_t generation = 0;
  std::vector<int> donors{};
  std::vector<std::uint64_t> versions{};
  bool operator==(const Seen&) const = default;
};

// Steps @p n times, one agent at a time (deterministic), every rank of an agent updating its
// replica identically.
std::vector<Seen> run(pw::GroupAgent& agent, Params& p, int n) {
  std::vector<Seen> seen;
  for (int i = 0; i < n; ++i) {
    for (float& x : p.w) x = x * 0.5F + static_cast<float>(agent.agent() + 1);
    const std::int64_t it = agent.steps();
    for (int turn = 0; turn < agent.agents(); ++turn) {
      if (turn == agent.agent()) {
        const pw::StepEvent ev = agent.step(it, static_cast<double>(p.w[0]), p.refs());
        Seen s{.died = ev.died, .generation = ev.generation};
        for (const pw::DonorRecord& d : ev.donors) {
          s.donors.push_back(d.rank);
          s.versions.push_back(d.version);
        }
        seen.push_back(s);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  return seen;
}

using pw::test::on_rank0;

// True when every rank of @p comm holds the same bytes in @p p and the same @p counters.
bool same_in(MPI_Comm comm, const Params& p, std::vector<std::int64_t> counters) {
  std::vector<std::int64_t> words = counters;
  for (const float x : p.w)
    words.push_back(static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(x)));
  for (const double x : p.b) words.push_back(std::bit_cast<std::int64_t>(x));
  std::vector<std::int64_t> lo = words;
  std::vector<std::int64_t> hi = words;
  MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(lo.size()), MPI_INT64_T, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(hi.size()), MPI_INT64_T, MPI_MAX, comm);
  return lo == words && hi == words;
}

std::vector<std::int64_t> counters_of(const pw::GroupAgent& a) {
  return {a.steps(),
          a.age(),
          a.max_age(),
          static_cast<std::int64_t>(a.generation()),
          static_cast<std::int64_t>(a.epoch()),
          static_cast<std::int64_t>(a.stats().deaths())};
}

}  // namespace

TEST(GroupCheckpoint, RoundTripRestoresEveryRankBitForBit) {
  for (const int g : group_sizes()) {
    SCOPED_TRACE("ranks per agent " + std::to_string(g));
    const std::string dir = fresh_dir("roundtrip_g" + std::to_string(g));
    pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
    const pw::Layout layout = pw::test::formula_layout(12, 3);
    Params p;
    p.fill(groups.agent(), 1);
    pw::GroupAgent a(groups, layout, ageing_options(), {.name = "a"});
    (void)a.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    (void)run(a, p, 9);
    const std::string path = dir + "/pop.h5";
    a.save_checkpoint(path, p.crefs());
    EXPECT_TRUE(fs::is_regular_file(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    // One HDF5 group per agent, as for Agent.
    on_rank0([&] {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      ASSERT_GE(f, 0);
      const hid_t ag = H5Gopen2(f, "agents", H5P_DEFAULT);
      H5G_info_t info{};
      H5Gget_info(ag, &info);
      EXPECT_EQ(info.nlinks, static_cast<hsize_t>(groups.agents()));
      H5Gclose(ag);
      H5Fclose(f);
    });

    Params q;  // a new population of the same shape, loaded from the file
    pw::GroupAgent b(groups, layout, ageing_options(), {.name = "b"});
    const pw::CheckpointLoad l = b.load_checkpoint(path, q.refs());
    EXPECT_EQ(l.agents, groups.agents());
    EXPECT_EQ(l.source, groups.agent());
    EXPECT_FALSE(l.reborn);
    EXPECT_EQ(l.steps, a.steps());
    EXPECT_EQ(q.w, p.w);
    EXPECT_EQ(q.b, p.b);
    EXPECT_EQ(counters_of(b), counters_of(a));
    EXPECT_EQ(b.stats().publishes(), a.stats().publishes());
    EXPECT_TRUE(same_in(groups.agent_comm(), q, counters_of(b)));
    // Both populations go on identically: the same deaths, donors and donor stamps.
    const std::vector<Seen> sa = run(a, p, 7);
    const std::vector<Seen> sb = run(b, q, 7);
    EXPECT_EQ(sa, sb);
    EXPECT_EQ(q.w, p.w);
    EXPECT_EQ(q.b, p.b);
    EXPECT_EQ(counters_of(b), counters_of(a));
  }
}

TEST(GroupCheckpoint, StepSavesEveryNStepsKeepsTheNewestAndResumeNewestLoadsIt) {
  for (const int g : group_sizes()) {
    for (const bool async : {false, true}) {
      SCOPED_TRACE("ranks per agent " + std::to_string(g) + (async ? ", async" : ""));
      const std::string dir = fresh_dir("every_g" + std::to_string(g) + (async ? "_async" : ""));
      pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
      // Named: the saver and the resumer are alive at once.
      int made = 0;
      pw::test::check_step_saves(dir, async, groups.agent(), [&](const pw::AgentOptions& o) {
        return pw::GroupAgent(groups, pw::test::formula_layout(12, 3), o,
                              {.name = "agent " + std::to_string(made++)});
      });
    }
  }
}

TEST(GroupCheckpoint, FewerAgentsTakeTheBestMoreAgentsAreRebornFromDonors) {
  const int n = pw::test::world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = pw::test::world_rank();
  const std::string dir = fresh_dir("resize");
  const std::string big = dir + "/big.h5";
  const std::string small = dir + "/small.h5";
  const pw::Layout layout = pw::test::formula_layout(12, 3);
  {
    // n one-rank Agents save (the file format is shared): agent r has metric 10 - r (lower
    // is better: the highest ranks are the best).
    pw::Agent<> a(MPI_COMM_WORLD, layout, pw::test::quiet_options(), {.name = "a"});
    Params p;
    p.fill(rank, 1);
    (void)a.step(0, static_cast<double>(10 - rank), p.refs());
    MPI_Barrier(MPI_COMM_WORLD);
    a.save_checkpoint(big, p.crefs());
  }
  const int half = n / 2;
  {
    // Fewer agents (n/2 agents of 2 ranks): the best n/2 of the file, kept in file order.
    pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
    pw::GroupAgent a(groups, layout, pw::test::quiet_options(), {.name = "a"});
    Params q;
    const pw::CheckpointLoad l = a.load_checkpoint(big, q.refs());
    EXPECT_EQ(l.agents, n);
    EXPECT_EQ(l.source, half + groups.agent());
    EXPECT_FALSE(l.reborn);
    EXPECT_TRUE(q.is(half + groups.agent(), 1));
    // And these agents save a smaller population for the next case (metric 10 - agent).
    Params s;
    s.fill(groups.agent() + 100, 1);
    (void)a.step(1, static_cast<double>(10 - groups.agent()), s.refs());
    MPI_Barrier(MPI_COMM_WORLD);
    a.save_checkpoint(small, s.crefs());
  }
  // More agents (n agents of 1 rank): the file's agents continue, the extra ones are reborn
  // from the best (the highest agent id of the file), round-robin.
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 1});
  pw::GroupAgent a(groups, layout, pw::test::quiet_options(), {.name = "a"});
  Params q;
  const pw::CheckpointLoad l = a.load_checkpoint(small, q.refs());
  EXPECT_EQ(l.agents, half);
  if (rank < half) {
    EXPECT_FALSE(l.reborn);
    EXPECT_EQ(l.source, rank);
    EXPECT_TRUE(q.is(rank + 100, 1));
  } else {
    EXPECT_TRUE(l.reborn);
    const int want = half - 1 - (rank - half) % half;
    EXPECT_EQ(l.source, want);
    EXPECT_TRUE(q.is(want + 100, 1));
    EXPECT_EQ(a.generation(), 1U);
    EXPECT_EQ(a.age(), 0);
  }
}

TEST(GroupCheckpoint, AnAgentRebornFromTheFileIsTheSameOnEachOfItsRanks) {
  PARAMWIN_REQUIRE_RANKS(4);
  const std::string dir = fresh_dir("reborn");
  const std::string one = dir + "/one.h5";
  const pw::Layout layout = pw::test::formula_layout(12, 3);
  {
    // One agent of 4 ranks saves.
    pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 4});
    pw::GroupAgent a(groups, layout, ageing_options(), {.name = "a"});
    Params p;
    p.fill(7, 1);
    (void)a.publish(p.crefs());
    (void)a.step(0, 1.0, p.refs());
    a.save_checkpoint(one, p.crefs());
  }
  // Two agents of 2 ranks: agent 0 continues it, agent 1 (ranks 2 and 3) is reborn from it.
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  pw::GroupAgent a(groups, layout, ageing_options(), {.name = "a"});
  Params q;
  const pw::CheckpointLoad l = a.load_checkpoint(one, q.refs());
  EXPECT_EQ(l.source, 0);
  EXPECT_EQ(l.reborn, groups.agent() == 1);
  EXPECT_TRUE(q.is(7, 1));
  EXPECT_EQ(a.generation(), groups.agent() == 1 ? 1U : 0U);
  EXPECT_EQ(a.steps(), groups.agent() == 1 ? 0 : 1);
  // The follower took the leader's reborn state (its own streams drew the maximum age).
  EXPECT_TRUE(same_in(groups.agent_comm(), q, counters_of(a)));
  // And the population trains on, each agent's ranks in step.
  (void)run(a, q, 6);
  EXPECT_TRUE(same_in(groups.agent_comm(), q, counters_of(a)));
}

// --- bad checkpoints and bad parameters: refused on every rank, nothing changed ---------------

class BadGroupCheckpoint : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    g_ = GetParam();
    if (pw::test::world_size() % g_ != 0) GTEST_SKIP() << "agents of " << g_ << " ranks";
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& ch : name)
      if (ch == '/') ch = '_';
    dir_ = fresh_dir("bad_" + name);
    good_ = dir_ + "/good.h5";
    groups_.emplace(MPI_COMM_WORLD, pw::GroupOptions{.ranks_per_agent = g_});
    pw::GroupAgent a(*groups_, pw::test::formula_layout(12, 3), ageing_options(), {.name = "a"});
    Params p;
    p.fill(groups_->agent(), 1);
    (void)a.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    (void)run(a, p, 5);
    a.save_checkpoint(good_, p.crefs());
  }
  // Loading @p path must throw E naming @p needle on every rank and change nothing: the
  // parameters, the agent's counters and its publish stamp.
  template <class E = pw::CheckpointError>
  void expect_refused(const std::string& path, const std::string& needle,
                      const pw::Layout& layout = pw::test::formula_layout(12, 3),
                      bool short_on_rank1 = false) {
    pw::GroupAgent b(*groups_, layout, ageing_options(), {.name = "b"});
    Params q;
    q.fill(pw::test::world_rank(), 7);
    try {
      if (layout.size() != 2) {
        std::vector<float> w(12);
        (void)b.load_checkpoint(path, {pw::LayerRef("w", w)});
      } else if (short_on_rank1 && pw::test::world_rank() == 1) {
        (void)b.load_checkpoint(path, {std::span<float>(q.w).first(11), q.b});
      } else {
        (void)b.load_checkpoint(path, q.refs());
      }
      ADD_FAILURE() << "no error loading " << path;
    } catch (const E& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(q.is(pw::test::world_rank(), 7));
    EXPECT_EQ(b.steps(), 0);
    EXPECT_EQ(b.generation(), 0U);
    EXPECT_EQ(b.epoch(), 0U);
    EXPECT_EQ(b.window().version(), 0U);
  }
  int g_ = 1;
  std::optional<pw::AgentGroups> groups_;
  std::string dir_;
  std::string good_;
};

TEST_P(BadGroupCheckpoint, Missing) { expect_refused(dir_ + "/nothing.h5", "does not exist"); }

TEST_P(BadGroupCheckpoint, OtherLayout) {
  pw::Layout other;
  other.add("w", 12);
  expect_refused(good_, "written for another layout", other);
}

TEST_P(BadGroupCheckpoint, BitFlippedInTheLastAgentsParameters) {
  const std::string bad = dir_ + "/flipped.h5";
  const std::string last = std::to_string(groups_->agents() - 1);
  on_rank0([&] { fs::copy_file(good_, bad); });
  pw::test::flip_a_bit(bad, "agents/" + last + "/params/w");
  expect_refused(bad, "checksum mismatch in agents/" + last + "/params/w");
}

TEST_P(BadGroupCheckpoint, FewerAgentGroupsThanAgents) {
  const std::string bad = dir_ + "/fewer.h5";
  const std::string last = std::to_string(groups_->agents() - 1);
  on_rank0([&] {
    fs::copy_file(good_, bad);
    const hid_t f = H5Fopen(bad.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    H5Ldelete(f, ("agents/" + last).c_str(), H5P_DEFAULT);
    H5Fclose(f);
  });
  expect_refused(bad, "agent groups");
}

TEST_P(BadGroupCheckpoint, BadParametersOnOneRank) {
  if (pw::test::world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 1 (a follower when g = 2) passes a layer one element short.
  expect_refused<pw::InvalidArgument>(good_, pw::test::world_rank() == 1 ? "expects 12" : "rank 1",
                                      pw::test::formula_layout(12, 3), true);
}

INSTANTIATE_TEST_SUITE_P(RanksPerAgent, BadGroupCheckpoint, ::testing::Values(1, 2));

TEST(GroupCheckpointOptions, OptionsDifferingAcrossRanksAreRefusedOnEveryRank) {
  if (pw::test::world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 1});
  pw::AgentOptions o = pw::test::quiet_options();
  o.checkpoint.every = pw::test::world_rank() == 0 ? 5 : 10;
  try {
    pw::GroupAgent g(groups, pw::test::formula_layout(12, 3), o);
    ADD_FAILURE() << "GroupAgent accepted checkpoint options that differ across ranks";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("differ across ranks"), std::string::npos) << e.what();
  }
}
