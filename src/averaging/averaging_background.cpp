// Background rounds on the worker thread (docs/averaging.md, "Background averaging"): the
// owner copies its parameters (own_at_read) and hands the round to the worker, which screens
// the peers and pulls their weighted mix into its own buffer; a later step collects it and
// adds (1 - self)(mix - own_at_read) to the parameters as they are then.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "averaging/averaging_state.hpp"
#include "paramwin/averaging.hpp"

namespace paramwin::detail {

namespace {

/// Per element: with @p apply, p = p + w (m - s) (in double, rounded once to T, as the
/// inline background correction); then with @p snapshot, s = p (own_at_read of the next
/// round). One pass over the parameters.
template <class T>
void land(T* p, const std::byte* mix, std::byte* at_read, std::size_t n, double w, bool apply,
          bool snapshot) {
  const T* m = reinterpret_cast<const T*>(mix);  // the buffers hold T
  T* s = reinterpret_cast<T*>(at_read);
  if (apply && snapshot) {
    for (std::size_t i = 0; i < n; ++i) {
      const T v = static_cast<T>(static_cast<double>(p[i]) +
                                 w * (static_cast<double>(m[i]) - static_cast<double>(s[i])));
      p[i] = v;
      s[i] = v;
    }
  } else if (apply) {
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = static_cast<T>(static_cast<double>(p[i]) +
                            w * (static_cast<double>(m[i]) - static_cast<double>(s[i])));
    }
  } else if (snapshot) {
    std::memcpy(s, p, n * sizeof(T));
  }
}

}  // namespace

void AveragingState::start_worker() {
  if (!options_.background) {
    inline_reason_ = "background averaging is off";
    return;
  }
  inline_reason_ = options_.background_worker ? WorkerReads::unsafe_reason(window_)
                                              : "AveragingOptions::background_worker is false";
  if (!inline_reason_.empty()) {
    return;
  }
  const Layout& layout = window_.layout();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const std::size_t bytes = layout[l].count * dtype_size(layout[l].dtype);
    mix_.emplace_back(bytes);
    at_read_.emplace_back(bytes);
    mix_refs_.emplace_back("", mix_.back().data(), layout[l].count, layout[l].dtype);
  }
  worker_ = std::make_unique<BackgroundWorker>(window_);
}

void AveragingState::read_in_background() {
  const double t0 = MPI_Wtime();
  try {
    AveragingRound& out = job_.out;
    RoundPlan plan;
    if (plan_round(job_.peers, job_.step, &worker_->reads(), out, plan)) {
      guarded_read(out, [&] {
        const PullResult result =
            worker_->reads().pull(plan.donors, mix_refs_, pull_options(plan, 0.0));
        record_reads(result, plan.self, out);
        out.bytes = result.bytes;
        out.self_weight = plan.self;
        job_.mixed = true;
      });
    }
  } catch (...) {
    job_.error = std::current_exception();
  }
  job_.out.seconds = MPI_Wtime() - t0;
}

void AveragingState::start_background_round(std::vector<int> peers) {
  job_ = BackgroundJob{};
  job_.round = rounds_;
  job_.step = steps_;
  job_.peers = std::move(peers);
  job_.out.kind = RoundKind::gossip;
  job_.out.round = rounds_++;
  job_.out.read_step = steps_;
  job_.out.overlapped = true;
  in_flight_ = true;
  drop_in_flight_ = false;
  worker_->start([this] { read_in_background(); });
}

bool AveragingState::collect(AveragingRound& out) {
  in_flight_ = false;
  worker_->reads().settle();  // reads it abandoned at a deadline complete with the window's
  if (drop_in_flight_) {
    drop_in_flight_ = false;
    return false;
  }
  if (job_.error) {
    const std::exception_ptr error = job_.error;
    job_.error = nullptr;
    std::rethrow_exception(error);
  }
  out.kind = RoundKind::gossip;
  out.round = job_.out.round;
  out.self_weight = job_.out.self_weight;
  out.peers = std::move(job_.out.peers);
  out.note = std::move(job_.out.note);
  out.bytes = job_.out.bytes;
  out.seconds = job_.out.seconds;
  out.read_step = job_.out.read_step;
  out.overlapped = true;
  return job_.mixed;
}

void AveragingState::overlap_step(const BoundLayers<LayerRef>& params, AveragingRound& out) {
  // The worker asked once: had the read finished between a first "busy" and a second "not
  // busy", the new round would overwrite the finished one's result, never collected.
  const bool busy = in_flight_ && worker_->busy();
  const bool apply = in_flight_ && !busy && collect(out);
  const bool due = round_due();
  const bool start = due && !busy;
  // The round's peers before anything changes (a custom topology's callable may throw).
  std::vector<int> peers;
  if (start) {
    peers = round_ranks();
  }
  if (due && !start) {
    out.busy = true;
    out.note = (out.note.empty() ? "" : out.note + "; ") + "round due, but the read of round " +
               std::to_string(job_.round) + " (begun at step " + std::to_string(job_.step) +
               ") is still running: no round began";
  }
  if (apply || start) {
    const double w = 1.0 - out.self_weight;
    for (std::size_t l = 0; l < params.size(); ++l) {
      const std::size_t n = params[l].count();
      if (params[l].dtype() == DType::float32) {
        land<float>(static_cast<float*>(params[l].data()), mix_[l].data(), at_read_[l].data(), n, w,
                    apply, start);
      } else {
        land<double>(static_cast<double*>(params[l].data()), mix_[l].data(), at_read_[l].data(), n,
                     w, apply, start);
      }
    }
  }
  out.applied = apply;
  out.background_applied = apply;
  if (start) {
    out.started_round = rounds_;
    start_background_round(std::move(peers));
  }
}

void AveragingState::collect_dropped() {
  if (in_flight_ && !worker_->busy()) {
    drop_in_flight_ = true;
    AveragingRound ignored;
    (void)collect(ignored);
  }
}

void AveragingState::quiesce() {
  if (worker_ && in_flight_) {
    worker_->wait();
    drop_in_flight_ = true;
    AveragingRound ignored;
    (void)collect(ignored);
  }
}

void AveragingState::wait_for_worker() const {
  if (worker_) {
    worker_->wait();
  }
}

}  // namespace paramwin::detail
