// Issue 5, case 2: k donors averaged (k = 1..3; 1M, 10M, 50M float32), rank 0 reborn from
// ranks 1..k. paramwin on both transports versus (a) the seed method in C++ (per donor:
// MPI_Win_lock(SHARED), MPI_Get of the whole buffer, MPI_Win_unlock; then a separate add
// loop; then a divide) and (b) MPI_Allreduce averaging over the k+1 ranks involved. The
// streaming bound, (k+1)*N*4 bytes at the `a += b` bandwidth, comes from stream/add in the
// same run. k donors need k+1 ranks: run with 4 ranks for k = 3 (oversubscribes 2 cores;
// waiting ranks sleep-poll, see main_mpi.cpp).
#include <cmath>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"

namespace paramwin::bench {
namespace {

constexpr int kReader = 0;

// Mean of fill_pattern over ranks 1..k, checked on a prefix with a float tolerance.
void expect_mean(std::span<const float> got, int k, const char* what) {
  const std::size_t m = std::min<std::size_t>(got.size(), 1024);
  std::vector<std::vector<float>> donors(static_cast<std::size_t>(k), std::vector<float>(m));
  for (int d = 1; d <= k; ++d) {
    fill_pattern(donors[static_cast<std::size_t>(d - 1)], d);
  }
  for (std::size_t i = 0; i < m; ++i) {
    double want = 0.0;
    for (const auto& v : donors) {
      want += static_cast<double>(v[i]);
    }
    want /= k;
    if (std::abs(static_cast<double>(got[i]) - want) > 1e-5 * std::abs(want) + 1e-6) {
      throw std::runtime_error(std::string(what) + ": wrong mean at element " + std::to_string(i) +
                               ": got " + std::to_string(got[i]) + ", want " +
                               std::to_string(want));
    }
  }
}

void bm_k_pull(benchmark::State& state, int k, std::size_t n, Transport transport,
               Landing landing = Landing::automatic) {
  auto [win, params] = published_window(n, transport);
  // Ranks past the k donors only wait; shm donors need not be inside MPI either (the reader
  // copies from their memory itself), RMA donors must, to answer the gets.
  const Idle idle(env().rank > k || (transport == Transport::shm && env().rank != kReader));
  std::vector<int> donors;
  for (int d = 1; d <= k; ++d) {
    donors.push_back(d);
  }
  const bool reader = env().rank == kReader;
  PullOptions popt;
  popt.landing = landing;
  if (reader) {
    win.pull(donors, {LayerRef(params)}, popt);  // warm-up (untimed): grows the pull's scratch
  }
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      const double t0 = now();
      win.pull(donors, {LayerRef(params)}, popt);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  if (reader) {
    expect_mean(params, k, "paramwin pull");
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, static_cast<std::size_t>(k) * n * sizeof(float));
}

// The case the Python binding is measured on (docs/benchmarks.md, "Python"): n float32 in 8
// equal layers, read with the default transport (shared memory on one node) by rank 0 from
// ranks 1..k. benchmarks/python_pull_bench.py times the same pull through `import paramwin`.
void bm_layers_pull(benchmark::State& state, int k, std::size_t n) {
  constexpr std::size_t kLayers = 8;
  Layout layout;
  for (std::size_t l = 0; l < kLayers; ++l) {
    layout.add("layer" + std::to_string(l), n / kLayers);
  }
  ParameterWindow<> win(MPI_COMM_WORLD, layout);
  std::vector<std::vector<float>> params(kLayers, std::vector<float>(n / kLayers));
  for (auto& p : params) {
    fill_pattern(p, env().rank);
  }
  const std::vector<LayerRef> refs(params.begin(), params.end());
  std::vector<ConstLayerRef> crefs;
  for (const LayerRef& r : refs) {
    crefs.push_back(r.as_const());
  }
  win.publish(crefs);
  polite_barrier(MPI_COMM_WORLD);
  const Idle idle(env().rank != kReader);  // shm donors need not be inside MPI
  std::vector<int> donors;
  for (int d = 1; d <= k; ++d) {
    donors.push_back(d);
  }
  const bool reader = env().rank == kReader;
  if (reader) {
    win.pull(donors, refs);  // warm-up (untimed)
  }
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      const double t0 = now();
      win.pull(donors, refs);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  if (reader) {
    expect_mean(params[0], k, "paramwin pull (8 layers)");
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, static_cast<std::size_t>(k) * n * sizeof(float));
}

void bm_seed(benchmark::State& state, int k, std::size_t n) {
  const std::size_t bytes = n * sizeof(float);
  RawWindow win(MPI_COMM_WORLD, bytes);
  fill_pattern(std::span<float>(reinterpret_cast<float*>(win.base()), n), env().rank);
  const bool reader = env().rank == kReader;
  Buffer tmp(reader ? bytes : 0);
  Buffer acc(reader ? bytes : 0);
  std::vector<float> out(reader ? n : 0);
  polite_barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      const double t0 = now();
      float* a = acc.as<float>().data();
      const float* b = tmp.as<const float>().data();
      std::fill_n(a, n, 0.0F);
      for (int d = 1; d <= k; ++d) {
        check(MPI_Win_lock(MPI_LOCK_SHARED, d, 0, win.win()), "MPI_Win_lock");
        get_bytes(tmp.data(), bytes, d, win.win());
        check(MPI_Win_unlock(d, win.win()), "MPI_Win_unlock");
        for (std::size_t i = 0; i < n; ++i) {
          a[i] += b[i];
        }
      }
      const auto kf = static_cast<float>(k);
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = a[i] / kf;
      }
      benchmark::DoNotOptimize(out.data());
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  if (reader) {
    expect_mean(out, k, "seed method");
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, static_cast<std::size_t>(k) * bytes);
}

void bm_allreduce(benchmark::State& state, int k, std::size_t n) {
  const bool member = env().rank <= k;
  MPI_Comm sub = MPI_COMM_NULL;
  check(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, env().rank, &sub),
        "MPI_Comm_split");
  std::vector<float> send(member ? n : 0);
  std::vector<float> recv(member ? n : 0);
  fill_pattern(send, env().rank);
  polite_barrier(MPI_COMM_WORLD);
  const float inv = 1.0F / static_cast<float>(k + 1);
  for (auto _ : state) {
    double t = 0.0;
    if (member) {
      const double t0 = now();
      check(MPI_Allreduce(send.data(), recv.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, sub),
            "MPI_Allreduce");
      for (float& x : recv) {
        x *= inv;
      }
      benchmark::DoNotOptimize(recv.data());
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  if (sub != MPI_COMM_NULL) {
    MPI_Comm_free(&sub);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, static_cast<std::size_t>(k) * n * sizeof(float));
}

// a += b over n floats: reads 2n, writes n floats; counted as 2*n*4 bytes (one stream in,
// one out: the k = 1 case of the (k+1)*N*4 bound).
void bm_add(benchmark::State& state, std::size_t n) {
  const bool active = env().rank == kReader;
  std::vector<float> a(active ? n : 0, 1.0F);
  std::vector<float> b(active ? n : 0, 2.0F);
  for (auto _ : state) {
    double t = 0.0;
    if (active) {
      const double t0 = now();
      float* __restrict pa = a.data();
      const float* __restrict pb = b.data();
      for (std::size_t i = 0; i < n; ++i) {
        pa[i] += pb[i];
      }
      benchmark::DoNotOptimize(pa);
      benchmark::ClobberMemory();
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  set_bytes(state, 2 * n * sizeof(float));
}

void reg(const std::string& name, auto fn) {
  with_stats(benchmark::RegisterBenchmark(name.c_str(), fn))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace

void register_multi_donor_benchmarks() {
  const std::size_t counts[] = {1000000, 10000000, 50000000};
  for (const std::size_t n : counts) {
    const std::string nl = "/n:" + count_label(n);
    reg("stream/add" + nl, [n](benchmark::State& s) { bm_add(s, n); });
    for (int k = 1; k <= 3 && k + 1 <= env().size; ++k) {
      const std::string suffix = "/k:" + std::to_string(k) + nl;
      reg("k_donors/pull_shm" + suffix,
          [k, n](benchmark::State& s) { bm_k_pull(s, k, n, Transport::shm); });
      reg("k_donors/pull_rma" + suffix,
          [k, n](benchmark::State& s) { bm_k_pull(s, k, n, Transport::rma); });
      reg("k_donors/seed" + suffix, [k, n](benchmark::State& s) { bm_seed(s, k, n); });
      reg("k_donors/allreduce" + suffix, [k, n](benchmark::State& s) { bm_allreduce(s, k, n); });
    }
  }
  // Issue 18 (scripts/bench.sh --direct): k = 3 over RMA at 50M, transactional and direct
  // landing, beside the streaming bound's stream/add.
  if (env().size >= 4) {
    constexpr std::size_t kN = 50000000;
    reg("direct/stream/add/n:50M", [](benchmark::State& s) { bm_add(s, kN); });
    for (const Landing l : {Landing::transactional, Landing::direct}) {
      reg("direct/k_donors/pull_rma_" + std::string(landing_name(l)) + "/k:3/n:50M",
          [l](benchmark::State& s) { bm_k_pull(s, 3, kN, Transport::rma, l); });
    }
  }
  // The Python binding's reference case: 10M float32 in 8 layers from 1 and from 3 donors.
  constexpr std::size_t kPythonCase = 10000000;
  for (const int k : {1, 3}) {
    if (k + 1 <= env().size) {
      reg("layers8/pull/k:" + std::to_string(k) + "/n:" + count_label(kPythonCase),
          [k](benchmark::State& s) { bm_layers_pull(s, k, kPythonCase); });
    }
  }
}

}  // namespace paramwin::bench
