// AveragingAgent's checkpoints (docs/averaging.md, "Checkpoints"): a run saved at step N and
// continued to M, against a new agent that loads the file and continues to M, in lockstep
// (every read sees the publishes of the previous step, so both runs are deterministic): the
// same parameters bit for bit and the same round peers at every step, for a random topology
// with warm-up, cool-down and intervals, background corrections read inline, and a paused
// agent. A save drops a background read in flight. Bad input: a missing file, another layout,
// another number of ranks, a checkpoint of Agents, bad parameters: an error on every rank with
// the agent and the parameters unchanged.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kW = 6;  // float32 layer
constexpr std::size_t kB = 3;  // float64 layer

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kW);
  l.add("b", kB, pw::DType::float64);
  return l;
}

struct Params {
  std::vector<float> w = std::vector<float>(kW);
  std::vector<double> b = std::vector<double>(kB);

  std::vector<pw::LayerRef> refs() { return {w, b}; }
  [[nodiscard]] std::vector<pw::ConstLayerRef> crefs() const { return {w, b}; }
  void init(int rank) {
    for (std::size_t i = 0; i < kW; ++i) {
      w[i] = static_cast<float>(0.1 * rank + 0.01 * static_cast<double>(i));
    }
    for (std::size_t i = 0; i < kB; ++i) b[i] = 1.0 - 0.2 * rank + 0.03 * static_cast<double>(i);
  }
  void train(int rank, std::int64_t step) {
    const auto t = static_cast<double>(step);
    for (std::size_t i = 0; i < kW; ++i) {
      w[i] += static_cast<float>(0.01 * std::sin(0.3 * t + rank + static_cast<double>(i)));
    }
    for (std::size_t i = 0; i < kB; ++i) {
      b[i] += 0.02 * std::cos(0.2 * t + rank + static_cast<double>(i));
    }
  }
  bool operator==(const Params&) const = default;
};

std::string fresh_dir(const std::string& name) {
  return pw::test::fresh_checkpoint_dir("averaging_checkpoint_mpi_test", name);
}

/// What one step did, as the lockstep saw it.
struct Seen {
  std::int64_t round = -1;
  std::vector<int> peers;  // the round's peers, read or skipped
  pw::RoundKind kind = pw::RoundKind::none;
  bool applied = false;
  Params after;
};

