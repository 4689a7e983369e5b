// Liveness: heartbeats written by owners, judged by readers (see liveness.hpp).
#include "window/liveness.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

namespace paramwin::detail {
namespace {

double steady_seconds() noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::uint64_t fnv1a(const std::string& text) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string format_seconds(double s) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", s);
  return buffer;
}

}  // namespace

std::uint64_t host_id() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  struct stat ns {};
  const std::uint64_t pid_namespace =
      stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<std::uint64_t>(ns.st_ino) : 0;
  const std::uint64_t id = fnv1a(std::string(name) + ":" + std::to_string(pid_namespace));
  return id == 0 ? 1 : id;  // 0 means "not written" to readers
}

namespace {

// A random incarnation, never 0 and never @p current.
std::uint64_t draw_incarnation(std::uint64_t current) {
  std::random_device device;
  std::uint64_t incarnation =
      (static_cast<std::uint64_t>(device()) << 32U) ^ device() ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      static_cast<std::uint64_t>(getpid());
  while (incarnation == 0 || incarnation == current) ++incarnation;
  return incarnation;
}

}  // namespace

void init_liveness(SegmentHeader& h) {
  h.pid.store(static_cast<std::uint64_t>(getpid()), std::memory_order_relaxed);
  h.host.store(host_id(), std::memory_order_relaxed);
  h.incarnation.store(draw_incarnation(0), std::memory_order_relaxed);
  h.heartbeat.store(0, std::memory_order_relaxed);
  h.beat_interval_ns.store(0, std::memory_order_relaxed);
}

void renew_incarnation(SegmentHeader& h) noexcept {
  try {
    h.incarnation.store(draw_incarnation(h.incarnation.load(std::memory_order_relaxed)),
                        std::memory_order_relaxed);
  } catch (...) {  // std::random_device could not be opened: still a different value
    const std::uint64_t next = h.incarnation.load(std::memory_order_relaxed) + 1;
    h.incarnation.store(next == 0 ? 1 : next, std::memory_order_relaxed);
  }
}

LivenessWords load_liveness(const SegmentHeader& h) noexcept {
  return {.heartbeat = h.heartbeat.load(std::memory_order_relaxed),
          .pid = h.pid.load(std::memory_order_relaxed),
          .host = h.host.load(std::memory_order_relaxed),
          .incarnation = h.incarnation.load(std::memory_order_relaxed),
          .beat_interval_ns = h.beat_interval_ns.load(std::memory_order_relaxed)};
}

Liveness to_liveness(const LivenessWords& w) noexcept {
  return {.heartbeat = w.heartbeat,
          .pid = static_cast<std::int64_t>(w.pid),
          .host = w.host,
          .incarnation = w.incarnation,
          .beat_interval_seconds = static_cast<double>(w.beat_interval_ns) * 1e-9};
}

bool process_alive(std::int64_t pid) noexcept {
  if (pid <= 0) return true;  // not known: nothing to judge by
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  // A process that died but was not reaped yet (a zombie) still answers kill(pid, 0).
  try {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;  // gone meanwhile
    const std::size_t close = line.rfind(')');
    return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
  } catch (...) {
    return true;
  }
}

void Heartbeat::beat(SegmentHeader& h) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (last_ != std::chrono::steady_clock::time_point{}) {
    const double ns = std::chrono::duration<double, std::nano>(now - last_).count();
    // A moving average over about 16 beats; the first interval seeds it.
    average_ns_ = average_ns_ == 0.0 ? ns : average_ns_ + (ns - average_ns_) / 16.0;
    h.beat_interval_ns.store(static_cast<std::uint64_t>(average_ns_), std::memory_order_relaxed);
  }
  last_ = now;
  h.heartbeat.store(h.heartbeat.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

namespace {

std::string gone_reason(std::int64_t pid, double silent) {
  return "its process is gone (pid " + std::to_string(pid) + " on this host; no heartbeat for " +
         format_seconds(silent) + " s)";
}

}  // namespace

LivenessJudge::LivenessJudge(int size, int self, const LivenessOptions& options)
    : self_(self), options_(options), host_(host_id()), seen_(static_cast<std::size_t>(size)) {}

void LivenessJudge::judge(RosterEntry& entry) {
  entry.suspect = false;
  entry.suspect_reason.clear();
  if (entry.rank == self_ || entry.rank < 0 || !entry.answered) return;
  const Liveness& l = entry.liveness;
  const double now = steady_seconds();
  double silent = 0.0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    Seen& s = seen_.at(static_cast<std::size_t>(entry.rank));
    const bool first = !s.any;
    const bool gone =
        s.any && s.gone_pid != 0 && s.gone_pid == l.pid && s.incarnation == l.incarnation;
    if (!gone && (first || l.heartbeat != s.heartbeat || l.incarnation != s.incarnation)) {
      s = {.any = true, .heartbeat = l.heartbeat, .incarnation = l.incarnation, .since = now};
      if (!first) return;  // it beat since the last look: alive
      // The first look: nothing to time a silence by, but a process that is gone is gone.
    }
    silent = now - s.since;
    if (gone) {
      entry.suspect = true;
      entry.suspect_reason = gone_reason(l.pid, silent);
      return;
    }
  }
  // The words were read before this check: a process that ended meanwhile may have beaten
  // after them. Gone is therefore remembered (above), never undone by a later beat.
  if (l.host == host_ && !process_alive(l.pid)) {
    entry.suspect = true;
    entry.suspect_reason = gone_reason(l.pid, silent);
    const std::lock_guard<std::mutex> lock(mutex_);
    Seen& s = seen_.at(static_cast<std::size_t>(entry.rank));
    if (s.incarnation == l.incarnation) s.gone_pid = l.pid;
    return;
  }
  if (options_.suspect_seconds <= 0.0 || l.heartbeat == 0) return;
  const double bound =
      std::max(options_.suspect_seconds, options_.suspect_beats * l.beat_interval_seconds);
  if (silent > bound) {
    entry.suspect = true;
    entry.suspect_reason =
        "no heartbeat for " + format_seconds(silent) + " s (bound " + format_seconds(bound) + " s)";
  }
}

}  // namespace paramwin::detail
