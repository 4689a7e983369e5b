// A CUDA model's rebirth through paramwin::torch::TorchAgent: device windows against host
// staging, in one run (issue 25's target is stated for TorchAgent; benchmarks/device_bench.cpp
// times ParameterWindow::pull alone). Run on 4 ranks sharing one GPU: rank 0 dies at every
// measured step (a custom trigger) and is reborn from the k = 1 or 3 fittest of ranks 1..3
// (mean mixing for k = 3), first with DeviceWindows::always, then with DeviceWindows::never
// (today's page-locked host staging), on the same module. Medians of --reps steps (>= 5).
//
//   mpiexec -n 4 paramwin_torch_device_bench [--sizes 100M,250M] [--reps 7] [--layers 8] [--cpu]
//
// Rows ("RESULT key=value ...", one per line):
//   d2d            one device-to-device copy of the model's bytes (Tensor::copy_ + synchronize)
//   torch_rebirth  mode=device|staged: the whole TorchAgent::step() that died (decide, pull,
//                  the republish), its pull phase (StepEvent::seconds.pull) and its publish
//                  phase; device rows add bound_ms = (k + 1) / 2 x d2d and the pull's ratio to
//                  it; staged rows add the step's ratio to the device step of the same k
// Without a CUDA device (or with a CPU-only LibTorch) it prints so and measures nothing;
// --cpu runs the staged rows with a CPU model instead (a check of this program's own flow).
#include <mpi.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "paramwin/paramwin.hpp"
#include "paramwin/torch/agent.hpp"
#include "size_args.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using paramwin::bench::median;
using paramwin::bench::parse_count;
using paramwin::bench::size_or_reps;

namespace {

struct Args {
  std::vector<std::string> sizes{"100M", "250M"};
  int reps = 7;
  int layers = 8;
  bool cpu = false;  // --cpu: the staged rows with a CPU model (the flow, where no GPU is)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (size_or_reps(argc, argv, i, a.sizes, a.reps)) continue;
    const std::string arg = argv[i];
    if (arg == "--cpu") {
      a.cpu = true;
    } else if (arg == "--layers" && i + 1 < argc) {
      a.layers = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "torch_device_bench: unknown argument %s\n", arg.c_str());
      std::exit(2);
    }
  }
  return a;
}

// A model of @p n float32 parameters in @p layers tensors (the last takes the remainder),
// every value rank + 1, on @p device.
struct Flat : ::torch::nn::Module {
  Flat(std::int64_t n, int layers, int rank, ::torch::Device device) {
    const std::int64_t each = n / layers;
    for (int l = 0; l < layers; ++l) {
      const std::int64_t count = l + 1 < layers ? each : n - each * (layers - 1);
      std::string name = "w";  // not "w" + to_string(l): GCC 12's -Wrestrict false positive
      name += std::to_string(l);
      register_parameter(name, ::torch::full({count}, static_cast<float>(rank + 1),
                                             ::torch::TensorOptions().device(device)));
    }
  }
};

struct Phases {
  double step = 0.0;
  double pull = 0.0;
  double publish = 0.0;
};

