// Cross-host vs same-host pulls (run by scripts/multihost.sh: 2 hosts, 2 ranks each).
// Rank 0 (hostA) pulls — a rebirth: k donors averaged into its parameters — from rank 1
// (hostA) and ranks n/2.. (hostB), at a few model sizes; plus the raw MPI baseline in the
// same binary (one MPI_Get + flush of the same bytes from a cross-host rank).
// Donors read over RMA wait inside MPI (busy, as a donor with a progress aid would be);
// ranks not involved sleep between polls so that the 2 cores go to the reader and donors.
//
//   multihost_bench [--sizes-mib 1,16,64] [--reps 5] [--direct 1]
// Prints a Markdown table on rank 0. --direct 1: the direct-landing cases of issue 18 instead
// (cross-host one donor, k = 2, float32 and bfloat16 wire, transactional vs direct landing).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <paramwin/paramwin.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pw = paramwin;

namespace {

/// Barrier in which this rank busy-polls (@p busy) or sleeps 200 us between polls.
void barrier(bool busy) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  while (done == 0) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done == 0 && !busy) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  std::string name;
  pw::Transport transport;
  std::vector<int> donors;
  pw::Landing landing = pw::Landing::automatic;
  pw::WireFormat wire = pw::WireFormat::native;
  std::size_t chunk_bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    std::vector<std::size_t> sizes_mib{1, 16, 64};
    int reps = 5;
    bool direct = false;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string a = argv[i];
      if (a == "--reps") reps = std::stoi(argv[i + 1]);
      if (a == "--direct") direct = std::stoi(argv[i + 1]) != 0;
      if (a == "--sizes-mib") {
        sizes_mib.clear();
        std::stringstream ss(argv[i + 1]);
        for (std::string s; std::getline(ss, s, ',');) sizes_mib.push_back(std::stoul(s));
      }
    }
    int rank = 0;
    int n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const int other = n / 2;  // first rank of the other host
    constexpr auto kAuto = pw::Transport::automatic;
    constexpr auto kTx = pw::Landing::transactional;
    constexpr auto kDirect = pw::Landing::direct;
    constexpr auto kBf16 = pw::WireFormat::bfloat16;
    std::vector<Case> cases;
    if (direct) {
      cases.push_back({"k=1 other host, f32, transactional", kAuto, {other}, kTx});
      cases.push_back({"k=1 other host, f32, direct", kAuto, {other}, kDirect});
      cases.push_back({"k=1 other host, bf16, transactional", kAuto, {other}, kTx, kBf16});
      cases.push_back({"k=1 other host, bf16, direct", kAuto, {other}, kDirect, kBf16});
      cases.push_back({"k=1 other host, bf16, direct, 16 MiB chunks",
                       kAuto,
                       {other},
                       kDirect,
                       kBf16,
                       std::size_t{16} << 20});
      cases.push_back({"k=2 other host, transactional", kAuto, {other, other + 1}, kTx});
      cases.push_back({"k=2 other host, direct", kAuto, {other, other + 1}, kDirect});
    } else {
      cases.push_back({"k=1 same host (shm)", kAuto, {1}});
      cases.push_back({"k=1 same host (rma forced)", pw::Transport::rma, {1}});
      cases.push_back({"k=1 other host (rma/tcp)", kAuto, {other}});
      cases.push_back({"k=2 other host", kAuto, {other, other + 1}});
      cases.push_back({"k=2 mixed (1 same + 1 other)", kAuto, {1, other}});
    }
    if (rank == 0) {
      std::printf("| case | model | median pull (rebirth) | bytes/s moved | min | reps |\n");
      std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    }
    for (const std::size_t mib : sizes_mib) {
      const std::size_t floats = mib * (std::size_t{1} << 20) / sizeof(float);
      for (const Case& c : cases) {
        pw::Layout layout;
        layout.add("w", floats);
        pw::ParameterWindow<> win(MPI_COMM_WORLD, layout,
                                  {.transport = c.transport, .wire = c.wire});
        pw::PullOptions opt;
        opt.landing = c.landing;
        opt.chunk_bytes = c.chunk_bytes;
        std::vector<float> w(floats, static_cast<float>(rank));
        (void)win.publish({w});
        const bool donor = std::find(c.donors.begin(), c.donors.end(), rank) != c.donors.end();
        // A donor that rank 0 reads over RMA must stay inside MPI; the others may sleep.
        const bool busy = rank == 0 || (donor && win.transport_for(0) == pw::Transport::rma);
        barrier(true);
        std::vector<double> t;
        std::size_t bytes = 0;
        if (rank == 0) {
          (void)win.pull(c.donors, {w}, opt);  // warm-up (connections, pages)
          for (int r = 0; r < reps; ++r) {
            const pw::PullResult res = win.pull(c.donors, {w}, opt);
            t.push_back(res.seconds);
            bytes = res.bytes;
          }
        }
        barrier(busy);
        if (rank == 0) {
          const double m = median(t);
          std::printf("| %s | %zu MiB | %.2f ms | %.2f GB/s | %.2f ms | %d |\n", c.name.c_str(),
                      mib, m * 1e3, static_cast<double>(bytes) / m / 1e9,
                      *std::min_element(t.begin(), t.end()) * 1e3, reps);
          std::fflush(stdout);
        }
      }
      // Raw MPI baseline: one MPI_Get of the same bytes from the other host + flush.
      {
        const MPI_Aint bytes = static_cast<MPI_Aint>(floats * sizeof(float));
        void* base = nullptr;
        MPI_Win raw = MPI_WIN_NULL;
        MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &raw);
        MPI_Win_lock_all(MPI_MODE_NOCHECK, raw);
        std::vector<float> dst(floats);
        barrier(true);
        std::vector<double> t;
        if (rank == 0) {
          for (int r = 0; r <= reps; ++r) {
            const double t0 = MPI_Wtime();
            MPI_Get(dst.data(), static_cast<int>(bytes), MPI_BYTE, other, 0,
                    static_cast<int>(bytes), MPI_BYTE, raw);
            MPI_Win_flush(other, raw);
            if (r > 0) t.push_back(MPI_Wtime() - t0);  // r == 0: warm-up
          }
        }
        barrier(rank == 0 || rank == other);
        MPI_Win_unlock_all(raw);
        MPI_Win_free(&raw);
        if (rank == 0) {
          const double m = median(t);
          std::printf("| raw MPI_Get+flush, other host | %zu MiB | %.2f ms | %.2f GB/s | %.2f ms | "
                      "%d |\n",
                      mib, m * 1e3, static_cast<double>(bytes) / m / 1e9,
                      *std::min_element(t.begin(), t.end()) * 1e3, reps);
          std::fflush(stdout);
        }
      }
    }
  }
  MPI_Finalize();
  return 0;
}
