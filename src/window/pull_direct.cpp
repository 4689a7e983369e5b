// The direct pull path: every donor read in place (on this node) and snapshot-exposed. Pin
// every donor's current slot, apply the finiteness records, then stream the weighted sum
// straight into the caller's memory (one pass per layer over all donors at once, with the
// kernels of the reader's memory) and unpin. Nothing can fail after the first write, so the
// pull stays transactional.
#include <vector>

#include "window/pull_engine.hpp"

namespace paramwin::detail {

void PullEngine::run_direct() {
  // Every donor is read in place, so one reader reads them all (pull.cpp).
  Reader& reader = *donors_.front().reader;
  for (Donor& d : donors_) {
    reader.pin(d);  // sets the version, its finiteness record and stamp
    d.attempts = 1;
    reader.copy_hyper(d);  // pinned: this slot cannot be rewritten until the unpin
    note_record(d);
  }
  (void)apply_non_finite();
  normalise_weights();
  const Layout& layout = w_.layout();
  std::vector<MixSource> sources;
  std::size_t out_bytes = 0;  // the whole pull's output, for the kernels' choice of stores
  for (std::size_t l = 0; l < layout.size(); ++l) {
    out_bytes += bytes_of(layout[l].count, layout[l].dtype);
  }
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const SlotLayout::Entry& e = w_.slots().entries[l];
    const LayerRef& ref = out_[order_[l]];
    if (e.count == 0) {
      continue;
    }
    sources.clear();
    for (const Donor& d : donors_) {
      if (!d.skipped) {
        sources.push_back({reader.at(d, Chunk{l, 0, e.count}, 0), d.weight});
      }
    }
    if (sources.size() == 1 && options_.momentum == 0.0 && e.wire == layout[l].dtype) {
      // One donor, no momentum, same type: a plain copy.
      reader.copy(ref.data(), sources[0].data, bytes_of(e.count, e.wire));
    } else {
      // Every donor in one pass over the layer (see mix()).
      reader.mix(ref.data(), ref.dtype(), sources, e.wire, e.count, options_.momentum, out_bytes);
    }
  }
  reader.sync();  // the kernels read the pinned slots: unpin only after them
  for (Donor& d : donors_) {
    unpin(d);
  }
}

}  // namespace paramwin::detail
