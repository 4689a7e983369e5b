// GoogleTest main for MPI tests: every rank runs every test; only rank 0 prints the usual
// report; other ranks print their own failures prefixed with their rank; the process exits
// non-zero on every rank if any rank failed.
//
// A watchdog thread turns a hang into a failure that names the test: if one test runs longer
// than PARAMWIN_TEST_WATCHDOG_SECONDS (default 120; 0 disables), the rank prints the test's
// name and calls MPI_Abort. CTest's timeout stays the outer bound (it kills, but names only
// the executable).
#include <mpi.h>

#include <gtest/gtest.h>
#include <Kokkos_Core.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                   result.summary());
    }
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

/// Seconds from PARAMWIN_TEST_WATCHDOG_SECONDS (default 120, 0 or negative: off).
double watchdog_limit() {
  const char* env = std::getenv("PARAMWIN_TEST_WATCHDOG_SECONDS");
  if (env == nullptr || *env == '\0') return 120.0;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env) {
    std::fprintf(stderr, "PARAMWIN_TEST_WATCHDOG_SECONDS='%s' is not a number; using 120\n", env);
    return 120.0;
  }
  return v;
}

/// Aborts the whole MPI job, naming the test, when a single test runs past the limit.
/// The listener records which test runs; the thread waits on a condition variable with a
/// deadline, so a test that ends in time costs nothing.
class Watchdog : public testing::EmptyTestEventListener {
 public:
  Watchdog(int rank, double limit_seconds) : rank_(rank), limit_(limit_seconds) {
    thread_ = std::thread([this] { run(); });
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  Watchdog(Watchdog&&) = delete;
  Watchdog& operator=(Watchdog&&) = delete;
  ~Watchdog() override { stop(); }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void OnTestStart(const testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mutex_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    started_ = Clock::now();
    ++generation_;
    running_ = true;
    cv_.notify_all();
  }
  void OnTestEnd(const testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    ++generation_;
    cv_.notify_all();
  }

 private:
  using Clock = std::chrono::steady_clock;

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      if (!running_) {
        cv_.wait(lock, [this] { return stopping_ || running_; });
        continue;
      }
      const std::uint64_t gen = generation_;
      const auto deadline = started_ + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(limit_));
      if (cv_.wait_until(lock, deadline, [&] { return stopping_ || generation_ != gen; })) {
        continue;
      }
      std::fprintf(stderr,
                   "[rank %d] WATCHDOG: test %s has run for more than %.0f s "
                   "(PARAMWIN_TEST_WATCHDOG_SECONDS); aborting the MPI job\n",
                   rank_, name_.c_str(), limit_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 124);
      std::_Exit(124);  // only if MPI_Abort returned
    }
  }

  int rank_;
  double limit_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string name_;
  Clock::time_point started_{};
  std::uint64_t generation_ = 0;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  // THREAD_MULTIPLE so that tests can use WindowOptions::progress_thread (and the watchdog
  // may call MPI_Abort from its own thread).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int failed = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    testing::InitGoogleTest(&argc, argv);
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(rank));
    }
    Watchdog* watchdog = nullptr;
    const double limit = watchdog_limit();
    if (limit > 0.0) {
      watchdog = new Watchdog(rank, limit);
      listeners.Append(watchdog);  // gtest owns and deletes it
    }
    failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    if (watchdog != nullptr) watchdog->stop();  // before the final collective
  }
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed != 0 && failed == 0) {
    std::fprintf(stderr, "some tests failed on other ranks (see [rank N] lines above)\n");
  }
  MPI_Finalize();
  return any_failed;
}
