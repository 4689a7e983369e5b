#pragma once
// Helpers shared by the MPI tests.
#include <mpi.h>

#include <gtest/gtest.h>

namespace paramwin::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// Skips the test (on every rank alike) when fewer than @p n ranks run it.
#define PARAMWIN_REQUIRE_RANKS(n)                                 \
  do {                                                            \
    if (::paramwin::test::world_size() < (n)) {                   \
      GTEST_SKIP() << "needs at least " << (n) << " ranks, have " \
                   << ::paramwin::test::world_size();             \
    }                                                             \
  } while (0)

/// Deterministic test value of element @p i of layer @p layer on @p rank at @p version.
inline float value(int rank, int layer, std::size_t i, std::uint64_t version = 0) {
  return static_cast<float>(rank * 1000 + layer * 100 + static_cast<int>(i % 97) +
                            static_cast<int>(version % 7) * 10000);
}

}  // namespace paramwin::test
