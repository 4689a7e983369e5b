// Long Agent population: every rank lives a hundred short lives (maximum ages 2..5) in one
// run; every rebirth is checked element by element against the donors and versions its event
// records. Length: PARAMWIN_AGENT_SOAK_DEATHS rebirths per agent (default 100).
//
// Each agent steps until it has been reborn that many times, not for a fixed number of steps:
// how many of its deaths are deferred (donors mid-rebirth) depends on the scheduler, and with 4
// ranks on 2 cores a rank descheduled mid-rebirth blocks its peers for a whole time slice. An
// agent that has finished stays a valid, active donor for the others while it waits.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kW = 64;  // float32 layer
constexpr std::size_t kB = 3;   // float64 layer

/// What @p rank publishes as version @p version: exact in float32, unique per (rank, version
/// mod 1000, element).
double formula(int rank, std::uint64_t version, std::size_t i) {
  return static_cast<double>(rank * 100000 + static_cast<int>(version % 1000) * 64 +
                             static_cast<int>(i));
}

struct Params {
  std::vector<float> w = std::vector<float>(kW);
  std::vector<double> b = std::vector<double>(kB);
  void fill(int rank, std::uint64_t version) {
    for (std::size_t i = 0; i < kW; ++i) w[i] = static_cast<float>(formula(rank, version, i));
    for (std::size_t i = 0; i < kB; ++i) b[i] = formula(rank, version, i) + 0.25;
  }
};

/// publish.rebirth_wait_ms for the soak: PARAMWIN_AGENT_SOAK_REBIRTH_WAIT_MS (default: the
/// library's), to compare the post-rebirth publishes skipped with and without the wait.
double soak_rebirth_wait_ms() {
  double ms = pw::PublishOptions{}.rebirth_wait_ms;
  if (pw::test::world_rank() == 0) {
    if (const char* env = std::getenv("PARAMWIN_AGENT_SOAK_REBIRTH_WAIT_MS");
        env != nullptr && *env != '\0')
      ms = std::atof(env);
  }
  MPI_Bcast(&ms, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return ms;
}

int soak_deaths() {
  int deaths = 100;
  if (pw::test::world_rank() == 0) {
    if (const char* env = std::getenv("PARAMWIN_AGENT_SOAK_DEATHS"); env != nullptr && *env != '\0')
      deaths = std::max(1, std::atoi(env));
  }
  MPI_Bcast(&deaths, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return deaths;
}

TEST(AgentSoak, HundredsOfRebirthsEachExactlyTheRecordedDonorsMean) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = pw::test::world_size();
  const int rank = pw::test::world_rank();
  const int target = soak_deaths();
  // A hang guard only: ages 2..5 give a death every ~3.5 steps when donors are free.
  const long long max_steps = 1000LL * target;
  const int k = std::min(2, n - 1);
  pw::Layout layout;
  layout.add("w", kW).add("b", kB, pw::DType::float64);

  pw::Agent<>* self = nullptr;
  long long checked = 0;
  long long wrong = 0;
  pw::AgentOptions o;
  o.seed = 77;
  o.triggers.age = {.enabled = true, .lo = 2, .hi = 5};
  o.selection = {.kind = pw::SelectionKind::uniform, .k = k};
  o.publish.rebirth_wait_ms = soak_rebirth_wait_ms();
  o.on_rebirth = [&](const pw::StepEvent& ev, std::span<const pw::LayerRef> params) {
    // Check the mix against the donors and versions the event records...
    const auto* w = static_cast<const float*>(params[0].data());
    const auto* b = static_cast<const double*>(params[1].data());
    bool ok = ev.donors.size() == static_cast<std::size_t>(k);
    std::set<int> distinct;
    for (const pw::DonorRecord& d : ev.donors) {
      ok = ok && d.rank != rank && d.version >= 1 && !d.skipped;
      distinct.insert(d.rank);
    }
    ok = ok && distinct.size() == ev.donors.size();
    const double kk = static_cast<double>(ev.donors.size());
    for (std::size_t i = 0; ok && i < kW; ++i) {
      double sum = 0.0;
      for (const pw::DonorRecord& d : ev.donors) sum += formula(d.rank, d.version, i);
      ok = w[i] == static_cast<float>(sum / kk);
    }
    for (std::size_t i = 0; ok && i < kB; ++i) {
      double sum = 0.0;
      for (const pw::DonorRecord& d : ev.donors) sum += formula(d.rank, d.version, i) + 0.25;
      ok = b[i] == sum / kk;
    }
    ++checked;
    wrong += ok ? 0 : 1;
    EXPECT_TRUE(ok) << "rebirth at step " << ev.step << " is not the mean of its recorded donors";
    // ...then republish this rank's own formula, so every published version stays known.
    Params own;
    own.fill(rank, self->window().version() + 1);
    std::copy(own.w.begin(), own.w.end(), static_cast<float*>(params[0].data()));
    std::copy(own.b.begin(), own.b.end(), static_cast<double*>(params[1].data()));
  };

  pw::Agent<> agent(MPI_COMM_WORLD, layout, o);
  self = &agent;
  Params p;
  p.fill(rank, 1);
  (void)agent.publish({p.w, p.b});
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  long long steps = 0;
  long long rebirth_skipped = 0;  // post-rebirth publishes skipped even after the wait
  long long rebirth_retried = 0;  // post-rebirth publishes that needed more than one try
  for (; agent.stats().deaths() < target && steps < max_steps; ++steps) {
    p.fill(rank, agent.window().version() + 1);
    const pw::StepEvent ev =
        agent.step(steps, 1.0 / (1.0 + static_cast<double>(steps)), {p.w, p.b});
    if (ev.died) {
      rebirth_skipped += ev.publish_skipped ? 1 : 0;
      rebirth_retried += ev.publish_attempts > 1 ? 1 : 0;
    }
  }
  const double elapsed = MPI_Wtime() - t0;
  EXPECT_EQ(checked, agent.stats().deaths());
  EXPECT_EQ(agent.stats().deaths(), target) << "after " << steps << " steps";
  // Ages 2..5: at least one death in every 5 steps the age trigger was not deferred.
  EXPECT_LE(steps, 5LL * target + agent.stats().deferred());
  EXPECT_EQ(agent.window().roster(rank).status.generation,
            static_cast<std::uint64_t>(agent.stats().deaths()));

  long long mine[6] = {checked, wrong,           agent.stats().deferred(),
                       steps,   rebirth_skipped, rebirth_retried};
  long long all[6] = {};
  MPI_Allreduce(mine, all, 6, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  double slowest = 0.0;
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("[ agents  ] %d agents, %lld steps in all, %.3f s: %lld rebirths verified against "
                "their recorded donor versions, %lld wrong, %lld deferred deaths; "
                "post-rebirth publishes (rebirth_wait_ms %g): %lld retried, %lld still skipped\n",
                n, all[3], slowest, all[0], all[1], all[2], o.publish.rebirth_wait_ms, all[5],
                all[4]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
