// One averaging round: the peers' rosters screened (paused, left, stale, never published,
// unreachable), the weights, the one-sided weighted pull (inline: straight into the
// parameters with momentum = self weight; background: into a scratch, kept as a correction),
// the synchronous mean, and the round as JSON.
#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "averaging/averaging_state.hpp"
#include "averaging/mean.hpp"
#include "detail/mpi_check.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

void record_reads(const PullResult& result, double self, AveragingRound& out) {
  std::size_t d = 0;
  for (AveragingPeer& p : out.peers) {
    if (p.skipped != SkipReason::none) {
      continue;
    }
    const DonorRead& read = result.donors[d++];
    p.version = read.version;
    p.stamp = read.stamp;
    p.transport = read.transport;
    p.skipped = read.skipped ? SkipReason::non_finite : SkipReason::none;
    p.weight = (1.0 - self) * read.weight;
  }
}

namespace {

/// Why the peer of @p entry may not be read now (none: it may).
SkipReason roster_verdict(const RosterEntry& entry, const AveragingOptions& o, SeenVersion& seen,
                          std::int64_t step) {
  if (entry.version == 0) {
    return SkipReason::never_published;
  }
  if (entry.status.state == AgentState::paused || entry.status.state == AgentState::rebirth) {
    return SkipReason::paused;
  }
  if (entry.status.state == AgentState::left) {
    return SkipReason::left;
  }
  if (entry.suspect) {
    return SkipReason::suspect;
  }
  if (entry.version != seen.version) {
    seen = {.version = entry.version, .since_step = step};
  } else if (o.stale_steps > 0 && step - seen.since_step >= o.stale_steps) {
    return SkipReason::stale;
  }
  if (o.stale_seconds > 0.0 && MPI_Wtime() - entry.publish_time > o.stale_seconds) {
    return SkipReason::stale;
  }
  return SkipReason::none;
}

/// "rank R reason, ..." for the peers of @p peers that were left out.
std::string skipped_text(const std::vector<AveragingPeer>& peers) {
  std::string text;
  for (const AveragingPeer& p : peers) {
    if (p.skipped != SkipReason::none) {
      text += (text.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p.rank) + " " +
              std::string(enum_name(p.skipped));
    }
  }
  return text;
}

template <class T>
void add_correction(void* data, const std::vector<double>& correction) {
  T* out = static_cast<T*>(data);
  for (std::size_t i = 0; i < correction.size(); ++i) {
    out[i] = static_cast<T>(static_cast<double>(out[i]) + correction[i]);
  }
}

template <class T>
void keep_correction(const void* own, const std::vector<char>& mix, double peers_weight,
                     std::vector<double>& correction) {
  const T* x = static_cast<const T*>(own);
  const T* m = reinterpret_cast<const T*>(mix.data());  // the scratch holds T
  for (std::size_t i = 0; i < correction.size(); ++i) {
    correction[i] = peers_weight * (static_cast<double>(m[i]) - static_cast<double>(x[i]));
  }
}

}  // namespace

void AveragingState::screen(std::span<const int> peers, std::int64_t step, WorkerReads* reads,
                            AveragingRound& out, bool given_weights) {
  for (std::size_t i = 0; i < peers.size(); ++i) {
    AveragingPeer peer{.rank = peers[i]};
    try {
      const RosterEntry entry = reads != nullptr
                                    ? reads->roster(peers[i], options_.timeout_seconds)
                                    : window_.roster(peers[i], options_.timeout_seconds);
      peer.version = entry.version;
      peer.skipped =
          roster_verdict(entry, options_, seen_[static_cast<std::size_t>(peers[i])], step);
    } catch (const TimeoutError&) {
      peer.skipped = SkipReason::unreachable;
    }
    if (given_weights && peer.skipped == SkipReason::none && !options_.peer_weights.empty() &&
        options_.peer_weights[i] <= 0.0) {
      peer.skipped = SkipReason::zero_weight;
    }
    out.peers.push_back(peer);
  }
}

