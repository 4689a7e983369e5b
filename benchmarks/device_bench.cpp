// Device windows against the host-staged path and the device-memory bound (issue 25,
// docs/gpu.md). Run on 4 ranks sharing one GPU: rank 0 is reborn from (or publishes, or trains
// while read by) ranks 1..3. Every figure is the median of --reps runs (>= 5), timed with
// MPI_Wtime around calls that return once their GPU work completed.
//
//   mpiexec -n 4 paramwin_device_bench [--sizes 100M,250M] [--reps 7] [--no-host]
//
// Rows (one line each, "RESULT key=value ..."):
//   d2d        one cudaMemcpyAsync device-to-device copy of the model's bytes
//   d2d_ipc    the same copy from rank 1's allocation mapped with CUDA IPC
//   d2d_vmm    the same copy from rank 1's allocation made with the VMM API (cuMemCreate),
//              shared as a file descriptor (vmm_copy.hpp): an experiment
//   publish    ParameterWindow::publish of a device window
//   rebirth    a k-donor pull of a device window into the caller's device memory; bound =
//              (k + 1) / 2 x d2d; staged = today's host path for a CUDA model (TorchAgent's
//              DeviceStaging): device->host copy of the own parameters, pull of the host
//              window into page-locked memory, host->device copy
//   step       rank 0's training-step stand-in (memory-bound passes over its parameters),
//              alone and while ranks 1..3 pull from it without pause
#include <cuda_runtime.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "paramwin/paramwin.hpp"
#include "size_args.hpp"
#include "test_kernels.hpp"
#include "vmm_copy.hpp"

namespace pw = paramwin;
using paramwin::bench::median;
using paramwin::bench::parse_count;
using paramwin::bench::size_or_reps;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "device_bench: %s: %s\n", what, cudaGetErrorString(e));
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

struct Args {
  std::vector<std::string> sizes{"100M", "250M"};
  int reps = 7;
  bool host = true;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (size_or_reps(argc, argv, i, a.sizes, a.reps)) continue;
    const std::string arg = argv[i];
    if (arg == "--no-host") {
      a.host = false;
    } else {
      std::fprintf(stderr, "device_bench: unknown argument %s\n", arg.c_str());
      std::exit(2);
    }
  }
  return a;
}

void result(const std::string& row, const std::string& size, int k, double seconds,
            const std::string& extra = {}) {
  std::printf("RESULT row=%s size=%s k=%d median_ms=%.3f%s%s\n", row.c_str(), size.c_str(), k,
              seconds * 1e3, extra.empty() ? "" : " ", extra.c_str());
  std::fflush(stdout);
}

// Median seconds of @p reps device-to-device copies of @p bytes (after one warm-up), each
// waited for.
double copy_seconds(void* dst, const void* src, std::size_t bytes, int reps, const char* what) {
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = MPI_Wtime();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy), what);
    check(cudaStreamSynchronize(cudaStreamLegacy), "sync");
    if (r > 0) t.push_back(MPI_Wtime() - t0);
  }
  return median(t);
}

