#pragma once
// Reader pins: one bit per reader rank and slot in the donor's header (SegmentHeader::pins),
// so that a donor can release the pins of a reader whose process is gone (docs/elastic.md).
// A reader pins the slot it reads when an optimistic copy could not be validated, or always
// under ReadMode::pinned; a publish that would overwrite a pinned slot is skipped, never
// waits (publish.cpp). Bits are idempotent, so nested pins of one process on one donor (two
// threads of one window) are counted here, in the reader's process, and its bit is cleared
// by the last unpin only.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "window/segment.hpp"

namespace paramwin::detail {

/// The two bitmaps of a header: same-node readers (CPU atomics) and RMA readers (MPI atomics).
enum class PinKind : std::size_t { shm = 0, rma = 1 };

/// The most ranks a window's header has pin bits for.
inline constexpr int kMaxPinReaders =
    static_cast<int>((kPage - kPinsOffset) / std::size_t{32} * 64);

/// Words of one bitmap for a window of @p ranks ranks.
[[nodiscard]] constexpr std::size_t pin_words(int ranks) noexcept {
  return (static_cast<std::size_t>(ranks) + 63) / 64;
}

/// Byte offset in a header of the word holding reader @p reader's bit for @p slot.
[[nodiscard]] constexpr std::size_t pin_word_offset(PinKind kind, std::size_t slot, int reader,
                                                    int ranks) noexcept {
  return kPinsOffset + ((static_cast<std::size_t>(kind) * 2 + slot) * pin_words(ranks) +
                        static_cast<std::size_t>(reader) / 64) *
                           8;
}

/// Reader @p reader's bit in its word.
[[nodiscard]] constexpr std::uint64_t pin_bit(int reader) noexcept {
  return std::uint64_t{1} << (static_cast<unsigned>(reader) % 64U);
}

/// The word of @p h at byte offset @p offset (pin_word_offset).
[[nodiscard]] std::atomic<std::uint64_t>& pin_word(SegmentHeader& h, std::size_t offset) noexcept;
[[nodiscard]] const std::atomic<std::uint64_t>& pin_word(const SegmentHeader& h,
                                                         std::size_t offset) noexcept;

/// The readers holding a pin of @p kind on @p slot of @p h (ascending ranks).
[[nodiscard]] std::vector<int> pinning_readers(const SegmentHeader& h, PinKind kind,
                                               std::size_t slot, int ranks);

/// Whether any reader pins @p slot of @p h.
[[nodiscard]] bool slot_pinned(const SegmentHeader& h, std::size_t slot, int ranks) noexcept;

/// This process's pins on the other ranks of one window: how many of its reads hold each
/// (donor, kind, slot) bit, so that the bit is set by the first and cleared by the last.
/// An RMA pin covers both slots (the reader does not know which slot it will read).
class PinBook {
 public:
  PinBook(int ranks, int self)
      : self_(self), ranks_(ranks), count_(3 * static_cast<std::size_t>(ranks)) {}

  /// Same-node pin of @p slot of donor @p donor's header @p h: sets this rank's bit
  /// (seq_cst, the Dekker pair with publish's begun store and pin load).
  void pin_shm(SegmentHeader& h, int donor, std::size_t slot);
  /// Releases it; clears the bit when it was this process's last pin there.
  void unpin_shm(SegmentHeader& h, int donor, std::size_t slot) noexcept;

  /// RMA pins: the lock to hold while counting and issuing the bit's operations, so that the
  /// operations of two threads reach the donor in the order they were counted.
  [[nodiscard]] std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }
  /// Counts an RMA pin of @p donor (both slots; under lock()): the bit must be set (always:
  /// setting it again changes nothing).
  void count_rma(int donor);
  /// Counts an RMA unpin of @p donor (under lock()): whether the bit must be cleared now.
  [[nodiscard]] bool uncount_rma(int donor) noexcept;

  [[nodiscard]] int self() const noexcept { return self_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }

 private:
  int self_;
  int ranks_;
  std::mutex mutex_;
  std::vector<std::uint32_t> count_;  // per donor: shm slot 0, shm slot 1, rma
};

}  // namespace paramwin::detail
