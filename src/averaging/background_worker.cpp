// BackgroundWorker: one thread per agent, asleep between rounds (see background_worker.hpp).
#include "averaging/background_worker.hpp"

#include <functional>
#include <mutex>
#include <utility>

namespace paramwin::detail {

BackgroundWorker::BackgroundWorker(const Window& window)
    : reads_(window), thread_([this] { loop(); }) {
  try {
    remember_client(this);
  } catch (...) {
    stop();
    throw;
  }
}

BackgroundWorker::~BackgroundWorker() {
  forget_client(this);
  stop();
  try {
    reads_.settle();
  } catch (...) {  // no memory to hand them over: complete them here
    reads_.complete_noexcept();
  }
}

void BackgroundWorker::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || job_; });
    if (!job_) {
      return;  // stopped while idle
    }
    const std::function<void()> job = job_;
    lock.unlock();
    job();  // the job catches what it throws (AveragingState::read_in_background)
    lock.lock();
    job_ = nullptr;
    done_.notify_all();
  }
}

void BackgroundWorker::start(std::function<void()> job) {
  {
    const std::lock_guard lock(mutex_);
    job_ = std::move(job);
  }
  wake_.notify_one();
}

bool BackgroundWorker::busy() {
  const std::lock_guard lock(mutex_);
  return static_cast<bool>(job_);
}

void BackgroundWorker::wait() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return !job_; });
}

void BackgroundWorker::stop() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) {
    thread_.join();  // a job in flight runs to its end first: reads cannot be interrupted
  }
}

}  // namespace paramwin::detail
