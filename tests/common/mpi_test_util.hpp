#pragma once
// Helpers shared by the MPI tests.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

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

/// Every rank's @p mine concatenated in rank order, on every rank (MPI_Allgatherv over
/// COMM_WORLD; the ranks may contribute different lengths). @note Collective.
inline std::vector<double> allgather_doubles(const std::vector<double>& mine) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(n));
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> displs(static_cast<std::size_t>(n), 0);
  for (std::size_t r = 1; r < displs.size(); ++r) {
    displs[r] = displs[r - 1] + counts[r - 1];
  }
  std::vector<double> all(static_cast<std::size_t>(displs.back() + counts.back()));
  MPI_Allgatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), displs.data(),
                 MPI_DOUBLE, MPI_COMM_WORLD);
  return all;
}

/// Deterministic test value of element @p i of layer @p layer on @p rank at @p version.
/// Largest spread (max - min over the ranks of MPI_COMM_WORLD) of any element of @p mine:
/// one MPI_MAX over the values and their negations (on 8 ranks sharing 2 cores each
/// collective costs tens of ms). Like a barrier, no rank returns before every rank entered it.
inline double spread_over_ranks(const std::vector<double>& mine) {
  const std::size_t n = mine.size();
  std::vector<double> both(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    both[i] = mine[i];
    both[n + i] = -mine[i];
  }
  MPI_Allreduce(MPI_IN_PLACE, both.data(), static_cast<int>(both.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  double out = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    out = std::max(out, both[i] + both[n + i]);  // max - min
  }
  return out;
}

inline float value(int rank, int layer, std::size_t i, std::uint64_t version = 0) {
  return static_cast<float>(rank * 1000 + layer * 100 + static_cast<int>(i % 97) +
                            static_cast<int>(version % 7) * 10000);
}

/// Busy computation without any MPI call, for at least @p seconds: a donor that computes
/// (over RMA it cannot answer meanwhile; a dead process looks the same).
inline void compute_for(double seconds) {
  const auto start = std::chrono::steady_clock::now();
  volatile double sink = 0.0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
         seconds) {
    for (int i = 0; i < 1000; ++i) sink = sink + 1e-9 * i;
  }
}

}  // namespace paramwin::test
