// Publish: the owner's side of the versioned double buffer (seqlock).
//
// Publish p writes slot p % 2, never the slot of the latest complete version p - 1 that
// readers are told to read. Order: begun = p, full fence, check pins, write the slot,
// release fence, version = p. A reader of version v accepts its copy only if begun <= v + 1
// afterwards, i.e. publish v + 2 (the next one to write slot v % 2) had not started.
#include <atomic>
#include <bit>

#include "detail/kernels.hpp"
#include "detail/window_impl.hpp"

namespace paramwin::detail {

PublishResult WindowImpl::publish(std::span<const ConstLayerRef> layers) {
  const double t0 = MPI_Wtime();
  const std::vector<std::size_t> order = bind_layers(layout_, layers, "publish");
  SegmentHeader& h = header();
  const std::uint64_t p = version_ + 1;
  const std::size_t slot = p & 1U;

  h.begun.store(p, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A reader that could not get a clean copy optimistically pins the slot it reads. Pinned
  // means: this publish would overwrite it, so skip it (never wait). The Dekker pair
  // (begun store, fence, pin load) vs (pin increment, begun load) makes one side see the other.
  if (h.shm_pins[slot].load(std::memory_order_relaxed) != 0 ||
      h.rma_pins[slot].load(std::memory_order_relaxed) != 0) {
    h.begun.store(version_, std::memory_order_relaxed);
    return PublishResult{false, version_, MPI_Wtime() - t0};
  }

  std::byte* dst = segment_.data() + kPage + slot * slots_.stride;
  for (std::size_t layer = 0; layer < order.size(); ++layer) {
    const ConstLayerRef& ref = layers[order[layer]];
    const SlotLayout::Entry& e = slots_.entries[layer];
    convert(dst + e.offset, e.wire, ref.data(), ref.dtype(), e.count);
  }

  const double now = MPI_Wtime();
  h.publish_time.store(std::bit_cast<std::uint64_t>(now), std::memory_order_relaxed);
  h.version.store(p, std::memory_order_release);
  version_ = p;
  if (status_.state == AgentState::fresh) {
    AgentStatus s = status_;
    s.state = AgentState::active;
    set_status(s);
  }
  return PublishResult{true, p, MPI_Wtime() - t0};
}

}  // namespace paramwin::detail
