// SoloExecutor: a one-rank agent's rebirth (see solo_executor.hpp).
#include "agent/solo_executor.hpp"

#include <algorithm>
#include <array>
#include <bit>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

std::vector<RosterEntry> agree_ranking_over(MPI_Comm comm, const AgentStatus& mine,
                                            const Hyperparameters& hyper, std::uint64_t version,
                                            std::uint64_t fingerprint) {
  int n = 0;
  check_mpi(MPI_Comm_size(comm, &n), "MPI_Comm_size");
  // metric, state, version, fingerprint, iteration, generation, number of hyperparameters
  constexpr int kWords = 7;
  const std::array<std::int64_t, kWords> head{std::bit_cast<std::int64_t>(mine.metric),
                                              static_cast<std::int64_t>(mine.state),
                                              static_cast<std::int64_t>(version),
                                              std::bit_cast<std::int64_t>(fingerprint),
                                              mine.iteration,
                                              static_cast<std::int64_t>(mine.generation),
                                              static_cast<std::int64_t>(hyper.size())};
  std::vector<std::int64_t> all(static_cast<std::size_t>(n) * kWords);
  check_mpi(MPI_Allgather(head.data(), kWords, MPI_INT64_T, all.data(), kWords, MPI_INT64_T, comm),
            "MPI_Allgather(synchronous ranking)");
  // The hyperparameters' words (agents of another layout may declare another number); every
  // agent sees the same counts, so all take this collective or none does.
  std::vector<int> counts(static_cast<std::size_t>(n));
  std::vector<int> displs(static_cast<std::size_t>(n));
  int total = 0;
  for (int r = 0; r < n; ++r) {
    counts[static_cast<std::size_t>(r)] =
        static_cast<int>(all[static_cast<std::size_t>(r) * kWords + 6]);
    displs[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<std::uint64_t> words(static_cast<std::size_t>(total));
  if (total > 0) {
    const std::span<const std::uint64_t> own = hyper.words();
    check_mpi(MPI_Allgatherv(own.data(), static_cast<int>(own.size()), MPI_UINT64_T, words.data(),
                             counts.data(), displs.data(), MPI_UINT64_T, comm),
              "MPI_Allgatherv(synchronous ranking's hyperparameters)");
  }
  std::vector<RosterEntry> out(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const std::size_t at = i * kWords;
    RosterEntry& e = out[i];
    e.rank = r;
    e.status.metric = std::bit_cast<double>(all[at]);
    e.status.state = static_cast<AgentState>(all[at + 1]);
    e.version = static_cast<std::uint64_t>(all[at + 2]);
    e.fingerprint = std::bit_cast<std::uint64_t>(all[at + 3]);
    e.status.iteration = all[at + 4];
    e.status.generation = static_cast<std::uint64_t>(all[at + 5]);
    // Same layout, same declarations: the values read as ours are read.
    if (e.fingerprint == fingerprint && static_cast<std::size_t>(counts[i]) == hyper.size()) {
      e.hyper = hyper;
      const auto from = words.begin() + displs[i];
      std::copy(from, from + counts[i], e.hyper.words().begin());
    }
  }
  return out;
}

void sync_barrier_over(MPI_Comm comm) {
  check_mpi(MPI_Barrier(comm), "MPI_Barrier(synchronous PBT)");
}

template class SoloExecutor<Window>;

}  // namespace paramwin::detail
