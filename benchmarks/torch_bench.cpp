// The LibTorch adapter's cost against the span path on the same parameter volume: publish
// (paramwin::torch::publish vs ParameterWindow::publish of spans) and a one-donor pull
// (paramwin::torch::adopt vs ParameterWindow::pull into spans). Same layer count, same
// element count, same window options; the adapter adds collecting named_parameters(),
// checking them against the layout and building the references. Own MPI-aware main (only
// rank 0 reports); timings reduced with MPI_MAX like the other suites (bench_util.hpp).
//   mpiexec.mpich -n 2 paramwin_torch_bench [--benchmark_out=torch.json
//   --benchmark_out_format=json]
#include <mpi.h>

#include <benchmark/benchmark.h>
#include <torch/torch.h>
#include <Kokkos_Core.hpp>

#include <array>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"
#include "paramwin/torch/module.hpp"

namespace pwt = paramwin::torch;

namespace paramwin::bench {
namespace {

constexpr int kReader = 0;
constexpr int kDonor = 1;
constexpr std::size_t kLayers = 8;  // plus a 0-dim parameter

/// kLayers flat parameters of @p n / kLayers floats and one scalar, like a small MLP's list.
struct ModelImpl : ::torch::nn::Module {
  explicit ModelImpl(std::size_t n) {
    for (std::size_t l = 0; l < kLayers; ++l) {
      register_parameter("layer" + std::to_string(l),
                         ::torch::ones({static_cast<std::int64_t>(n / kLayers)}));
    }
    register_parameter("scale", ::torch::ones({}));
  }
};

/// The same volume as spans: kLayers vectors and a one-element vector.
struct SpanModel {
  explicit SpanModel(std::size_t n) : layers(kLayers, std::vector<float>(n / kLayers, 1.0F)) {}
  std::vector<std::vector<float>> layers;
  std::vector<float> scale = std::vector<float>(1, 1.0F);
  Layout layout() const {
    Layout l;
    for (std::size_t i = 0; i < kLayers; ++i) l.add("layer" + std::to_string(i), layers[i].size());
    l.add("scale", std::vector<std::size_t>{});
    return l;
  }
  std::vector<LayerRef> refs() {
    std::vector<LayerRef> r;
    for (std::size_t i = 0; i < kLayers; ++i) r.emplace_back(layers[i]);
    r.emplace_back(scale);
    return r;
  }
  std::vector<ConstLayerRef> crefs() const {
    std::vector<ConstLayerRef> r;
    for (std::size_t i = 0; i < kLayers; ++i) r.emplace_back(layers[i]);
    r.emplace_back(scale);
    return r;
  }
};

enum class Path { span, torch };

void bm_publish(benchmark::State& state, std::size_t n, Path path) {
  auto model = std::make_shared<ModelImpl>(n);
  SpanModel spans(n);
  ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*model));
  auto publish_once = [&] {
    return path == Path::torch ? pwt::publish(win, *model) : win.publish(spans.crefs());
  };
  (void)publish_once();  // both slots touched before timing
  (void)publish_once();
  polite_barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      const PublishResult r = publish_once();
      benchmark::DoNotOptimize(r);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, (n / kLayers * kLayers + 1) * sizeof(float));
}

void bm_pull(benchmark::State& state, std::size_t n, Path path) {
  auto model = std::make_shared<ModelImpl>(n);
  SpanModel spans(n);
  ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*model));
  if (path == Path::torch) {
    (void)pwt::publish(win, *model);
  } else {
    (void)win.publish(spans.crefs());
  }
  polite_barrier(MPI_COMM_WORLD);
  const std::array<int, 1> donors{kDonor};
  std::vector<LayerRef> out = spans.refs();
  auto pull_once = [&] {
    return path == Path::torch ? pwt::adopt(win, donors, *model) : win.pull(donors, out);
  };
  if (env().rank == kReader) (void)pull_once();  // warm-up: grows the pull's scratch
  for (auto _ : state) {
    double t = 0.0;
    if (env().rank == kReader) {
      const double t0 = now();
      const PullResult r = pull_once();
      benchmark::DoNotOptimize(r);
      t = now() - t0;
    }
    finish_iteration(state, t);
  }
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, (n / kLayers * kLayers + 1) * sizeof(float));
}

void register_torch_benchmarks() {
  const std::string np = "/np:" + std::to_string(env().size);
  for (const std::size_t n : {std::size_t{1000000}, std::size_t{10000000}}) {
    const std::string nl = "/n:" + count_label(n);
    const int iterations = n > 1000000 ? 40 : 200;
    for (const Path p : {Path::span, Path::torch}) {
      const std::string pn = p == Path::torch ? "torch" : "span";
      with_stats(benchmark::RegisterBenchmark(("torch/publish/" + pn + nl + np).c_str(),
                                              [n, p](benchmark::State& s) { bm_publish(s, n, p); }))
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(iterations)
          ->Repetitions(5);
      if (env().size >= 2) {
        with_stats(benchmark::RegisterBenchmark(("torch/pull/" + pn + nl + np).c_str(),
                                                [n, p](benchmark::State& s) { bm_pull(s, n, p); }))
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(iterations)
            ->Repetitions(5);
      }
    }
  }
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context& /*context*/) override { return true; }
  void ReportRuns(const std::vector<Run>& /*report*/) override {}
};

}  // namespace
}  // namespace paramwin::bench

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto& e = paramwin::bench::env();
  MPI_Comm_rank(MPI_COMM_WORLD, &e.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &e.size);
  e.poll_ns = e.size > 2 ? 20000 : 0;
  ::torch::set_num_threads(1);
  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    // Non-root ranks drop --benchmark_out* (they would truncate rank 0's file).
    int kept = 0;
    for (int i = 0; i < argc; ++i) {
      if (e.rank != 0 && i > 0 && std::string_view(argv[i]).starts_with("--benchmark_out"))
        continue;
      argv[kept++] = argv[i];
    }
    argv[kept] = nullptr;
    argc = kept;
    benchmark::Initialize(&argc, argv);
    try {
      paramwin::bench::add_machine_context();
      paramwin::bench::register_torch_benchmarks();
      if (e.rank == 0) {
        benchmark::RunSpecifiedBenchmarks();
      } else {
        paramwin::bench::NullReporter null;
        benchmark::RunSpecifiedBenchmarks(&null);
      }
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "[rank %d] paramwin_torch_bench: %s\n", e.rank, ex.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    benchmark::Shutdown();
  }
  MPI_Finalize();
  return rc;
}
