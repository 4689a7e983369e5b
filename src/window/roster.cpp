// The roster: each agent's status block under its own seqlock, read locally (same node) or
// over RMA in pipelined phases.
#include <algorithm>
#include <atomic>
#include <bit>
#include <string>

#include "paramwin/error.hpp"
#include "window/rma_batch.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

void WindowImpl::set_status(const AgentStatus& status) {
  if (status.state > AgentState::left) {
    throw InvalidArgument("paramwin: set_status with an out-of-range AgentState");
  }
  SegmentHeader& h = header();
  const std::uint64_t seq = h.status_seq.load(std::memory_order_relaxed);
  h.status_seq.store(seq + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  h.iteration.store(static_cast<std::uint64_t>(status.iteration), std::memory_order_relaxed);
  h.age.store(static_cast<std::uint64_t>(status.age), std::memory_order_relaxed);
  h.metric.store(std::bit_cast<std::uint64_t>(status.metric), std::memory_order_relaxed);
  h.generation.store(status.generation, std::memory_order_relaxed);
  h.state.store(static_cast<std::uint64_t>(status.state), std::memory_order_relaxed);
  h.status_seq.store(seq + 2, std::memory_order_release);
  status_ = status;
}

namespace {

RosterEntry make_entry(int rank, const HeadWords& head, const StatusWords& s) {
  RosterEntry e;
  e.rank = rank;
  e.version = head.version;
  e.fingerprint = head.fingerprint;
  e.publish_time = std::bit_cast<double>(head.publish_time);
  e.status_updates = s.seq / 2;
  e.status.iteration = static_cast<std::int64_t>(s.iteration);
  e.status.age = static_cast<std::int64_t>(s.age);
  e.status.metric = std::bit_cast<double>(s.metric);
  e.status.generation = s.generation;
  e.status.state = s.state <= 3 ? static_cast<AgentState>(s.state) : AgentState::left;
  return e;
}

}  // namespace

RosterEntry WindowImpl::read_local_roster(int rank, const SegmentHeader& h) const {
  HeadWords head{};
  StatusWords s{};
  for (;;) {
    s.seq = h.status_seq.load(std::memory_order_acquire);
    if ((s.seq & 1U) != 0) {
      continue;  // the owner is between two stores; it never blocks, so this is brief
    }
    s.iteration = h.iteration.load(std::memory_order_relaxed);
    s.age = h.age.load(std::memory_order_relaxed);
    s.metric = h.metric.load(std::memory_order_relaxed);
    s.generation = h.generation.load(std::memory_order_relaxed);
    s.state = h.state.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.status_seq.load(std::memory_order_relaxed) == s.seq) {
      break;
    }
  }
  head.magic = h.magic.load(std::memory_order_relaxed);
  head.fingerprint = h.fingerprint.load(std::memory_order_relaxed);
  head.version = h.version.load(std::memory_order_acquire);
  head.publish_time = h.publish_time.load(std::memory_order_relaxed);
  return make_entry(rank, head, s);
}

RosterEntry WindowImpl::roster(int rank) const {
  check_rank(rank, "roster:");
  if (rank == rank_ || transport_for(rank) == Transport::shm) {
    return read_local_roster(rank, rank == rank_ ? header() : *shm_header(rank));
  }
  std::vector<RosterEntry> all = roster_all();
  return all[static_cast<std::size_t>(rank)];
}

std::vector<RosterEntry> WindowImpl::roster_all() const {
  std::vector<RosterEntry> out(static_cast<std::size_t>(size_));
  std::vector<int> remote;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || transport_for(r) == Transport::shm) {
      out[static_cast<std::size_t>(r)] =
          read_local_roster(r, r == rank_ ? header() : *shm_header(r));
    } else {
      remote.push_back(r);
    }
  }
  if (remote.empty()) {
    return out;
  }
  // Remote seqlock read in three pipelined phases over all remote ranks: sequence word,
  // header and status block, sequence word again. Retry the ranks whose sequence moved.
  const std::size_t n = remote.size();
  std::vector<std::uint64_t> seq_after(n);
  std::vector<HeadWords> heads(n);
  std::vector<StatusWords> status(n);
  std::vector<int> pending = remote;
  for (int round = 0; !pending.empty(); ++round) {
    if (round > 10000) {
      throw Error("paramwin: roster read did not settle after 10000 rounds");
    }
    std::vector<std::uint64_t> seq_before(pending.size());
    RmaBatch batch(rma_win_.get());
    for (std::size_t i = 0; i < pending.size(); ++i) {
      batch.get(&seq_before[i], 8, pending[i], kStatusOffset);
    }
    batch.wait();
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t slot = static_cast<std::size_t>(
          std::find(remote.begin(), remote.end(), pending[i]) - remote.begin());
      batch.get(&heads[slot], sizeof(HeadWords), pending[i], 0);
      batch.get(&status[slot], sizeof(StatusWords), pending[i], kStatusOffset);
    }
    batch.wait();
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t slot = static_cast<std::size_t>(
          std::find(remote.begin(), remote.end(), pending[i]) - remote.begin());
      batch.get(&seq_after[slot], 8, pending[i], kStatusOffset);
    }
    batch.wait();
    std::vector<int> again;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t slot = static_cast<std::size_t>(
          std::find(remote.begin(), remote.end(), pending[i]) - remote.begin());
      const std::uint64_t before = seq_before[i];
      if ((before & 1U) != 0 || before != seq_after[slot] || status[slot].seq != before) {
        again.push_back(pending[i]);
      } else {
        out[static_cast<std::size_t>(pending[i])] =
            make_entry(pending[i], heads[slot], status[slot]);
      }
    }
    pending.swap(again);
  }
  return out;
}

}  // namespace paramwin::detail
