// The pull paths of a device window (Memory::cuda, docs/gpu.md). The protocol is the host
// paths': the direct path pins every donor (pull_direct.cpp's pin_shm) before one kernel per
// layer reads all of them from their mapped device slots into the caller's device memory, and
// unpins only after the kernels completed; the staged path (ReadMode::optimistic) reads the
// donors' slots into a device scratch, validates the seqlock afterwards and retries or pins
// as pull_staged.cpp does, and commits only once every copy is accepted.
#include <cstring>
#include <vector>

#include "detail/kernels.hpp"
#include "paramwin/error.hpp"
#include "window/pull_engine.hpp"

namespace paramwin::detail {

void PullEngine::run_device_direct() {
  device_read_ = true;
  for (Donor& d : donors_) {
    pin_shm(d);
    d.attempts = 1;
    copy_shm_hyper(d);  // pinned: this slot cannot be rewritten until the unpin
    note_record(d);
  }
  (void)apply_non_finite();
  normalise_weights();
  cuda::Device& dev = *w_.device();
  const Layout& layout = w_.layout();
  std::vector<cuda::DeviceSource> sources;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const SlotLayout::Entry& e = w_.slots().entries[l];
    const LayerRef& ref = out_[order_[l]];
    if (e.count == 0) continue;
    sources.clear();
    for (const Donor& d : donors_) {
      if (!d.skipped) {
        sources.push_back(
            {w_.device_slots(d.rank) + device_slot_offset(d.version, w_.slots().stride) + e.offset,
             d.weight});
      }
    }
    if (sources.size() == 1 && options_.momentum == 0.0 && e.wire == layout[l].dtype) {
      dev.copy(ref.data(), sources[0].data, bytes_of(e.count, e.wire));  // the copy engine
    } else {
      dev.mix(ref.data(), ref.dtype(), sources, e.wire, e.count, options_.momentum);
    }
  }
  dev.synchronize();  // the kernels read the pinned slots: unpin only after them
  for (Donor& d : donors_) {
    unpin(d);
  }
}

void PullEngine::pass_device() {
  cuda::Device& dev = *w_.device();
  acc_ = dev.scratch(scratch_bytes_);
  const Layout& layout = w_.layout();
  std::vector<cuda::DeviceSource> sources;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const SlotLayout::Entry& e = w_.slots().entries[l];
    if (e.count == 0) continue;
    sources.clear();
    for (const Donor& d : donors_) {
      if (!d.skipped) {
        sources.push_back(
            {w_.device_slots(d.rank) + device_slot_offset(d.version, w_.slots().stride) + e.offset,
             d.weight});
      }
    }
    dev.mix(acc_ + acc_offset_[l], layout[l].dtype, sources, e.wire, e.count, 0.0, true);
  }
  dev.synchronize();  // end_reads() then checks whether a publish overtook a copy
}

void PullEngine::commit_out() {
  const Layout& layout = w_.layout();
  cuda::Device* dev = w_.device();
  if (dev == nullptr) {
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const LayerRef& ref = out_[order_[l]];
      commit(ref.data(), ref.dtype(), acc_ + acc_offset_[l], layout[l].count, options_.momentum);
    }
    return;
  }
  if (device_read_) {
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const LayerRef& ref = out_[order_[l]];
      dev->commit(ref.data(), ref.dtype(), acc_ + acc_offset_[l], layout[l].count,
                  options_.momentum);
    }
    dev->synchronize();
    return;
  }
  // Donors read over RMA into the host scratch: commit on the host into a bounce buffer per
  // layer (holding the caller's values first when momentum blends with them), then copy it
  // to the caller's device memory.
  std::vector<std::byte> bounce;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const LayerRef& ref = out_[order_[l]];
    const std::size_t bytes = bytes_of(layout[l].count, layout[l].dtype);
    if (bytes == 0) continue;
    bounce.resize(bytes);
    if (options_.momentum != 0.0) {
      dev->copy(bounce.data(), ref.data(), bytes);
      dev->synchronize();
    }
    commit(bounce.data(), ref.dtype(), acc_ + acc_offset_[l], layout[l].count, options_.momentum);
    dev->copy(ref.data(), bounce.data(), bytes);
    dev->synchronize();
  }
}

}  // namespace paramwin::detail
