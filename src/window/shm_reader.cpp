// The same-node reader (reader.hpp): a donor's header, seqlock words and pins are CPU atomics
// in its shared segment, its slots are read in place. Also the host memory kind: the host
// kernels that mix into and commit to the caller's host layers (Reader's defaults).
#include <atomic>
#include <cstring>
#include <string>

#include "detail/kernels.hpp"
#include "paramwin/error.hpp"
#include "window/pins.hpp"
#include "window/reader.hpp"

namespace paramwin::detail {

// --- the host memory kind (Reader's defaults) ---------------------------------------------

void Reader::mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
                 std::size_t count, double momentum, std::size_t out_bytes) {
  detail::mix(out, out_dtype, sources, wire, count, momentum, out_bytes);
}

void Reader::copy(void* dst, const void* src, std::size_t bytes) {
  // A plain copy lets memcpy use streaming stores on large layers.
  std::memcpy(dst, src, bytes);
}

void Reader::commit(std::span<const LayerRef> out, std::span<const std::size_t> order,
                    const std::byte* acc, std::span<const std::size_t> acc_offset, bool /*own*/,
                    double momentum) {
  const Layout& layout = ctx_.w.layout();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const LayerRef& ref = out[order[l]];
    detail::commit(ref.data(), ref.dtype(), acc + acc_offset[l], layout[l].count, momentum);
  }
}

// --- ShmReader ---------------------------------------------------------------------------

std::size_t ShmReader::chunk_bytes() const noexcept { return kShmChunkBytes; }

void ShmReader::start_head(Donor& d, HeadWords& head, std::uint64_t& metric, bool /*pin*/) {
  const SegmentHeader& h = header(d);
  head.magic = h.magic.load(std::memory_order_relaxed);
  head.fingerprint = h.fingerprint.load(std::memory_order_relaxed);
  head.exposure = h.exposure.load(std::memory_order_relaxed);
  head.version = h.version.load(std::memory_order_acquire);
  head.stamp[head.version & 1U] = h.stamp[head.version & 1U].load(std::memory_order_relaxed);
  metric = h.metric.load(std::memory_order_relaxed);
}

void ShmReader::start_line1(const Donor& d, HeadWords& line1) {
  const SegmentHeader& h = header(d);
  line1.version = h.version.load(std::memory_order_acquire);
  line1.bad_layer[line1.version & 1U] =
      h.bad_layer[line1.version & 1U].load(std::memory_order_relaxed);
  line1.stamp[line1.version & 1U] = h.stamp[line1.version & 1U].load(std::memory_order_relaxed);
}

void ShmReader::start_begun(const Donor& d, std::uint64_t& begun) {
  std::atomic_thread_fence(std::memory_order_acquire);  // after the reads it validates
  begun = header(d).begun.load(std::memory_order_relaxed);
}

void ShmReader::refresh_live(Donor& d) const {
  // Live memory has one slot and no protocol: read it as it is now.
  const SegmentHeader& h = header(d);
  d.version = h.version.load(std::memory_order_acquire);
  d.stamp = h.stamp[d.version & 1U].load(std::memory_order_relaxed);
}

bool ShmReader::overtaken(const Donor& d) const {
  std::atomic_thread_fence(std::memory_order_acquire);
  return header(d).begun.load(std::memory_order_relaxed) > d.version + 1;
}

void ShmReader::pin(Donor& d) {
  SegmentHeader& h = header(d);
  for (unsigned tries = 0; tries < kMaxPinTries; ++tries) {
    const std::uint64_t v = h.version.load(std::memory_order_acquire);
    ctx_.w.pin_book().pin_shm(h, d.rank, v & 1U);
    const std::uint64_t b = h.begun.load(std::memory_order_seq_cst);
    if (b <= v + 1) {
      d.version = v;
      d.bad_layer = h.bad_layer[v & 1U].load(std::memory_order_relaxed);
      d.stamp = h.stamp[v & 1U].load(std::memory_order_relaxed);
      d.pinned = d.ever_pinned = true;
      return;
    }
    ctx_.w.pin_book().unpin_shm(h, d.rank, v & 1U);
  }
  throw DonorError(d.rank, "paramwin: pull: could not pin a snapshot of donor " +
                               std::to_string(d.rank) + " (it publishes too fast)");
}

void ShmReader::unpin(Donor& d) { release_noexcept(d); }

void ShmReader::release_noexcept(Donor& d) noexcept {
  if (!d.pinned) {
    return;
  }
  d.pinned = false;
  ctx_.w.pin_book().unpin_shm(header(d), d.rank, d.version & 1U);
}

void ShmReader::copy_hyper(Donor& d) {
  const SlotLayout& slots = ctx_.w.slots();
  if (slots.hyper_count == 0 || d.skipped) return;
  std::memcpy(d.hyper,
              ctx_.w.shm_segment(d.rank) + slot_offset(d.version, slots.stride, d.live) +
                  slots.hyper_offset,
              slots.hyper_count * sizeof(std::uint64_t));
}

const std::byte* ShmReader::at(const Donor& d, const Chunk& c, unsigned /*lane*/) const {
  return ctx_.w.shm_segment(d.rank) + data_offset(ctx_.w.slots(), d, c);
}

}  // namespace paramwin::detail
