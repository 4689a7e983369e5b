// Donor progress across hosts: a donor computes for ~1 s without any MPI call while rank 0
// pulls 1 MiB from it. Measured for a donor on the reader's host (shared memory) and for a
// donor on the other host (RMA over UCX's TCP transport) with no aid, with progress() calls
// in the donor's loop, and with the progress thread.
//
// Checked logically (no timing threshold): with no aid, the cross-host pull completes only
// after the donor has finished computing (the roster flag it raises after computing is
// already up); with either aid, and from a same-host donor, pulls complete while it is still
// computing. Prints one line per case; exits non-zero if a check fails.
//
//   multihost_progress [--compute SECONDS] [--mib N]      (4 ranks: 2 per host)
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <paramwin/paramwin.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace pw = paramwin;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// A barrier whose waiting ranks sleep instead of busy-polling (2 cores, 4 ranks).
void sleepy_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm, &req);
  int done = 0;
  while (done == 0) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

enum class Aid { none, progress_calls, progress_thread };

const char* aid_name(Aid a) {
  switch (a) {
    case Aid::none: return "none";
    case Aid::progress_calls: return "progress() every 1 ms";
    case Aid::progress_thread: return "progress thread (200 us)";
  }
  return "?";
}

struct Outcome {
  int pulls = 0;
  int during = 0;         // pulls that returned while the donor was still computing
  double first_ms = 0.0;  // latency of the first pull
  double median_ms = 0.0;
  double max_ms = 0.0;
};

/// Rank 0 pulls from @p donor while it computes; ranks other than 0 and the donor sleep.
Outcome run_case(int donor, Aid aid, double compute_s, std::size_t floats) {
  pw::Layout layout;
  layout.add("w", floats);
  pw::WindowOptions opt;
  opt.progress_thread = aid == Aid::progress_thread;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, opt);
  const int rank = win.rank();
  std::vector<float> w(floats, static_cast<float>(rank + 1));
  win.set_status({.iteration = 0, .state = pw::AgentState::active});
  (void)win.publish({w});
  sleepy_barrier(MPI_COMM_WORLD);

  Outcome out;
  if (rank == donor) {
    const auto t0 = Clock::now();
    volatile double sink = 0.0;
    auto last_progress = t0;
    while (since(t0) < compute_s) {  // no MPI call in here, except the aid under test
      for (int i = 0; i < 1000; ++i) sink = sink + 1e-9 * i;
      if (aid == Aid::progress_calls && since(last_progress) > 1e-3) {
        win.progress();
        last_progress = Clock::now();
      }
    }
    win.set_status({.iteration = 1, .state = pw::AgentState::active});  // "done computing"
  } else if (rank == 0) {
    std::vector<float> buf(floats);
    std::vector<double> ms;
    const auto t0 = Clock::now();
    // Pull until the donor is done (at most 40 pulls), then one more check of the flag.
    for (int p = 0; p < 40; ++p) {
      const auto t = Clock::now();
      (void)win.pull({donor}, {buf});
      ms.push_back(since(t) * 1e3);
      if (buf[0] != static_cast<float>(donor + 1)) std::abort();
      const bool computing = win.roster(donor).status.iteration == 0;
      if (computing) ++out.during;
      if (!computing || since(t0) > compute_s) break;
    }
    out.pulls = static_cast<int>(ms.size());
    out.first_ms = ms.front();
    out.max_ms = *std::max_element(ms.begin(), ms.end());
    std::sort(ms.begin(), ms.end());
    out.median_ms = ms[ms.size() / 2];
  }
  sleepy_barrier(MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int failures = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    double compute_s = 1.0;
    std::size_t mib = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i];
      if (a == "--compute") compute_s = std::stod(argv[i + 1]);
      if (a == "--mib") mib = std::stoul(argv[i + 1]);
    }
    const std::size_t floats = mib * (std::size_t{1} << 20) / sizeof(float);
    int rank = 0;
    int n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(host, &len);
    if (n < 3) {
      if (rank == 0) std::fprintf(stderr, "multihost_progress: needs >= 3 ranks\n");
      failures = 1;
    } else {
      // Donors: rank 1 (same host as rank 0 under scripts/multihost.sh) and rank n/2 (the
      // first rank of the other host).
      struct Case {
        int donor;
        Aid aid;
      };
      const Case cases[] = {{1, Aid::none},
                            {n / 2, Aid::none},
                            {n / 2, Aid::progress_calls},
                            {n / 2, Aid::progress_thread}};
      for (const Case& c : cases) {
        pw::Layout probe;
        probe.add("w", std::size_t{1});
        const pw::Transport t = pw::ParameterWindow<>(MPI_COMM_WORLD, probe).transport_for(c.donor);
        const Outcome o = run_case(c.donor, c.aid, compute_s, floats);
        if (rank != 0) continue;
        const bool cross = t == pw::Transport::rma;
        // Expected: no aid over RMA -> no pull completes during the computation; otherwise
        // at least one does (normally all of them).
        const bool ok = cross && c.aid == Aid::none ? o.during == 0 : o.during >= 1;
        if (!ok) ++failures;
        std::printf("[multihost-progress] donor %d (%s, %s) aid=%-24s %.0f MiB, compute %.1f s: "
                    "first pull %.1f ms, median %.2f ms, max %.1f ms, %d/%d pulls returned "
                    "while the donor computed %s\n",
                    c.donor, cross ? "other host" : "same host", pw::transport_name(t).data(),
                    aid_name(c.aid), static_cast<double>(mib), compute_s, o.first_ms, o.median_ms,
                    o.max_ms, o.during, o.pulls, ok ? "[ok]" : "[UNEXPECTED]");
        std::fflush(stdout);
      }
    }
    MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