// Rank 0's rebirth from the k fittest of ranks 1..k (metrics: rank r reports r, rank 0 the
// worst), through a TorchAgent with @p mode; the medians of @p reps measured steps after one
// warm-up. Collective.
Phases rebirths(Flat& model, pwt::DeviceWindows mode, int k, int reps, int rank, bool cuda) {
  bool die = false;
  pw::AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [&die](const pw::TriggerContext& c) { return c.rank == 0 && die; };
  o.selection = {.kind = pw::SelectionKind::fittest, .k = k};
  o.mixing.kind = k == 1 ? pw::MixingKind::best : pw::MixingKind::mean;
  ::torch::optim::SGD sgd(model.parameters(), ::torch::optim::SGDOptions(0.0));
  pwt::TorchAgent agent(MPI_COMM_WORLD, model, sgd, o, {.device_windows = mode});
  const double metric = rank == 0 ? 1e9 : static_cast<double>(rank);
  (void)agent.step(0, metric);  // every agent published, with its metric in the roster
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> step;
  std::vector<double> pull;
  std::vector<double> publish;
  for (int r = 0; r <= reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      die = true;
      if (cuda) ::torch::cuda::synchronize();
      const double t0 = MPI_Wtime();
      const pw::StepEvent ev = agent.step(r + 1, metric);
      const double t = MPI_Wtime() - t0;
      die = false;
      if (!ev.died || ev.donors.size() != static_cast<std::size_t>(k)) {
        std::fprintf(stderr, "torch_device_bench: step %d: not reborn from %d donors (%s)\n", r, k,
                     ev.note.c_str());
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      if (r > 0) {
        step.push_back(t);
        pull.push_back(ev.seconds.pull);
        publish.push_back(ev.seconds.publish);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0 && agent.staging_stats().device_window != (mode == pwt::DeviceWindows::always)) {
    std::fprintf(stderr, "torch_device_bench: the agent %s a device window\n",
                 agent.staging_stats().device_window ? "has" : "lacks");
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return Phases{.step = median(step), .pull = median(pull), .publish = median(publish)};
}

void result(const std::string& size, const std::string& row, const std::string& extra) {
  std::printf("RESULT row=%s size=%s %s\n", row.c_str(), size.c_str(), extra.c_str());
  std::fflush(stdout);
}

// The fields joined by single spaces (one helper, not chains of " " + ...: GCC 12 warns
// falsely, -Wrestrict, on some of those).
std::string join(const std::vector<std::string>& fields) {
  std::string out;
  for (const std::string& f : fields) {
    if (!out.empty()) out += ' ';
    out += f;
  }
  return out;
}

// "key=value" with three decimals: a ratio as it is, seconds as milliseconds (ms).
std::string ratio(const char* key, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s=%.3f", key, value);
  return buf;
}

std::string ms(const char* key, double seconds) { return ratio(key, seconds * 1e3); }

void run_size(const Args& args, const std::string& size_text, int rank, int size) {
  const auto n = static_cast<std::int64_t>(parse_count(size_text));
  Flat model(n, args.layers, rank, args.cpu ? ::torch::kCPU : ::torch::kCUDA);
  double d2d = 0.0;
  if (rank == 0 && !args.cpu) {
    ::torch::Tensor a = ::torch::ones({n}, ::torch::TensorOptions().device(::torch::kCUDA));
    ::torch::Tensor b = ::torch::empty_like(a);
    std::vector<double> t;
    for (int r = 0; r <= args.reps; ++r) {
      ::torch::cuda::synchronize();
      const double t0 = MPI_Wtime();
      b.copy_(a);
      ::torch::cuda::synchronize();
      if (r > 0) t.push_back(MPI_Wtime() - t0);
    }
    d2d = median(t);
    result(size_text, "d2d", ms("median_ms", d2d));
  }
  MPI_Bcast(&d2d, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::map<int, Phases> device;
  for (const int k : {1, 3}) {
    if (k >= size || args.cpu) continue;
    const Phases p = rebirths(model, pwt::DeviceWindows::always, k, args.reps, rank, true);
    device[k] = p;
    if (rank == 0) {
      const double bound = (k + 1) / 2.0 * d2d;
      result(size_text, "torch_rebirth",
             join({"mode=device", "k=" + std::to_string(k), ms("step_ms", p.step),
                   ms("pull_ms", p.pull), ms("publish_ms", p.publish), ms("bound_ms", bound),
                   ratio("pull_to_bound", p.pull / bound)}));
    }
  }
  for (const int k : {1, 3}) {
    if (k >= size) continue;
    // The host window's segments (2 x the model per rank, in /dev/shm) may not fit where a
    // device window does: construction then fails on every rank alike, and the row says so.
    try {
      const Phases p = rebirths(model, pwt::DeviceWindows::never, k, args.reps, rank, !args.cpu);
      if (rank == 0) {
        std::vector<std::string> row{"mode=staged", "k=" + std::to_string(k), ms("step_ms", p.step),
                                     ms("pull_ms", p.pull), ms("publish_ms", p.publish)};
        if (!args.cpu) {
          row.push_back(ratio("step_to_device", p.step / device[k].step));
          row.push_back(ratio("pull_to_device", p.pull / device[k].pull));
        }
        result(size_text, "torch_rebirth", join(row));
      }
    } catch (const pw::Error& e) {
      if (rank == 0) {
        result(size_text, "torch_rebirth",
               join({"mode=staged", "k=" + std::to_string(k), "skipped:", e.what()}));
      }
    }
  }
}

// Kokkos lives inside MPI (the ScopeGuard ends before MPI_Finalize).
int run(int argc, char** argv) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Args args = parse(argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  int has_cuda = ::torch::cuda::is_available() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &has_cuda, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (has_cuda == 0 && !args.cpu) {
    if (rank == 0) {
      std::printf("torch_device_bench: no CUDA device (or a CPU-only LibTorch) on some rank, "
                  "nothing measured\n");
    }
  } else if (size < 2) {
    if (rank == 0) std::printf("torch_device_bench: needs 2 ranks or more (4: k = 1 and 3)\n");
  } else {
    for (const std::string& s : args.sizes) run_size(args, s, rank, size);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rc = run(argc, argv);
  MPI_Finalize();
  return rc;
}
