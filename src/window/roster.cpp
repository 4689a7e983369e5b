// The roster: each agent's status block under its own seqlock, read locally (same node) or
// over RMA in pipelined phases.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/rma_batch.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

void WindowImpl::set_status(const AgentStatus& status) {
  if (status.state > AgentState::paused) {
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
  // A new iteration: the outgoing report becomes the previous one (a fresh status is none).
  if (status.iteration != status_.iteration && status_.state != AgentState::fresh) {
    h.previous_iteration.store(static_cast<std::uint64_t>(status_.iteration),
                               std::memory_order_relaxed);
    h.previous_metric.store(std::bit_cast<std::uint64_t>(status_.metric),
                            std::memory_order_relaxed);
  }
  h.status_seq.store(seq + 2, std::memory_order_release);
  status_ = status;
  heartbeat_.beat(h);
}

namespace {

// @p hyper: the agent's roster copy of its hyperparameters (hyper_count words), kept only
// when its layout is this window's (same fingerprint): only then are they the same ones.
RosterEntry make_entry(int rank, const HeadWords& head, const StatusWords& s,
                       const std::uint64_t* hyper, const LivenessWords& live,
                       const Hyperparameters& own, std::uint64_t own_fingerprint) {
  RosterEntry e;
  e.rank = rank;
  e.liveness = to_liveness(live);
  e.version = head.version;
  e.fingerprint = head.fingerprint;
  e.publish_time = std::bit_cast<double>(head.publish_time);
  e.status_updates = s.seq / 2;
  e.status.iteration = static_cast<std::int64_t>(s.iteration);
  e.status.age = static_cast<std::int64_t>(s.age);
  e.status.metric = std::bit_cast<double>(s.metric);
  e.status.generation = s.generation;
  if (s.previous_iteration != kNoReport) {
    e.previous = MetricReport{.iteration = static_cast<std::int64_t>(s.previous_iteration),
                              .metric = std::bit_cast<double>(s.previous_metric)};
  }
  // An unknown state (a newer library's?) is read as left: never chosen, never ranked.
  e.status.state = s.state <= static_cast<std::uint64_t>(AgentState::paused)
                       ? static_cast<AgentState>(s.state)
                       : AgentState::left;
  if (!own.empty() && head.fingerprint == own_fingerprint) {
    e.hyper = own;
    std::copy(hyper, hyper + own.size(), e.hyper.words().begin());
  }
  return e;
}

}  // namespace

RosterEntry WindowImpl::read_local_roster(int rank, const SegmentHeader& h) const {
  HeadWords head{};
  StatusWords s{};
  std::uint64_t hyper[kMaxHyperparameters] = {};
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
    s.previous_iteration = h.previous_iteration.load(std::memory_order_relaxed);
    s.previous_metric = h.previous_metric.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < slots_.hyper_count; ++i) {
      hyper[i] = h.roster_hyper[i].load(std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.status_seq.load(std::memory_order_relaxed) == s.seq) {
      break;
    }
  }
  head.magic = h.magic.load(std::memory_order_relaxed);
  head.fingerprint = h.fingerprint.load(std::memory_order_relaxed);
  head.version = h.version.load(std::memory_order_acquire);
  head.publish_time = h.publish_time.load(std::memory_order_relaxed);
  RosterEntry e = make_entry(rank, head, s, hyper, load_liveness(h), hyper_, slots_.fingerprint);
  judge_->judge(e);
  return e;
}

RosterEntry WindowImpl::roster(int rank, double timeout_seconds) const {
  return roster(rank, timeout_seconds, graveyard_);
}

RosterEntry WindowImpl::roster(int rank, double timeout_seconds, Graveyard& graveyard) const {
  check_rank(rank, "roster:");
  check_roster_timeout(timeout_seconds);
  if (rank == rank_ || transport_for(rank) == Transport::shm) {
    return read_local_roster(rank, rank == rank_ ? header() : *shm_header(rank));
  }
  // Only this rank's block: a dead or busy third rank cannot hold it up.
  const int one[1] = {rank};
  return read_remote_rosters(one, timeout_seconds, false, graveyard).front();
}

std::vector<RosterEntry> WindowImpl::roster_all(double timeout_seconds) const {
  check_roster_timeout(timeout_seconds);
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
  if (!remote.empty()) {
    std::vector<RosterEntry> got = read_remote_rosters(remote, timeout_seconds, true, graveyard_);
    for (std::size_t i = 0; i < remote.size(); ++i) {
      out[static_cast<std::size_t>(remote[i])] = got[i];
    }
  }
  return out;
}

void WindowImpl::check_roster_timeout(double timeout_seconds) {
  if (!(timeout_seconds >= 0.0) || !std::isfinite(timeout_seconds)) {
    throw InvalidArgument("paramwin: roster: timeout_seconds must be finite and >= 0, got " +
                          std::to_string(timeout_seconds));
  }
}

