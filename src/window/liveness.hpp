#pragma once
// Liveness (docs/elastic.md): the owner's heartbeat in its segment header, and each reader's
// judgement of the others from what it observes of their heartbeats and processes, with no
// messages and nothing asked of the MPI library (which does not report failures reliably).

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "paramwin/roster.hpp"
#include "paramwin/window_options.hpp"
#include "window/segment.hpp"

namespace paramwin::detail {

/// This process's host id: a hash of the host name and of its PID namespace, so that two
/// processes with one id can see each other's pids.
[[nodiscard]] std::uint64_t host_id();

/// Writes pid, host and a fresh random incarnation into a new segment's header.
void init_liveness(SegmentHeader& h);

/// Draws a new incarnation into @p h (different from the one it holds): a new life of the
/// same process in its segment.
void renew_incarnation(SegmentHeader& h) noexcept;

/// The liveness line of @p h (owner or same-node reader).
[[nodiscard]] LivenessWords load_liveness(const SegmentHeader& h) noexcept;

/// The public form of @p w.
[[nodiscard]] Liveness to_liveness(const LivenessWords& w) noexcept;

/// Whether the process @p pid of this host still runs (a zombie does not).
[[nodiscard]] bool process_alive(std::int64_t pid) noexcept;

/// The owner's side: one beat per set_status or publish.
class Heartbeat {
 public:
  /// Advances @p h's heartbeat and its moving average of the time between beats.
  void beat(SegmentHeader& h) noexcept;

 private:
  std::chrono::steady_clock::time_point last_{};
  double average_ns_ = 0.0;
};

/// One reader's judgement of the other agents of a window. Thread-safe: the trainer's thread
/// and an averaging worker read rosters of one window.
class LivenessJudge {
 public:
  LivenessJudge(int size, int self, const LivenessOptions& options);

  /// Sets @p entry's suspect and suspect_reason from what this reader has observed of its
  /// rank (answered entries: their liveness was read with them). The pid rule is checked at
  /// the first look and whenever the heartbeat has not moved since the previous one; a process
  /// once found gone stays gone for that incarnation, whatever beats a later look carries (the
  /// words are read before the pid is checked: they may predate the death). The silence is
  /// timed from the first look at the current heartbeat.
  void judge(RosterEntry& entry);

 private:
  struct Seen {
    bool any = false;
    std::uint64_t heartbeat = 0;
    std::uint64_t incarnation = 0;
    double since = 0.0;  // steady seconds at which this heartbeat was first observed
    // This incarnation's process was found gone: final. An entry read just before the
    // process ended may still carry beats newer than the last look; they never revive it.
    std::int64_t gone_pid = 0;
  };
  int self_;
  LivenessOptions options_;
  std::uint64_t host_;
  std::mutex mutex_;
  std::vector<Seen> seen_;
};

}  // namespace paramwin::detail