/// Steps @p from..@p to in lockstep: train, step (never publishing: publish_every is huge),
/// barrier, publish, barrier. @p before_step (if set) runs first at each step.
std::vector<Seen> lockstep(pw::AveragingAgent& agent, Params& p, std::int64_t from, std::int64_t to,
                           const std::function<void(std::int64_t)>& before_step = {}) {
  const int rank = agent.rank();
  std::vector<Seen> out;
  for (std::int64_t t = from; t <= to; ++t) {
    if (before_step) before_step(t);
    p.train(rank, t);
    const pw::AveragingRound r = agent.step(p.refs());
    Seen s{.round = r.round, .peers = {}, .kind = r.kind, .applied = r.applied, .after = p};
    for (const pw::AveragingPeer& peer : r.peers) s.peers.push_back(peer.rank);
    out.push_back(s);
    MPI_Barrier(MPI_COMM_WORLD);
    (void)agent.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return out;
}

pw::AveragingOptions lockstep_options() {
  pw::AveragingOptions o;
  o.topology = pw::Topology::random_peers(1, 11);
  o.interval = 2;
  o.warmup_steps = 2;
  o.cooldown_steps = 2;
  o.total_steps = 20;
  o.publish_every = std::int64_t{1} << 40;
  o.stale_steps = 3;
  return o;
}

/// Saves at step @p n, continues to @p m; a new agent loads and continues to @p m: the same
/// steps, rounds, peers and parameters. @p pause_rank0: rank 0 pauses at step 3 and resumes
/// after the save (the load restores the pause).
void resume_matches(const pw::AveragingOptions& o, const std::string& name, bool pause_rank0) {
  constexpr std::int64_t kSave = 9;
  constexpr std::int64_t kEnd = 20;
  const std::string path = fresh_dir(name) + "/avg.h5";
  const int rank = pw::test::world_rank();
  const auto pausing = [&](pw::AveragingAgent& agent) {
    return [&agent, pause_rank0, rank](std::int64_t t) {
      if (!pause_rank0 || rank != 0) return;
      if (t == 3) agent.pause();
      if (t == kSave + 2) agent.resume();
    };
  };
  Params p;
  p.init(rank);
  Params at_save;
  std::int64_t rounds_at_save = 0;
  std::uint64_t version_at_save = 0;
  std::vector<Seen> original;
  int mixed = 0;
  {
    pw::AveragingAgent a(MPI_COMM_WORLD, layout(), o);
    (void)a.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    for (const Seen& s : lockstep(a, p, 1, kSave, pausing(a))) mixed += s.applied ? 1 : 0;
    a.save_checkpoint(path, p.crefs());
    EXPECT_TRUE(std::filesystem::is_regular_file(path));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(a.is_paused(), pause_rank0 && rank == 0);
    at_save = p;
    rounds_at_save = a.rounds();
    version_at_save = a.window().version();
    original = lockstep(a, p, kSave + 1, kEnd, pausing(a));
  }
  Params q;  // zeros: everything comes from the file
  pw::AveragingAgent b(MPI_COMM_WORLD, layout(), o);
  const pw::CheckpointLoad l = b.load_checkpoint(path, q.refs());
  EXPECT_EQ(l.agents, pw::test::world_size());
  EXPECT_EQ(l.source, rank);
  EXPECT_FALSE(l.reborn);
  EXPECT_EQ(l.steps, kSave);
  EXPECT_TRUE(q == at_save) << name << ": loaded parameters differ from the saved ones";
  EXPECT_EQ(b.steps(), kSave);
  EXPECT_EQ(b.rounds(), rounds_at_save);
  EXPECT_EQ(b.is_paused(), pause_rank0 && rank == 0);
  EXPECT_EQ(b.window().version(), version_at_save);  // republished under the saved version
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<Seen> resumed = lockstep(b, q, kSave + 1, kEnd, pausing(b));
  ASSERT_EQ(resumed.size(), original.size());
  for (std::size_t i = 0; i < original.size(); ++i) {
    const std::int64_t step = kSave + 1 + static_cast<std::int64_t>(i);
    EXPECT_EQ(resumed[i].kind, original[i].kind) << name << " step " << step;
    EXPECT_EQ(resumed[i].round, original[i].round) << name << " step " << step;
    EXPECT_EQ(resumed[i].peers, original[i].peers) << name << " step " << step;
    EXPECT_EQ(resumed[i].applied, original[i].applied) << name << " step " << step;
    EXPECT_TRUE(resumed[i].after == original[i].after) << name << " step " << step;
    mixed += original[i].applied && original[i].kind == pw::RoundKind::gossip ? 1 : 0;
  }
  EXPECT_GT(mixed, 0) << name << ": no round mixed anything in";
  EXPECT_EQ(b.steps(), kEnd);
}

}  // namespace

TEST(AveragingCheckpoint, AResumedRunMakesTheRoundsOfTheUninterruptedOne) {
  PARAMWIN_REQUIRE_RANKS(2);
  resume_matches(lockstep_options(), "plain", false);
}

TEST(AveragingCheckpoint, BackgroundCorrectionsReadInlineResumeExactly) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::AveragingOptions o = lockstep_options();
  o.interval = 1;  // a correction pending at the save (dropped by both runs)
  o.background = true;
  o.background_worker = false;
  resume_matches(o, "background", false);
}

TEST(AveragingCheckpoint, APausedAgentLoadsPausedAndResumesAsBefore) {
  PARAMWIN_REQUIRE_RANKS(2);
  resume_matches(lockstep_options(), "paused", true);
}

TEST(AveragingCheckpoint, ASaveDropsTheBackgroundReadInFlight) {
  PARAMWIN_REQUIRE_RANKS(2);
  const std::string path = fresh_dir("worker") + "/avg.h5";
  const int rank = pw::test::world_rank();
  pw::AveragingOptions o;
  o.background = true;  // on the worker where MPI allows it, inline otherwise
  Params p;
  p.init(rank);
  Params saved;
  std::int64_t rounds_after = 0;
  {
    pw::AveragingAgent a(MPI_COMM_WORLD, layout(), o);
    (void)a.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 1; t <= 3; ++t) (void)a.step(p.refs());
    const pw::AveragingRound began = a.step(p.refs());  // begins a read (worker) or reads
    EXPECT_TRUE(began.started_round >= 0 || began.busy || began.read_step == 4)
        << pw::to_json(began);
    a.save_checkpoint(path, p.crefs());
    saved = p;
    const pw::AveragingRound next = a.step(p.refs());
    EXPECT_FALSE(next.background_applied) << "the save dropped the read, but " << pw::to_json(next);
    EXPECT_TRUE(p == saved);  // nothing landed (the next read began, if any, lands later)
    rounds_after = a.rounds();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  Params q;
  pw::AveragingAgent b(MPI_COMM_WORLD, layout(), o);
  (void)b.load_checkpoint(path, q.refs());
  EXPECT_TRUE(q == saved);
  EXPECT_EQ(b.steps(), 4);
  EXPECT_EQ(b.rounds(), rounds_after - 1);  // the saving run began one more read since
}

