#pragma once
// Draws from the agents' seeded std::mt19937_64 streams with our own bounded draws: the
// standard's distributions are implementation-defined, mt19937_64's sequence is not.

#include <cstdint>
#include <random>

namespace paramwin::detail {

/// Uniform in [0, n), n > 0: rejection sampling.
[[nodiscard]] inline std::uint64_t below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  while (true) {
    const std::uint64_t r = rng();
    if (r >= threshold) {
      return r % n;
    }
  }
}

/// Uniform in [0, 1): the top 53 bits of one draw.
[[nodiscard]] inline double unit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11U) * 0x1.0p-53;
}

}  // namespace paramwin::detail
