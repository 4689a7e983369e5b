// SoloExecutor: a one-rank agent's rebirth (see solo_executor.hpp).
#include "agent/solo_executor.hpp"

#include <algorithm>
#include <array>
#include <bit>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

std::vector<RosterEntry> SoloExecutor::agree_ranking(const AgentStatus& mine,
                                                     const Hyperparameters& hyper) {
  const MPI_Comm comm = w_.comm();
  int n = 0;
  check_mpi(MPI_Comm_size(comm, &n), "MPI_Comm_size");
  // metric, state, version, fingerprint, iteration, generation, number of hyperparameters
  constexpr int kWords = 7;
  const std::array<std::int64_t, kWords> head{std::bit_cast<std::int64_t>(mine.metric),
                                              static_cast<std::int64_t>(mine.state),
                                              static_cast<std::int64_t>(w_.version()),
                                              std::bit_cast<std::int64_t>(fingerprint()),
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
    if (e.fingerprint == fingerprint() && static_cast<std::size_t>(counts[i]) == hyper.size()) {
      e.hyper = hyper;
      const auto from = words.begin() + displs[i];
      std::copy(from, from + counts[i], e.hyper.words().begin());
    }
  }
  return out;
}

void SoloExecutor::sync_barrier() {
  check_mpi(MPI_Barrier(w_.comm()), "MPI_Barrier(synchronous PBT)");
}

std::uint64_t SoloExecutor::fingerprint() {
  if (!fingerprint_) fingerprint_ = w_.roster(w_.rank()).fingerprint;
  return *fingerprint_;
}

StepAgreement SoloExecutor::agree(const std::string& local_error, double metric,
                                  bool publish_pending, bool paused) {
  if (!local_error.empty()) throw InvalidArgument(local_error);
  return StepAgreement{.metric = metric, .any_publish_pending = publish_pending, .paused = paused};
}

RebirthPlan SoloExecutor::share(RebirthPlan plan, std::exception_ptr leader_error) {
  if (leader_error) std::rethrow_exception(leader_error);
  return plan;
}

void SoloExecutor::share_reset(std::span<const LayerRef> /*ordered*/,
                               std::exception_ptr leader_error) {
  if (leader_error) std::rethrow_exception(leader_error);
}

PullOutcome SoloExecutor::pull(const RebirthPlan& plan, const PullOptions& options,
                               const BoundLayers<LayerRef>& ordered, StepEvent& event) {
  const auto t = StepClock::now();
  try {
    // Transactional pulls write into the caller's layers only once every donor's snapshot
    // has been read whole; a direct one (Landing::direct) may fail midway (partial below).
    const PullResult r = w_.pull(plan.donors, ordered, options);
    event.seconds.pull += seconds_since(t);
    event.donors = donor_records(plan, r);
    event.bytes += r.bytes;
    PullOutcome outcome{.ok = true};
    record_donor_hyper(r, outcome);
    return outcome;
  } catch (const PartialPullError& e) {
    event.seconds.pull += seconds_since(t);
    return PullOutcome{.ok = false,
                       .blame = e.rank(),
                       .retry = false,
                       .partial = true,
                       .why = e.what()};
  } catch (const DonorError& e) {
    event.seconds.pull += seconds_since(t);
    return PullOutcome{.ok = false, .blame = e.rank(), .retry = false, .why = e.what()};
  }
}

}  // namespace paramwin::detail
