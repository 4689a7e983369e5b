#pragma once
// BackgroundWorker: the one long-lived thread of an AveragingAgent whose background rounds
// overlap the trainer (docs/averaging.md, "Background averaging"). It sleeps on a condition
// variable until the owner hands it a job (one round's roster reads, pull and mix), runs it,
// and sleeps again; the owner polls whether the job is done without waiting for it. At most
// one job at a time. Listed in the finalize registry: MPI_Finalize stops it (the job in
// flight completes first) and completes its abandoned reads before the window is freed.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "mpi/finalize_registry.hpp"
#include "window/worker_reads.hpp"

namespace paramwin::detail {

// Final, owned and deleted as BackgroundWorker (FinalizeClient's destructor is protected).
// NOLINTNEXTLINE(cppcoreguidelines-virtual-class-destructor): see above
class BackgroundWorker final : public FinalizeClient {
 public:
  /// Starts the thread; its reads are of @p window (which outlives this, at its address).
  explicit BackgroundWorker(const Window& window);
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;
  BackgroundWorker(BackgroundWorker&&) = delete;
  BackgroundWorker& operator=(BackgroundWorker&&) = delete;
  /// Stops the thread (a job in flight completes first) and hands its abandoned reads to the
  /// window.
  ~BackgroundWorker();

  /// Runs @p job on the thread. Owner only; the worker must be idle (!busy()).
  void start(std::function<void()> job);
  /// Whether a job is running or waiting to run (owner only).
  [[nodiscard]] bool busy();
  /// Waits until the job in flight, if any, has completed (owner only).
  void wait();
  /// The worker's reads (the job's side; settle() on the owner's side while idle).
  [[nodiscard]] WorkerReads& reads() noexcept { return reads_; }

  // FinalizeClient
  void stop_threads_at_finalize() noexcept override { stop(); }
  void free_at_finalize() noexcept override { reads_.complete_noexcept(); }
  [[nodiscard]] const std::string& finalize_error() const noexcept override { return none_; }

 private:
  void loop();
  void stop() noexcept;

  WorkerReads reads_;
  std::mutex mutex_;
  std::condition_variable wake_;  // a job or stop for the thread
  std::condition_variable done_;  // the job finished, for wait()
  std::function<void()> job_;     // the job in flight (empty: idle)
  bool stop_ = false;
  std::string none_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace paramwin::detail
