// Issue 14: how an Agent loop serves its RMA readers. A trainer loop whose only paramwin
// call is Agent::step() makes no other MPI call; on MPICH's ch4:ucx an MPI_Get is served only
// while its target is inside MPI, so its readers wait for step()'s one progress call
// (AgentOptions::serve.progress_in_step) — or, without it, until the loop ends.
#include <array>
#include <ctime>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"

namespace paramwin::bench {
namespace {

constexpr int kReader = 0;
constexpr int kDonor = 1;
constexpr double kLoopSeconds = 0.3;   // the donor's training loop per iteration
constexpr double kStepSeconds = 1e-3;  // compute per training step (no MPI inside)

/// An agent that never dies nor publishes on its own (the reader pulls its first snapshot):
/// step() is then the loop's only paramwin call, with or without its progress call.
AgentOptions loop_options(bool progress_in_step) {
  AgentOptions o;
  o.selection.k = 1;
  o.publish.every = 1000000000;
  o.serve.progress_in_step = progress_in_step;
  return o;
}

// Rank 0 pulls 1M float32 over RMA from rank 1, whose loop is: 1 ms of compute, step().
void bm_agent_loop(benchmark::State& state, bool progress_in_step) {
  constexpr std::size_t n = 1000000;
  auto [win, params] = published_window(n, Transport::rma);
  Agent<> agent(std::move(win), loop_options(progress_in_step));
  const std::array<int, 1> donors{kDonor};
  const timespec head_start{0, 2000000};  // lets the donor enter its loop first
  if (env().rank == kReader) {
    agent.window().pull(donors, {LayerRef(params)});  // warm-up (untimed)
  }
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      nanosleep(&head_start, nullptr);
      const double t0 = now();
      agent.window().pull(donors, {LayerRef(params)});
      t = now() - t0;
    } else if (env().rank == kDonor) {
      const double end = now() + kLoopSeconds;  // not the measured operation: reports 0
      for (std::int64_t i = 0; now() < end; ++i) {
        compute_without_mpi(kStepSeconds);
        (void)agent.step(i, 1.0, {LayerRef(params)});
      }
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, n * sizeof(float));
}

// The cost of step()'s progress call: rank 0 times 1000 steps of an agent that has RMA
// readers (Transport::rma), no death, no publish, with and without the call. Per step.
void bm_step_cost(benchmark::State& state, bool progress_in_step) {
  constexpr int kSteps = 1000;
  auto [win, params] = published_window(1024, Transport::rma);
  Agent<> agent(std::move(win), loop_options(progress_in_step));
  std::int64_t iteration = 0;
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      for (int i = 0; i < kSteps; ++i) {
        (void)agent.step(iteration++, 1.0, {LayerRef(params)});
      }
      t = (now() - t0) / kSteps;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
}

// The call itself, as step() makes it: window.progress() on an agent with RMA readers,
// timed over 10000 calls. Per call.
void bm_progress_call(benchmark::State& state) {
  constexpr int kCalls = 10000;
  auto [win, params] = published_window(1024, Transport::rma);
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      for (int i = 0; i < kCalls; ++i) {
        win.progress();
      }
      t = (now() - t0) / kCalls;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
}

// What a progress thread costs the trainer: rank 0 times a fixed computation (no MPI calls)
// with its window's progress thread polling every 200 us, and without one. The other rank
// waits (sleep-polling) meanwhile. Needs MPI_THREAD_MULTIPLE (PARAMWIN_BENCH_THREAD_MULTIPLE).
void bm_thread_cost(benchmark::State& state, bool thread) {
  Layout layout;
  layout.add("w", 1024);
  ParameterWindow<> win(MPI_COMM_WORLD, layout,
                        {.transport = Transport::rma, .progress_thread = thread});
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      double x = 1.0;
      for (int i = 0; i < 20000000; ++i) {
        x = x * 1.0000001 + 1e-9;
      }
      benchmark::DoNotOptimize(x);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
}

}  // namespace

void register_serve_benchmarks() {
  if (env().size < 2) {
    return;
  }
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided == MPI_THREAD_MULTIPLE) {
    for (const bool th : {false, true}) {
      with_stats(benchmark::RegisterBenchmark(("serve/thread_cost/progress_thread:" +
                                               std::string(th ? "on" : "off"))
                                                  .c_str(),
                                              [th](benchmark::State& s) { bm_thread_cost(s, th); }))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(10);
    }
  }
  with_stats(benchmark::RegisterBenchmark("serve/progress_call", bm_progress_call))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(20);
  for (const bool p : {false, true}) {
    const std::string pn = p ? "step" : "none";
    with_stats(
        benchmark::RegisterBenchmark(("serve/agent_loop_rma/progress:" + pn + "/n:1M").c_str(),
                                     [p](benchmark::State& s) { bm_agent_loop(s, p); }))
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(5);
    with_stats(benchmark::RegisterBenchmark(("serve/step_cost/progress:" + pn).c_str(),
                                            [p](benchmark::State& s) { bm_step_cost(s, p); }))
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  }
}

}  // namespace paramwin::bench
