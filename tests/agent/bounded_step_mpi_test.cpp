// Bounded steps: with AgentOptions::read.timeout_seconds, nothing inside step() waits for
// other agents longer than that bound, whatever they do. The donor here computes for 3 s
// without any MPI call (over RMA it cannot answer; a dead process looks the same), the bound
// is 0.3 s, on both transports, for Agent and GroupAgent (TorchAgent: torch_adapter_mpi_test).
// The check is logical, not a timing threshold on speed: every dying step must return while
// the donor is still computing (its 3 s are 10x the bound), and the parameters are either
// exactly a responsive donor's or unchanged (a deferred death that says why).
#include <mpi.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr double kBound = 0.3;
constexpr double kBusy = 3.0;
constexpr std::size_t kN = 4096;

using pw::test::compute_for;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kN);
  return l;
}

/// Age 2 for everyone, the fittest donor (lower metric is better), the bound under test.
pw::AgentOptions bounded_options() {
  pw::AgentOptions o;
  o.triggers.age = {.enabled = true, .lo = 2, .hi = 2};
  o.selection = {.kind = pw::SelectionKind::fittest, .k = 1, .shortfall = pw::Shortfall::defer};
  o.read.timeout_seconds = kBound;
  return o;
}

/// What the dying agent saw.
struct Outcome {
  pw::StepEvent event;
  double seconds = 0.0;
};

/// The scenario for one agent type. @p busy_agent computes for kBusy s after its first step;
/// @p dying_agent steps twice (dies on the second); every other agent progresses meanwhile.
/// Parameters: agent a holds the value a + 1 everywhere.
template <class MakeAgent>
void run_scenario(const char* kind, pw::Transport transport, int agent_id, int agents,
                  MakeAgent make_agent) {
  const int busy_agent = agents - 1;  // the best donor: metric 0
  const int dying_agent = 0;
  auto agent = make_agent(transport);
  std::vector<float> w(kN, static_cast<float>(agent_id + 1));
  const double metric = agent_id == busy_agent ? 0.0 : 1.0 + agent_id;
  (void)agent->step(0, metric, {pw::LayerRef(w)});  // age 1: publishes
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  if (agent_id == busy_agent) {
    compute_for(kBusy);  // no MPI call in here
  } else if (agent_id == dying_agent) {
    const std::vector<float> before = w;
    const double t1 = MPI_Wtime();
    const pw::StepEvent ev = agent->step(1, metric, {pw::LayerRef(w)});
    const double took = MPI_Wtime() - t1;
    EXPECT_NE(ev.reason, pw::DeathReason::none);
    // The step returned while the busy donor still computes: it did not wait for it.
    EXPECT_LT(MPI_Wtime() - t0, kBusy)
        << "step() waited for the busy donor (took " << took << " s, bound " << kBound << " s)";
    if (ev.died) {
      // Read a snapshot: over shared memory the busy donor's (it cannot stall a local read),
      // otherwise a responsive one's. Exactly one donor's values.
      ASSERT_EQ(ev.donors.size(), 1U);
      const float want = static_cast<float>(ev.donors[0].rank + 1);
      EXPECT_EQ(w, std::vector<float>(kN, want));
      if (transport == pw::Transport::rma) {
        EXPECT_NE(ev.donors[0].rank, busy_agent);
      }
    } else {
      EXPECT_TRUE(ev.deferred);
      EXPECT_EQ(w, before) << "a deferred death changed the parameters";
      EXPECT_FALSE(ev.note.empty() && agent->stats().deferred() == 0);
      EXPECT_NE(transport, pw::Transport::shm) << "a shm read never waits: " << ev.note;
    }
    std::printf("[ bounded ] %s %s agents=%d: step %.3f s (bound %.1f s), %s%s%s\n",
                pw::transport_name(transport).data(), kind, agents, took, kBound,
                ev.died ? "reborn from agent " : "deferred: ",
                ev.died ? std::to_string(ev.donors[0].rank).c_str() : ev.note.c_str(), "");
  }
  // Everyone but the busy agent keeps serving RMA readers until the busy one is back.
  if (agent_id != busy_agent) {
    while (MPI_Wtime() - t0 < kBusy + 0.2) agent->progress();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(BoundedStep, AgentNeverWaitsLongerThanTheBound) {
  PARAMWIN_REQUIRE_RANKS(2);
  for (pw::Transport t : {pw::Transport::shm, pw::Transport::rma}) {
    run_scenario("Agent", t, pw::test::world_rank(), pw::test::world_size(), [](pw::Transport tr) {
      return std::make_unique<pw::Agent<>>(MPI_COMM_WORLD, layout(), bounded_options(),
                                           pw::WindowOptions{.transport = tr});
    });
  }
}

TEST(BoundedStep, GroupAgentNeverWaitsLongerThanTheBound) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = n / 2});
  for (pw::Transport t : {pw::Transport::shm, pw::Transport::rma}) {
    run_scenario("GroupAgent", t, groups.agent(), groups.agents(), [&groups](pw::Transport tr) {
      return std::make_unique<pw::GroupAgent>(groups, layout(), bounded_options(),
                                              pw::WindowOptions{.transport = tr});
    });
  }
}

TEST(BoundedStep, ReadOptionsAreValidatedAndParsed) {
  pw::AgentOptions o;
  o.read.timeout_seconds = -1.0;
  EXPECT_THROW(pw::validate(o, 4), pw::InvalidArgument);
  o = {};
  o.read.chunk_bytes = 8;
  EXPECT_THROW(pw::validate(o, 4), pw::InvalidArgument);
  const pw::AgentOptions p = pw::parse_agent_options(
      "read_timeout_seconds=0.5 roster_timeout_seconds=0.1 read_mode=pinned chunk_bytes=65536 "
      "optimistic_attempts=2 progress_in_step=false progress_thread=true "
      "progress_interval_us=100");
  EXPECT_EQ(p.read.timeout_seconds, 0.5);
  EXPECT_EQ(p.read.roster_timeout_seconds, 0.1);
  EXPECT_EQ(p.read.read_mode, pw::ReadMode::pinned);
  EXPECT_EQ(p.read.chunk_bytes, 65536U);
  EXPECT_EQ(p.read.optimistic_attempts, 2U);
  EXPECT_FALSE(p.serve.progress_in_step);
  EXPECT_TRUE(p.serve.progress_thread);
  EXPECT_EQ(p.serve.progress_interval_us, 100U);
}

}  // namespace
