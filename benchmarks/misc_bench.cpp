// Issue 5, cases 3, 4, 5 and 6: wire formats, publish cost, busy donor, roster reads.
#include <array>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"

namespace paramwin::bench {
namespace {

constexpr int kReader = 0;
constexpr int kDonor = 1;

const char* wire_name(WireFormat w) {
  switch (w) {
    case WireFormat::native: return "native";
    case WireFormat::bfloat16: return "bfloat16";
    case WireFormat::float16: return "float16";
  }
  return "?";
}

// --- 3. wire formats: one donor, float32 layer, published as native / bfloat16 / float16 ---
void bm_wire(benchmark::State& state, std::size_t n, Transport transport, WireFormat wire,
             Landing landing = Landing::automatic, std::size_t chunk_bytes = 0) {
  Layout layout;
  layout.add("w", n);
  WindowOptions wopt;
  wopt.transport = transport;
  wopt.wire = wire;
  ParameterWindow<> win(MPI_COMM_WORLD, layout, wopt);
  std::vector<float> params(n);
  fill_pattern(params, env().rank);
  win.publish({ConstLayerRef(params)});
  polite_barrier(MPI_COMM_WORLD);
  const std::array<int, 1> donors{kDonor};
  PullOptions popt;
  popt.landing = landing;
  popt.chunk_bytes = chunk_bytes;
  if (env().rank == kReader) {
    win.pull(donors, {LayerRef(params)}, popt);  // warm-up (untimed): grows the pull's scratch
  }
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      win.pull(donors, {LayerRef(params)}, popt);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  state.counters["wire_bytes"] = benchmark::Counter(static_cast<double>(win.wire_bytes()));
  set_bytes(state, n * sizeof(float));
}

// --- 4. publish vs memcpy of the same volume ----------------------------------------------
void bm_publish(benchmark::State& state, std::size_t n, WireFormat wire) {
  Layout layout;
  layout.add("w", n);
  WindowOptions wopt;
  wopt.wire = wire;
  ParameterWindow<> win(MPI_COMM_WORLD, layout, wopt);
  std::vector<float> params(n);
  fill_pattern(params, env().rank);
  win.publish({ConstLayerRef(params)});  // both slots touched before timing
  win.publish({ConstLayerRef(params)});
  polite_barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      const PublishResult r = win.publish({ConstLayerRef(params)});
      benchmark::DoNotOptimize(r);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, n * sizeof(float));
}

// Exposure::live: the parameters live in the window; publish only advances the version.
void bm_publish_live(benchmark::State& state, std::size_t n) {
  Layout layout;
  layout.add("w", n);
  WindowOptions wopt;
  wopt.exposure = Exposure::live;
  ParameterWindow<> win(MPI_COMM_WORLD, layout, wopt);
  const std::span<float> live = win.live_span<float>("w");
  fill_pattern(live, env().rank);
  win.publish();
  polite_barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      const PublishResult r = win.publish();
      benchmark::DoNotOptimize(r);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, n * sizeof(float));
}

void bm_publish_memcpy(benchmark::State& state, std::size_t n) {
  const bool active = env().rank == kReader;
  Buffer src(active ? n * sizeof(float) : 0);
  Buffer dst(active ? n * sizeof(float) : 0);
  for (auto _ : state) {
    double t = 0.0;
    if (active) {
      const double t0 = now();
      std::memcpy(dst.data(), src.data(), n * sizeof(float));
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  set_bytes(state, n * sizeof(float));
}

// --- 5. busy donor: the donor computes without MPI calls while rank 0 pulls ----------------
constexpr double kBusySeconds = 0.3;

enum class Donor { idle, busy, busy_progress };

void bm_busy(benchmark::State& state, std::size_t n, Transport transport, Donor donor) {
  const bool busy = donor != Donor::idle;
  auto [win, params] = published_window(n, transport);
  const std::array<int, 1> donors{kDonor};
  const timespec head_start{0, 2000000};  // lets the donor enter its compute first
  if (env().rank == kReader) {
    win.pull(donors, {LayerRef(params)});  // warm-up (untimed)
  }
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      nanosleep(&head_start, nullptr);
      const double t0 = now();
      win.pull(donors, {LayerRef(params)});
      t = now() - t0;
    } else if (env().rank == kDonor && busy) {
      // Not the measured operation: reports 0.
      compute_without_mpi(kBusySeconds, donor == Donor::busy_progress ? &win : nullptr);
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, n * sizeof(float));
}

// --- 6. roster: rank 0 reads every agent's roster ------------------------------------------
void bm_roster(benchmark::State& state, Transport transport) {
  Layout layout;
  layout.add("w", 1024);
  WindowOptions wopt;
  wopt.transport = transport;
  ParameterWindow<> win(MPI_COMM_WORLD, layout, wopt);
  std::vector<float> params(1024);
  fill_pattern(params, env().rank);
  win.publish({ConstLayerRef(params)});
  polite_barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      const std::vector<RosterEntry> all = win.roster_all();
      benchmark::DoNotOptimize(all.data());
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
}

void reg(const std::string& name, auto fn, benchmark::TimeUnit unit) {
  with_stats(benchmark::RegisterBenchmark(name.c_str(), fn))->UseManualTime()->Unit(unit);
}

}  // namespace