namespace {

// The remote seqlock reads of one read_remote_rosters() call: per rank three phases —
// sequence word; header, status block and liveness line; sequence word again — retried from the
// start when the sequence moved. Each rank advances through its phases as its own reads complete,
// all ranks in flight together and polled through one MPI_Testsome: one rank that does not answer
// (busy outside MPI, or gone) holds up no other. With a deadline the reads land in an arena that
// outlives them: a read abandoned at the deadline completes later, into memory the graveyard keeps.
class RemoteRosterReads {
 public:
  RemoteRosterReads(std::span<const int> ranks, MPI_Win win, Graveyard& graveyard,
                    std::size_t hyper_count, double deadline)
      : ranks_(ranks),
        win_(win),
        graveyard_(graveyard),
        nh_(hyper_count),
        deadline_(deadline),
        seq_before_(arena_->make<std::uint64_t>(ranks.size())),
        seq_after_(arena_->make<std::uint64_t>(ranks.size())),
        heads_(arena_->make<HeadWords>(ranks.size())),
        status_(arena_->make<StatusWords>(ranks.size())),
        // The roster copy of the hyperparameters, read with the status block (same seqlock).
        hyper_(arena_->make<std::uint64_t>(std::max<std::size_t>(ranks.size() * nh_, 1))),
        live_(arena_->make<LivenessWords>(ranks.size())),
        requests_(kSlots * ranks.size(), MPI_REQUEST_NULL),
        readers_(ranks.size()),
        completed_(requests_.size()),
        statuses_(requests_.size()) {}

  // Starts the current phase of rank @p i (index into the ranks).
  void issue(std::size_t i) {
    switch (readers_[i].phase) {
      case 0: get(i, 0, &seq_before_[i], 8, kStatusOffset); break;
      case 1:
        get(i, 0, &heads_[i], sizeof(HeadWords), 0);
        get(i, 1, &status_[i], sizeof(StatusWords), kStatusOffset);
        if (nh_ != 0) get(i, 2, &hyper_[i * nh_], nh_ * sizeof(std::uint64_t), kRosterHyperOffset);
        get(i, 3, &live_[i], sizeof(LivenessWords), kLivenessOffset);
        break;
      default: get(i, 0, &seq_after_[i], 8, kStatusOffset); break;
    }
  }

