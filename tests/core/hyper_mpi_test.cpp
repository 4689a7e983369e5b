// Hyperparameters over the windows and the agents: one version per pull (weights and
// hyperparameters never mixed) under concurrent publishing over shm and rma, the roster
// shows every agent's latest published values, and a rebirth inherits the best donor's
// published hyperparameters (then explores them), visible in the event, the callback, the
// JSON log and the roster.
#include <mpi.h>

#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

float stamp(int rank, std::uint64_t version, std::size_t layer, std::size_t i) {
  return static_cast<float>(((version * 31 + layer * 7 + i) % 65536) +
                            static_cast<std::uint64_t>(rank) * 65536);
}

pw::Layout model_layout() {
  pw::Layout l;
  l.add("a", std::size_t{3001}).add("b", std::size_t{40000});
  l.add_hyperparameter("lr");
  l.add_hyperparameter("batch", pw::HyperType::int64);
  return l;
}

struct Model {
  pw::Layout layout = model_layout();
  std::vector<std::vector<float>> layers;
  Model() {
    for (const auto& l : layout.layers()) layers.emplace_back(l.count);
  }
  void fill(int rank, std::uint64_t version) {
    for (std::size_t l = 0; l < layers.size(); ++l)
      for (std::size_t i = 0; i < layers[l].size(); ++i) layers[l][i] = stamp(rank, version, l, i);
  }
  std::vector<pw::ConstLayerRef> crefs() const { return {layers.begin(), layers.end()}; }
  std::vector<pw::LayerRef> refs() { return {layers.begin(), layers.end()}; }
};

// Hyperparameters that name the version they were published with.
pw::Hyperparameters versioned(const pw::Layout& layout, int rank, std::uint64_t version) {
  pw::Hyperparameters h = layout.make_hyperparameters();
  h.set("lr", static_cast<double>(version) + 0.25 * rank);
  h.set_int("batch", static_cast<std::int64_t>(version * 3));
  return h;
}

struct Counts {
  long pulls = 0, bad_layers = 0, bad_hyper = 0, roster_bad = 0;
};

Counts stress(pw::Transport transport, pw::ReadMode mode, int pulls_per_reader) {
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  const int publishers = n / 2;
  Model model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, model.layout, {.transport = transport});
  model.fill(rank, 1);
  (void)win.publish(model.crefs(), versioned(model.layout, rank, 1));
  MPI_Barrier(MPI_COMM_WORLD);
  Counts c;
  MPI_Request done = MPI_REQUEST_NULL;
  if (rank < publishers) {
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    int finished = 0;
    while (finished == 0) {
      const std::uint64_t next = win.version() + 1;
      model.fill(rank, next);
      (void)win.publish(model.crefs(), versioned(model.layout, rank, next));
      MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
    }
  } else {
    std::mt19937 rng(static_cast<unsigned>(rank) * 7919U);
    Model out;
    pw::PullOptions opt;
    opt.read_mode = mode;
    for (int p = 0; p < pulls_per_reader; ++p) {
      const int donor = static_cast<int>(rng() % static_cast<unsigned>(publishers));
      auto refs = out.refs();
      const pw::PullResult r = win.pull(std::span<const int>(&donor, 1), refs, opt);
      ++c.pulls;
      const std::uint64_t v = r.donors[0].version;
      bool ok = true;
      for (std::size_t l = 0; l < out.layers.size() && ok; ++l)
        for (std::size_t i = 0; i < out.layers[l].size(); ++i)
          if (out.layers[l][i] != stamp(donor, v, l, i)) {
            ok = false;
            break;
          }
      c.bad_layers += ok ? 0 : 1;
      // The hyperparameters of exactly the version whose layers were read.
      c.bad_hyper += r.donors[0].hyper == versioned(model.layout, donor, v) ? 0 : 1;
      // The roster's copy is of one publish too: lr and batch agree with each other. (Same
      // node only: over RMA a roster read takes three round trips, each served only when the
      // publisher enters MPI, and this publisher changes its values on every publish, i.e.
      // between any two of them: the read would retry for as long as it publishes.)
      if (transport == pw::Transport::shm) {
        const pw::RosterEntry e = win.roster(donor);
        const auto rv = static_cast<std::uint64_t>(e.hyper.get_int("batch") / 3);
        c.roster_bad += e.hyper == versioned(model.layout, donor, rv) ? 0 : 1;
      }
    }
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    MPI_Wait(&done, MPI_STATUS_IGNORE);
  }
  long mine[4] = {c.pulls, c.bad_layers, c.bad_hyper, c.roster_bad};
  long sum[4] = {};
  MPI_Allreduce(mine, sum, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("[ hyper   ] %s: %ld pulls verified, %ld torn layers, %ld wrong hyperparameters, "
                "%ld inconsistent roster copies\n",
                std::string(pw::transport_name(transport)).c_str(), sum[0], sum[1], sum[2], sum[3]);
  }
  return Counts{sum[0], sum[1], sum[2], sum[3]};
}

