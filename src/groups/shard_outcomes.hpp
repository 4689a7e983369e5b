#pragma once
// The table of shard pull outcomes a grouped agent's ranks allgather after each pulls its
// shard of a rebirth (ShardExecutor::pull): per rank, `words(n)` int64 for n donors:
//   [0] 1 when the pull succeeded, [1] the donor that failed it (-1: none or unknown),
//   [2] the bytes pulled, [3, 3 + n) each donor's publish stamp, [3 + n, 3 + 2n) 1 when the
//   donor's shard was skipped.
// Every rank reads the same table, so every rank reaches the same decision from it.

#include <cstddef>
#include <cstdint>
#include <span>

namespace paramwin::detail {

class ShardOutcomes {
 public:
  /// Words per rank for @p donors donors.
  [[nodiscard]] static constexpr std::size_t words(std::size_t donors) noexcept {
    return 3 + 2 * donors;
  }
  /// @p all: @p ranks rows of words(@p donors) each.
  ShardOutcomes(std::span<const std::int64_t> all, std::size_t donors, int ranks) noexcept
      : all_(all), donors_(donors), ranks_(ranks) {}

  [[nodiscard]] const std::int64_t* row(int rank) const noexcept {
    return all_.data() + static_cast<std::size_t>(rank) * words(donors_);
  }
  [[nodiscard]] std::int64_t stamp(int rank, std::size_t donor) const noexcept {
    return row(rank)[3 + donor];
  }
  [[nodiscard]] bool skipped(int rank, std::size_t donor) const noexcept {
    return row(rank)[3 + donors_ + donor] != 0;
  }
  /// Every rank pulled, no shard was skipped, yet some donor's stamps differ between ranks:
  /// the ranks read different publishes of one donor, which reading again may mend.
  [[nodiscard]] bool only_stamps_differ() const noexcept;
  /// Whether @p rank read an older publish of some donor than another rank did.
  [[nodiscard]] bool lagging(int rank) const noexcept;

 private:
  std::span<const std::int64_t> all_;
  std::size_t donors_;
  int ranks_;
};

}  // namespace paramwin::detail