bool AveragingState::plan_round(std::span<const int> peers, std::int64_t step, WorkerReads* reads,
                                AveragingRound& out, RoundPlan& plan) {
  screen(peers, step, reads, out);
  for (std::size_t i = 0; i < out.peers.size(); ++i) {
    const AveragingPeer& p = out.peers[i];
    if (p.skipped == SkipReason::none) {
      plan.donors.push_back(p.rank);
      plan.weights.push_back(options_.peer_weights.empty() ? 1.0 : options_.peer_weights[i]);
    }
  }
  if (plan.donors.empty()) {
    out.note = peers.empty()
                   ? "no peer in this round's topology"
                   : "no usable peer (" + skipped_text(out.peers) + "): parameters unchanged";
    return false;
  }
  plan.self = options_.self_weight;
  if (std::isnan(plan.self)) {  // symmetric: each exchange also moves the peer, by as much
    const auto usable = static_cast<double>(plan.donors.size());
    plan.self = options_.symmetric ? (usable + 1.0) / (2.0 * usable + 1.0) : 1.0 / (usable + 1.0);
  } else if (options_.normalize_weights && !options_.peer_weights.empty()) {
    double sum = plan.self;
    for (const double w : options_.peer_weights) {
      sum += w;
    }
    plan.self /= sum;
  }
  return true;
}

PullOptions AveragingState::pull_options(const RoundPlan& plan, double momentum) const {
  return PullOptions{.reduction = Reduction::weighted,
                     .weights = plan.weights,
                     .momentum = momentum,
                     .non_finite = NonFinitePolicy::skip_donor,
                     .timeout_seconds = options_.timeout_seconds,
                     .landing = Landing::transactional};
}

void AveragingState::guarded_read(AveragingRound& out, const std::function<void()>& read) {
  try {
    read();
  } catch (const DonorError& e) {  // every peer non-finite, or past the deadline: unchanged
    for (AveragingPeer& p : out.peers) {
      if (p.skipped == SkipReason::none) {
        p.skipped = dynamic_cast<const TimeoutError*>(&e) != nullptr ? SkipReason::unreachable
                                                                     : SkipReason::non_finite;
      }
    }
    out.note = std::string("read failed, parameters unchanged: ") + e.what();
  }
}

const std::vector<int>& AveragingState::round_peers() {
  if (peers_round_ != rounds_) {
    peers_ = options_.topology.peers(rounds_, population_rank(), population_size());
    peers_round_ = rounds_;
  }
  return peers_;
}

std::vector<int> AveragingState::round_ranks() {
  std::vector<int> ranks = round_peers();
  if (!members_.empty()) {
    for (int& r : ranks) {
      r = members_.at(static_cast<std::size_t>(r));
    }
  }
  return ranks;
}

void AveragingState::join_round(const BoundLayers<LayerRef>& params, AveragingRound& out) {
  quiesce();  // a background read in flight, and a pending correction, are dropped
  pending_ = false;
  out.kind = RoundKind::joined;
  std::vector<int> peers;
  if (members_.empty()) {
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) {
        peers.push_back(r);
      }
    }
  } else {
    for (const int r : members_) {
      if (r != rank_) {
        peers.push_back(r);
      }
    }
  }
  screen(peers, steps_, nullptr, out, false);
  RoundPlan plan;
  for (const AveragingPeer& p : out.peers) {
    if (p.skipped == SkipReason::none) {
      plan.donors.push_back(p.rank);
      plan.weights.push_back(1.0);
    }
  }
  if (plan.donors.empty()) {
    out.note = "joining: no usable member (" +
               (peers.empty() ? std::string("none") : skipped_text(out.peers)) +
               "): parameters unchanged, nothing published";
    return;
  }
  plan.self = 0.0;
  guarded_read(out, [&] {
    const PullResult result = window_.pull(plan.donors, params, pull_options(plan, 0.0));
    out.bytes = result.bytes;
    record_reads(result, 0.0, out);
    out.applied = true;
    out.self_weight = 0.0;
  });
  if (out.applied) {
    joining_ = false;
  }
}

void AveragingState::gossip(const BoundLayers<LayerRef>& params, AveragingRound& out) {
  const std::vector<int> peers = round_ranks();
  out.kind = RoundKind::gossip;
  out.round = rounds_++;
  if (options_.background) {
    out.read_step = steps_;  // read now, inline; its correction lands at the next step
  }
  RoundPlan plan;
  if (!plan_round(peers, steps_, nullptr, out, plan)) {
    return;
  }
  if (options_.symmetric) {
    exchange_round(params, plan, out);
    return;
  }
  const PullOptions pull = pull_options(plan, options_.background ? 0.0 : plan.self);
  guarded_read(out, [&] {
    if (options_.background) {
      begin_correction(params, plan.donors, pull, plan.self, out);
    } else {
      const PullResult result = window_.pull(plan.donors, params, pull);
      out.bytes = result.bytes;
      record_reads(result, plan.self, out);
      out.applied = true;
    }
    out.self_weight = plan.self;
  });
}

