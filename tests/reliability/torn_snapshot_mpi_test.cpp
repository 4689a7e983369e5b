// No torn snapshot: publishers republish version-stamped patterns in a tight loop while
// readers pull; every pulled snapshot must hold exactly one version across all layers,
// and that version must be the one the pull reports.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "detail/kernels.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

float stamp(int rank, std::uint64_t version, std::size_t layer, std::size_t i) {
  // Exact in float (< 2^24): differs between versions, ranks, layers and elements.
  return static_cast<float>(((version * 31 + layer * 7 + i) % 65536) +
                            static_cast<std::uint64_t>(rank) * 65536);
}

struct Model {
  pw::Layout layout;
  std::vector<std::vector<float>> layers;
  Model() {
    layout.add("tiny", std::size_t{1}).add("none", std::size_t{0});
    layout.add("mid", std::size_t{3001}).add("big", std::size_t{250000});
    for (const auto& l : layout.layers()) layers.emplace_back(l.count);
  }
  void fill(int rank, std::uint64_t version) {
    for (std::size_t l = 0; l < layers.size(); ++l)
      for (std::size_t i = 0; i < layers[l].size(); ++i) layers[l][i] = stamp(rank, version, l, i);
  }
  std::vector<pw::ConstLayerRef> crefs() const { return {layers.begin(), layers.end()}; }
  std::vector<pw::LayerRef> refs() { return {layers.begin(), layers.end()}; }
};

struct Counts {
  long pulls = 0, bad = 0, retried = 0, pinned = 0, skipped_publishes = 0, publishes = 0,
       direct = 0;
};

Counts stress(pw::Transport transport, pw::ReadMode mode, unsigned optimistic_attempts,
              int pulls_per_reader, pw::Landing landing = pw::Landing::automatic,
              double timeout_seconds = 0.0, bool progress_thread = false) {
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  const int publishers = n / 2;  // ranks [0, publishers) publish, the others read
  Model model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, model.layout,
                            {.transport = transport,
                             .progress_thread = progress_thread,
                             .progress_interval_us = 1});
  model.fill(rank, 1);
  (void)win.publish(model.crefs());
  MPI_Barrier(MPI_COMM_WORLD);

  Counts c;
  MPI_Request done = MPI_REQUEST_NULL;
  if (rank < publishers) {
    // Publish as fast as possible until every reader is finished; MPI_Test keeps MPI
    // progressing so RMA readers are served.
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    int finished = 0;
    while (finished == 0) {
      model.fill(rank, win.version() + 1);
      const pw::PublishResult r = win.publish(model.crefs());
      ++c.publishes;
      c.skipped_publishes += r.published ? 0 : 1;
      MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
    }
  } else {
    std::mt19937 rng(static_cast<unsigned>(rank) * 7919U);
    Model out;
    pw::PullOptions opt;
    opt.read_mode = mode;
    opt.optimistic_attempts = optimistic_attempts;
    opt.landing = landing;
    opt.timeout_seconds = timeout_seconds;  // direct landing: chunk buffers, not straight
    for (int p = 0; p < pulls_per_reader; ++p) {
      const int donor = static_cast<int>(rng() % static_cast<unsigned>(publishers));
      auto refs = out.refs();
      const pw::PullResult r = win.pull(std::span<const int>(&donor, 1), refs, opt);
      ++c.pulls;
      c.retried += r.donors[0].attempts > 1 ? 1 : 0;
      c.pinned += r.donors[0].pinned ? 1 : 0;
      c.direct += r.landing == pw::Landing::direct ? 1 : 0;
      const std::uint64_t v = r.donors[0].version;
      bool ok = true;
      for (std::size_t l = 0; l < out.layers.size() && ok; ++l)
        for (std::size_t i = 0; i < out.layers[l].size(); ++i)
          if (out.layers[l][i] != stamp(donor, v, l, i)) {
            ok = false;
            break;
          }
      c.bad += ok ? 0 : 1;
    }
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    MPI_Wait(&done, MPI_STATUS_IGNORE);
  }
  Counts total;
  long mine[7] = {c.pulls, c.bad, c.retried, c.pinned, c.skipped_publishes, c.publishes, c.direct};
  long sum[7] = {};
  MPI_Allreduce(mine, sum, 7, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  total = {sum[0], sum[1], sum[2], sum[3], sum[4], sum[5], sum[6]};
  if (rank == 0) {
    const char* mode_name = mode == pw::ReadMode::automatic    ? "automatic"
                            : mode == pw::ReadMode::optimistic ? "optimistic"
                                                               : "pinned";
    std::printf("[ stress  ] %s %s optimistic_attempts=%u landing=%s: %ld pulls verified, %ld "
                "torn, %ld retried, %ld pinned, %ld direct; %ld publishes, %ld skipped for pins\n",
                std::string(pw::transport_name(transport)).c_str(), mode_name, optimistic_attempts,
                std::string(pw::landing_name(landing)).c_str(), total.pulls, total.bad,
                total.retried, total.pinned, total.direct, total.publishes,
                total.skipped_publishes);
  }
  return total;
}

