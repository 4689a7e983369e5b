// Passive donors: a donor computing for seconds without any MPI call does not delay a
// shared-memory pull from it. Checked logically, not with a timing threshold: the donor
// raises a flag (its roster iteration, a plain store into its own segment) only after its
// computation; every pull must return while that flag is still down.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

/// Busy computation without any MPI call, for at least @p seconds.
double compute_for(double seconds) {
  const auto start = std::chrono::steady_clock::now();
  volatile double sink = 0.0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
         seconds) {
    for (int i = 0; i < 1000; ++i) sink = sink + 1e-9 * i;
  }
  return sink;
}

TEST(PassiveDonor, ShmPullNeverWaitsForAComputingDonor) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{1} << 18);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = pw::Transport::shm});
  const int rank = win.rank();
  std::vector<float> w(layout[0].count, static_cast<float>(rank + 1));
  win.set_status({.iteration = 0, .state = pw::AgentState::active});
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == 1) {
    (void)compute_for(2.0);                                             // no MPI call in here
    win.set_status({.iteration = 1, .state = pw::AgentState::active});  // "done computing"
  } else if (rank == 0) {
    std::vector<float> out(w.size());
    int pulls_during_compute = 0;
    for (int p = 0; p < 20; ++p) {
      (void)win.pull({1}, {out});
      // Still 0 means the donor had not finished computing when this pull returned.
      if (win.roster(1).status.iteration == 0) ++pulls_during_compute;
      ASSERT_EQ(out[0], 2.0F);
    }
    EXPECT_EQ(pulls_during_compute, 20)
        << "a shared-memory pull returned only after the donor finished computing";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PassiveDonor, RmaPullIsServedByTheProgressThreadWhileTheDonorComputes) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{1} << 16);
  // Over RMA (MPICH ch4:ucx), a get is served only when the donor is inside MPI. The progress
  // thread keeps the donor inside MPI while its main thread computes without any MPI call.
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout,
                            {.transport = pw::Transport::rma,
                             .progress_thread = true,
                             .progress_interval_us = 100});
  const int rank = win.rank();
  std::vector<float> w(layout[0].count, static_cast<float>(rank + 1));
  win.set_status({.iteration = 0, .state = pw::AgentState::active});
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    (void)compute_for(2.0);
    win.set_status({.iteration = 1, .state = pw::AgentState::active});
  } else if (rank == 0) {
    std::vector<float> out(w.size());
    int pulls_during_compute = 0;
    for (int p = 0; p < 10; ++p) {
      (void)win.pull({1}, {out});
      if (win.roster(1).status.iteration == 0) ++pulls_during_compute;
      ASSERT_EQ(out[0], 2.0F);
    }
    EXPECT_EQ(pulls_during_compute, 10)
        << "an RMA pull waited for the donor despite its progress thread";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PassiveDonor, RmaDeadlineGivesTimeoutLeavesOutputAndWindowUsable) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{1} << 16);
  // No progress thread: over RMA the busy donor cannot answer until it enters MPI again.
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = pw::Transport::rma});
  const int rank = win.rank();
  std::vector<float> w(layout[0].count, static_cast<float>(rank + 1));
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    (void)compute_for(2.0);
  } else if (rank == 0) {
    std::vector<float> out(w.size(), -1.0F);
    for (pw::ReadMode mode : {pw::ReadMode::automatic, pw::ReadMode::pinned}) {
      pw::PullOptions opt;
      opt.timeout_seconds = 0.2;
      opt.read_mode = mode;
      try {
        (void)win.pull({1}, {out}, opt);
        ADD_FAILURE() << "pull from a donor busy for 2 s returned within a 0.2 s deadline";
      } catch (const pw::TimeoutError& e) {
        EXPECT_EQ(e.rank(), 1);
        EXPECT_NE(std::string(e.what()).find("donor 1 did not complete before the deadline"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(out, std::vector<float>(w.size(), -1.0F));
    }
    EXPECT_GT(win.pending_rma(), 0U);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    // The donor is in MPI again: abandoned reads and pin releases complete, pulls work.
    while (win.pending_rma() > 0) win.progress();
    std::vector<float> out(w.size());
    (void)win.pull({1}, {out}, {.timeout_seconds = 30.0});
    EXPECT_EQ(out[0], 2.0F);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    // No pin was left behind: both publishes (one per slot) go through.
    EXPECT_TRUE(win.publish({w}).published);
    EXPECT_TRUE(win.publish({w}).published);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A single float32 donor over RMA has its data reads land straight in the pull's scratch
// (which the window then retires if they are abandoned in flight). Wherever the deadline
// falls in a large pull (header, data or validation reads; which one depends on the
// transport: over UCX shared memory large gets complete without the donor), the caller's
// memory stays untouched and later pulls see exactly what the donor published after it came
// back.
TEST(PassiveDonor, RmaDeadlineInALargePullLosesNothing) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{4} << 20);  // 16 MiB: four 4 MiB data chunks
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = pw::Transport::rma});
  const int rank = win.rank();
  std::vector<float> w(layout[0].count);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<float>(rank * 1000) + static_cast<float>(i % 997);
  }
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  int timeouts = 0;
  if (rank == 1) {
    // Serve reads for a while, then compute without MPI for 2 s, mid-pull most likely.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < until) win.progress();
    (void)compute_for(2.0);
    for (float& x : w) x += 0.5F;
    (void)win.publish({w});
  } else if (rank == 0) {
    std::vector<float> out(w.size(), -1.0F);
    for (int i = 0; i < 400 && timeouts == 0; ++i) {
      std::fill(out.begin(), out.end(), -1.0F);
      try {
        (void)win.pull({1}, {out}, {.timeout_seconds = 0.5});
        ASSERT_EQ(out[12345], 1000.0F + static_cast<float>(12345 % 997));
      } catch (const pw::TimeoutError& e) {
        EXPECT_EQ(e.rank(), 1);
        EXPECT_EQ(out, std::vector<float>(w.size(), -1.0F)) << "a timed-out pull wrote output";
        ++timeouts;
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(timeouts, 1) << "the donor never went busy during a pull";
    std::vector<float> out(w.size());
    for (int i = 0; i < 3; ++i) {
      (void)win.pull({1}, {out}, {.timeout_seconds = 30.0});
      for (std::size_t j = 0; j < out.size(); ++j) {
        ASSERT_EQ(out[j], 1000.5F + static_cast<float>(j % 997))
            << "pull " << i << ", element " << j;
      }
    }
    while (win.pending_rma() > 0) win.progress();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(PassiveDonor, ProgressCallIsCheapAndSafe) {
  pw::Layout layout;
  layout.add("w", std::size_t{1});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout);
  for (int i = 0; i < 1000; ++i) win.progress();
  SUCCEED();
}

}  // namespace
