// A symmetric (mean-preserving) averaging round: each usable peer's snapshot read on its own
// into the scratch, then exchanged through the peer's inbox (ExchangeInbox::deposit: the
// peer's half -d, this agent's half +d accumulated), then the accumulated moves added to the
// parameters. A peer whose inbox is closed or whose lock is not taken before the deadline is
// left out with nothing changed on either side.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "averaging/averaging_state.hpp"
#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

template <class T>
void add_and_zero(void* params, std::vector<double>& moves) {
  T* x = static_cast<T*>(params);
  for (std::size_t i = 0; i < moves.size(); ++i) {
    x[i] = static_cast<T>(static_cast<double>(x[i]) + moves[i]);
    moves[i] = 0.0;
  }
}

}  // namespace

void AveragingState::exchange_round(const BoundLayers<LayerRef>& params, const RoundPlan& plan,
                                    AveragingRound& out) {
  const Layout& layout = window_.layout();
  if (exchange_acc_.size() != layout.size()) {  // allocated once (zero), reused by every round
    exchange_acc_.resize(layout.size());
    inline_scratch_.resize(layout.size());
    for (std::size_t l = 0; l < layout.size(); ++l) {
      exchange_acc_[l].assign(layout[l].count, 0.0);
      inline_scratch_[l].resize(layout[l].count * dtype_size(layout[l].dtype));
    }
  }
  std::vector<LayerRef> refs;
  refs.reserve(layout.size());
  for (std::size_t l = 0; l < layout.size(); ++l) {
    refs.emplace_back("", inline_scratch_[l].data(), layout[l].count, layout[l].dtype);
  }
  double given = 0.0;
  for (const double w : plan.weights) {
    given += w;
  }
  const double start = MPI_Wtime();
  const double deadline = options_.timeout_seconds > 0.0 ? start + options_.timeout_seconds : 0.0;
  double moved = 0.0;
  std::size_t d = 0;
  for (AveragingPeer& p : out.peers) {
    if (p.skipped != SkipReason::none) {
      continue;
    }
    const double weight = (1.0 - plan.self) * plan.weights[d++] / given;
    const int peer[1] = {p.rank};
    PullOptions pull{.reduction = Reduction::mean,
                     .non_finite = NonFinitePolicy::skip_donor,
                     .landing = Landing::transactional};
    if (deadline > 0.0) {  // what is left of the round's deadline (a positive value: bounded)
      pull.timeout_seconds = std::max(deadline - MPI_Wtime(), 1e-6);
    }
    try {
      const PullResult result = window_.pull(peer, std::span<const LayerRef>(refs), pull);
      const DonorRead& read = result.donors.front();
      p.version = read.version;
      p.stamp = read.stamp;
      p.transport = read.transport;
      out.bytes += result.bytes;
    } catch (const TimeoutError&) {
      p.skipped = SkipReason::unreachable;
      continue;
    } catch (const DonorError&) {  // its one snapshot holds NaN or infinity
      p.skipped = SkipReason::non_finite;
      continue;
    }
    switch (inbox_->deposit(p.rank, refs, params, weight, exchange_acc_, deadline)) {
      case ExchangeInbox::Deposit::done:
        p.weight = weight;
        moved += weight;
        break;
      case ExchangeInbox::Deposit::closed: p.skipped = SkipReason::paused; break;
      case ExchangeInbox::Deposit::timed_out: p.skipped = SkipReason::unreachable; break;
    }
  }
  if (moved == 0.0) {
    out.note = "no peer exchanged with (paused, unreachable or non-finite since its roster was "
               "read): parameters unchanged";
    return;
  }
  for (std::size_t l = 0; l < layout.size(); ++l) {
    if (layout[l].dtype == DType::float32) {
      add_and_zero<float>(params[l].data(), exchange_acc_[l]);
    } else {
      add_and_zero<double>(params[l].data(), exchange_acc_[l]);
    }
  }
  out.self_weight = 1.0 - moved;
  out.applied = true;
}

BoundLayers<ConstLayerRef> AveragingState::with_pending(
    const BoundLayers<ConstLayerRef>& ordered, std::vector<std::vector<std::byte>>& copies) {
  if (!inbox_) {
    return ordered;
  }
  check_mpi(MPI_Barrier(sync_comm_.get()), "MPI_Barrier");
  copies.assign(ordered.size(), {});
  std::vector<LayerRef> refs;
  std::vector<ConstLayerRef> out;
  for (std::size_t l = 0; l < ordered.size(); ++l) {
    const ConstLayerRef& r = ordered[l];
    copies[l].resize(r.count() * dtype_size(r.dtype()));
    std::memcpy(copies[l].data(), r.data(), copies[l].size());
    refs.emplace_back(r.name(), copies[l].data(), r.count(), r.dtype());
    out.emplace_back(r.name(), copies[l].data(), r.count(), r.dtype());
  }
  inbox_->add_pending_to(refs);
  return BoundLayersAccess::make(std::move(out), ordered.layout_fingerprint());
}

void AveragingState::reset_inbox() {
  if (inbox_) {
    inbox_->clear();
    inbox_->set_open(!paused_);
  }
}

}  // namespace paramwin::detail
