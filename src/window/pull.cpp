// Pull: WindowImpl::pull() and the engine's top level (the readers of a pull, which path, the
// result). The engine, its paths and why they cannot tear: pull_engine.hpp and docs/design.md.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

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
  shm_ = std::make_unique<ShmReader>(ctx_);
  memory_ = make_memory_reader(ctx_);
  output_ = memory_ != nullptr ? memory_.get() : shm_.get();
  validate(donors);
  order_ = bound ? identity_order(out.size()) : bind_layers(w.layout(), out, "pull");
  w.check_layer_memory(out, order_, "pull");
  bool any_remote = false;
  for (std::size_t i = 0; i < donors.size(); ++i) {
    Donor d;
    d.rank = donors[i];
    d.transport = w.transport_for(d.rank);
    any_remote = any_remote || d.transport != Transport::shm;
    d.user_weight = options.reduction == Reduction::weighted ? options.weights[i] : 1.0;
    donors_.push_back(d);
  }
  // The window's own memory kind reads its slots only when every donor is on this node;
  // otherwise the same-node donors are read from their host copies, beside the RMA reads.
  Reader* same_node = memory_ != nullptr && !any_remote ? memory_.get() : shm_.get();
  if (any_remote) rma_ = make_rma_reader(ctx_);
  for (Donor& d : donors_) {
    d.reader = d.transport == Transport::shm ? same_node : rma_.get();
    if (std::find(readers_.begin(), readers_.end(), d.reader) == readers_.end()) {
      readers_.push_back(d.reader);
    }
  }
}

PullResult PullEngine::run() {
  const double t0 = MPI_Wtime();
  deadline_ = options_.timeout_seconds > 0.0 ? t0 + options_.timeout_seconds : 0.0;
  port_.graveyard.reap(false);
  // Reads land in the caller's memory only where MPI can write it (host layers).
  const bool land = options_.landing == Landing::direct && output_->host_output() &&
                    std::any_of(donors_.begin(), donors_.end(),
                                [](const Donor& d) { return d.reader->fetches(); });
  read_heads(land);
  plan_chunks();
  if (land && can_land()) {
    run_landing();
    return result(MPI_Wtime() - t0);
  }
  if (land) {
    for (Donor& d : donors_) {  // a live donor: the whole pull is read transactionally
      d.reader->release(d);
      d.ever_pinned = false;
    }
  }
  const bool all_in_place_snapshots =
      std::all_of(donors_.begin(), donors_.end(),
                  [](const Donor& d) { return !d.reader->fetches() && !d.live; });
  if (all_in_place_snapshots && options_.read_mode != ReadMode::optimistic) {
    run_direct();
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