class HyperSnapshot : public ::testing::TestWithParam<pw::Transport> {
 protected:
  int pulls(int shm_pulls) const {
    return GetParam() == pw::Transport::rma ? shm_pulls / 5 : shm_pulls;
  }
};

}  // namespace

TEST_P(HyperSnapshot, PullReadsWeightsAndHyperparametersOfOneVersion) {
  PARAMWIN_REQUIRE_RANKS(2);
  for (const pw::ReadMode mode : {pw::ReadMode::automatic, pw::ReadMode::optimistic}) {
    const Counts c = stress(GetParam(), mode, pulls(300));
    EXPECT_EQ(c.bad_layers, 0);
    EXPECT_EQ(c.bad_hyper, 0);
    EXPECT_EQ(c.roster_bad, 0);
    EXPECT_GT(c.pulls, 0);
  }
}

TEST_P(HyperSnapshot, RosterAndPullShowThePublishedValues) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  Model model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, model.layout, {.transport = GetParam()});
  // Before any publish: zeros.
  const pw::RosterEntry fresh = win.roster(rank);
  ASSERT_EQ(fresh.hyper.size(), 2U);
  EXPECT_EQ(fresh.hyper.get("lr"), 0.0);
  model.fill(rank, 1);
  pw::Hyperparameters h = win.hyperparameters();
  h.set("lr", 0.5 + rank);
  h.set_int("batch", 10 * rank);
  win.set_hyperparameters(h);
  EXPECT_TRUE(win.hyperparameters() == h);
  // Set but not yet published: the roster still says zeros.
  EXPECT_EQ(win.roster(rank).hyper.get("lr"), 0.0);
  (void)win.publish(model.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<pw::RosterEntry> all = win.roster_all();
  for (int r = 0; r < n; ++r) {
    EXPECT_DOUBLE_EQ(all[static_cast<std::size_t>(r)].hyper.get("lr"), 0.5 + r) << r;
    EXPECT_EQ(all[static_cast<std::size_t>(r)].hyper.get_int("batch"), 10 * r) << r;
  }
  const int donor = (rank + 1) % n;
  Model out;
  auto refs = out.refs();
  const pw::PullResult r = win.pull(std::span<const int>(&donor, 1), refs);
  EXPECT_DOUBLE_EQ(r.donors[0].hyper.get("lr"), 0.5 + donor);
  EXPECT_EQ(r.donors[0].hyper.get_int("batch"), 10 * donor);
  // Values with other declarations are refused, nothing changed.
  pw::Layout other;
  other.add_hyperparameter("momentum");
  EXPECT_THROW(win.set_hyperparameters(other.make_hyperparameters()), pw::InvalidArgument);
  EXPECT_TRUE(win.hyperparameters() == h);
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, HyperSnapshot,
                         ::testing::Values(pw::Transport::shm, pw::Transport::rma),
                         [](const auto& p) { return std::string(pw::transport_name(p.param)); });