void run_size(const Args& args, const std::string& size_text, int rank, int size) {
  const auto n = static_cast<std::size_t>(parse_count(size_text));
  const std::size_t bytes = n * sizeof(float);
  pw::Layout layout;
  layout.add("params", n);
  float* params = nullptr;
  float* out = nullptr;
  check(cudaMalloc(&params, bytes), "cudaMalloc params");
  check(cudaMalloc(&out, bytes), "cudaMalloc out");
  std::vector<float> init(n, static_cast<float>(rank + 1));
  check(cudaMemcpy(params, init.data(), bytes, cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(out, init.data(), bytes, cudaMemcpyHostToDevice), "upload");
  init.clear();
  init.shrink_to_fit();
  const pw::ConstLayerRef cref("", params, n, pw::DType::float32, pw::device_memory);
  const pw::LayerRef oref("", out, n, pw::DType::float32, pw::device_memory);

  // d2d: the copy engine's bound, on rank 0 while the others wait.
  double d2d = 0.0;
  if (rank == 0) {
    d2d = copy_seconds(out, params, bytes, args.reps, "d2d");
    result("d2d", size_text, 0, d2d);
  }
  MPI_Bcast(&d2d, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  // d2d_ipc: the same copy from rank 1's allocation mapped through CUDA IPC (what a
  // one-donor pull reads), to tell the mapping's cost from the protocol's.
  if (size > 1) {
    cudaIpcMemHandle_t handle{};
    if (rank == 1) check(cudaIpcGetMemHandle(&handle, params), "cudaIpcGetMemHandle");
    MPI_Bcast(&handle, sizeof handle, MPI_BYTE, 1, MPI_COMM_WORLD);
    if (rank == 0) {
      void* peer = nullptr;
      check(cudaIpcOpenMemHandle(&peer, handle, cudaIpcMemLazyEnablePeerAccess),
            "cudaIpcOpenMemHandle");
      const double ipc = copy_seconds(out, peer, bytes, args.reps, "d2d_ipc");
      check(cudaIpcCloseMemHandle(peer), "cudaIpcCloseMemHandle");
      result("d2d_ipc", size_text, 0, ipc, "ratio_to_d2d=" + std::to_string(ipc / d2d));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // d2d_vmm: the same copy from rank 1's allocation made and shared with the VMM API.
  if (size > 1) {
    std::string why;
    const double vmm =
        paramwin::bench::vmm_copy_seconds(MPI_COMM_WORLD, 1, out, bytes, args.reps, why);
    if (rank == 0 && vmm > 0.0) {
      result("d2d_vmm", size_text, 0, vmm, "ratio_to_d2d=" + std::to_string(vmm / d2d));
    } else if (rank == 0) {
      std::printf("RESULT row=d2d_vmm size=%s skipped: %s\n", size_text.c_str(), why.c_str());
    }
  }

  pw::ParameterWindow<> dev(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  (void)dev.publish({cref});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::vector<double> t;
    for (int r = 0; r < args.reps + 1; ++r) {
      const pw::PublishResult p = dev.publish({cref});
      if (r > 0) t.push_back(p.seconds);
    }
    const double m = median(t);
    result("publish", size_text, 0, m, "ratio_to_d2d=" + std::to_string(m / d2d));
  }
  MPI_Barrier(MPI_COMM_WORLD);

  for (const int k : {1, 3}) {
    if (k >= size) continue;
    std::vector<int> donors;
    for (int d = 1; d <= k; ++d) donors.push_back(d);
    if (rank == 0) {
      std::vector<double> t;
      for (int r = 0; r < args.reps + 1; ++r) {
        const pw::PullResult p = dev.pull(donors, std::vector<pw::LayerRef>{oref});
        if (r > 0) t.push_back(p.seconds);
      }
      const double m = median(t);
      const double bound = (k + 1) / 2.0 * d2d;
      result("rebirth_device", size_text, k, m,
             "bound_ms=" + std::to_string(bound * 1e3) +
                 " ratio_to_bound=" + std::to_string(m / bound));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  std::optional<pw::ParameterWindow<>> made;
  if (args.host) {
    // Its host segments (2 x the model per rank, in /dev/shm) may not fit where a device
    // window does: creation then fails on every rank alike, and the row says so.
    try {
      made.emplace(MPI_COMM_WORLD, layout);
    } catch (const pw::Error& e) {
      if (rank == 0) {
        std::printf("RESULT row=rebirth_staged size=%s skipped: %s\n", size_text.c_str(), e.what());
      }
    }
  }
  if (made) {
    // Today's path for a CUDA model: a host window, page-locked staging both ways.
    pw::ParameterWindow<>& host = *made;
    float* pinned = nullptr;
    check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
    check(cudaMemcpy(pinned, params, bytes, cudaMemcpyDeviceToHost), "d2h");
    (void)host.publish({std::span<const float>(pinned, n)});
    MPI_Barrier(MPI_COMM_WORLD);
    for (const int k : {1, 3}) {
      if (k >= size) continue;
      std::vector<int> donors;
      for (int d = 1; d <= k; ++d) donors.push_back(d);
      if (rank == 0) {
        std::vector<double> t;
        for (int r = 0; r < args.reps + 1; ++r) {
          const double t0 = MPI_Wtime();
          check(cudaMemcpyAsync(pinned, out, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy),
                "d2h");
          check(cudaStreamSynchronize(cudaStreamLegacy), "sync");
          (void)host.pull(donors, {std::span<float>(pinned, n)});
          check(cudaMemcpyAsync(out, pinned, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy),
                "h2d");
          check(cudaStreamSynchronize(cudaStreamLegacy), "sync");
          if (r > 0) t.push_back(MPI_Wtime() - t0);
        }
        result("rebirth_staged", size_text, k, median(t));
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    check(cudaFreeHost(pinned), "cudaFreeHost");
  }
  made.reset();  // collective: every rank frees the host window here

  // The donor's step, alone and read by every other rank without pause.
  constexpr int kPasses = 10;
  auto time_steps = [&](int steps) {
    std::vector<double> t;
    for (int s = 0; s < steps; ++s) {
      const double t0 = MPI_Wtime();
      pw::test::launch_step(nullptr, params, n, kPasses);
      check(cudaStreamSynchronize(cudaStreamLegacy), "step");
      t.push_back(MPI_Wtime() - t0);
    }
    return median(t);
  };
  double alone = 0.0;
  if (rank == 0) alone = time_steps(args.reps);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Request done = MPI_REQUEST_NULL;
  double read = 0.0;
  long pulls = 0;
  if (rank == 0) {
    read = time_steps(args.reps);
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    MPI_Wait(&done, MPI_STATUS_IGNORE);
  } else {
    MPI_Ibarrier(MPI_COMM_WORLD, &done);
    int finished = 0;
    while (finished == 0) {
      (void)dev.pull(std::vector<int>{0}, std::vector<pw::LayerRef>{oref});
      ++pulls;
      MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
    }
  }
  long total = 0;
  MPI_Reduce(&pulls, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    result("step_alone", size_text, 0, alone);
    result("step_read", size_text, size - 1, read,
           "ratio=" + std::to_string(read / alone) + " pulls=" + std::to_string(total));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check(cudaFree(params), "cudaFree");
  check(cudaFree(out), "cudaFree");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const Args args = parse(argc, argv);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      if (rank == 0) std::printf("device_bench: no CUDA device, nothing measured\n");
    } else {
      if (rank == 0) {
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
        int driver = 0;
        int runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        std::printf("device_bench: %d ranks on %s (driver API %d, runtime %d), %d reps\n", size,
                    prop.name, driver, runtime, args.reps);
      }
      for (const std::string& s : args.sizes) run_size(args, s, rank, size);
    }
  }
  MPI_Finalize();
  return 0;
}
