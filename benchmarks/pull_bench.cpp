// Issue 2 benchmark: one donor, layer sizes 4 KiB .. 256 MiB. Rank 0 reads rank 1's
// parameters; rank 1 (the donor) only waits inside MPI (the MPI_MAX reduction of each
// iteration), which is what lets RMA gets progress on this MPICH build. Baselines in the same
// binary: memcpy, raw MPI_Get + flush under one lock_all epoch, raw lock / get / unlock.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"

namespace paramwin::bench {
namespace {

constexpr int kReader = 0;
constexpr int kDonor = 1;

void expect_donor_values(std::span<const float> got, const char* what) {
  std::vector<float> want(std::min<std::size_t>(got.size(), 1024));
  fill_pattern(want, kDonor);
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      throw std::runtime_error(std::string(what) + ": read wrong data at element " +
                               std::to_string(i));
    }
  }
}

void bm_memcpy(benchmark::State& state, std::size_t bytes) {
  const bool active = env().rank == kReader;
  Buffer src(active ? bytes : 0);
  Buffer dst(active ? bytes : 0);
  for (auto _ : state) {
    double t = 0.0;
    if (active) {
      const double t0 = now();
      std::memcpy(dst.data(), src.data(), bytes);
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  set_bytes(state, bytes);
}

// memcpy straight out of the donor's shared-memory segment (MPI_Win_allocate_shared +
// MPI_Win_shared_query): what plain loads from another process's pages cost here, i.e. the
// floor under the shm transport (separates platform cost from library overhead).
void bm_shm_memcpy(benchmark::State& state, std::size_t bytes) {
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  if (node_size != env().size) {
    MPI_Comm_free(&node);
    throw std::runtime_error("one_donor/shm_memcpy needs every rank on one node");
  }
  MPI_Info info = MPI_INFO_NULL;
  check(MPI_Info_create(&info), "MPI_Info_create");
  check(MPI_Info_set(info, "alloc_shared_noncontig", "true"), "MPI_Info_set");
  void* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  const int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(page_round(bytes)), 1, info, node, &base, &win);
  MPI_Info_free(&info);
  check(rc, "MPI_Win_allocate_shared");
  auto* mine = static_cast<float*>(base);
  fill_pattern(std::span<float>(mine, bytes / sizeof(float)), env().rank);
  MPI_Aint donor_size = 0;
  int disp = 0;
  void* donor_base = nullptr;
  check(MPI_Win_shared_query(win, kDonor, &donor_size, &disp, &donor_base), "MPI_Win_shared_query");
  check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win), "MPI_Win_lock_all");
  check(MPI_Win_sync(win), "MPI_Win_sync");
  polite_barrier(MPI_COMM_WORLD);
  check(MPI_Win_sync(win), "MPI_Win_sync");
  const bool reader = env().rank == kReader;
  Buffer dst(reader ? bytes : 0);
  if (reader) {
    std::memcpy(dst.data(), donor_base, bytes);  // warm-up: maps the donor's pages here
  }
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      const double t0 = now();
      std::memcpy(dst.data(), donor_base, bytes);
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  if (reader) {
    expect_donor_values(dst.as<const float>(), "shm memcpy");
  }
  check(MPI_Win_unlock_all(win), "MPI_Win_unlock_all");
  polite_barrier(MPI_COMM_WORLD);
  MPI_Win_free(&win);
  MPI_Comm_free(&node);
  set_bytes(state, bytes);
}

enum class RawMode { get_flush, lock_get_unlock };

void bm_raw_get(benchmark::State& state, std::size_t bytes, RawMode mode) {
  RawWindow win(MPI_COMM_WORLD, bytes);
  const bool reader = env().rank == kReader;
  if (env().rank == kDonor) {
    fill_pattern(std::span<float>(reinterpret_cast<float*>(win.base()), bytes / sizeof(float)),
                 kDonor);
  }
  Buffer dst(reader ? bytes : 0);
  if (mode == RawMode::get_flush) {
    check(MPI_Win_lock_all(MPI_MODE_NOCHECK, win.win()), "MPI_Win_lock_all");
  }
  polite_barrier(MPI_COMM_WORLD);
  const auto read_once = [&] {
    if (mode == RawMode::get_flush) {
      get_bytes(dst.data(), bytes, kDonor, win.win());
      check(MPI_Win_flush(kDonor, win.win()), "MPI_Win_flush");
    } else {
      check(MPI_Win_lock(MPI_LOCK_SHARED, kDonor, 0, win.win()), "MPI_Win_lock");
      get_bytes(dst.data(), bytes, kDonor, win.win());
      check(MPI_Win_unlock(kDonor, win.win()), "MPI_Win_unlock");
    }
  };
  if (reader) {
    read_once();  // warm-up (untimed), as for the pulls
  }
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      const double t0 = now();
      if (mode == RawMode::get_flush) {
        get_bytes(dst.data(), bytes, kDonor, win.win());
        check(MPI_Win_flush(kDonor, win.win()), "MPI_Win_flush");
      } else {
        check(MPI_Win_lock(MPI_LOCK_SHARED, kDonor, 0, win.win()), "MPI_Win_lock");
        get_bytes(dst.data(), bytes, kDonor, win.win());
        check(MPI_Win_unlock(kDonor, win.win()), "MPI_Win_unlock");
      }
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  if (mode == RawMode::get_flush) {
    check(MPI_Win_unlock_all(win.win()), "MPI_Win_unlock_all");
  }
  if (reader) {
    expect_donor_values(dst.as<const float>(), "raw MPI_Get");
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, bytes);
}

