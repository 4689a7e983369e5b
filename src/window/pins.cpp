// Reader pins (see pins.hpp).
#include "window/pins.hpp"

#include <bit>

namespace paramwin::detail {

std::atomic<std::uint64_t>& pin_word(SegmentHeader& h, std::size_t offset) noexcept {
  return h.pins[(offset - kPinsOffset) / 8];
}

const std::atomic<std::uint64_t>& pin_word(const SegmentHeader& h, std::size_t offset) noexcept {
  return h.pins[(offset - kPinsOffset) / 8];
}

std::vector<int> pinning_readers(const SegmentHeader& h, PinKind kind, std::size_t slot,
                                 int ranks) {
  std::vector<int> out;
  const std::size_t words = pin_words(ranks);
  const std::size_t first = pin_word_offset(kind, slot, 0, ranks);
  for (std::size_t w = 0; w < words; ++w) {
    std::uint64_t bits = pin_word(h, first + 8 * w).load(std::memory_order_relaxed);
    while (bits != 0) {
      const int bit = std::countr_zero(bits);
      out.push_back(static_cast<int>(64 * w) + bit);
      bits &= bits - 1;
    }
  }
  return out;
}

bool slot_pinned(const SegmentHeader& h, std::size_t slot, int ranks) noexcept {
  const std::size_t words = pin_words(ranks);
  for (const PinKind kind : {PinKind::shm, PinKind::rma}) {
    const std::size_t first = pin_word_offset(kind, slot, 0, ranks);
    for (std::size_t w = 0; w < words; ++w) {
      if (pin_word(h, first + 8 * w).load(std::memory_order_relaxed) != 0) return true;
    }
  }
  return false;
}

void PinBook::pin_shm(SegmentHeader& h, int donor, std::size_t slot) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++count_[3 * static_cast<std::size_t>(donor) + slot];
  // Always the RMW (even when the bit is set): its seq_cst order is the Dekker pair's.
  pin_word(h, pin_word_offset(PinKind::shm, slot, self_, ranks_))
      .fetch_or(pin_bit(self_), std::memory_order_seq_cst);
}

void PinBook::unpin_shm(SegmentHeader& h, int donor, std::size_t slot) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::uint32_t& c = count_[3 * static_cast<std::size_t>(donor) + slot];
  if (c > 0 && --c == 0) {
    pin_word(h, pin_word_offset(PinKind::shm, slot, self_, ranks_))
        .fetch_and(~pin_bit(self_), std::memory_order_seq_cst);
  }
}

void PinBook::count_rma(int donor) { ++count_[3 * static_cast<std::size_t>(donor) + 2]; }

bool PinBook::uncount_rma(int donor) noexcept {
  std::uint32_t& c = count_[3 * static_cast<std::size_t>(donor) + 2];
  return c > 0 && --c == 0;
}

}  // namespace paramwin::detail