namespace {

struct RebirthRun {
  pw::StepEvent death;
  pw::StepEvent seen_by_callback;
  std::string json;
  pw::Hyperparameters after;
  std::vector<pw::RosterEntry> roster;
};

// Every rank publishes lr = 0.1 * (rank + 1), batch = 8 * (rank + 1) and reports metric =
// rank (rank 0 is the best); the last rank dies at step 3 and is reborn from the best donor.
RebirthRun run_rebirth(pw::AgentOptions o) {
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  o.seed = 11;
  o.triggers.age.enabled = false;
  o.triggers.custom = [n](const pw::TriggerContext& c) { return c.rank == n - 1 && c.step == 3; };
  o.selection.kind = pw::SelectionKind::fittest;
  o.selection.k = 1;
  o.mixing.kind = pw::MixingKind::best;
  RebirthRun run;
  o.on_rebirth = [&run](const pw::StepEvent& e, std::span<const pw::LayerRef>) {
    run.seen_by_callback = e;
  };
  pw::Agent<> agent(MPI_COMM_WORLD, model_layout(), o);
  Model m;
  m.fill(rank, 1);
  agent.set_hyperparameter("lr", 0.1 * (rank + 1));
  agent.set_hyperparameter("batch", 8.0 * (rank + 1));
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int s = 1; s <= 5; ++s) {
    auto refs = m.refs();
    const pw::StepEvent e = agent.step(s, static_cast<double>(rank), refs);
    if (e.died) {
      run.death = e;
      run.json = pw::to_json(e);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  run.after = agent.hyperparameters();
  run.roster = agent.window().roster_all();
  MPI_Barrier(MPI_COMM_WORLD);
  return run;
}

}  // namespace

TEST(HyperRebirth, InheritsTheBestDonorsPublishedHyperparameters) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  pw::AgentOptions o;  // inherit best, no rules: an exact copy
  const RebirthRun run = run_rebirth(o);
  if (rank == n - 1) {
    ASSERT_TRUE(run.death.died);
    ASSERT_EQ(run.death.donors.size(), 1U);
    EXPECT_EQ(run.death.donors[0].rank, 0);
    EXPECT_DOUBLE_EQ(run.death.hyper.get("lr"), 0.1);
    EXPECT_EQ(run.death.hyper.get_int("batch"), 8);
    EXPECT_DOUBLE_EQ(run.death.hyper_before.get("lr"), 0.1 * n);
    EXPECT_EQ(run.death.hyper_before.get_int("batch"), 8 * n);
    EXPECT_TRUE(run.seen_by_callback.hyper == run.death.hyper);
    EXPECT_TRUE(run.seen_by_callback.hyper_before == run.death.hyper_before);
    EXPECT_TRUE(run.after == run.death.hyper);
    EXPECT_NE(run.json.find(R"("hyper":{"lr":0.1,"batch":8})"), std::string::npos) << run.json;
    EXPECT_NE(run.json.find(R"("hyper_before":{)"), std::string::npos) << run.json;
  } else {
    EXPECT_FALSE(run.death.died);
    EXPECT_DOUBLE_EQ(run.after.get("lr"), 0.1 * (rank + 1));
  }
  // Everyone sees the reborn agent's new values in the roster (published by its rebirth).
  EXPECT_DOUBLE_EQ(run.roster[static_cast<std::size_t>(n - 1)].hyper.get("lr"), 0.1);
}

TEST(HyperRebirth, ExploresAfterInheritingAndKeepKeepsItsOwn) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  pw::AgentOptions o;
  o.explore.rules = {{.name = "lr"}, {.name = "batch", .lo = 1, .hi = 9}};
  const RebirthRun explored = run_rebirth(o);
  o.explore.rules.clear();
  o.explore.inherit = pw::HyperInherit::keep;
  const RebirthRun kept = run_rebirth(o);
  if (rank == n - 1) {
    ASSERT_TRUE(explored.death.died);
    const double lr = explored.death.hyper.get("lr");
    EXPECT_TRUE(lr == 0.1 * 0.8 || lr == 0.1 * 1.2) << lr;
    const std::int64_t b = explored.death.hyper.get_int("batch");
    EXPECT_TRUE(b == 6 || b == 9) << b;  // 8 * 0.8 rounded, or 8 * 1.2 clamped to 9
    ASSERT_TRUE(kept.death.died);
    EXPECT_TRUE(kept.death.hyper == kept.death.hyper_before);
    EXPECT_DOUBLE_EQ(kept.death.hyper.get("lr"), 0.1 * n);
  }
}

