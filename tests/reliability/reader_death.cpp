// A reader dies in the middle of its pulls and its donor publishes on (docs/elastic.md). The
// last rank pulls rank 0's 32 MiB snapshot over and over with pins (ReadMode::pinned: every
// read pins the donor's slot so that no publish overwrites it meanwhile), and a thread of its
// own ends its process (std::_Exit) after 200-400 ms, mostly while a pin is held. Rank 0
// publishes every 2 ms for 3 s. A pin of a process that is gone must not hold the donor's
// slot forever: after the reader's death rank 0's publishes must succeed again within the
// liveness bound (the reader's pid is gone on this host). The survivors gather their results
// over a communicator without the dead rank and end with std::_Exit(0) (docs/elastic.md).
// --rma: the reader reads over RMA (Transport::rma), its pins are MPI atomics.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const bool rma = argc > 1 && std::string(argv[1]) == "--rma";
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int victim = size - 1;
  constexpr std::size_t kN = std::size_t{8} << 20;  // 32 MiB of float32
  constexpr double kSeconds = 3.0;

  pw::Layout layout;
  layout.add("w", kN);
  pw::WindowOptions options;
  options.name = "reader_death";
  options.liveness.suspect_seconds = 1.0;
  if (rma && rank == victim) options.transport = pw::Transport::rma;
  pw::ParameterWindow<> window(MPI_COMM_WORLD, layout, options);
  std::vector<float> w(kN, static_cast<float>(rank));
  window.publish({pw::ConstLayerRef(w)});
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == victim) {
    std::mt19937 gen(static_cast<unsigned>(std::random_device{}()));
    const int ms = std::uniform_int_distribution<int>(200, 400)(gen);
    std::thread([ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      std::_Exit(3);
    }).detach();
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

  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_excl(world, 1, &victim, &alive);
  MPI_Comm survivors = MPI_COMM_NULL;
  MPI_Comm_create_group(MPI_COMM_WORLD, alive, 19, &survivors);
  std::printf("rank %d: %ld publishes, %ld skipped (slot pinned), longest run of skips %.3f s%s\n",
              rank, published, skipped, longest,
              skipping_at_end ? ", still skipping at the end" : "");
  std::fflush(stdout);
  int bad = (skipping_at_end || longest > 2.0) ? 1 : 0;
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, survivors);
  if (rank == 0) {
    std::printf(any_bad != 0 ? "FAILED: a dead reader's pin held a donor's slot\n"
                             : "survivors: reader death survived (%s)\n",
                rma ? "rma" : "shm");
    std::fflush(stdout);
  }
  std::_Exit(0);
}
