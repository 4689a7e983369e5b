// SoloExecutor: a one-rank agent's rebirth (see solo_executor.hpp).
#include "agent/solo_executor.hpp"

#include "paramwin/error.hpp"

namespace paramwin::detail {

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