namespace {

/// Runs @p load, which must throw @p E whose message holds @p needle on every rank, and checks
/// that @p agent and @p p are unchanged.
template <class E, class F>
void refused(pw::AveragingAgent& agent, Params& p, const std::string& needle, F load) {
  const Params before = p;
  const std::int64_t steps = agent.steps();
  const std::int64_t rounds = agent.rounds();
  const std::uint64_t version = agent.window().version();
  try {
    load();
    ADD_FAILURE() << "no error; expected one saying '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_TRUE(p == before);
  EXPECT_EQ(agent.steps(), steps);
  EXPECT_EQ(agent.rounds(), rounds);
  EXPECT_EQ(agent.window().version(), version);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST(AveragingCheckpoint, BadFilesAndParametersThrowOnEveryRankAndChangeNothing) {
  PARAMWIN_REQUIRE_RANKS(2);
  const std::string dir = fresh_dir("bad");
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  Params p;
  p.init(rank);
  pw::AveragingAgent a(MPI_COMM_WORLD, layout(), {});
  (void)a.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int t = 1; t <= 3; ++t) (void)a.step(p.refs());
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string good = dir + "/good.h5";
  a.save_checkpoint(good, p.crefs());

  refused<pw::CheckpointError>(a, p, "does not exist",
                               [&] { (void)a.load_checkpoint(dir + "/missing.h5", p.refs()); });

  // Another layout: a file of agents with one more element in "w".
  pw::Layout wide;
  wide.add("w", kW + 1);
  wide.add("b", kB, pw::DType::float64);
  {
    std::vector<float> w(kW + 1, 1.0F);
    std::vector<double> b(kB, 2.0);
    pw::AveragingAgent other(MPI_COMM_WORLD, wide, {});
    other.save_checkpoint(dir + "/wide.h5", {pw::ConstLayerRef(w), pw::ConstLayerRef(b)});
  }
  refused<pw::CheckpointError>(a, p, "another layout",
                               [&] { (void)a.load_checkpoint(dir + "/wide.h5", p.refs()); });

  // Another number of ranks: rank 0's one-rank population.
  if (rank == 0) {
    pw::AveragingAgent alone(MPI_COMM_SELF, layout(), {});
    alone.save_checkpoint(dir + "/alone.h5", p.crefs());
    // ... and the world's file loaded by a population of one.
    Params mine = p;
    refused<pw::CheckpointError>(alone, mine, "population of " + std::to_string(n),
                                 [&] { (void)alone.load_checkpoint(good, mine.refs()); });
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // refused()'s barrier on rank 0
  }
  MPI_Barrier(MPI_COMM_WORLD);
  refused<pw::CheckpointError>(a, p,
                               "population of 1 averaging agents, this one has " +
                                   std::to_string(n),
                               [&] { (void)a.load_checkpoint(dir + "/alone.h5", p.refs()); });

  // A checkpoint of Agents (dying agents), and an Agent given an averaging checkpoint.
  {
    pw::Agent<> agents(MPI_COMM_WORLD, layout(), pw::test::ageing_options(), {.name = "agents"});
    (void)agents.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    agents.save_checkpoint(dir + "/agents.h5", p.crefs());
    Params q = p;
    try {
      (void)agents.load_checkpoint(good, q.refs());
      ADD_FAILURE() << "an Agent loaded an averaging checkpoint";
    } catch (const pw::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("AveragingAgents"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(q == p);
  }
  refused<pw::CheckpointError>(a, p, "dying agents",
                               [&] { (void)a.load_checkpoint(dir + "/agents.h5", p.refs()); });

  // Bad parameters on one rank: InvalidArgument on every rank, for a load and a save.
  std::vector<float> short_w(kW - 1);
  refused<pw::InvalidArgument>(
      a, p,
      rank == n - 1 ? "expects 6 elements, got 5" : "rank " + std::to_string(n - 1) + " failed",
      [&] {
        if (rank == n - 1) {
          (void)a.load_checkpoint(good, {pw::LayerRef(short_w), pw::LayerRef(p.b)});
        } else {
          (void)a.load_checkpoint(good, p.refs());
        }
      });
  refused<pw::InvalidArgument>(a, p, rank == 0 ? "got 1 layers, the layout has 2" : "rank 0 failed",
                               [&] {
                                 if (rank == 0) {
                                   a.save_checkpoint(dir + "/never.h5", {pw::ConstLayerRef(p.w)});
                                 } else {
                                   a.save_checkpoint(dir + "/never.h5", p.crefs());
                                 }
                               });
  EXPECT_FALSE(std::filesystem::exists(dir + "/never.h5"));

  // The good file still loads.
  Params q;
  const pw::CheckpointLoad l = a.load_checkpoint(good, q.refs());
  EXPECT_EQ(l.steps, 3);
  EXPECT_TRUE(q == p);
}

namespace {

/// Lockstep of a hierarchy: train, step, barrier, the leaders publish, barrier. Returns per
/// step the leader's round index and the parameters.
std::vector<std::pair<std::int64_t, Params>> hierarchy_lockstep(pw::HierarchicalAveragingAgent& h,
                                                                Params& p, std::int64_t from,
                                                                std::int64_t to) {
  const int rank = pw::test::world_rank();
  std::vector<std::pair<std::int64_t, Params>> out;
  for (std::int64_t t = from; t <= to; ++t) {
    p.train(rank, t);
    const pw::HierarchicalRound r = h.step(p.refs());
    out.emplace_back(r.across.round, p);
    MPI_Barrier(MPI_COMM_WORLD);
    (void)h.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return out;
}

}  // namespace

TEST(HierarchicalCheckpoint, EveryTrainingRankResumesAndTheLeadersRoundsContinue) {
  PARAMWIN_REQUIRE_RANKS(2);
  if (pw::test::world_size() % 2 != 0) GTEST_SKIP() << "groups of 2 ranks";
  const std::string dir = fresh_dir("hierarchy");
  const std::string path = dir + "/tiers.h5";
  const int rank = pw::test::world_rank();
  const pw::AgentGroups groups(MPI_COMM_WORLD, pw::GroupOptions{.ranks_per_agent = 2});
  pw::AveragingOptions o;
  o.topology = pw::Topology::ring_peers();
  o.warmup_steps = 1;
  o.publish_every = std::int64_t{1} << 40;
  Params p;
  p.init(rank);
  Params at_save;
  std::vector<std::pair<std::int64_t, Params>> original;
  {
    pw::HierarchicalAveragingAgent h(groups, layout(), o);
    (void)h.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    (void)hierarchy_lockstep(h, p, 1, 5);
    // The members of a group differ at the save (the leaders' parameters stay the ones they
    // published: the load republishes what it loads).
    if (!h.leader()) p.train(rank, 100);
    h.save_checkpoint(path, p.crefs());
    at_save = p;
    original = hierarchy_lockstep(h, p, 6, 12);
  }
  Params q;
  pw::HierarchicalAveragingAgent h(groups, layout(), o);
  const pw::CheckpointLoad l = h.load_checkpoint(path, q.refs());
  EXPECT_EQ(l.agents, pw::test::world_size());
  EXPECT_EQ(l.steps, 5);
  EXPECT_TRUE(q == at_save) << "rank " << rank << ": not its own saved parameters";
  EXPECT_EQ(h.steps(), 5);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto resumed = hierarchy_lockstep(h, q, 6, 12);
  ASSERT_EQ(resumed.size(), original.size());
  for (std::size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(resumed[i].first, original[i].first) << "step " << 6 + i;
    EXPECT_TRUE(resumed[i].second == original[i].second) << "step " << 6 + i;
  }
  // A file of flat AveragingAgents is not a hierarchy's, and the other way round.
  Params r;
  r.init(rank);
  {
    pw::AveragingAgent flat(MPI_COMM_WORLD, layout(), {});
    flat.save_checkpoint(dir + "/flat.h5", r.crefs());
    const Params before = r;
    try {
      (void)flat.load_checkpoint(path, r.refs());
      ADD_FAILURE() << "an AveragingAgent loaded a hierarchy's checkpoint";
    } catch (const pw::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("hierarchical"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(r == before);
  }
  const Params before = q;
  try {
    (void)h.load_checkpoint(dir + "/flat.h5", q.refs());
    ADD_FAILURE() << "a hierarchy loaded an AveragingAgent checkpoint";
  } catch (const pw::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a HierarchicalAveragingAgent state"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(q == before);
  EXPECT_EQ(h.steps(), 12);
}