void bm_pull(benchmark::State& state, std::size_t bytes, Transport transport,
             std::size_t chunk_bytes, NonFinitePolicy non_finite = NonFinitePolicy::fail,
             Landing landing = Landing::automatic) {
  const std::size_t n = bytes / sizeof(float);
  auto [win, params] = published_window(n, transport);
  const bool reader = env().rank == kReader;
  const std::array<int, 1> donors{kDonor};
  PullOptions popt;
  popt.chunk_bytes = chunk_bytes;
  popt.non_finite = non_finite;
  popt.landing = landing;
  if (reader) {
    // Warm-up (untimed): the first pull grows the window's accumulation scratch and maps
    // the donor's pages; the timed pulls are the steady state of a trainer that pulls often.
    win.pull(donors, {LayerRef(params)}, popt);
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
    expect_donor_values(params, "paramwin pull");
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, bytes);
}

// A fixed iteration count per size: with one MPI_MAX reduction per iteration (~10 us), a
// min-time rule would run ~10^6 iterations of a 0.1 us memcpy. 64 MiB of traffic per
// repetition, at least 4 and at most 200 iterations.
benchmark::IterationCount iterations_for(std::size_t bytes) {
  const std::size_t n = (std::size_t{64} << 20U) / bytes;
  return static_cast<benchmark::IterationCount>(std::clamp<std::size_t>(n, 4, 200));
}

void reg(const std::string& name, std::size_t bytes, auto fn) {
  with_stats(benchmark::RegisterBenchmark(name.c_str(), fn))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->Iterations(iterations_for(bytes));
}

}  // namespace

void register_pull_benchmarks() {
  if (env().size < 2) {
    return;
  }
  for (std::size_t bytes = 4096; bytes <= (std::size_t{256} << 20U); bytes *= 4) {
    const std::string suffix = "/bytes:" + std::to_string(bytes);
    reg("one_donor/memcpy" + suffix, bytes, [bytes](benchmark::State& s) { bm_memcpy(s, bytes); });
    reg("one_donor/shm_memcpy" + suffix, bytes,
        [bytes](benchmark::State& s) { bm_shm_memcpy(s, bytes); });
    reg("one_donor/get_flush" + suffix, bytes,
        [bytes](benchmark::State& s) { bm_raw_get(s, bytes, RawMode::get_flush); });
    reg("one_donor/lock_get_unlock" + suffix, bytes,
        [bytes](benchmark::State& s) { bm_raw_get(s, bytes, RawMode::lock_get_unlock); });
    reg("one_donor/pull_shm" + suffix, bytes,
        [bytes](benchmark::State& s) { bm_pull(s, bytes, Transport::shm, 0); });
    reg("one_donor/pull_rma" + suffix, bytes,
        [bytes](benchmark::State& s) { bm_pull(s, bytes, Transport::rma, 0); });
    if (bytes < (std::size_t{1} << 20U)) {
      continue;
    }
    // Without the default NaN/infinity scan of the donor values (NonFinitePolicy::allow).
    reg("one_donor/pull_shm_nocheck" + suffix, bytes, [bytes](benchmark::State& s) {
      bm_pull(s, bytes, Transport::shm, 0, NonFinitePolicy::allow);
    });
    reg("one_donor/pull_rma_nocheck" + suffix, bytes, [bytes](benchmark::State& s) {
      bm_pull(s, bytes, Transport::rma, 0, NonFinitePolicy::allow);
    });
  }
  // Issue 18, direct landing (scripts/bench.sh --direct): raw get, the transactional RMA
  // pull and the direct one side by side at each size >= 1 MiB.
  for (std::size_t bytes = std::size_t{1} << 20U; bytes <= (std::size_t{256} << 20U); bytes *= 4) {
    const std::string suffix = "/bytes:" + std::to_string(bytes);
    reg("direct/one_donor/get_flush" + suffix, bytes,
        [bytes](benchmark::State& s) { bm_raw_get(s, bytes, RawMode::get_flush); });
    reg("direct/one_donor/pull_rma_transactional" + suffix, bytes, [bytes](benchmark::State& s) {
      bm_pull(s, bytes, Transport::rma, 0, NonFinitePolicy::fail, Landing::transactional);
    });
    reg("direct/one_donor/pull_rma_direct" + suffix, bytes, [bytes](benchmark::State& s) {
      bm_pull(s, bytes, Transport::rma, 0, NonFinitePolicy::fail, Landing::direct);
    });
  }
  // PullOptions::chunk_bytes sweep over RMA (library default 4 MiB). Same-node pulls from
  // snapshots read each layer in one pass and ignore chunk_bytes, so they are not swept.
  for (const std::size_t bytes : {std::size_t{16} << 20U}) {
    for (const std::size_t chunk :
         {std::size_t{8} << 10U, std::size_t{32} << 10U, std::size_t{128} << 10U,
          std::size_t{512} << 10U, std::size_t{2} << 20U, std::size_t{8} << 20U}) {
      const std::string suffix =
          "/chunk:" + std::to_string(chunk) + "/bytes:" + std::to_string(bytes);
      reg("chunk/pull_rma" + suffix, bytes,
          [bytes, chunk](benchmark::State& s) { bm_pull(s, bytes, Transport::rma, chunk); });
    }
  }
}

}  // namespace paramwin::bench
