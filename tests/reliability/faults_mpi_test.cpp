// Faults: a donor that stops publishing (stale), an agent that leaves, exceptions thrown
// inside user callbacks, an RMA pull past its deadline, and the watchdog's own self-test.
// Each injects the fault and checks that the population carries on with nothing lost.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kW = 256;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kW);
  l.add("s", std::vector<std::size_t>{}, pw::DType::float64);
  return l;
}

struct Params {
  std::vector<float> w = std::vector<float>(kW);
  std::vector<double> s = std::vector<double>(1);
  void fill(int rank, std::uint64_t version) {
    for (std::size_t i = 0; i < kW; ++i)
      w[i] =
          static_cast<float>(rank * 1000 + static_cast<int>(version % 500) + static_cast<int>(i));
    s[0] = rank * 10.0 + static_cast<double>(version);
  }
  std::vector<pw::LayerRef> refs() { return {w, s}; }
  std::vector<pw::ConstLayerRef> crefs() const { return {w, s}; }
  bool operator==(const Params&) const = default;
};

/// Options for an agent that dies only when @p die says so, from one donor.
pw::AgentOptions on_demand(const bool& die) {
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [&die](const pw::TriggerContext&) { return die; };
  o.selection.k = 1;
  o.selection.shortfall = pw::Shortfall::defer;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// --- stale donor ----------------------------------------------------------------------------

TEST(StaleDonor, SelectionSkipsADonorThatStoppedPublishingAndSaysWhy) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  constexpr int kStale = 1;
  constexpr double kBound = 1.0;  // seconds
  bool die = false;
  pw::AgentOptions o = on_demand(die);
  o.selection.max_staleness_seconds = kBound;
  pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
  Params p;
  p.fill(rank, 1);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);

  MPI_Request done = MPI_REQUEST_NULL;
  if (rank == 0) {
    // Fresh right after its publish: eligible.
    const std::uint64_t fp = agent.window().roster(0).fingerprint;
    std::vector<pw::RosterEntry> rosters = agent.window().roster_all();
    EXPECT_TRUE(
        std::ranges::count(pw::eligible_donors(rosters, 0, fp, kBound, MPI_Wtime()), kStale))
        << "rank 1 published " << MPI_Wtime() - rosters[kStale].publish_time << " s ago";
    // Train (publishing every step) until rank 1's latest publish is older than the bound.
    std::int64_t it = 0;
    while (MPI_Wtime() - agent.window().roster(kStale).publish_time <= 1.5 * kBound) {
      p.fill(rank, agent.window().version() + 1);
      (void)agent.step(it++, 1.0, p.refs());
    }
    rosters = agent.window().roster_all();
    EXPECT_FALSE(
        std::ranges::count(pw::eligible_donors(rosters, 0, fp, kBound, MPI_Wtime()), kStale));

    die = true;
    int rebirths = 0;
    int stale_notes = 0;
    const double give_up = MPI_Wtime() + 30.0;
    while (rebirths < 5 && MPI_Wtime() < give_up) {
      const pw::StepEvent ev = agent.step(it++, 1.0, p.refs());
      if (ev.died) {
        ++rebirths;
        ASSERT_EQ(ev.donors.size(), 1U);
        EXPECT_NE(ev.donors[0].rank, kStale) << "a stale donor was chosen";
        EXPECT_LE(ev.donors[0].staleness_seconds, kBound);
        p.fill(rank, agent.window().version() + 1);  // back to this rank's own data
      } else {
        ASSERT_TRUE(ev.deferred);
        stale_notes += contains(ev.note, "rank 1 stale (no publish for") ? 1 : 0;
        if (n == 2) break;  // the only other agent is stale: deferred, and the note says so
      }
    }
    if (n == 2) {
      EXPECT_EQ(rebirths, 0);
      EXPECT_EQ(stale_notes, 1);
    } else {
      EXPECT_EQ(rebirths, 5);
    }
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    MPI_Wait(&done, MPI_STATUS_IGNORE);
  } else if (rank == kStale) {
    // Stops publishing: sits in MPI until the others are done.
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    MPI_Wait(&done, MPI_STATUS_IGNORE);
  } else {
    // The healthy donors keep training and publishing.
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    std::int64_t it = 0;
    for (int finished = 0; finished == 0;) {
      p.fill(rank, agent.window().version() + 1);
      (void)agent.step(it++, 1.0, p.refs());
      MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(StaleDonor, BoundIsValidatedAndParsed) {
  bool die = false;
  pw::AgentOptions o = on_demand(die);
  o.selection.max_staleness_seconds = -1.0;
  EXPECT_THROW(pw::validate(o, 4), pw::InvalidArgument);
  EXPECT_EQ(pw::parse_agent_options("max_staleness_seconds=2.5").selection.max_staleness_seconds,
            2.5);
}

// --- an agent that leaves -------------------------------------------------------------------

TEST(LeavingAgent, OthersStopChoosingItAndItCannotStepAgain) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int leaver = n - 1;
  bool die = false;
  pw::Agent<> agent(MPI_COMM_WORLD, layout(), on_demand(die));
  Params p;
  p.fill(rank, 1);
  (void)agent.publish(p.crefs());
  if (rank == leaver) {
    agent.leave();
    try {
      (void)agent.step(0, 1.0, p.refs());
      ADD_FAILURE() << "step() after leave() did not throw";
    } catch (const pw::InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), "step() after leave()")) << e.what();
    }
    EXPECT_EQ(agent.window().version(), 1U);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(agent.window().roster(leaver).status.state, pw::AgentState::left);

  if (rank == 0) {
    die = true;
    for (int d = 0; d < 6; ++d) {
      const Params before = p;
      const pw::StepEvent ev = agent.step(d, 1.0, p.refs());
      if (n == 2) {
        EXPECT_TRUE(ev.deferred);
        EXPECT_TRUE(contains(ev.note, "rank 1 left")) << ev.note;
        EXPECT_EQ(p, before);
        break;
      }
      ASSERT_TRUE(ev.died) << ev.note;
      EXPECT_NE(ev.donors.at(0).rank, leaver);
    }
    // Its last snapshot stays readable for a direct pull.
    Params out;
    const pw::PullResult r = agent.window().pull({leaver}, {out.w, out.s});
    Params want;
    want.fill(leaver, 1);
    EXPECT_EQ(r.donors[0].version, 1U);
    EXPECT_EQ(out, want);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- exceptions inside user callbacks -------------------------------------------------------

TEST(CallbackFault, ThrowingCustomTriggerUndoesTheStep) {
  const int rank = pw::test::world_rank();
  bool boom = false;
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [&boom](const pw::TriggerContext&) -> bool {
    if (boom) throw std::runtime_error("predicate exploded");
    return false;
  };
  o.selection.shortfall = pw::Shortfall::clamp;
  pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
  Params p;
  p.fill(rank, 1);
  (void)agent.step(0, 1.0, p.refs());
  const std::int64_t steps = agent.steps();
  const std::int64_t age = agent.age();
  const std::uint64_t version = agent.window().version();
  const pw::RosterEntry roster = agent.window().roster(rank);
  const Params before = p;

  boom = true;
  EXPECT_THROW((void)agent.step(1, 1.0, p.refs()), std::runtime_error);
  EXPECT_EQ(agent.steps(), steps);
  EXPECT_EQ(agent.age(), age);
  EXPECT_EQ(agent.stats().steps(), steps);
  EXPECT_EQ(agent.window().version(), version);
  const pw::RosterEntry after = agent.window().roster(rank);
  EXPECT_EQ(after.status_updates, roster.status_updates);
  EXPECT_EQ(after.status.state, pw::AgentState::active);
  EXPECT_EQ(p, before);

  boom = false;
  const pw::StepEvent ev = agent.step(1, 1.0, p.refs());
  EXPECT_EQ(ev.step, steps + 1);
  EXPECT_EQ(agent.window().version(), version + 1);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CallbackFault, ThrowingRebirthHookKeepsTheRebirthAndRepublishesIt) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  bool die = false;
  pw::AgentOptions o = on_demand(die);
  int hook_calls = 0;
  o.on_rebirth = [&hook_calls](const pw::StepEvent&, std::span<const pw::LayerRef>) {
    if (++hook_calls == 1) throw std::runtime_error("hook exploded");
  };
  pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
  Params p;
  p.fill(rank, 1);
  (void)agent.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    die = true;
    EXPECT_THROW((void)agent.step(0, 1.0, p.refs()), std::runtime_error);
    die = false;
    const pw::RosterEntry r = agent.window().roster(0);
    EXPECT_EQ(r.status.state, pw::AgentState::active) << "left advertised as mid-rebirth";
    EXPECT_EQ(agent.generation(), 1U);
    EXPECT_EQ(r.status.generation, 1U);
    EXPECT_EQ(agent.window().version(), 1U);  // not yet republished
    // The pull completed: p holds a donor's version-1 data.
    const int donor = static_cast<int>(p.s[0] / 10.0);
    EXPECT_NE(donor, 0);
    Params want;
    want.fill(donor, 1);
    EXPECT_EQ(p, want);
    // The next step publishes the reborn parameters (even with a cadence that would not).
    const pw::StepEvent ev = agent.step(1, 1.0, p.refs());
    EXPECT_TRUE(ev.published);
    EXPECT_EQ(agent.window().version(), 2U);
    Params self_read;
    (void)agent.window().pull({donor}, {self_read.w, self_read.s});  // the window is still usable
    EXPECT_EQ(self_read, want);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CallbackFault, ThrowingResetKeepsTheDeathPending) {
  const int rank = pw::test::world_rank();
  bool die = false;
  pw::AgentOptions o = on_demand(die);
  o.mixing.kind = pw::MixingKind::reset;
  int resets = 0;
  o.reset = [&resets](std::span<const pw::LayerRef> params, std::uint64_t) {
    if (++resets == 1) throw std::runtime_error("reset exploded");
    static_cast<float*>(params[0].data())[0] = -1.0F;
  };
  pw::Agent<> agent(MPI_COMM_WORLD, layout(), o);
  Params p;
  p.fill(rank, 1);
  (void)agent.step(0, 1.0, p.refs());
  die = true;
  EXPECT_THROW((void)agent.step(1, 1.0, p.refs()), std::runtime_error);
  die = false;  // the death stays pending regardless of the trigger now
  EXPECT_EQ(agent.window().roster(rank).status.state, pw::AgentState::active);
  EXPECT_EQ(agent.generation(), 0U);
  EXPECT_EQ(agent.policy().pending(), pw::DeathReason::custom);
  const pw::StepEvent ev = agent.step(2, 1.0, p.refs());
  EXPECT_TRUE(ev.died);
  EXPECT_EQ(ev.reason, pw::DeathReason::custom);
  EXPECT_EQ(agent.generation(), 1U);
  EXPECT_EQ(p.w[0], -1.0F);
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- watchdog self-test ---------------------------------------------------------------------

// Run only by the CTest entry faults_mpi_test.watchdog (PARAMWIN_WATCHDOG_SELFTEST=1): rank 0
// never enters the barrier the others wait in — the classic MPI hang — and the watchdog of
// tests/common/main_mpi.cpp must abort the job naming this test.
TEST(WatchdogSelfTest, HangIsTurnedIntoANamedFailure) {
  if (std::getenv("PARAMWIN_WATCHDOG_SELFTEST") == nullptr) {
    GTEST_SKIP() << "set PARAMWIN_WATCHDOG_SELFTEST=1 to hang on purpose";
  }
  if (pw::test::world_rank() == 0) {
    for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
