#pragma once
// Shared helpers of the paramwin benchmarks: the MPI environment, per-iteration timing with
// an MPI_MAX reduction (every rank reports the same time, so every rank runs the same
// iteration count), polite waiting for oversubscribed runs, page-aligned buffers and raw MPI
// windows for the baselines.
#include <mpi.h>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace paramwin::bench {

/// What the benchmark main learned at start-up.
struct Env {
  int rank = 0;
  int size = 1;
  /// Sleep between MPI_Test polls while waiting (0: block in MPI_Wait, i.e. busy-poll), for
  /// ranks that serve the timed operation (an RMA donor answers gets only inside MPI).
  long poll_ns = 0;
  /// The same for ranks with no part in the timed operation (see Idle).
  long idle_poll_ns = 0;
};

/// The process-wide benchmark environment (set once by main before any benchmark runs).
Env& env();

/// Throws std::runtime_error naming @p what when @p code is not MPI_SUCCESS.
void check(int code, const char* what);

/// Completes @p request: MPI_Wait when env().poll_ns is 0, otherwise MPI_Test plus a short
/// nanosleep between polls so idle ranks leave the (oversubscribed) cores to the ranks that
/// work. Either way the caller is inside MPI, so RMA targeting it progresses.
void wait_politely(MPI_Request& request);

/// Marks this rank as having no part in the current benchmark's timed operation while it
/// lives: wait_politely() then sleeps Env::idle_poll_ns between polls. With more ranks than
/// cores this leaves the cores to the ranks that work, as on a machine with a core per rank.
class Idle {
 public:
  explicit Idle(bool idle);
  Idle(const Idle&) = delete;
  Idle& operator=(const Idle&) = delete;
  Idle(Idle&&) = delete;
  Idle& operator=(Idle&&) = delete;
  ~Idle();

 private:
  bool previous_;
};

/// Barrier on @p comm completed with wait_politely().
void polite_barrier(MPI_Comm comm);

/// Reduces @p local_seconds with MPI_MAX over @p comm (waiting politely) and feeds the result
/// to state.SetIterationTime (benchmarks run under UseManualTime()).
void finish_iteration(benchmark::State& state, double local_seconds,
                      MPI_Comm comm = MPI_COMM_WORLD);

/// Sets bytes/s (from @p bytes_per_iteration) and a constant "bytes" counter the report uses.
void set_bytes(benchmark::State& state, std::size_t bytes_per_iteration);

/// Registers the min and max statistics next to Google Benchmark's mean/median/stddev.
benchmark::internal::Benchmark* with_stats(benchmark::internal::Benchmark* b);

/// Seconds from a monotonic clock.
double now();

/// Rounds @p bytes up to a multiple of 4096.
constexpr std::size_t page_round(std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

/// Page-aligned, zero-touched heap buffer.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes);
  [[nodiscard]] std::byte* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  template <class T>
  [[nodiscard]] std::span<T> as() const noexcept {
    return {reinterpret_cast<T*>(data_.get()), bytes_ / sizeof(T)};
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t bytes_ = 0;
};

/// A raw MPI window from MPI_Win_allocate over @p comm with page-rounded per-rank size and
/// alloc_shared_noncontig=true (the platform facts in DESIGN.md: unaligned per-rank bases
/// return other ranks' bytes on this MPICH + UCX). Collective; freed in the destructor.
class RawWindow {
 public:
  RawWindow(MPI_Comm comm, std::size_t bytes);
  RawWindow(const RawWindow&) = delete;
  RawWindow& operator=(const RawWindow&) = delete;
  RawWindow(RawWindow&&) = delete;
  RawWindow& operator=(RawWindow&&) = delete;
  ~RawWindow();
  [[nodiscard]] MPI_Win win() const noexcept { return win_; }
  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

/// MPI_Get of @p bytes (chunked below INT_MAX) from @p target at displacement 0 into @p dst;
/// completion is the caller's (flush or unlock).
void get_bytes(void* dst, std::size_t bytes, int target, MPI_Win win);

/// Fills @p values with a deterministic pattern of rank @p rank (finite, non-zero).
void fill_pattern(std::span<float> values, int rank);

/// A one-layer window of @p n floats over MPI_COMM_WORLD, this rank's pattern published,
/// every rank past a barrier: the starting point of the pull benchmarks.
struct PublishedWindow {
  ParameterWindow<> win;
  std::vector<float> params;
};

/// Computes for @p seconds without MPI calls; with @p win set, calls its progress() about
/// every 10 us of compute (the RMA progress aid a trainer places in its loop).
void compute_without_mpi(double seconds, const ParameterWindow<>* win = nullptr);

/// Creates and publishes a PublishedWindow (collective), with @p hyperparameters float64
/// hyperparameters declared and published with the layer.
PublishedWindow published_window(std::size_t n, Transport transport,
                                 std::size_t hyperparameters = 0);

/// "4KiB", "16MiB", ...
std::string size_label(std::size_t bytes);
/// "1M", "10M", "50M" for element counts.
std::string count_label(std::size_t count);

// Registration hooks, one per benchmark file (called by main after MPI_Init).
void register_pull_benchmarks();
void register_multi_donor_benchmarks();
void register_misc_benchmarks();
void register_group_benchmarks();
void register_serve_benchmarks();
void register_hyper_benchmarks();

}  // namespace paramwin::bench
