// A trainer's step with background averaging on against the same step without averaging
// (docs/averaging.md, "Background averaging: the trainer's step"): every rank runs the same
// fixed compute per step over N float32 parameters, then (averaging on) AveragingAgent::step
// with Topology::all_peers() and a round every step. Modes, run in alternating blocks on every
// rank at once: off (compute only), background (reads on the worker thread), background
// inline (AveragingOptions::background_worker = false) and inline averaging. Prints rank 0's
// median and minimum step time per mode and the ratio of medians to off.
//   mpiexec -n 2 paramwin_averaging_background_step [N] [compute] [passes] [interval]
// interval: steps between two rounds (AveragingOptions::interval, default 1).
// compute: "params" (each pass: x = a x + b over the parameters, memory-bound), "spin" (each
// pass: 2^20 dependent multiply-adds in registers, no memory traffic) or "sleep" (passes
// milliseconds of sleep: a GPU trainer whose host thread waits for the device, its core free).
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "paramwin/averaging.hpp"

namespace {

constexpr int kModes = 4;
constexpr int kBlocks = 3;
constexpr int kStepsPerBlock = 15;
const std::array<const char*, kModes> kNames = {"off", "background", "background inline", "inline"};

volatile float g_sink = 0.0F;  // keeps the spin loop's result alive

void compute(std::vector<float>& w, const std::string& kind, int passes) {
  if (kind == "sleep") {
    std::this_thread::sleep_for(std::chrono::milliseconds(passes));
    return;
  }
  if (kind == "spin") {
    float x = 1.0F;
    for (int p = 0; p < passes; ++p) {
      for (int i = 0; i < (1 << 20); ++i) {
        x = x * 0.999999F + 1e-7F;
      }
    }
    g_sink = x;
    return;
  }
  for (int p = 0; p < passes; ++p) {
    for (float& v : w) {
      v = 0.9999F * v + 1e-5F;
    }
  }
}

struct Mode {
  std::unique_ptr<paramwin::AveragingAgent> agent;
  std::vector<double> seconds;
  std::vector<double> in_step;  // AveragingAgent::step alone
  int applied = 0;
  int busy = 0;
};

void run(std::size_t n, const std::string& kind, int passes, std::int64_t interval) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  paramwin::Layout layout;
  layout.add("w", n);
  std::vector<float> w(n, static_cast<float>(rank));
  std::array<Mode, kModes> modes;
  for (int m = 1; m < kModes; ++m) {
    paramwin::AveragingOptions o;
    o.background = m != 3;
    o.background_worker = m == 1;
    o.interval = interval;
    o.window.name = kNames[static_cast<std::size_t>(m)];  // three windows alive at once
    modes[static_cast<std::size_t>(m)].agent =
        std::make_unique<paramwin::AveragingAgent>(MPI_COMM_WORLD, layout, o);
    (void)modes[static_cast<std::size_t>(m)].agent->publish({w});
  }
  if (rank == 0 && !modes[1].agent->background_inline_reason().empty()) {
    std::printf("background reads inline: %s\n",
                modes[1].agent->background_inline_reason().c_str());
  }
  for (int block = 0; block < kBlocks; ++block) {
    for (std::size_t m = 0; m < kModes; ++m) {
      Mode& mode = modes[m];
      MPI_Barrier(MPI_COMM_WORLD);
      for (int s = 0; s < kStepsPerBlock; ++s) {
        const double start = MPI_Wtime();
        compute(w, kind, passes);
        if (mode.agent) {
          const double at = MPI_Wtime();
          const paramwin::AveragingRound r = mode.agent->step({w});
          mode.in_step.push_back(MPI_Wtime() - at);
          mode.applied += r.applied ? 1 : 0;
          mode.busy += r.busy ? 1 : 0;
        }
        mode.seconds.push_back(MPI_Wtime() - start);
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (Mode& mode : modes) {
      std::sort(mode.seconds.begin(), mode.seconds.end());
      std::sort(mode.in_step.begin(), mode.in_step.end());
    }
    const double off = modes[0].seconds[modes[0].seconds.size() / 2];
    std::printf("%zu float32, compute %s x %d, a round every %lld steps, %d steps per mode:\n", n,
                kind.c_str(), passes, static_cast<long long>(interval), kBlocks * kStepsPerBlock);
    for (std::size_t m = 0; m < kModes; ++m) {
      const Mode& mode = modes[m];
      const double median = mode.seconds[mode.seconds.size() / 2];
      const double in_step = mode.in_step.empty() ? 0.0 : mode.in_step[mode.in_step.size() / 2];
      std::printf("  %-18s step median %7.2f ms (min %7.2f), ratio %.3f; in step() %6.2f ms; "
                  "applied %d, busy %d\n",
                  kNames[m], median * 1e3, mode.seconds.front() * 1e3, median / off, in_step * 1e3,
                  mode.applied, mode.busy);
    }
  }
  for (Mode& mode : modes) {
    mode.agent.reset();  // collective, in the same order on every rank
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
  const std::string kind = argc > 2 ? argv[2] : "params";
  const int passes = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::int64_t interval = argc > 4 ? std::atoll(argv[4]) : 1;
  run(n, kind, passes, interval);
  MPI_Finalize();
  return 0;
}
