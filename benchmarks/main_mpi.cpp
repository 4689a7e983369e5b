// Google Benchmark main for MPI: every rank registers and runs the same benchmarks; each
// benchmark reduces its per-iteration time with MPI_MAX (bench_util.hpp), so every rank
// decides the same iteration counts. Only rank 0 reports: the other ranks get a reporter
// that prints nothing and never see --benchmark_out (they would truncate rank 0's file).
#include <mpi.h>
#include <sys/prctl.h>

#include <benchmark/benchmark.h>
#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "bench_util.hpp"

namespace {

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context& /*context*/) override { return true; }
  void ReportRuns(const std::vector<Run>& /*report*/) override {}
};

// Drops --benchmark_out* from argv (non-root ranks).
int strip_output_flags(int argc, char** argv) {
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (i > 0 && arg.starts_with("--benchmark_out")) {
      continue;
    }
    argv[kept++] = argv[i];
  }
  argv[kept] = nullptr;
  return kept;
}

}  // namespace

int main(int argc, char** argv) {
  // PARAMWIN_BENCH_THREAD_MULTIPLE=1: MPI_THREAD_MULTIPLE, for the progress-thread cases
  // only (scripts/bench.sh --serve runs them apart: the other figures use plain MPI_Init).
  const char* multiple = std::getenv("PARAMWIN_BENCH_THREAD_MULTIPLE");
  if (multiple != nullptr && std::string(multiple) == "1") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
  auto& e = paramwin::bench::env();
  MPI_Comm_rank(MPI_COMM_WORLD, &e.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &e.size);
  // More ranks than the 2 cores: waiting ranks sleep between polls instead of busy-polling.
  // PARAMWIN_BENCH_POLL_NS overrides (0 = MPI_Wait).
  // Ranks with no part in a benchmark's timed operation (bench_util.hpp: Idle) sleep 1 ms;
  // PARAMWIN_BENCH_IDLE_POLL_NS overrides.
  e.poll_ns = e.size > 2 ? 20000 : 0;
  if (const char* s = std::getenv("PARAMWIN_BENCH_POLL_NS"); s != nullptr) {
    e.poll_ns = std::strtol(s, nullptr, 10);
  }
  e.idle_poll_ns = e.size > 2 ? 1000000 : e.poll_ns;
  if (const char* s = std::getenv("PARAMWIN_BENCH_IDLE_POLL_NS"); s != nullptr) {
    e.idle_poll_ns = std::strtol(s, nullptr, 10);
  }
  // Default timer slack (50 us) would stretch every short sleep.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);

  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    if (e.rank != 0) {
      argc = strip_output_flags(argc, argv);
    }
    benchmark::Initialize(&argc, argv);
    if (e.rank == 0 && benchmark::ReportUnrecognizedArguments(argc, argv)) {
      rc = 1;
    }
    int any_bad = 0;
    MPI_Allreduce(&rc, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_bad == 0) {
      benchmark::AddCustomContext("mpi_ranks", std::to_string(e.size));
      benchmark::AddCustomContext("poll_ns", std::to_string(e.poll_ns));
      benchmark::AddCustomContext("idle_poll_ns", std::to_string(e.idle_poll_ns));
      try {
        paramwin::bench::register_pull_benchmarks();
        paramwin::bench::register_multi_donor_benchmarks();
        paramwin::bench::register_misc_benchmarks();
        paramwin::bench::register_group_benchmarks();
        paramwin::bench::register_serve_benchmarks();
        paramwin::bench::register_hyper_benchmarks();
        if (e.rank == 0) {
          benchmark::RunSpecifiedBenchmarks();
        } else {
          NullReporter quiet;
          benchmark::RunSpecifiedBenchmarks(&quiet);
        }
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "[rank %d] paramwin_bench: %s\n", e.rank, ex.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    } else {
      rc = 1;
    }
    benchmark::Shutdown();
  }
  MPI_Finalize();
  return rc;
}
