// A reader dies in the middle of its pulls and its donor publishes on (docs/elastic.md). The
// last rank pulls rank 0's 32 MiB snapshot over and over with pins (ReadMode::pinned: every
// read pins the donor's slot so that no publish overwrites it meanwhile), and a thread of its
// own ends its process (std::_Exit) after 200-400 ms, mostly while a pin is held. Rank 0
// publishes every 2 ms for 3 s. A pin of a process that is gone must not hold the donor's
// slot forever: after the reader's death rank 0's publishes must succeed again within the
// liveness bound (the reader's pid is gone on this host). The survivors meet over a
// communicator of their own and end with std::_Exit(0) (death_test_util.hpp).
// --rma: the reader reads over RMA (Transport::rma), its pins are MPI atomics.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "death_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

int main(int argc, char** argv) {
  const pw::test::DeathRun run(argc, argv);
  const int rank = run.rank;
  const bool rma = run.rma;
  const int victim = run.size - 1;
  constexpr std::size_t kN = std::size_t{8} << 20;  // 32 MiB of float32
  constexpr double kSeconds = 3.0;

  pw::ParameterWindow<> window = pw::test::death_window("reader_death", kN, rma && rank == victim);
  std::vector<float> w(kN, static_cast<float>(rank));
  window.publish({pw::ConstLayerRef(w)});
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == victim) {
    pw::test::die_soon();
    pw::PullOptions pull;
    pull.read_mode = pw::ReadMode::pinned;
    for (;;) {
      (void)window.pull({0}, {pw::LayerRef(w)}, pull);
    }
  }

  // Donors: publish every 2 ms; the longest run of skipped publishes (pinned slot), in seconds.
  const double t0 = MPI_Wtime();
  double skipped_since = -1.0;
  double longest = 0.0;
  long published = 0;
  long skipped = 0;
  bool skipping_at_end = false;
  while (MPI_Wtime() - t0 < kSeconds) {
    for (float& x : w) x += 1.0F;
    const pw::PublishResult r = window.publish({pw::ConstLayerRef(w)});
    const double now = MPI_Wtime();
    if (r.published) {
      ++published;
      if (skipped_since >= 0.0) longest = std::max(longest, now - skipped_since);
      skipped_since = -1.0;
    } else {
      ++skipped;
      if (skipped_since < 0.0) skipped_since = now;
    }
    window.progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (skipped_since >= 0.0) {
    skipping_at_end = true;
    longest = std::max(longest, MPI_Wtime() - skipped_since);
  }

  std::printf("rank %d: %ld publishes, %ld skipped (slot pinned), longest run of skips %.3f s%s\n",
              rank, published, skipped, longest,
              skipping_at_end ? ", still skipping at the end" : "");
  const bool failed = skipping_at_end || longest > 2.0;
  if (failed) std::printf("FAILED: rank %d: a dead reader's pin held its slot\n", rank);
  pw::test::end_survivor(victim, failed,
                         std::string("survivors: reader death survived (") + (rma ? "rma" : "shm") +
                             ")");
}