void register_misc_benchmarks() {
  const std::string np = "/np:" + std::to_string(env().size);
  for (const Transport t : {Transport::shm, Transport::rma}) {
    const std::string tn(transport_name(t));
    // Fixed count: a 1 us read plus a ~10-100 us reduction per iteration.
    with_stats(benchmark::RegisterBenchmark(("roster/roster_all_" + tn + np).c_str(),
                                            [t](benchmark::State& s) { bm_roster(s, t); }))
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(200);
  }
  const std::size_t counts[] = {1000000, 10000000, 50000000};
  for (const std::size_t n : counts) {
    const std::string nl = "/n:" + count_label(n);
    reg(
        "publish/memcpy" + nl, [n](benchmark::State& s) { bm_publish_memcpy(s, n); },
        benchmark::kMillisecond);
    reg(
        "publish/live" + nl, [n](benchmark::State& s) { bm_publish_live(s, n); },
        benchmark::kMicrosecond);
    for (const WireFormat w : {WireFormat::native, WireFormat::bfloat16}) {
      reg(
          "publish/paramwin/wire:" + std::string(wire_name(w)) + nl,
          [n, w](benchmark::State& s) { bm_publish(s, n, w); }, benchmark::kMillisecond);
    }
  }
  if (env().size < 2) {
    return;
  }
  for (const std::size_t n : {std::size_t{10000000}, std::size_t{50000000}}) {
    for (const Transport t : {Transport::shm, Transport::rma}) {
      for (const WireFormat w : {WireFormat::native, WireFormat::bfloat16, WireFormat::float16}) {
        reg(
            "wire/pull_" + std::string(transport_name(t)) + "/wire:" + wire_name(w) +
                "/n:" + count_label(n),
            [n, t, w](benchmark::State& s) { bm_wire(s, n, t, w); }, benchmark::kMillisecond);
      }
    }
  }
  // Issue 18 (scripts/bench.sh --direct): float32 and bfloat16 wire over RMA, 50M, one donor,
  // transactional and direct landing side by side; the direct bfloat16 pull also with 16 MiB
  // chunks (fewer round trips, for the network-bound case).
  for (const WireFormat w : {WireFormat::native, WireFormat::bfloat16}) {
    for (const Landing l : {Landing::transactional, Landing::direct}) {
      const std::size_t n = 50000000;
      reg(
          "direct/wire/pull_rma_" + std::string(landing_name(l)) + "/wire:" + wire_name(w) +
              "/n:" + count_label(n),
          [n, w, l](benchmark::State& s) { bm_wire(s, n, Transport::rma, w, l); },
          benchmark::kMillisecond);
    }
  }
  reg(
      "direct/wire/pull_rma_direct_chunk16M/wire:bfloat16/n:50M",
      [](benchmark::State& s) {
        bm_wire(s, 50000000, Transport::rma, WireFormat::bfloat16, Landing::direct,
                std::size_t{16} << 20U);
      },
      benchmark::kMillisecond);
  for (const Transport t : {Transport::shm, Transport::rma}) {
    for (const Donor d : {Donor::idle, Donor::busy, Donor::busy_progress}) {
      if (t == Transport::shm && d == Donor::busy_progress) {
        continue;
      }
      const std::size_t n = 1000000;
      const char* dn = d == Donor::idle   ? "/donor:idle"
                       : d == Donor::busy ? "/donor:busy"
                                          : "/donor:busy_progress";
      const std::string name =
          "busy/pull_" + std::string(transport_name(t)) + dn + "/n:" + count_label(n);
      with_stats(
          benchmark::RegisterBenchmark(name.c_str(),
                                       [n, t, d](benchmark::State& s) { bm_busy(s, n, t, d); }))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(5)
          ->Repetitions(3);
    }
  }
}

}  // namespace paramwin::bench