TEST(HyperGroupAgent, EveryRankOfTheAgentGetsTheLeadersExploredValues) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int g = n % 2 == 0 && n >= 4 ? 2 : 1;
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  pw::AgentOptions o;
  o.seed = 5;
  o.triggers.age.enabled = false;
  o.triggers.custom = [](const pw::TriggerContext& c) {
    return c.rank == 0 && c.step == 2 && c.generation == 0;
  };
  o.selection.k = 1;
  o.explore.rules = {{.name = "lr"}};
  pw::GroupAgent agent(groups, model_layout(), o);
  const int a = groups.agent();
  agent.set_hyperparameter("lr", 0.1 * (a + 1));
  agent.set_hyperparameter("batch", 4.0 * (a + 1));
  Model m;
  m.fill(a, 1);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  pw::StepEvent death;
  for (int s = 1; s <= 3; ++s) {
    const pw::StepEvent e = agent.step(s, 1.0, m.refs());
    if (e.died) death = e;
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (a == 0) {
    ASSERT_TRUE(death.died);
    const int donor = death.donors[0].rank;
    const double lr = death.hyper.get("lr");
    EXPECT_TRUE(lr == 0.1 * (donor + 1) * 0.8 || lr == 0.1 * (donor + 1) * 1.2) << lr;
    EXPECT_EQ(death.hyper.get_int("batch"), 4 * (donor + 1));  // no rule: inherited only
    EXPECT_DOUBLE_EQ(death.hyper_before.get("lr"), 0.1);
    EXPECT_TRUE(agent.hyperparameters() == death.hyper);
  }
  // The same values on every rank of the agent (shared by the leader): compare within it.
  double mine = agent.hyperparameters().get("lr");
  double lo = 0.0;
  double hi = 0.0;
  MPI_Allreduce(&mine, &lo, 1, MPI_DOUBLE, MPI_MIN, groups.agent_comm());
  MPI_Allreduce(&mine, &hi, 1, MPI_DOUBLE, MPI_MAX, groups.agent_comm());
  EXPECT_EQ(lo, hi);
  // Every shard window's roster shows agent 0's new values after the rebirth's republish
  // (world rank 0 is agent 0's leader; its values are every rank of agent 0's).
  double agent0 = mine;
  MPI_Bcast(&agent0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(agent.window().roster(0).hyper.get("lr"), agent0);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(HyperRebirth, AThrowingExploreFunctionKeepsTheDeathPending) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [n](const pw::TriggerContext& c) { return c.rank == n - 1 && c.step >= 2; };
  o.selection.k = 1;
  bool fail = true;
  o.explore.custom = [&fail](const pw::ExploreContext&, pw::Hyperparameters&) {
    if (fail) throw std::runtime_error("explore failed");
  };
  pw::Agent<> agent(MPI_COMM_WORLD, model_layout(), o);
  agent.set_hyperparameter("lr", 0.1 * (rank + 1));
  Model m;
  m.fill(rank, 1);
  (void)agent.publish(m.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int s = 1; s <= 3; ++s) {
    bool threw = false;
    pw::StepEvent e;
    try {
      e = agent.step(s, 1.0, m.refs());
    } catch (const std::runtime_error& err) {
      threw = true;
      EXPECT_STREQ(err.what(), "explore failed");
    }
    if (rank == n - 1) {
      if (s == 2) {
        EXPECT_TRUE(threw);
        EXPECT_EQ(agent.generation(), 0U);  // not reborn: the death stays pending
        EXPECT_DOUBLE_EQ(agent.hyperparameters().get("lr"), 0.1 * n);
        EXPECT_EQ(agent.window().roster(rank).status.state, pw::AgentState::active);
        fail = false;
      } else if (s == 3) {
        EXPECT_FALSE(threw);
        EXPECT_TRUE(e.died);
        EXPECT_EQ(agent.generation(), 1U);
      }
    } else {
      EXPECT_FALSE(threw);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}
