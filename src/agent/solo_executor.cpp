// SoloExecutor: a one-rank agent's rebirth (see solo_executor.hpp).
#include "agent/solo_executor.hpp"

#include <array>
#include <bit>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

std::vector<RosterEntry> SoloExecutor::agree_ranking(double metric, AgentState state) {
  const MPI_Comm comm = w_.comm();
  int n = 0;
  check_mpi(MPI_Comm_size(comm, &n), "MPI_Comm_size");
  constexpr int kWords = 4;  // metric, state, version, fingerprint
  const std::array<std::int64_t, kWords> mine{std::bit_cast<std::int64_t>(metric),
                                              static_cast<std::int64_t>(state),
                                              static_cast<std::int64_t>(w_.version()),
                                              std::bit_cast<std::int64_t>(fingerprint())};
  std::vector<std::int64_t> all(static_cast<std::size_t>(n) * kWords);
  check_mpi(MPI_Allgather(mine.data(), kWords, MPI_INT64_T, all.data(), kWords, MPI_INT64_T, comm),
            "MPI_Allgather(synchronous ranking)");
  std::vector<RosterEntry> out(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * kWords;
    RosterEntry& e = out[static_cast<std::size_t>(r)];
    e.rank = r;
    e.status.metric = std::bit_cast<double>(all[at]);
    e.status.state = static_cast<AgentState>(all[at + 1]);
    e.version = static_cast<std::uint64_t>(all[at + 2]);
    e.fingerprint = std::bit_cast<std::uint64_t>(all[at + 3]);
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
