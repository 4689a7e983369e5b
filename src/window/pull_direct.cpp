// The direct pull path: every donor on this node and snapshot-exposed. Pin every donor's
// current slot, apply the finiteness records, then stream the weighted sum straight into
// the caller's memory (one pass per layer over all donors at once) and unpin. Nothing can
// fail after the first write, so the pull stays transactional.
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

void PullEngine::run_direct() {
  for (Donor& d : donors_) {
    pin_shm(d);
    d.bad_layer = d.shm->bad_layer[d.version & 1U].load(std::memory_order_relaxed);
    d.stamp = d.shm->stamp[d.version & 1U].load(std::memory_order_relaxed);
    d.attempts = 1;
    copy_shm_hyper(d);  // pinned: this slot cannot be rewritten until the unpin
    note_record(d);
  }
  (void)apply_non_finite();
  normalise_weights();
  const Layout& layout = w_.layout();
  std::vector<MixSource> sources;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const SlotLayout::Entry& e = w_.slots().entries[l];
    const LayerRef& ref = out_[order_[l]];
    if (e.count == 0) {
      continue;
    }
    sources.clear();
    for (const Donor& d : donors_) {
      if (!d.skipped) {
        sources.push_back(
            {w_.shm_segment(d.rank) + data_offset(d, Chunk{l, 0, e.count}), d.weight});
      }
    }
    if (sources.size() == 1 && options_.momentum == 0.0 && e.wire == layout[l].dtype) {
      // One donor, no momentum, same type: a plain copy, which lets memcpy use streaming
      // stores on large layers.
      std::memcpy(ref.data(), sources[0].data, bytes_of(e.count, e.wire));
    } else {
      // Every donor in one pass over the layer (see mix()).
      mix(ref.data(), ref.dtype(), sources, e.wire, e.count, options_.momentum);
    }
  }
  for (Donor& d : donors_) {
    unpin(d);
  }
}

void PullEngine::pin_shm(Donor& d) {
  for (unsigned tries = 0; tries < kMaxPinTries; ++tries) {
    const std::uint64_t v = d.shm->version.load(std::memory_order_acquire);
    d.shm->shm_pins[v & 1U].fetch_add(1, std::memory_order_seq_cst);
    const std::uint64_t b = d.shm->begun.load(std::memory_order_seq_cst);
    if (b <= v + 1) {
      d.version = v;
      d.bad_layer = d.shm->bad_layer[v & 1U].load(std::memory_order_relaxed);
      d.stamp = d.shm->stamp[v & 1U].load(std::memory_order_relaxed);
      d.pinned = d.ever_pinned = true;
      return;
    }
    d.shm->shm_pins[v & 1U].fetch_sub(1, std::memory_order_seq_cst);
  }
  throw DonorError(d.rank, "paramwin: pull: could not pin a snapshot of donor " +
                               std::to_string(d.rank) + " (it publishes too fast)");
}

}  // namespace paramwin::detail