class TornSnapshot : public ::testing::TestWithParam<pw::Transport> {
 protected:
  // Every RMA round trip waits until a publisher reaches MPI_Test in its loop (MPICH ch4:ucx
  // serves gets only inside MPI), which is slow on an oversubscribed machine: fewer pulls.
  int pulls(int shm_pulls) const {
    return GetParam() == pw::Transport::rma ? shm_pulls / 5 : shm_pulls;
  }
};

TEST_P(TornSnapshot, OptimisticReadsRetryAndNeverTear) {
  PARAMWIN_REQUIRE_RANKS(2);
  const Counts c = stress(GetParam(), pw::ReadMode::optimistic, 4, pulls(300));
  EXPECT_EQ(c.bad, 0);
  EXPECT_EQ(c.pulls, pulls(300) * (pw::test::world_size() - pw::test::world_size() / 2));
}

TEST_P(TornSnapshot, DefaultReadsNeverTear) {
  PARAMWIN_REQUIRE_RANKS(2);
  const Counts c = stress(GetParam(), pw::ReadMode::automatic, 4, pulls(200));
  EXPECT_EQ(c.bad, 0);
  if (GetParam() == pw::Transport::shm) {
    EXPECT_EQ(c.pinned, c.pulls);  // same-node pulls pin and stream straight into the output
  }
}

TEST_P(TornSnapshot, AlwaysPinnedReadsAreConsistentAndPublishersNeverWait) {
  PARAMWIN_REQUIRE_RANKS(2);
  // Every read pins; publishers skip instead of waiting.
  const Counts c = stress(GetParam(), pw::ReadMode::pinned, 4, pulls(200));
  EXPECT_EQ(c.bad, 0);
  EXPECT_EQ(c.pinned, c.pulls);
  EXPECT_EQ(c.retried, 0);
}

// The same with every kernel output streamed (non-temporal stores, which are weakly ordered:
// publish must fence them before it releases the version; the automatic mode streams only
// layers of 16 MiB or more, larger than this model).
TEST_P(TornSnapshot, StreamedPublishesAndPullsNeverTear) {
  PARAMWIN_REQUIRE_RANKS(2);
  paramwin::detail::set_store_mode(paramwin::detail::StoreMode::streaming);
  const Counts optimistic = stress(GetParam(), pw::ReadMode::optimistic, 4, pulls(200));
  const Counts automatic = stress(GetParam(), pw::ReadMode::automatic, 4, pulls(200));
  paramwin::detail::set_store_mode(paramwin::detail::StoreMode::automatic);
  EXPECT_EQ(optimistic.bad, 0);
  EXPECT_EQ(automatic.bad, 0);
}

// Landing::direct: pinned reads that land in the output, straight (no deadline) or through
// chunk buffers (a deadline); the version the header read names before the pin is checked
// in the first data batch and the read restarts when a publish overtook it.
TEST_P(TornSnapshot, DirectLandingNeverTears) {
  PARAMWIN_REQUIRE_RANKS(2);
  for (const double timeout : {0.0, 60.0}) {
    for (const pw::ReadMode mode : {pw::ReadMode::automatic, pw::ReadMode::pinned}) {
      const Counts c = stress(GetParam(), mode, 4, pulls(200), pw::Landing::direct, timeout);
      EXPECT_EQ(c.bad, 0);
      EXPECT_EQ(c.pinned, c.pulls);
      EXPECT_EQ(c.direct, GetParam() == pw::Transport::rma ? c.pulls : 0);
    }
  }
  // With a progress thread the owner serves the pin and the header read while it publishes:
  // a header read served before the pin can name a version a running publish overtakes,
  // which the first data batch detects (retried > 0 when it happened).
  const Counts c =
      stress(GetParam(), pw::ReadMode::automatic, 4, pulls(100), pw::Landing::direct, 0.0, true);
  EXPECT_EQ(c.bad, 0);
  EXPECT_EQ(c.pinned, c.pulls);
}

INSTANTIATE_TEST_SUITE_P(Transports, TornSnapshot,
                         ::testing::Values(pw::Transport::shm, pw::Transport::rma),
                         [](const auto& param_info) {
                           return std::string(pw::transport_name(param_info.param));
                         });

}  // namespace