  // Polls once: the indices of the ranks whose read settled now (an entry, or failed()).
  std::vector<std::size_t> poll() {
    int count = 0;
    const int code = MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count,
                                  completed_.data(), statuses_.data());
    // MPI_ERR_IN_STATUS: some reads failed (their target's process gone, the transport to it
    // broken): those ranks did not answer. Any other error is the window's.
    if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) check_mpi(code, "MPI_Testsome(roster)");
    std::vector<std::size_t> settled;
    for (int c = 0; c < count && count != MPI_UNDEFINED; ++c) {
      const auto k = static_cast<std::size_t>(c);
      const std::size_t i = static_cast<std::size_t>(completed_[k]) / kSlots;
      if (code == MPI_ERR_IN_STATUS && statuses_[k].MPI_ERROR != MPI_SUCCESS) {
        readers_[i].failed = true;
      }
      if (--readers_[i].in_flight > 0 || readers_[i].failed) continue;
      advance(i);
    }
    for (std::size_t i = 0; i < readers_.size(); ++i) {
      Reader& r = readers_[i];
      if (!r.reported && (r.done || (r.failed && r.in_flight == 0))) {
        r.reported = true;
        settled.push_back(i);
      }
    }
    return settled;
  }

  [[nodiscard]] bool done(std::size_t i) const noexcept { return readers_[i].done; }
  // Whether the read of rank @p i failed (an MPI error: it did not answer).
  [[nodiscard]] bool failed(std::size_t i) const noexcept { return readers_[i].failed; }
  [[nodiscard]] bool any_failed() const noexcept {
    return std::any_of(readers_.begin(), readers_.end(), [](const Reader& r) { return r.failed; });
  }

  // The entry of settled rank @p i (see make_entry).
  [[nodiscard]] RosterEntry entry(std::size_t i, const Hyperparameters& own,
                                  std::uint64_t own_fingerprint) const {
    return make_entry(ranks_[i], heads_[i], status_[i], &hyper_[i * nh_], live_[i], own,
                      own_fingerprint);
  }

  // Requests still in flight when the read ends early (deadline, error): to the graveyard
  // with the arena when there is a deadline, else completed here.
  void abandon() noexcept {
    std::vector<MPI_Request> open;
    for (MPI_Request r : requests_) {
      if (r != MPI_REQUEST_NULL) open.push_back(r);
    }
    std::fill(requests_.begin(), requests_.end(), MPI_REQUEST_NULL);
    if (open.empty()) return;
    if (deadline_ > 0.0) {
      try {
        graveyard_.requests.insert(graveyard_.requests.end(), open.begin(), open.end());
        graveyard_.arenas.push_back(arena_);
        return;
      } catch (...) {  // no memory to record them: wait for them instead
      }
    }
    MPI_Waitall(static_cast<int>(open.size()), open.data(), MPI_STATUSES_IGNORE);
  }

 private:
  static constexpr std::size_t kSlots = 4;  // requests per rank in flight (phase 1: up to 4)
  struct Reader {
    int phase = 0;  // 0: sequence word, 1: header and status, 2: sequence word again
    int in_flight = 0;
    int rounds = 0;
    bool done = false;
    bool failed = false;    // an MPI call of its read failed
    bool reported = false;  // poll() returned it
  };

  void get(std::size_t i, std::size_t slot, void* dst, std::size_t bytes, std::size_t offset) {
    if (readers_[i].failed) return;
    const int count = static_cast<int>(bytes);
    const int code = MPI_Rget(dst, count, MPI_BYTE, ranks_[i], static_cast<MPI_Aint>(offset), count,
                              MPI_BYTE, win_, &requests_[kSlots * i + slot]);
    if (code != MPI_SUCCESS) {  // its process gone, the transport to it broken: no answer
      requests_[kSlots * i + slot] = MPI_REQUEST_NULL;
      readers_[i].failed = true;
      return;
    }
    ++readers_[i].in_flight;
  }

  // A rank whose phase completed: the next phase, a retry, or its entry.
  void advance(std::size_t i) {
    Reader& r = readers_[i];
    if (r.phase < 2) {
      ++r.phase;
      issue(i);
      return;
    }
    const std::uint64_t before = seq_before_[i];
    if ((before & 1U) != 0 || before != seq_after_[i] || status_[i].seq != before) {
      if (++r.rounds > 10000) {
        throw Error("paramwin: roster read of rank " + std::to_string(ranks_[i]) +
                    " did not settle after 10000 rounds");
      }
      r.phase = 0;  // the owner wrote meanwhile: read again
      issue(i);
      return;
    }
    r.done = true;
  }

  std::span<const int> ranks_;
  MPI_Win win_;
  Graveyard& graveyard_;
  std::size_t nh_;
  double deadline_;
  std::shared_ptr<RmaArena> arena_ = std::make_shared<RmaArena>();
  std::uint64_t* seq_before_;
  std::uint64_t* seq_after_;
  HeadWords* heads_;
  StatusWords* status_;
  std::uint64_t* hyper_;
  LivenessWords* live_;
  std::vector<MPI_Request> requests_;
  std::vector<Reader> readers_;
  std::vector<int> completed_;
  std::vector<MPI_Status> statuses_;
};

}  // namespace

std::vector<RosterEntry> WindowImpl::read_remote_rosters(std::span<const int> ranks,
                                                         double timeout_seconds, bool mark_late,
                                                         Graveyard& graveyard) const {
  const std::size_t n = ranks.size();
  const double deadline = timeout_seconds > 0.0 ? MPI_Wtime() + timeout_seconds : 0.0;
  RemoteRosterReads reads(ranks, rma_win_.get(), graveyard, slots_.hyper_count, deadline);
  std::vector<RosterEntry> out(n);
  try {
    for (std::size_t i = 0; i < n; ++i) {
      reads.issue(i);
    }
    std::size_t left = n;
    while (left > 0) {
      for (const std::size_t i : reads.poll()) {
        --left;
        if (reads.failed(i)) {  // an MPI error: it does not answer (as a late rank)
          if (!mark_late) {     // as a rank that does not answer in time (callers skip it)
            throw TimeoutError(ranks[i], "paramwin: the roster read of rank " +
                                             std::to_string(ranks[i]) +
                                             " failed in MPI: it does not answer (its process "
                                             "may be gone)");
          }
          out[i] = RosterEntry{};
          out[i].rank = ranks[i];
          out[i].answered = false;
          continue;
        }
        out[i] = reads.entry(i, hyper_, slots_.fingerprint);
        judge_->judge(out[i]);
      }
      if (left > 0 && deadline > 0.0 && MPI_Wtime() > deadline) {
        int first_late = -1;
        for (std::size_t i = 0; i < n; ++i) {
          if (reads.done(i)) continue;
          if (first_late < 0) first_late = ranks[i];
          out[i] = RosterEntry{};
          out[i].rank = ranks[i];
          out[i].answered = false;
        }
        reads.abandon();
        if (!mark_late) {
          throw TimeoutError(first_late, timeout_text("roster read", first_late));
        }
        break;
      }
    }
  } catch (...) {
    reads.abandon();
    throw;
  }
  if (reads.any_failed()) reads.abandon();  // requests of failed reads still outstanding
  return out;
}

}  // namespace paramwin::detail
