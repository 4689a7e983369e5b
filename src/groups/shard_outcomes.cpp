#include "groups/shard_outcomes.hpp"

namespace paramwin::detail {

bool ShardOutcomes::only_stamps_differ() const noexcept {
  bool differ = false;
  for (int r = 0; r < ranks_; ++r) {
    if (row(r)[0] != 1) return false;
    for (std::size_t d = 0; d < donors_; ++d) {
      if (skipped(r, d)) return false;
      differ = differ || stamp(r, d) != stamp(0, d);
    }
  }
  return differ;
}

bool ShardOutcomes::lagging(int rank) const noexcept {
  for (std::size_t d = 0; d < donors_; ++d) {
    for (int r = 0; r < ranks_; ++r) {
      if (stamp(r, d) > stamp(rank, d)) return true;
    }
  }
  return false;
}

}  // namespace paramwin::detail
