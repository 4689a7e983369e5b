// Issue 15 benchmark: what hyperparameters cost a pull and a publish. Rank 0 pulls rank 1's
// snapshot of one float layer with 0 and with 4 float64 hyperparameters declared (published
// inside the same seqlocked slot, read in the same copy / the same flush as the layer),
// side by side in one run; and rank 0 publishes with 0 and 4. The donor only waits inside MPI
// (the MPI_MAX reduction of each iteration), as in one_donor/*.
#include <array>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"
#include "size_args.hpp"

namespace paramwin::bench {
namespace {

constexpr int kReader = 0;
constexpr int kDonor = 1;

void bm_hyper_pull(benchmark::State& state, std::size_t bytes, Transport transport,
                   std::size_t hyper) {
  auto [win, params] = published_window(bytes / sizeof(float), transport, hyper);
  const bool reader = env().rank == kReader;
  const std::array<int, 1> donors{kDonor};
  if (reader) {
    (void)win.pull(donors, {LayerRef(params)});  // warm-up: scratch, page mapping
  }
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      const double t0 = now();
      const PullResult r = win.pull(donors, {LayerRef(params)});
      t = now() - t0;
      if (r.donors[0].hyper.size() != hyper ||
          (hyper != 0 && r.donors[0].hyper.as_double(hyper - 1) != 0.001 * double(hyper))) {
        throw std::runtime_error("hyper pull: wrong hyperparameters read");
      }
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, bytes);
}

// Side by side: every iteration pulls the same donor's snapshot of one layer from a window
// without hyperparameters and from one with 4, in alternating order, so both see the same
// machine load; reports the medians of each and of the difference (over pairs of iterations).
void bm_hyper_pull_ab(benchmark::State& state, std::size_t bytes, Transport transport) {
  auto [plain, plain_params] = published_window(bytes / sizeof(float), transport, 0);
  auto [hyper, hyper_params] = published_window(bytes / sizeof(float), transport, 4);
  const bool reader = env().rank == kReader;
  const std::array<int, 1> donors{kDonor};
  std::vector<double> without;
  std::vector<double> with;
  std::vector<double> diff;
  const auto timed = [&](ParameterWindow<>& w, std::vector<float>& p) {
    const double t0 = now();
    (void)w.pull(donors, {LayerRef(p)});
    return now() - t0;
  };
  if (reader) {
    (void)timed(plain, plain_params);
    (void)timed(hyper, hyper_params);
  }
  bool plain_first = true;
  for (auto _ : state) {
    double t = 0.0;
    if (reader) {
      double a = 0.0;
      double b = 0.0;
      if (plain_first) {
        a = timed(plain, plain_params);
        b = timed(hyper, hyper_params);
      } else {
        b = timed(hyper, hyper_params);
        a = timed(plain, plain_params);
      }
      plain_first = !plain_first;
      without.push_back(a);
      with.push_back(b);
      t = a + b;
    }
    finish_iteration(state, t);
  }
  // The second pull of an iteration finds warmer caches: the difference is taken over pairs
  // of iterations, one in each order, which cancels that.
  for (std::size_t i = 0; i + 1 < with.size(); i += 2) {
    diff.push_back(0.5 * ((with[i] - without[i]) + (with[i + 1] - without[i + 1])));
  }
  if (reader) {
    state.counters["no_hyper_us"] = median(without) * 1e6;
    state.counters["hyper4_us"] = median(with) * 1e6;
    state.counters["diff_us"] = median(diff) * 1e6;
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, 2 * bytes);
}

void bm_hyper_publish(benchmark::State& state, std::size_t bytes, std::size_t hyper) {
  auto [win, params] = published_window(bytes / sizeof(float), Transport::shm, hyper);
  Hyperparameters h = win.hyperparameters();
  for (auto _ : state) {
    const double t0 = now();
    if (hyper != 0) h.set(0, h.as_double(0) + 1.0);  // a changed value: the roster copy too
    (void)win.publish({ConstLayerRef(params)}, h);
    finish_iteration(state, now() - t0);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, bytes);
}

}  // namespace

void register_hyper_benchmarks() {
  for (const std::size_t bytes : {std::size_t{4096}, std::size_t{1} << 20U}) {
    for (const std::size_t hyper : {std::size_t{0}, std::size_t{4}}) {
      const std::string suffix =
          "/hyper:" + std::to_string(hyper) + "/bytes:" + std::to_string(bytes);
      with_stats(benchmark::RegisterBenchmark(("hyper/publish" + suffix).c_str(),
                                              [bytes, hyper](benchmark::State& s) {
                                                bm_hyper_publish(s, bytes, hyper);
                                              }))
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(500);
      if (env().size < 2) continue;
      if (hyper == 0) {
        for (const Transport t : {Transport::shm, Transport::rma}) {
          with_stats(
              benchmark::RegisterBenchmark(("hyper/pull_ab_" + std::string(transport_name(t)) +
                                            "/bytes:" + std::to_string(bytes))
                                               .c_str(),
                                           [bytes, t](benchmark::State& s) {
                                             bm_hyper_pull_ab(s, bytes, t);
                                           }))
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond)
              ->Iterations(1000);
        }
      }
      for (const Transport t : {Transport::shm, Transport::rma}) {
        with_stats(
            benchmark::RegisterBenchmark(("hyper/pull_" + std::string(transport_name(t)) + suffix)
                                             .c_str(),
                                         [bytes, t, hyper](benchmark::State& s) {
                                           bm_hyper_pull(s, bytes, t, hyper);
                                         }))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(500);
      }
    }
  }
}

}  // namespace paramwin::bench
