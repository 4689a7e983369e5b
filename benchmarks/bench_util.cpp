#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <new>
#include <vector>

namespace paramwin::bench {

Env& env() {
  static Env e;
  return e;
}

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    throw std::runtime_error(std::string("paramwin_bench: ") + what +
                             " failed: " + std::string(msg, static_cast<std::size_t>(len)));
  }
}

namespace {
bool& idle_now() {
  static bool idle = false;
  return idle;
}
}  // namespace

Idle::Idle(bool idle) : previous_(idle_now()) { idle_now() = idle; }
Idle::~Idle() { idle_now() = previous_; }

void wait_politely(MPI_Request& request) {
  const long ns = idle_now() ? env().idle_poll_ns : env().poll_ns;
  if (ns <= 0) {
    check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
    return;
  }
  const timespec pause{0, ns};
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done != 0) {
      return;
    }
    nanosleep(&pause, nullptr);
  }
}

void polite_barrier(MPI_Comm comm) {
  MPI_Request req = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
  wait_politely(req);
}

void finish_iteration(benchmark::State& state, double local_seconds, MPI_Comm comm) {
  double global = 0.0;
  MPI_Request req = MPI_REQUEST_NULL;
  check(MPI_Iallreduce(&local_seconds, &global, 1, MPI_DOUBLE, MPI_MAX, comm, &req),
        "MPI_Iallreduce");
  wait_politely(req);
  state.SetIterationTime(global);
}

void set_bytes(benchmark::State& state, std::size_t bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes_per_iteration));
  state.counters["bytes"] = benchmark::Counter(static_cast<double>(bytes_per_iteration));
}

namespace {
double stat_min(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}
double stat_max(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}
}  // namespace

benchmark::internal::Benchmark* with_stats(benchmark::internal::Benchmark* b) {
  return b->ComputeStatistics("min", stat_min)->ComputeStatistics("max", stat_max);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Buffer::Buffer(std::size_t bytes)
    : data_(static_cast<std::byte*>(
          ::operator new[](page_round(std::max<std::size_t>(bytes, 1)), std::align_val_t{4096}))),
      bytes_(bytes) {
  // Touch every page now so first-touch faults are not timed.
  std::fill_n(data_.get(), page_round(std::max<std::size_t>(bytes, 1)), std::byte{0});
}

void Buffer::Free::operator()(std::byte* p) const noexcept {
  ::operator delete[](p, std::align_val_t{4096});
}

RawWindow::RawWindow(MPI_Comm comm, std::size_t bytes) : bytes_(bytes) {
  MPI_Info info = MPI_INFO_NULL;
  check(MPI_Info_create(&info), "MPI_Info_create");
  check(MPI_Info_set(info, "alloc_shared_noncontig", "true"), "MPI_Info_set");
  void* base = nullptr;
  const int rc =
      MPI_Win_allocate(static_cast<MPI_Aint>(page_round(std::max<std::size_t>(bytes, 1))), 1, info,
                       comm, &base, &win_);
  MPI_Info_free(&info);
  check(rc, "MPI_Win_allocate");
  base_ = static_cast<std::byte*>(base);
  check(MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  std::fill_n(base_, page_round(std::max<std::size_t>(bytes, 1)), std::byte{0});
}

RawWindow::~RawWindow() {
  if (win_ != MPI_WIN_NULL) {
    MPI_Win_free(&win_);
  }
}

void get_bytes(void* dst, std::size_t bytes, int target, MPI_Win win) {
  constexpr std::size_t kMax = std::size_t{1} << 30;
  auto* d = static_cast<std::byte*>(dst);
  for (std::size_t off = 0; off < bytes; off += kMax) {
    const int n = static_cast<int>(std::min(kMax, bytes - off));
    check(MPI_Get(d + off, n, MPI_BYTE, target, static_cast<MPI_Aint>(off), n, MPI_BYTE, win),
          "MPI_Get");
  }
}

void fill_pattern(std::span<float> values, int rank) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(rank * 1000) + static_cast<float>(i % 1024) * 0.5F + 1.0F;
  }
}

std::string size_label(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20U) + "MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) {
    return std::to_string(bytes >> 10U) + "KiB";
  }
  return std::to_string(bytes) + "B";
}

std::string count_label(std::size_t count) {
  if (count >= 1000000 && count % 1000000 == 0) {
    return std::to_string(count / 1000000) + "M";
  }
  if (count >= 1000 && count % 1000 == 0) {
    return std::to_string(count / 1000) + "K";
  }
  return std::to_string(count);
}

void compute_without_mpi(double seconds, const ParameterWindow<>* win) {
  const double end = now() + seconds;
  double x = 1.0;
  while (now() < end) {
    for (int i = 0; i < 10000; ++i) {
      x = x * 1.0000001 + 1e-9;
    }
    benchmark::DoNotOptimize(x);
    if (win != nullptr) {
      win->progress();
    }
  }
}

PublishedWindow published_window(std::size_t n, Transport transport, std::size_t hyperparameters) {
  Layout layout;
  layout.add("w", n);
  for (std::size_t i = 0; i < hyperparameters; ++i) {
    layout.add_hyperparameter(std::string("h").append(std::to_string(i)));
  }
  WindowOptions wopt;
  wopt.transport = transport;
  PublishedWindow pw{ParameterWindow<>(MPI_COMM_WORLD, layout, wopt), std::vector<float>(n)};
  fill_pattern(pw.params, env().rank);
  Hyperparameters h = pw.win.hyperparameters();
  for (std::size_t i = 0; i < h.size(); ++i) h.set(i, 0.001 * static_cast<double>(i + 1));
  pw.win.publish({ConstLayerRef(pw.params)}, h);
  polite_barrier(MPI_COMM_WORLD);
  return pw;
}

}  // namespace paramwin::bench