void AveragingState::begin_correction(const BoundLayers<LayerRef>& params,
                                      std::span<const int> donors, const PullOptions& pull,
                                      double self, AveragingRound& out) {
  const Layout& layout = window_.layout();
  if (correction_.size() != layout.size()) {  // allocated once, reused by every round
    correction_.resize(layout.size());
    inline_scratch_.resize(layout.size());
    for (std::size_t l = 0; l < layout.size(); ++l) {
      correction_[l].resize(layout[l].count);
      inline_scratch_[l].resize(layout[l].count * dtype_size(layout[l].dtype));
    }
  }
  std::vector<LayerRef> refs;
  refs.reserve(layout.size());
  for (std::size_t l = 0; l < layout.size(); ++l) {
    refs.emplace_back("", inline_scratch_[l].data(), layout[l].count, layout[l].dtype);
  }
  const PullResult result = window_.pull(donors, std::span<const LayerRef>(refs), pull);
  record_reads(result, self, out);
  const double peers_weight = 1.0 - self;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    if (layout[l].dtype == DType::float32) {
      keep_correction<float>(params[l].data(), inline_scratch_[l], peers_weight, correction_[l]);
    } else {
      keep_correction<double>(params[l].data(), inline_scratch_[l], peers_weight, correction_[l]);
    }
  }
  out.bytes = result.bytes;
  pending_ = true;
}

bool AveragingState::apply_correction(const BoundLayers<LayerRef>& params) {
  if (!pending_) {
    return false;
  }
  for (std::size_t l = 0; l < correction_.size(); ++l) {
    if (window_.layout()[l].dtype == DType::float32) {
      add_correction<float>(params[l].data(), correction_[l]);
    } else {
      add_correction<double>(params[l].data(), correction_[l]);
    }
  }
  pending_ = false;
  return true;
}

void allreduce_mean(const BoundLayers<LayerRef>& params, MPI_Comm comm, int size,
                    const char* what) {
  const double inverse = 1.0 / static_cast<double>(size);
  for (std::size_t l = 0; l < params.size(); ++l) {
    const LayerRef& ref = params[l];
    const int count = checked_int(ref.count(), what);
    if (ref.dtype() == DType::float32) {
      auto* x = static_cast<float*>(ref.data());
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, x, count, MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
      for (std::size_t i = 0; i < ref.count(); ++i) {
        x[i] = static_cast<float>(static_cast<double>(x[i]) * inverse);
      }
    } else {
      auto* x = static_cast<double*>(ref.data());
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
      for (std::size_t i = 0; i < ref.count(); ++i) {
        x[i] *= inverse;
      }
    }
  }
}

void AveragingState::synchronous_mean(const BoundLayers<LayerRef>& params) {
  allreduce_mean(params, sync_comm_.get(), size_, "AveragingAgent: layer elements");
}

}  // namespace paramwin::detail

namespace paramwin {

std::string to_json(const AveragingRound& round) {
  nlohmann::ordered_json j;
  j["rank"] = round.rank;
  j["step"] = round.step;
  j["round"] = round.round;
  j["kind"] = std::string(enum_name(round.kind));
  j["applied"] = round.applied;
  j["background_applied"] = round.background_applied;
  j["overlapped"] = round.overlapped;
  j["read_step"] = round.read_step;
  j["started_round"] = round.started_round;
  j["busy"] = round.busy;
  j["received"] = round.received;
  j["self_weight"] = round.self_weight;
  nlohmann::ordered_json peers = nlohmann::ordered_json::array();
  for (const AveragingPeer& p : round.peers) {
    nlohmann::ordered_json peer;
    peer["rank"] = p.rank;
    peer["version"] = p.version;
    peer["stamp"] = p.stamp;
    peer["weight"] = p.weight;
    peer["skipped"] = std::string(enum_name(p.skipped));
    peer["transport"] = std::string(enum_name(p.transport));
    peers.push_back(peer);
  }
  j["peers"] = peers;
  if (!round.note.empty()) {
    j["note"] = round.note;
  }
  j["paused"] = round.paused;
  j["published"] = round.published;
  if (round.joining) {
    j["joining"] = true;
  }
  j["version"] = round.version;
  j["bytes"] = round.bytes;
  j["seconds"] = round.seconds;
  return j.dump();
}

}  // namespace paramwin
