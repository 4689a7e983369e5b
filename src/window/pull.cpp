// Pull: WindowImpl::pull() and the engine's top level (which path, the result). The
// engine, its two paths and why they cannot tear: pull_engine.hpp and docs/design.md.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/pull_engine.hpp"

namespace paramwin::detail {

PullResult WindowImpl::pull(std::span<const int> donors, std::span<const LayerRef> out,
                            const PullOptions& options, bool bound) {
  return PullEngine(*this, PullPort{rma_win_.get(), graveyard_, scratch_}, donors, out, options,
                    bound)
      .run();
}

PullEngine::PullEngine(const WindowImpl& w, PullPort port, std::span<const int> donors,
                       std::span<const LayerRef> out, const PullOptions& options, bool bound)
    : w_(w), port_(port), out_(out), options_(options) {
  validate(donors);
  order_ = bound ? identity_order(out.size()) : bind_layers(w.layout(), out, "pull");
  w.check_layer_memory(out, order_, "pull");
  for (std::size_t i = 0; i < donors.size(); ++i) {
    Donor d;
    d.rank = donors[i];
    d.transport = w.transport_for(d.rank);
    d.shm = d.transport == Transport::shm ? w.shm_header(d.rank) : nullptr;
    d.user_weight = options.reduction == Reduction::weighted ? options.weights[i] : 1.0;
    donors_.push_back(d);
  }
}

PullResult PullEngine::run() {
  const double t0 = MPI_Wtime();
  deadline_ = options_.timeout_seconds > 0.0 ? t0 + options_.timeout_seconds : 0.0;
  port_.graveyard.reap(false);
  const bool device = w_.device() != nullptr;
  device_read_ = device && std::all_of(donors_.begin(), donors_.end(),
                                       [](const Donor& d) { return d.shm != nullptr; });
  // A device window never lands RMA reads in the caller's memory: MPI cannot write GPU
  // memory here, so reads over RMA are always staged through the host (transactional).
  const bool land =
      options_.landing == Landing::direct && !device &&
      std::any_of(donors_.begin(), donors_.end(), [](const Donor& d) { return d.shm == nullptr; });
  read_heads(land);
  plan_chunks();
  if (land && can_land()) {
    run_landing();
    return result(MPI_Wtime() - t0);
  }
  if (land) {
    for (Donor& d : donors_) {  // a live donor: the whole pull is read transactionally
      release_rma(d);
      d.ever_pinned = false;
    }
  }
  const bool all_shm_snapshots = std::all_of(donors_.begin(), donors_.end(), [](const Donor& d) {
    return d.shm != nullptr && !d.live;
  });
  if (all_shm_snapshots && options_.read_mode != ReadMode::optimistic) {
    if (device) {
      run_device_direct();
    } else {
      run_direct();
    }
  } else {
    run_staged();
  }
  return result(MPI_Wtime() - t0);
}

PullResult PullEngine::result(double seconds) const {
  PullResult r;
  r.seconds = seconds;
  r.landing = landing_;
  for (const Donor& d : donors_) {
    DonorRead read;
    read.rank = d.rank;
    read.version = d.version;
    read.stamp = d.stamp;
    read.transport = d.transport;
    read.bytes = w_.slots().payload_bytes;
    read.attempts = d.attempts;
    read.pinned = d.ever_pinned;
    read.skipped = d.skipped;
    read.weight = d.weight;
    read.metric = d.metric;
    if (d.hyper != nullptr) {
      read.hyper = w_.hyperparameters();
      std::copy(d.hyper, d.hyper + read.hyper.size(), read.hyper.words().begin());
    }
    r.bytes += read.bytes;
    r.donors.push_back(read);
  }
  return r;
}
}  // namespace paramwin::detail
