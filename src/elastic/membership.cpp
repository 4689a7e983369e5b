// Membership epochs (docs/elastic.md, "Epochs and spares"): the coordinator's judgement of
// the members, the proposal / answer / commit exchange over point-to-point messages, and the
// epoch's communicator built by MPI_Comm_create_group over the new epoch's processes only.
#include "paramwin/membership.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/liveness.hpp"

namespace paramwin {
namespace {

// Message tags on the membership's own duplicate of the world communicator.
enum Tag : int {
  kPropose =
      1,  // [epoch, nslots, members..., ndead, (slot, iteration, by_pid)..., nspares, spares...]
  kAnswer = 2,  // [epoch, ok]
  kCommit = 3,  // [epoch]
  kAbort = 4,   // [epoch]
  kEvict = 5,   // [epoch, nslots, members...]
  kResign = 6,  // [epoch, slot]
  kSpare = 7,   // []: the sender is a spare now
  kDone = 8,    // [epoch, slot]
  kStop = 9,    // []: the population finished
  // A refill of the spares (SpawnOptions): [id, nspawn, root, nlive, live..., nslots,
  // members..., nspares, spares...] to every live process but the proposer; answered
  // [id, ok], then committed or aborted [id].
  kRefill = 10,
  kRefillAnswer = 11,
  kRefillCommit = 12,
  kRefillAbort = 13,
  // A spawn ahead (docs/elastic.md, "Refilling the spares"): the coordinator asks one live
  // spare to spawn the new spares alone while the members train on, and tells every process
  // which spare is busy: [id, nspawn, spawner] to every process of the population.
  kAhead = 14,
  // The spawner's outcome, to every process: [id, nspawn, outcome, port...] (1: its new
  // processes wait for the merge, a kRefill with join 2, at the port it opened, one char per
  // value; 0: the spawn failed, refills stop; -1: it declined, no longer a spare).
  kAheadReady = 15,
};
// On a spawn ahead's own communicator (the spawner and its new processes): the spawner's word
// to them, [1] merge (they accept the population's connection at its port) or [0] stop.
constexpr int kAheadGoTag = 7;
// MPI_Comm_create_group's tags: an epoch's kCommTagBase + epoch % 30000, create_members_comm's
// kMembersTagBase + epoch % 1000 (all below 32767, the least MPI_TAG_UB allowed).
constexpr int kCommTagBase = 1000;
constexpr int kMembersTagBase = 31000;
// A refill's MPI_Comm_create_group over the live processes: kRefillTagBase + refills % 700.
constexpr int kRefillTagBase = 32000;
int epoch_tag(std::uint64_t epoch) { return kCommTagBase + static_cast<int>(epoch % 30000); }

using Message = std::vector<std::int64_t>;

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// Whether PARAMWIN_MEMBERSHIP_TRACE asks for every decision on stderr (docs/elastic.md,
/// "When a population does not recover"): set, non-empty and not "0".
bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("PARAMWIN_MEMBERSHIP_TRACE");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

/// "[a b c]" for a trace line.
std::string listed(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(v[i]);
  }
  return out + "]";
}

/// This process's executable and arguments (what a refill spawns by default).
std::string own_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string cur;
  for (const char c : all) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!args.empty()) args.erase(args.begin());  // argv[0]
  return args;
}

/// @p call (an MPI name-service call, whose errors MPI raises on MPI_COMM_WORLD or, in MPI 4,
/// MPI_COMM_SELF) with both returning errors instead of aborting; their handlers restored.
template <class Call>
int quietly(Call&& call) {
  MPI_Errhandler world = MPI_ERRHANDLER_NULL;
  MPI_Errhandler self = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  const int rc = call();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
  MPI_Errhandler_free(&world);
  MPI_Errhandler_free(&self);
  return rc;
}

/// The name a joiner publishes its port under (JoinOptions).
std::string join_name(const std::string& service) { return service + ".join"; }

/// Whether this MPI has MPI_Comm_spawn here (Open MPI; MPICH's ch4:ucx has not).
constexpr bool kCanSpawn =
#if defined(OPEN_MPI)
    true;
#else
    false;
#endif

}  // namespace

struct Membership::State {
  MembershipOptions o;
  MPI_Comm ctl = MPI_COMM_NULL;  // duplicate of world for the messages; never freed
  // Another duplicate, the parent of every MPI_Comm_create_group: Open MPI builds the new
  // communicator with point-to-point messages on the parent under the call's tag, which the
  // wildcard probes on ctl would otherwise take.
  MPI_Comm groups = MPI_COMM_NULL;
  int world_rank = 0;
  int world_size = 0;
  std::vector<std::int64_t> pids;    // per world rank
  std::vector<std::uint64_t> hosts;  // per world rank
  std::uint64_t host = 0;
  MemberRole role = MemberRole::member;
  int slot = -1;
  int nslots = 0;
  std::uint64_t epoch = 0;
  MPI_Comm comm = MPI_COMM_NULL;  // the epoch's (standing_window: everyone's); never freed
  bool standing = false;          // Replacement::standing_window
  std::vector<int> members;       // world rank per slot
  std::vector<int> spares;
  std::vector<char> gone;             // per slot: resigned in this epoch
  std::vector<char> done;             // per slot: finished
  std::vector<int> finished_members;  // finish(): the world ranks of the slots that finished
  struct Seen {
    bool any = false;
    std::uint64_t heartbeat = 0;
    double since = 0.0;
  };
  std::vector<Seen> seen;  // per slot: the silence rule
  double last_check = -1e300;
  double backoff_until = 0.0;
  double finish_started = 0.0;  // start_finish(): when this member began to finish
  std::optional<EpochChange> last;
  std::int64_t resume_iteration = 0;
  /// A member of the standing window that answered yes goes on training; the commit or abort
  /// is read at a later poll (nothing collective follows it, so nothing waits).
  struct Pending {
    int proposer = -1;
    EpochChange change;
    std::vector<int> spares_left;
    double started = 0.0;
  };
  std::optional<Pending> pending;
  /// A kResign of an epoch this process had not entered yet: applied when it enters it.
  struct LaterResign {
    std::uint64_t epoch = 0;
    int slot = -1;
    int world = -1;
  };
  std::vector<LaterResign> later_resigns;
  struct Outgoing {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<Message> data;
  };
  std::vector<Outgoing> outbox;  // sends to a dead rank never complete: kept, small
  std::mt19937_64 rng{std::random_device{}()};
  // Messages the agreement loops read but only poll() or wait_for_slot() act on.
  std::optional<Message> evict_pending;  // a kEvict of a later epoch
  bool stop_pending = false;             // a kStop
  /// The communicators of every process this process held before a refill: never freed;
  /// their ctl is still read (a message sent before the refill; one from a process the refill
  /// left out, which is told to stop).
  struct OldUniverse {
    MPI_Comm ctl = MPI_COMM_NULL;
    std::vector<int> to_current;  // its rank -> the current rank, -1: left out
    std::vector<std::int64_t> pids;
    std::vector<std::uint64_t> hosts;
  };
  std::vector<OldUniverse> old_universes;
  RefillStats refill_stats;
  std::vector<std::string> ports_joined;  // JoinOptions: ports connected to (never again)
  std::string join_port;                  // the port the coordinator proposes to connect to
  double next_look = 0.0;                 // JoinOptions: the coordinator's next lookup
  std::string spawn_command;              // resolved SpawnOptions::command
  std::vector<std::string> spawn_args;    // resolved SpawnOptions::args
  /// A spawn ahead in flight or ready, as this process knows it (kAhead, kAheadReady).
  struct Ahead {
    std::int64_t id = 0;
    int nspawn = 0;
    int spawner = -1;  // its current rank
    bool ready = false;
    std::string port;    // ready: where the spawner's group accepts the merge
    double since = 0.0;  // when this process learned of it
  };
  std::optional<Ahead> ahead;
  bool spawn_due = false;                // this spare was asked to spawn ahead
  MPI_Comm ahead_group = MPI_COMM_NULL;  // the spawner: itself and its new processes
  std::string ahead_port;                // the spawner: the port its group accepts at

  // --- trace (PARAMWIN_MEMBERSHIP_TRACE) --------------------------------------------------

  std::vector<int> traced_dead;  // the judgement last traced
  std::string traced_wait;       // the last "waits for a spare" traced

  /// One line on stderr: who says it (world rank, epoch, slot, role), when, and @p what.
  void trace(const std::string& what) const {
    std::fprintf(stderr, "paramwin membership: world %d epoch %llu slot %d role %d t %.6f: %s\n",
                 world_rank, static_cast<unsigned long long>(epoch), slot, static_cast<int>(role),
                 MPI_Wtime(), what.c_str());
  }

  // --- messages -------------------------------------------------------------------------

  void reap() {
    std::erase_if(outbox, [](Outgoing& m) {
      int flag = 0;
      MPI_Test(&m.request, &flag, MPI_STATUS_IGNORE);
      return flag != 0;
    });
  }

  /// Sends @p msg to @p dest of @p on (the current ctl by default); a slot whose process a
  /// refill left out (dest -1) gets nothing.
  void send(int dest, int tag, Message msg, MPI_Comm on = MPI_COMM_NULL) {
    if (dest < 0) return;
    reap();
    detail::check_mpi(post(dest, tag, std::move(msg), on == MPI_COMM_NULL ? ctl : on), "MPI_Isend");
  }

  /// MPI_Isend of @p msg to @p dest of @p on, kept in the outbox when posted; its code.
  int post(int dest, int tag, Message msg, MPI_Comm on) {
    Outgoing out;
    out.data = std::make_unique<Message>(std::move(msg));
    const int rc = MPI_Isend(out.data->data(), static_cast<int>(out.data->size()), MPI_INT64_T,
                             dest, tag, on, &out.request);
    if (rc == MPI_SUCCESS) outbox.push_back(std::move(out));
    return rc;
  }

  /// The next message to this process, if one has arrived: from the current ctl, else from
  /// an old one's (its source translated to the current rank). A process a refill left out
  /// is answered there with kEvict and kStop: the population has no place for it.
  bool receive(Message& msg, MPI_Status& status) {
    if (receive_on(ctl, msg, status)) return true;
    for (OldUniverse& u : old_universes) {
      while (receive_on(u.ctl, msg, status)) {
        const int now = u.to_current.at(static_cast<std::size_t>(status.MPI_SOURCE));
        if (now >= 0) {
          status.MPI_SOURCE = now;
          return true;
        }
        if (status.MPI_TAG != kStop) tell_left_out(u, status.MPI_SOURCE);
      }
    }
    return false;
  }

  /// Tells a process a refill left out (a member judged dead that only stalled) to drop its
  /// slot and end: kEvict of a later epoch (no members), then kStop.
  void tell_left_out(const OldUniverse& u, int rank) {
    send(rank, kEvict, {static_cast<std::int64_t>(epoch + 1), nslots}, u.ctl);
    send(rank, kStop, {}, u.ctl);
  }

  /// One message on @p on, if one has arrived.
  bool receive_on(MPI_Comm on, Message& msg, MPI_Status& status) {
    int flag = 0;
    detail::check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, on, &flag, &status), "MPI_Iprobe");
    if (flag == 0) return false;
    int count = 0;
    MPI_Get_count(&status, MPI_INT64_T, &count);
    if (count < 0) {  // MPI_UNDEFINED: not a message of this membership
      throw Error("paramwin: Membership: a message from world rank " +
                  std::to_string(status.MPI_SOURCE) + " (tag " + std::to_string(status.MPI_TAG) +
                  ") is not a whole number of int64 values");
    }
    msg.assign(static_cast<std::size_t>(count), 0);
    detail::check_mpi(MPI_Recv(msg.data(), count, MPI_INT64_T, status.MPI_SOURCE, status.MPI_TAG,
                               on, MPI_STATUS_IGNORE),
                      "MPI_Recv");
    return true;
  }

  // --- judgement ------------------------------------------------------------------------

  [[nodiscard]] bool process_gone(int world) const {
    if (world < 0) return true;  // a slot whose process a refill left out
    return hosts[static_cast<std::size_t>(world)] == host &&
           !detail::process_alive(pids[static_cast<std::size_t>(world)]);
  }

  [[nodiscard]] int slot_of(int world) const {
    const auto it = std::find(members.begin(), members.end(), world);
    return it == members.end() ? -1 : static_cast<int>(it - members.begin());
  }

  /// Per slot: 0 alive, 1 dead by its process gone (or resigned), 2 dead by silence.
  std::vector<int> judge(std::span<const RosterEntry> roster) {
    const double now = MPI_Wtime();
    std::vector<int> dead(static_cast<std::size_t>(nslots), 0);
    for (int s = 0; s < nslots; ++s) {
      if (s == slot) continue;
      const auto i = static_cast<std::size_t>(s);
      if (gone[i] != 0 || process_gone(members[i])) {
        dead[i] = 1;
        continue;
      }
      if (roster.size() != static_cast<std::size_t>(nslots) || o.dead_after_seconds <= 0.0) {
        continue;
      }
      const RosterEntry& e = roster[i];
      Seen& seen_slot = seen[i];
      if (!seen_slot.any || (e.answered && e.liveness.heartbeat != seen_slot.heartbeat)) {
        seen_slot = {.any = true, .heartbeat = e.liveness.heartbeat, .since = now};
      } else if (now - seen_slot.since > o.dead_after_seconds) {
        dead[i] = 2;
      }
    }
    return dead;
  }

  /// The lowest slot not judged dead in @p dead.
  [[nodiscard]] int coordinator(const std::vector<int>& dead) const {
    for (int s = 0; s < nslots; ++s) {
      if (dead[static_cast<std::size_t>(s)] == 0) return s;
    }
    return slot;
  }

  // --- epochs ---------------------------------------------------------------------------

  /// MPI_Comm_create_group over @p ranks (in slot order) with @p tag. @note Collective over
  /// them.
  MPI_Comm create_comm(const std::vector<int>& ranks, int tag) const {
    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Group group = MPI_GROUP_NULL;
    detail::check_mpi(MPI_Comm_group(groups, &world_group), "MPI_Comm_group");
    detail::check_mpi(MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(),
                                     &group),
                      "MPI_Group_incl");
    MPI_Comm c = MPI_COMM_NULL;
    const int rc = MPI_Comm_create_group(groups, group, tag, &c);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    detail::check_mpi(rc, "MPI_Comm_create_group");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return c;
  }

  /// Parses a proposal into @p change (members, dead, iterations) and the spares left.
  static bool parse_proposal(const Message& m, EpochChange& change, std::vector<int>& spares_left) {
    std::size_t i = 0;
    auto next = [&]() -> std::int64_t { return i < m.size() ? m[i++] : -1; };
    change.epoch = static_cast<std::uint64_t>(next());
    const std::int64_t n = next();
    if (n <= 0) return false;
    change.members.clear();
    for (std::int64_t k = 0; k < n; ++k) change.members.push_back(static_cast<int>(next()));
    const std::int64_t d = next();
    change.dead.clear();
    change.iterations.clear();
    change.reasons_pid.clear();
    for (std::int64_t k = 0; k < d; ++k) {
      change.dead.push_back(static_cast<int>(next()));
      change.iterations.push_back(next());
      change.reasons_pid.push_back(static_cast<int>(next()));
    }
    change.joined = change.dead;
    const std::int64_t sp = next();
    spares_left.clear();
    for (std::int64_t k = 0; k < sp; ++k) spares_left.push_back(static_cast<int>(next()));
    return i <= m.size();
  }

  /// Enters the committed epoch @p change (collective over its processes).
  EpochChange enter(EpochChange change, const std::vector<int>& spares_left, double started) {
    if (!standing) comm = create_comm(change.members, epoch_tag(change.epoch));  // old one stays
    epoch = change.epoch;
    members = change.members;
    // The proposer's spares first (its order gives the slots), then the spares this process
    // knows and the proposer did not yet (a kSpare or kResign that reached it later): a spare
    // that every proposal left out would never be given a slot again.
    std::vector<int> known = std::move(spares);
    spares = spares_left;
    for (int w : known) add_spare(w);  // those the new epoch gave no slot
    const int mine = slot_of(world_rank);
    if (role == MemberRole::spare) {
      const auto at = std::find(change.dead.begin(), change.dead.end(), mine);
      resume_iteration =
          at == change.dead.end()
              ? 0
              : change.iterations[static_cast<std::size_t>(at - change.dead.begin())];
    }
    slot = mine;
    role = MemberRole::member;
    std::fill(gone.begin(), gone.end(), 0);
    std::fill(seen.begin(), seen.end(), Seen{});
    for (const LaterResign& r : later_resigns) {  // read before this process entered the epoch
      if (r.epoch == epoch && members[static_cast<std::size_t>(r.slot)] == r.world) {
        gone[static_cast<std::size_t>(r.slot)] = 1;
        add_spare(r.world, true);
      }
    }
    std::erase_if(later_resigns, [this](const LaterResign& r) { return r.epoch <= epoch; });
    change.agree_seconds = MPI_Wtime() - started;
    last = change;
    return change;
  }

  /// A kEvict message [epoch, _, members...] of a later epoch than this process's: it takes
  /// that epoch's members and becomes evicted (true); a stale one changes nothing (false).
  bool evicted_by(const Message& m) {
    if (m.size() < 2 || static_cast<std::uint64_t>(m[0]) <= epoch) return false;
    epoch = static_cast<std::uint64_t>(m[0]);
    members.clear();
    for (std::size_t k = 2; k < m.size(); ++k) members.push_back(static_cast<int>(m[k]));
    role = MemberRole::evicted;
    slot = -1;
    if (tracing()) trace("evicted: members " + listed(members));
    return true;
  }

  /// Bookkeeping messages any process handles at any time; false for others.
  bool bookkeeping(const Message& m, const MPI_Status& st) {
    switch (st.MPI_TAG) {
      case kResign:
        if (m.size() == 2 && m[1] >= 0 && m[1] < nslots) {
          const auto of = static_cast<std::uint64_t>(m[0]);
          if (of == epoch) {
            gone[static_cast<std::size_t>(m[1])] = 1;
            add_spare(st.MPI_SOURCE, true);  // the resigned process waits as a spare
          } else if (of < epoch) {
            add_spare(st.MPI_SOURCE);  // a spare, unless a later epoch gave it a slot
          } else {  // of an epoch this process has yet to enter (its commit is on the way)
            later_resigns.push_back({of, static_cast<int>(m[1]), st.MPI_SOURCE});
          }
        }
        return true;
      case kSpare: add_spare(st.MPI_SOURCE); return true;
      case kAhead: on_ahead(m); return true;
      case kAheadReady: on_ahead_ready(m); return true;
      case kDone:
        // Only from the slot's holder: a member evicted while it stalled may finish late,
        // and its slot's new holder has not finished then.
        if (m.size() == 2 && m[1] >= 0 && m[1] < nslots &&
            members[static_cast<std::size_t>(m[1])] == st.MPI_SOURCE) {
          done[static_cast<std::size_t>(m[1])] = 1;
        }
        return true;
      case kEvict:  // read inside an agreement: acted on by the next poll()
        if (!m.empty() && static_cast<std::uint64_t>(m[0]) > epoch) evict_pending = m;
        return true;
      case kStop: stop_pending = true; return true;  // acted on by wait_for_slot()
      case kCommit:
      case kAbort:
      case kAnswer:
      case kRefillAnswer:
      case kRefillCommit:
      case kRefillAbort: return true;  // stale: of a proposal given up
      case kRefill:                    // busy with another agreement
        if (!m.empty()) send(st.MPI_SOURCE, kRefillAnswer, {m[0], 0});
        return true;
      default: return false;
    }
  }

  void add_spare(int world, bool resigned = false) {
    if (std::find(spares.begin(), spares.end(), world) == spares.end() &&
        (resigned || slot_of(world) < 0)) {
      spares.push_back(world);
      if (tracing()) trace("spare " + std::to_string(world) + " known: spares " + listed(spares));
    }
  }

  /// Having answered yes to @p proposer's proposal of @p change: waits for its commit or
  /// abort (or its death, or agree_seconds), answering other proposals no.
  std::optional<EpochChange> await_commit(int proposer, const EpochChange& change,
                                          const std::vector<int>& spares_left) {
    const double started = MPI_Wtime();
    Message m;
    MPI_Status st;
    while (true) {
      while (receive(m, st)) {
        if (st.MPI_SOURCE == proposer && (st.MPI_TAG == kCommit || st.MPI_TAG == kAbort) &&
            !m.empty() && static_cast<std::uint64_t>(m[0]) == change.epoch) {
          if (tracing()) {
            trace(std::string(st.MPI_TAG == kAbort ? "aborted" : "committed") + ": epoch " +
                  std::to_string(change.epoch) + " of " + std::to_string(proposer));
          }
          if (st.MPI_TAG == kAbort) return std::nullopt;
          return enter(change, spares_left, started);
        }
        if (st.MPI_TAG == kPropose) {
          send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});
        } else if (st.MPI_TAG == kStop) {
          role = MemberRole::finished;
          return std::nullopt;
        } else {
          (void)bookkeeping(m, st);
        }
      }
      if (process_gone(proposer) || MPI_Wtime() - started > commit_wait()) {
        if (tracing()) {
          trace("gave up waiting for the commit of epoch " + std::to_string(change.epoch) + " of " +
                std::to_string(proposer) +
                (process_gone(proposer) ? " (its process is gone)" : " (commit_wait passed)"));
        }
        return std::nullopt;
      }
      sleep_seconds(0.0005);
    }
  }

  /// Whether @p m is the commit or abort of the proposal this process answered yes to and
  /// trains on meanwhile (standing window).
  [[nodiscard]] bool settles_pending(const Message& m, const MPI_Status& st) const {
    return pending && st.MPI_SOURCE == pending->proposer &&
           (st.MPI_TAG == kCommit || st.MPI_TAG == kAbort) && !m.empty() &&
           static_cast<std::uint64_t>(m[0]) == pending->change.epoch;
  }

  /// Ends the pending answer with @p st's commit (the epoch entered: no collective in the
  /// standing window) or abort (nullopt).
  std::optional<EpochChange> settle(const MPI_Status& st) {
    Pending p = std::move(*pending);
    pending.reset();
    if (tracing()) {
      trace(std::string(st.MPI_TAG == kCommit ? "committed" : "aborted") + ": epoch " +
            std::to_string(p.change.epoch) + " of " + std::to_string(p.proposer) +
            " (answered while training)");
    }
    if (st.MPI_TAG != kCommit) return std::nullopt;
    return enter(std::move(p.change), p.spares_left, p.started);
  }

  /// A proposal received: answers it, and on yes waits for its end.
  std::optional<EpochChange> on_proposal(const Message& m, int proposer) {
    EpochChange change;
    std::vector<int> spares_left;
    const bool ok = parse_proposal(m, change, spares_left) && change.epoch == epoch + 1 &&
                    std::find(change.members.begin(), change.members.end(), world_rank) !=
                        change.members.end() &&
                    static_cast<int>(change.members.size()) == nslots;
    send(proposer, kAnswer, {static_cast<std::int64_t>(change.epoch), ok ? 1 : 0});
    if (tracing()) {
      trace("answered " + std::string(ok ? "yes" : "no") + " to epoch " +
            std::to_string(change.epoch) + " of " + std::to_string(proposer) + ": members " +
            listed(change.members) + ", dead " + listed(change.dead));
    }
    if (!ok) return std::nullopt;
    if (standing && role == MemberRole::member) {
      pending = Pending{proposer, std::move(change), std::move(spares_left), MPI_Wtime()};
      return std::nullopt;
    }
    return await_commit(proposer, change, spares_left);
  }

  /// Waits for every one of @p targets to answer the proposal @p id (messages @p tag:
  /// [id, ok]) made at @p started, answering other proposals no; @p yes gets those that said
  /// yes. False when one said no, one's process is gone or answer_wait() passed.
  bool collect_answers(const std::vector<int>& targets, int tag, std::int64_t id, double started,
                       std::vector<int>& yes) {
    Message m;
    MPI_Status st;
    bool no = false;  // the answers already here are still read (then every target is aborted)
    while (yes.size() < targets.size()) {
      while (receive(m, st)) {
        if (st.MPI_TAG == tag && m.size() == 2 && m[0] == id &&
            std::find(targets.begin(), targets.end(), st.MPI_SOURCE) != targets.end()) {
          if (m[1] == 1) {
            yes.push_back(st.MPI_SOURCE);
          } else {
            no = true;
          }
        } else if (st.MPI_TAG == kPropose) {
          send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});  // busy with its own
        } else {
          (void)bookkeeping(m, st);
        }
      }
      if (no) {
        if (tracing()) trace("proposal " + std::to_string(id) + ": an answer was no");
        return false;
      }
      for (int w : targets) {
        if (std::find(yes.begin(), yes.end(), w) == yes.end() && process_gone(w)) {
          if (tracing())
            trace("proposal " + std::to_string(id) + ": " + std::to_string(w) +
                  "'s process is gone");
          return false;
        }
      }
      if (MPI_Wtime() - started > answer_wait()) {
        if (tracing())
          trace("proposal " + std::to_string(id) + ": answer_wait passed, yes " + listed(yes) +
                " of " + listed(targets));
        return false;
      }
      if (yes.size() < targets.size()) sleep_seconds(0.0005);
    }
    return true;
  }

  /// How long a proposer waits for the answers: agree_seconds, and no longer than half the
  /// silence bound, after which it may not commit (may_commit). A proposer does not step while
  /// it waits: waiting longer for a member that stopped would make the others judge the
  /// proposer itself dead by its silence.
  [[nodiscard]] double answer_wait() const {
    return o.dead_after_seconds > 0.0 ? std::min(o.agree_seconds, 0.5 * o.dead_after_seconds)
                                      : o.agree_seconds;
  }

  /// How long a process that answered yes waits for the commit: agree_seconds, and no longer
  /// than the silence bound (its proposer commits within half of it, or aborts).
  [[nodiscard]] double commit_wait() const {
    return o.dead_after_seconds > 0.0 ? std::min(o.agree_seconds, o.dead_after_seconds)
                                      : o.agree_seconds;
  }

  /// Whether a proposal made at @p started may still commit: not when this process was
  /// evicted meanwhile, nor when it took half the silence bound (the others may have judged
  /// its proposer dead by then and given up their answers).
  [[nodiscard]] bool may_commit(double started) const {
    return !evict_pending &&
           (o.dead_after_seconds <= 0.0 || MPI_Wtime() - started <= 0.5 * o.dead_after_seconds);
  }

  /// After a proposal given up: no new one for a random 20-200 ms (two coordinators whose
  /// proposals collided do not collide again).
  void back_off() {
    std::uniform_real_distribution<double> wait(0.02, 0.2);
    backoff_until = MPI_Wtime() + wait(rng);
  }

  /// The coordinator: proposes the epoch that gives the slots in @p dead to spares.
  std::optional<EpochChange> propose(const std::vector<int>& dead,
                                     std::span<const RosterEntry> roster) {
    const double judged = MPI_Wtime();
    std::vector<int> live_spares;
    for (int r : spares) {
      if (!process_gone(r) && !busy_spawning(r)) live_spares.push_back(r);
    }
    EpochChange change;
    change.epoch = epoch + 1;
    change.members = members;
    change.judged_at = judged;
    std::size_t next_spare = 0;
    for (int s = 0; s < nslots; ++s) {
      const int how = dead[static_cast<std::size_t>(s)];
      if (how == 0) continue;
      if (next_spare == live_spares.size()) {  // wait for a spare
        if (tracing()) {
          const std::string w = "waits for a spare: dead " + listed(dead) + ", live spares " +
                                listed(live_spares) + " of " + listed(spares);
          if (w != traced_wait) trace(w);
          traced_wait = w;
        }
        return std::nullopt;
      }
      change.dead.push_back(s);
      change.reasons_pid.push_back(how == 1 ? 1 : 0);
      change.iterations.push_back(roster.size() == static_cast<std::size_t>(nslots)
                                      ? roster[static_cast<std::size_t>(s)].status.iteration
                                      : 0);
      change.members[static_cast<std::size_t>(s)] = live_spares[next_spare++];
    }
    change.joined = change.dead;
    std::vector<int> spares_left(live_spares.begin() + static_cast<std::ptrdiff_t>(next_spare),
                                 live_spares.end());
    if (ahead && !process_gone(ahead->spawner)) spares_left.push_back(ahead->spawner);
    Message msg{static_cast<std::int64_t>(change.epoch), nslots};
    for (int r : change.members) msg.push_back(r);
    msg.push_back(static_cast<std::int64_t>(change.dead.size()));
    for (std::size_t k = 0; k < change.dead.size(); ++k) {
      msg.push_back(change.dead[k]);
      msg.push_back(change.iterations[k]);
      msg.push_back(change.reasons_pid[k]);
    }
    msg.push_back(static_cast<std::int64_t>(spares_left.size()));
    for (int r : spares_left) msg.push_back(r);
    std::vector<int> targets;
    for (int r : change.members) {
      if (r != world_rank) targets.push_back(r);
    }
    for (int r : targets) send(r, kPropose, msg);
    if (tracing()) {
      trace("proposes epoch " + std::to_string(change.epoch) + ": dead slots " +
            listed(change.dead) + ", members " + listed(change.members) + ", spares left " +
            listed(spares_left));
    }
    const double started = MPI_Wtime();
    std::vector<int> yes;
    if (!collect_answers(targets, kAnswer, static_cast<std::int64_t>(change.epoch), started, yes) ||
        !may_commit(started)) {
      if (tracing()) trace("gives up epoch " + std::to_string(change.epoch));
      // Every target, not only those whose yes was read: a yes that comes after a no would
      // otherwise hold its sender (answering every other proposal no) for commit_wait().
      for (int r : targets) send(r, kAbort, {static_cast<std::int64_t>(change.epoch)});
      back_off();
      return std::nullopt;
    }
    for (int r : targets) send(r, kCommit, {static_cast<std::int64_t>(change.epoch)});
    if (tracing()) trace("commits epoch " + std::to_string(change.epoch));
    Message evict{static_cast<std::int64_t>(change.epoch), nslots};
    for (int r : change.members) evict.push_back(r);
    for (int s : change.dead) {
      const int old = members[static_cast<std::size_t>(s)];
      const bool reused = std::find(change.members.begin(), change.members.end(), old) !=
                          change.members.end();  // a resigned process given a slot again
      if (!reused && !process_gone(old)) send(old, kEvict, evict);  // may come back
    }
    return enter(change, spares_left, started);
  }

  // --- refills (SpawnOptions) -------------------------------------------------------------

  /// What a refill proposal carries.
  struct Refill {
    std::int64_t id = 0;
    int nspawn = 0;
    int root = 0;              // the proposer's index in live
    std::vector<int> live;     // the processes that take part, current ranks
    std::vector<int> members;  // per slot, current rank (-1: none alive)
    std::vector<int> spares;   // current ranks
    std::int64_t join = 0;  // 1: connect to a joiner's port (JoinOptions); 2: merge a spawn ahead
    int spawner = -1;       // join 2: the spare that spawned ahead (not in live), current rank
  };

  static Message refill_message(const Refill& r) {
    Message m{r.id, r.nspawn, r.root, static_cast<std::int64_t>(r.live.size())};
    m.insert(m.end(), r.live.begin(), r.live.end());
    m.push_back(static_cast<std::int64_t>(r.members.size()));
    m.insert(m.end(), r.members.begin(), r.members.end());
    m.push_back(static_cast<std::int64_t>(r.spares.size()));
    m.insert(m.end(), r.spares.begin(), r.spares.end());
    m.push_back(r.join);
    m.push_back(r.spawner);
    return m;
  }

  static bool parse_refill(const Message& m, Refill& r) {
    std::size_t i = 0;
    auto next = [&]() -> std::int64_t { return i < m.size() ? m[i++] : -1; };
    auto list = [&](std::vector<int>& out) {
      const std::int64_t n = next();
      if (n < 0 || static_cast<std::size_t>(n) > m.size()) return false;
      out.clear();
      for (std::int64_t k = 0; k < n; ++k) out.push_back(static_cast<int>(next()));
      return true;
    };
    r.id = next();
    r.nspawn = static_cast<int>(next());
    r.root = static_cast<int>(next());
    if (!list(r.live) || !list(r.members) || !list(r.spares)) return false;
    r.join = next();
    r.spawner = static_cast<int>(next());
    return i <= m.size() && r.nspawn > 0 && r.join >= 0 && r.join <= 2 && r.root >= 0 &&
           static_cast<std::size_t>(r.root) < r.live.size() && (r.join != 2 || r.spawner >= 0);
  }

  /// Whether a slot has finished (no refill or join is proposed after that).
  [[nodiscard]] bool any_done() const {
    return std::any_of(done.begin(), done.end(), [](char d) { return d != 0; });
  }

  /// Whether a refill may be proposed now (the coordinator, no dead slot it can fill).
  [[nodiscard]] bool refill_allowed() const {
    return o.spawn.pool > 0 && refill_stats.failed == 0 && !any_done();
  }

  /// Whether the coordinator looks for a joiner now (JoinOptions; not once a slot finished).
  [[nodiscard]] bool join_due() const {
    return !o.join.service.empty() && MPI_Wtime() >= next_look && !any_done();
  }

  /// The coordinator: a joiner's port published under the service's name, if one waits there
  /// (and it is not one this population connected to already).
  std::optional<std::string> look_for_joiner() {
    next_look = MPI_Wtime() + o.join.look_seconds;
    std::vector<char> port(MPI_MAX_PORT_NAME + 1, '\0');
    const std::string name = join_name(o.join.service);
    if (quietly([&] { return MPI_Lookup_name(name.c_str(), MPI_INFO_NULL, port.data()); }) !=
        MPI_SUCCESS) {
      return std::nullopt;
    }
    std::string found(port.data());
    if (found.empty() ||
        std::find(ports_joined.begin(), ports_joined.end(), found) != ports_joined.end()) {
      return std::nullopt;
    }
    if (tracing()) trace("a joiner waits at " + found);
    return found;
  }

  /// The coordinator: proposes a refill that spawns @p nspawn spares (or, with @p port, that
  /// connects to the joiner waiting there), to every process it does not judge dead (@p dead:
  /// per slot, as judge() says).
  void propose_refill(int nspawn, const std::vector<int>& dead, const std::string& port = {}) {
    Refill r;
    r.id = static_cast<std::int64_t>(rng() >> 2);
    r.nspawn = nspawn;
    r.join = port.empty() ? 0 : 1;
    join_port = port;
    offer_refill(r, dead);
  }

  /// The coordinator: proposes @p r (its kind, count and spawner set) to every live process
  /// (the members alive by @p dead, the live spares but a spawner ahead) and the spawner, if
  /// any; on yes from all, commits and takes part.
  void offer_refill(Refill& r, const std::vector<int>& dead) {
    const double started = MPI_Wtime();
    for (int k = 0; k < nslots; ++k) {
      const int w = members[static_cast<std::size_t>(k)];
      const bool alive = dead[static_cast<std::size_t>(k)] == 0 && w >= 0;
      r.members.push_back(alive ? w : -1);
      if (alive) r.live.push_back(w);
    }
    for (int w : spares) {
      if (!process_gone(w) && w != r.spawner) {
        r.spares.push_back(w);
        r.live.push_back(w);
      }
    }
    r.root = static_cast<int>(std::find(r.live.begin(), r.live.end(), world_rank) - r.live.begin());
    const Message msg = refill_message(r);
    std::vector<int> targets;
    if (r.spawner >= 0) targets.push_back(r.spawner);
    for (int w : r.live) {
      if (w != world_rank) targets.push_back(w);
    }
    for (int w : targets) send(w, kRefill, msg);
    std::vector<int> yes;
    if (!collect_answers(targets, kRefillAnswer, r.id, started, yes) || !may_commit(started)) {
      for (int w : targets) send(w, kRefillAbort, {r.id});  // as propose(): every target
      back_off();
      return;
    }
    for (int w : targets) send(w, kRefillCommit, {r.id});
    enter_refill(r, started);
  }

  /// The coordinator's refill decision at a check (spares first: enough for the @p ndead
  /// dead slots waiting, and the pool): true when it proposed one (the epoch waits for the
  /// next check); a spawn ahead started lets the epoch go on with the other spares.
  bool refill_proposed(const std::vector<int>& dead, std::size_t ndead) {
    // A spawner that died (on this host: its pid; elsewhere: not ready within agree_seconds)
    // took its spawn with it.
    if (ahead && (process_gone(ahead->spawner) ||
                  (!ahead->ready && MPI_Wtime() - ahead->since > o.agree_seconds))) {
      if (tracing()) trace("forgets the spawn ahead of " + std::to_string(ahead->spawner));
      ahead.reset();
    }
    if (!refill_allowed()) return false;
    if (ahead) {
      if (!ahead->ready) return false;
      propose_ahead_merge(dead);
      return true;
    }
    std::vector<int> live;
    for (int w : spares) {
      if (!process_gone(w)) live.push_back(w);
    }
    const auto pool = static_cast<std::size_t>(o.spawn.pool);
    const auto low = o.spawn.low > 0 ? static_cast<std::size_t>(o.spawn.low) : pool;
    if (live.size() >= std::max(low, ndead)) return false;
    const int nspawn = static_cast<int>(std::max(pool, ndead) - live.size());
    if (o.spawn.ahead && live.size() > ndead) {
      // A spare the dead slots do not need spawns ahead, alone; the members train on and the
      // dead slots take the other spares now.
      start_ahead(nspawn, live.back());
      return false;
    }
    propose_refill(nspawn, dead);  // no spare to spare: every live process spawns
    return true;
  }

  // --- spawns ahead: a spare spawns the new spares alone, the members train on ----------

  /// Whether @p world is the spare busy with a spawn ahead (not a candidate for a slot).
  [[nodiscard]] bool busy_spawning(int world) const { return ahead && ahead->spawner == world; }

  /// Sends @p msg with @p tag to every other live process of the population (the members'
  /// and spares' lists of a spare may be stale). A send the MPI refuses at once (UCX, to a
  /// process that died before this one ever reached it) is dropped: that process is dead.
  void tell_everyone(int tag, const Message& msg) {
    reap();
    for (int w = 0; w < world_size; ++w) {
      if (w != world_rank && !process_gone(w)) (void)post(w, tag, msg, ctl);
    }
  }

  /// The coordinator: asks @p spawner (a live spare not needed for a dead slot) to spawn
  /// @p nspawn spares alone; the members go on training (docs/elastic.md).
  void start_ahead(int nspawn, int spawner) {
    ahead = Ahead{static_cast<std::int64_t>(rng() >> 2), nspawn, spawner, false, {}, MPI_Wtime()};
    tell_everyone(kAhead, {ahead->id, nspawn, spawner});
    if (tracing())
      trace("asks " + std::to_string(spawner) + " to spawn " + std::to_string(nspawn) + " ahead");
  }

  /// kAhead: which spare spawns ahead; if this one (a spare), it spawns at its next wait.
  void on_ahead(const Message& m) {
    if (m.size() != 3) return;
    ahead = Ahead{m[0], static_cast<int>(m[1]), static_cast<int>(m[2]), false, {}, MPI_Wtime()};
    if (ahead->spawner != world_rank) return;
    if (role == MemberRole::spare && ahead_group == MPI_COMM_NULL) {
      spawn_due = true;
    } else if (role == MemberRole::spare) {
      // Still holds the processes of a spawn ahead that a coordinator forgot (not ready in
      // time): offers those, as they are, under the new id.
      int n = 0;
      MPI_Comm_size(ahead_group, &n);
      ahead->nspawn = n - 1;
      ahead->ready = true;
      ahead->port = ahead_port;
      announce_ahead(1);
    } else {  // given a slot meanwhile: someone else may spawn
      announce_ahead(-1);
      ahead.reset();
    }
  }

  /// The spawner: tells every process the outcome of its spawn ahead (1 ready, with the port
  /// its group accepts at; 0 failed; -1 declined).
  void announce_ahead(std::int64_t outcome) {
    Message m{ahead->id, ahead->nspawn, outcome};
    if (outcome == 1) m.insert(m.end(), ahead_port.begin(), ahead_port.end());
    tell_everyone(kAheadReady, m);
  }

  /// kAheadReady: the spawner's outcome.
  void on_ahead_ready(const Message& m) {
    if (m.size() < 3 || !ahead || ahead->id != m[0]) return;
    if (m[2] == 1) {
      ahead->ready = true;
      ahead->nspawn = static_cast<int>(m[1]);  // what it holds (an offer of older ones)
      ahead->port.clear();
      for (std::size_t i = 3; i < m.size(); ++i) ahead->port.push_back(static_cast<char>(m[i]));
      return;
    }
    if (m[2] == 0) ++refill_stats.failed;  // as a failed refill: no more are proposed
    ahead.reset();
  }

  /// The spawner (a spare, in wait_for_slot): spawns ahead->nspawn processes over itself
  /// alone, merges with them into ahead_group and tells everyone the outcome. The others go
  /// on meanwhile; the new processes wait (sleeping) for the merge or a stop.
  void spawn_ahead() {
    spawn_due = false;
    if (!ahead || ahead->spawner != world_rank) return;
    const double started = MPI_Wtime();
    MPI_Comm inter = MPI_COMM_NULL;
    Refill self;
    self.nspawn = ahead->nspawn;
    self.root = 0;
    const bool ok = spawn_spares(self, MPI_COMM_SELF, inter);
    if (ok) {
      detail::check_mpi(MPI_Intercomm_merge(inter, 0, &ahead_group), "MPI_Intercomm_merge");
      MPI_Comm_set_errhandler(ahead_group, MPI_ERRORS_RETURN);
      // To the new processes: they merge later (1), and whose death ends their wait.
      std::int64_t word[3] = {1, static_cast<std::int64_t>(getpid()),
                              static_cast<std::int64_t>(host)};
      detail::check_mpi(MPI_Bcast(word, 3, MPI_INT64_T, 0, ahead_group), "MPI_Bcast");
      // The merge is a connection (MPI_Comm_connect / MPI_Comm_accept, as a join's): through
      // it Open MPI learns which of the processes share a node, which MPI_Intercomm_create
      // does not tell it (the next epoch's shared-memory window needs it).
      std::vector<char> port(MPI_MAX_PORT_NAME + 1, '\0');
      detail::check_mpi(MPI_Open_port(MPI_INFO_NULL, port.data()), "MPI_Open_port");
      ahead_port = port.data();
      ahead->port = ahead_port;
    }
    if (tracing()) {
      trace("spawned " + std::to_string(ahead->nspawn) + " ahead in " +
            std::to_string(MPI_Wtime() - started) + " s" + (ok ? "" : ": failed"));
    }
    announce_ahead(ok ? 1 : 0);
    if (ok) {
      ahead->ready = true;
    } else {
      ahead.reset();
    }
  }

  /// The spawner, when the population finished: its new processes stop waiting, its port
  /// closes.
  void release_ahead() {
    if (ahead_group == MPI_COMM_NULL) return;
    int n = 0;
    MPI_Comm_size(ahead_group, &n);
    for (int c = 1; c < n; ++c) send(c, kAheadGoTag, {0}, ahead_group);
    MPI_Close_port(ahead_port.c_str());
  }

  /// The coordinator: proposes to merge the ready spawn ahead into the population (a refill
  /// with join 2: the live processes and the spawner's group build one communicator).
  void propose_ahead_merge(const std::vector<int>& dead) {
    Refill r;
    r.id = ahead->id;
    r.nspawn = ahead->nspawn;
    r.join = 2;
    r.spawner = ahead->spawner;
    if (tracing()) trace("proposes to merge the spawn ahead of " + std::to_string(r.spawner));
    offer_refill(r, dead);
  }

  /// A process a spawn ahead started, merged with its spawner into @p group: waits (sleeping)
  /// for the spawner's word, then merges with the population (true) or stops (false).
  bool await_ahead_merge(MPI_Comm group, std::int64_t spawner_pid, std::uint64_t spawner_host) {
    Message m;
    MPI_Status st;
    while (true) {
      int flag = 0;
      detail::check_mpi(MPI_Iprobe(0, kAheadGoTag, group, &flag, &st), "MPI_Iprobe");
      if (flag != 0) {
        m.assign(1, 0);
        detail::check_mpi(MPI_Recv(m.data(), 1, MPI_INT64_T, 0, kAheadGoTag, group, &st),
                          "MPI_Recv");
        if (m[0] == 0) return false;
        break;
      }
      if (spawner_host == host && !detail::process_alive(spawner_pid)) {
        throw Error("paramwin: Membership: the spare that spawned this process (pid " +
                    std::to_string(spawner_pid) + ") died before it merged it into the population");
      }
      sleep_seconds(o.spare_sleep_seconds);
    }
    if (tracing()) trace("spawned ahead: told to merge");
    MPI_Comm inter = MPI_COMM_NULL;
    detail::check_mpi(MPI_Comm_accept(nullptr, MPI_INFO_NULL, 0, group, &inter), "MPI_Comm_accept");
    if (tracing()) trace("spawned ahead: accepted");
    MPI_Comm universe = MPI_COMM_NULL;
    detail::check_mpi(MPI_Intercomm_merge(inter, 1, &universe), "MPI_Intercomm_merge");
    adopt_universe(universe, {});
    return true;
  }

  /// A refill proposal received: answers it, and on yes waits for its commit and takes part.
  void on_refill(const Message& m, int proposer) {
    Refill r;
    const bool parsed = parse_refill(m, r);
    // The spawner of a spawn ahead takes part in its merge from outside the live processes.
    const bool part =
        parsed && (r.join == 2 && r.spawner == world_rank
                       ? ahead_group != MPI_COMM_NULL
                       : std::find(r.live.begin(), r.live.end(), world_rank) != r.live.end());
    const bool ok = parsed && part && !pending &&
                    (role == MemberRole::member || role == MemberRole::spare) &&
                    r.members.size() == static_cast<std::size_t>(nslots) &&
                    r.live[static_cast<std::size_t>(r.root)] == proposer;
    send(proposer, kRefillAnswer, {r.id, ok ? 1 : 0});
    if (!ok) return;
    const double started = MPI_Wtime();
    Message in;
    MPI_Status st;
    while (true) {
      while (receive(in, st)) {
        if (st.MPI_SOURCE == proposer &&
            (st.MPI_TAG == kRefillCommit || st.MPI_TAG == kRefillAbort) && !in.empty() &&
            in[0] == r.id) {
          if (st.MPI_TAG == kRefillCommit) enter_refill(r, started);
          return;
        }
        if (st.MPI_TAG == kPropose) {
          send(st.MPI_SOURCE, kAnswer, {in.empty() ? 0 : in[0], 0});
        } else {
          (void)bookkeeping(in, st);
        }
      }
      if (process_gone(proposer) || MPI_Wtime() - started > commit_wait()) return;
      sleep_seconds(0.0005);
    }
  }

  /// The committed refill @p r: the live processes build a communicator over themselves,
  /// spawn the new spares (or connect to the joiner) and merge with them; every process of
  /// the result then takes it as its communicator of every process. Collective over the live
  /// processes (and, through the spawn or connection, the new ones). A failed spawn leaves
  /// everything as it was (refills stop); a failed connection too (that port is not tried
  /// again).
  void enter_refill(const Refill& r, double started) {
    if (r.join == 2) {
      enter_ahead_merge(r, started);
      return;
    }
    MPI_Comm live = live_comm(r);
    if (tracing()) trace("refill " + std::to_string(r.id) + ": communicator of the live built");
    MPI_Comm inter = MPI_COMM_NULL;
    int nnew = r.nspawn;
    if (r.join == 1) {
      if (!connect_joiner(r, live, inter, nnew)) return;
    } else if (!spawn_spares(r, live, inter)) {
      return;
    }
    if (tracing()) trace("refill " + std::to_string(r.id) + ": " + std::to_string(nnew) + " new");
    adopt_refill(r, inter, nnew, started);
    if (tracing()) trace("refill " + std::to_string(r.id) + ": merged");
  }

  /// The communicator over the live processes of refill @p r (collective over them).
  MPI_Comm live_comm(const Refill& r) const {
    return create_comm(r.live,
                       kRefillTagBase +
                           static_cast<int>((refill_stats.refills + refill_stats.joins) % 700));
  }

  /// The committed merge of a spawn ahead: the spawner's group (told to go on) accepts at the
  /// spawner's port, the live processes (a communicator over them) connect to it, the root's
  /// copy of the port sent to them, and both merge over the connection. Collective over the
  /// live processes, the spawner and its new processes; no process starts.
  void enter_ahead_merge(const Refill& r, double started) {
    MPI_Comm inter = MPI_COMM_NULL;
    if (r.spawner == world_rank) {
      int n = 0;
      MPI_Comm_size(ahead_group, &n);
      for (int c = 1; c < n; ++c) send(c, kAheadGoTag, {1}, ahead_group);
      detail::check_mpi(MPI_Comm_accept(ahead_port.c_str(), MPI_INFO_NULL, 0, ahead_group, &inter),
                        "MPI_Comm_accept");
      MPI_Close_port(ahead_port.c_str());
    } else {
      MPI_Comm live = live_comm(r);
      std::vector<char> port(MPI_MAX_PORT_NAME + 1, '\0');
      if (r.live[static_cast<std::size_t>(r.root)] == world_rank && ahead) {  // the proposer's
        std::copy_n(ahead->port.begin(), std::min(ahead->port.size(), port.size() - 1),
                    port.begin());
      }
      detail::check_mpi(MPI_Bcast(port.data(), MPI_MAX_PORT_NAME, MPI_CHAR, r.root, live),
                        "MPI_Bcast");
      if (tracing()) trace("connects to " + std::string(port.data()));
      detail::check_mpi(MPI_Comm_connect(port.data(), MPI_INFO_NULL, r.root, live, &inter),
                        "MPI_Comm_connect");
    }
    if (tracing()) trace("refill " + std::to_string(r.id) + ": connected");
    ++refill_stats.refills;
    refill_stats.spawned += static_cast<std::uint64_t>(r.nspawn);
    adopt_refill(r, inter, r.nspawn, started);
    if (tracing()) trace("refill " + std::to_string(r.id) + ": the spawn ahead merged");
  }

  /// A join's connection: the root's port to every live process (each remembers it), then
  /// MPI_Comm_connect over @p live; @p nnew gets the joiner's processes. False (the port
  /// remembered, nothing else changed) when the connection failed on any live process.
  bool connect_joiner(const Refill& r, MPI_Comm live, MPI_Comm& inter, int& nnew) {
    std::int64_t n = static_cast<std::int64_t>(join_port.size());
    detail::check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, r.root, live), "MPI_Bcast");
    join_port.resize(static_cast<std::size_t>(n));
    detail::check_mpi(MPI_Bcast(join_port.data(), static_cast<int>(n), MPI_CHAR, r.root, live),
                      "MPI_Bcast");
    ports_joined.push_back(join_port);
    const int rc = MPI_Comm_connect(join_port.c_str(), MPI_INFO_NULL, r.root, live, &inter);
    int failed = rc != MPI_SUCCESS ? 1 : 0;
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, live),
                      "MPI_Allreduce");
    ++refill_stats.joins;
    if (tracing())
      trace(std::string(failed != 0 ? "failed to connect to " : "connected to ") + join_port);
    if (failed != 0) return false;
    MPI_Comm_remote_size(inter, &nnew);
    refill_stats.joined += static_cast<std::uint64_t>(nnew);
    return true;
  }

  /// A refill's spawn over @p live (the new processes' intercommunicator in @p inter). False
  /// when it failed on any live process (refills stop).
  bool spawn_spares(const Refill& r, MPI_Comm live, MPI_Comm& inter) {
    const std::string& command = spawn_command;
    std::vector<char*> argv;
    std::vector<std::string> args = spawn_args;  // MPI_Comm_spawn takes char**
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    MPI_Info info = MPI_INFO_NULL;
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    MPI_Info_create(&info);
    if (!ec) MPI_Info_set(info, "wdir", cwd.c_str());
    std::vector<int> errcodes(static_cast<std::size_t>(r.nspawn), MPI_SUCCESS);
    int rc = MPI_Comm_spawn(command.c_str(), argv.data(), r.nspawn, info, r.root, live, &inter,
                            errcodes.data());
    MPI_Info_free(&info);
    // One outcome for every live process (the root's errcodes say more than its return).
    int failed = rc != MPI_SUCCESS ? 1 : 0;
    for (int e : errcodes) failed |= e != MPI_SUCCESS ? 1 : 0;
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, live),
                      "MPI_Allreduce");
    ++refill_stats.refills;
    if (failed != 0) {
      ++refill_stats.failed;  // a spawn that started some processes leaves them waiting
      return false;
    }
    refill_stats.spawned += static_cast<std::uint64_t>(r.nspawn);
    return true;
  }

  /// After a refill's spawn or a join's connection: merges with the @p nnew new processes
  /// over @p inter and takes the result as the communicator of every process (the dead and
  /// the processes the refill left out out of it; the latter are told to stop).
  void adopt_refill(const Refill& r, MPI_Comm inter, int nnew, double started) {
    MPI_Comm universe = MPI_COMM_NULL;
    const bool spawner_here = r.join == 2 && r.spawner == world_rank;  // the high side
    detail::check_mpi(MPI_Intercomm_merge(inter, spawner_here ? 1 : 0, &universe),
                      "MPI_Intercomm_merge");
    if (r.join == 0) {  // to the processes just spawned: merged already (0), not ahead
      std::int64_t word[3] = {0, 0, 0};
      detail::check_mpi(MPI_Bcast(word, 3, MPI_INT64_T, 0, universe), "MPI_Bcast");
    }
    // The order of the merged communicator: the live processes, then the spawner of a
    // spawn ahead, then the new processes.
    std::vector<int> ordered = r.live;
    if (r.join == 2) ordered.push_back(r.spawner);
    // The live processes keep their order in the merged communicator; the new ones follow.
    std::vector<int> to_new(static_cast<std::size_t>(world_size), -1);
    for (std::size_t i = 0; i < ordered.size(); ++i) {
      to_new[static_cast<std::size_t>(ordered[i])] = static_cast<int>(i);
    }
    auto mapped = [&](const std::vector<int>& ranks) {
      std::vector<int> out;
      out.reserve(ranks.size());
      for (int w : ranks) out.push_back(w < 0 ? -1 : to_new[static_cast<std::size_t>(w)]);
      return out;
    };
    std::vector<int> new_spares = mapped(r.spares);
    if (r.join == 2) new_spares.push_back(to_new[static_cast<std::size_t>(r.spawner)]);
    for (int j = 0; j < nnew; ++j) new_spares.push_back(static_cast<int>(ordered.size()) + j);
    Message header{static_cast<std::int64_t>(epoch),
                   nslots,
                   static_cast<std::int64_t>(refill_stats.refills),
                   static_cast<std::int64_t>(refill_stats.spawned),
                   static_cast<std::int64_t>(refill_stats.joins),
                   static_cast<std::int64_t>(refill_stats.joined)};
    for (int w : mapped(r.members)) header.push_back(w);
    header.push_back(static_cast<std::int64_t>(new_spares.size()));
    for (int w : new_spares) header.push_back(w);
    // The processes a refill left out that may still live (judged dead, maybe stalled).
    OldUniverse left;
    left.ctl = ctl;
    left.to_current = to_new;
    left.pids = pids;
    left.hosts = hosts;
    for (OldUniverse& u : old_universes) {
      for (int& w : u.to_current) w = w < 0 ? -1 : to_new[static_cast<std::size_t>(w)];
    }
    const bool coordinator_here = r.live[static_cast<std::size_t>(r.root)] == world_rank;
    std::vector<int> left_out;
    for (int w = 0; w < world_size; ++w) {
      if (to_new[static_cast<std::size_t>(w)] < 0 && !process_gone(w)) left_out.push_back(w);
    }
    old_universes.push_back(std::move(left));
    for (LaterResign& lr : later_resigns) lr.world = to_new[static_cast<std::size_t>(lr.world)];
    std::erase_if(later_resigns, [](const LaterResign& lr) { return lr.world < 0; });
    adopt_universe(universe, header);
    if (coordinator_here) {
      for (int w : left_out) tell_left_out(old_universes.back(), w);
    }
    refill_stats.last_seconds = MPI_Wtime() - started;
    refill_stats.total_seconds += refill_stats.last_seconds;
    if (r.join == 2) {
      ahead.reset();
      ahead_group = MPI_COMM_NULL;  // the spawner's: never freed, as the others
      ahead_port.clear();
    }
  }

  /// Takes @p universe (every process of the population, after a refill) as the
  /// communicator of every process: the header from its rank 0 (@p header there: epoch,
  /// slots, refills, spawned, joins, joined, members, spares), the pids and hosts, the two
  /// duplicates.
  /// Collective over @p universe.
  void adopt_universe(MPI_Comm universe, Message header) {
    MPI_Comm_set_errhandler(universe, MPI_ERRORS_RETURN);
    MPI_Comm_rank(universe, &world_rank);
    MPI_Comm_size(universe, &world_size);
    std::int64_t n = static_cast<std::int64_t>(header.size());
    detail::check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, 0, universe), "MPI_Bcast");
    header.resize(static_cast<std::size_t>(n));
    detail::check_mpi(MPI_Bcast(header.data(), static_cast<int>(n), MPI_INT64_T, 0, universe),
                      "MPI_Bcast");
    std::size_t i = 0;
    auto next = [&]() -> std::int64_t { return i < header.size() ? header[i++] : -1; };
    epoch = static_cast<std::uint64_t>(next());
    nslots = static_cast<int>(next());
    refill_stats.refills = static_cast<std::uint64_t>(next());
    refill_stats.spawned = static_cast<std::uint64_t>(next());
    refill_stats.joins = static_cast<std::uint64_t>(next());
    refill_stats.joined = static_cast<std::uint64_t>(next());
    members.clear();
    for (int k = 0; k < nslots; ++k) members.push_back(static_cast<int>(next()));
    spares.clear();
    const std::int64_t nsp = next();
    for (std::int64_t k = 0; k < nsp; ++k) spares.push_back(static_cast<int>(next()));
    gather_processes(universe);
    detail::check_mpi(MPI_Comm_dup(universe, &ctl), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(ctl, MPI_ERRORS_RETURN);
    detail::check_mpi(MPI_Comm_dup(universe, &groups), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(groups, MPI_ERRORS_RETURN);
    slot = slot_of(world_rank);
  }

  /// JoinOptions::joining: this world's rank 0 opens a port and publishes it under the
  /// service's name (trying for publish_seconds: the name is taken while another joiner waits
  /// there), then every process of @p world waits for the population to connect
  /// (MPI_Comm_accept), merges with it, and waits as a spare. Collective over @p world.
  void join_population(MPI_Comm world) {
    int rank = 0;
    MPI_Comm_rank(world, &rank);
    std::vector<char> port(MPI_MAX_PORT_NAME + 1, '\0');
    const std::string name = join_name(o.join.service);
    int published = 1;
    if (rank == 0) {
      detail::check_mpi(MPI_Open_port(MPI_INFO_NULL, port.data()), "MPI_Open_port");
      const double until = MPI_Wtime() + o.join.publish_seconds;
      while (quietly([&] { return MPI_Publish_name(name.c_str(), MPI_INFO_NULL, port.data()); }) !=
             MPI_SUCCESS) {
        if (MPI_Wtime() >= until) {
          published = 0;
          break;
        }
        sleep_seconds(std::max(0.05, o.join.look_seconds));
      }
    }
    detail::check_mpi(MPI_Bcast(&published, 1, MPI_INT, 0, world), "MPI_Bcast");
    if (published == 0) {
      if (rank == 0) MPI_Close_port(port.data());
      throw Error("paramwin: Membership: this joiner could not publish its port as '" + name +
                  "' within " + std::to_string(o.join.publish_seconds) +
                  " s: is ompi-server running, was every mpirun given --ompi-server, and is the "
                  "name free (another joiner waits under it)?");
    }
    detail::check_mpi(MPI_Bcast(port.data(), MPI_MAX_PORT_NAME, MPI_CHAR, 0, world), "MPI_Bcast");
    if (tracing()) trace("a joiner: waits at " + std::string(port.data()));
    MPI_Comm inter = MPI_COMM_NULL;
    detail::check_mpi(MPI_Comm_accept(port.data(), MPI_INFO_NULL, 0, world, &inter),
                      "MPI_Comm_accept");
    if (rank == 0) {
      (void)quietly([&] { return MPI_Unpublish_name(name.c_str(), MPI_INFO_NULL, port.data()); });
      MPI_Close_port(port.data());
    }
    ports_joined.emplace_back(port.data());
    MPI_Comm universe = MPI_COMM_NULL;
    detail::check_mpi(MPI_Intercomm_merge(inter, 1, &universe), "MPI_Intercomm_merge");
    adopt_universe(universe, {});
    become_new_spare();
    refill_stats.joined_here = true;
  }

  /// A process a refill started (@p parent: MPI_Comm_get_parent): merges with its parents.
  /// Their first word: merged already (0: the population's communicator), or spawned ahead
  /// by one spare (1: the population merges with them later; then the spawner's pid and
  /// host). Then a spare, or finished when the population ended before it was merged.
  void start_spawned(MPI_Comm parent) {
    MPI_Comm merged = MPI_COMM_NULL;
    detail::check_mpi(MPI_Intercomm_merge(parent, 1, &merged), "MPI_Intercomm_merge");
    MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
    std::int64_t word[3] = {0, 0, 0};
    detail::check_mpi(MPI_Bcast(word, 3, MPI_INT64_T, 0, merged), "MPI_Bcast");
    refill_stats.spawned_here = true;
    if (word[0] == 0) {
      adopt_universe(merged, {});
    } else if (!await_ahead_merge(merged, word[1], static_cast<std::uint64_t>(word[2]))) {
      role = MemberRole::finished;
      return;
    }
    become_new_spare();
  }

  /// A process a refill or join brought in, once it adopted its population: a spare.
  void become_new_spare() {
    gone.assign(static_cast<std::size_t>(nslots), 0);
    done.assign(static_cast<std::size_t>(nslots), 0);
    seen.assign(static_cast<std::size_t>(nslots), Seen{});
    role = MemberRole::spare;
    slot = -1;
  }

  /// Every process's pid and host over @p all (MPI_Allgather).
  void gather_processes(MPI_Comm all) {
    const std::int64_t mine[2] = {static_cast<std::int64_t>(getpid()),
                                  static_cast<std::int64_t>(host)};
    std::vector<std::int64_t> both(2 * static_cast<std::size_t>(world_size));
    detail::check_mpi(MPI_Allgather(mine, 2, MPI_INT64_T, both.data(), 2, MPI_INT64_T, all),
                      "MPI_Allgather");
    pids.clear();
    hosts.clear();
    for (int w = 0; w < world_size; ++w) {
      pids.push_back(both[2 * static_cast<std::size_t>(w)]);
      hosts.push_back(static_cast<std::uint64_t>(both[2 * static_cast<std::size_t>(w) + 1]));
    }
  }
};

Membership::Membership(MPI_Comm world, MembershipOptions options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.o = options;
  MPI_Comm_rank(world, &s.world_rank);
  MPI_Comm_size(world, &s.world_size);
  // A process a refill started: its world is the refill's new processes only.
  MPI_Comm parent = MPI_COMM_NULL;
  if (options.spawn.pool > 0) MPI_Comm_get_parent(&parent);
  const bool spawned = parent != MPI_COMM_NULL;
  const int members = options.members == 0 ? s.world_size : options.members;
  if (options.spawn.pool > 0) {  // /proc is read only by a population that spawns
    s.spawn_command = options.spawn.command.empty() ? own_executable() : options.spawn.command;
    s.spawn_args = options.spawn.args ? *options.spawn.args : own_arguments();
  }
  std::string bad;
  if (options.spawn.pool < 0) {
    bad = "SpawnOptions::pool is " + std::to_string(options.spawn.pool) + ", not >= 0";
  } else if (options.spawn.low < 0 || options.spawn.low > options.spawn.pool) {
    bad = "SpawnOptions::low is " + std::to_string(options.spawn.low) + ", not in 0.." +
          std::to_string(options.spawn.pool) + " (the pool)";
  } else if (options.spawn.ahead && options.spawn.pool == 0) {
    bad = "SpawnOptions::ahead needs a pool (SpawnOptions::pool > 0)";
  } else if (options.spawn.pool > 0 && options.replacement != Replacement::new_window) {
    bad = "SpawnOptions::pool needs Replacement::new_window (the standing window is over the "
          "processes of the start: a spawned spare could never take a slot in it)";
  } else if (options.spawn.pool > 0 && !kCanSpawn) {
    bad = "SpawnOptions::pool needs Open MPI (this MPI has no MPI_Comm_spawn here: MPICH's "
          "ch4:ucx does not support it)";
  } else if (options.spawn.pool > 0 && s.spawn_command.empty()) {
    bad = "SpawnOptions::command is empty and this process's executable is unknown "
          "(/proc/self/exe)";
  } else if (!options.join.service.empty() && options.replacement != Replacement::new_window) {
    bad = "JoinOptions::service needs Replacement::new_window (the standing window is over the "
          "processes of the start: a joiner could never take a slot in it)";
  } else if (!options.join.service.empty() && !kCanSpawn) {
    bad = "JoinOptions::service needs Open MPI (MPICH's ch4:ucx has no MPI_Comm_connect here)";
  } else if (options.join.joining && options.join.service.empty()) {
    bad = "JoinOptions::joining needs JoinOptions::service (the population's name)";
  } else if (!(options.join.look_seconds >= 0.0) || !(options.join.publish_seconds >= 0.0) ||
             !std::isfinite(options.join.look_seconds + options.join.publish_seconds)) {
    bad = "JoinOptions: look_seconds and publish_seconds must be finite and >= 0";
  } else if (!spawned && !options.join.joining && (members < 1 || members > s.world_size)) {
    bad = "MembershipOptions::members is " + std::to_string(options.members) + ", not in [0, " +
          std::to_string(s.world_size) + "] (0: every rank)";
  } else if (options.replacement != Replacement::new_window &&
             options.replacement != Replacement::standing_window) {
    bad = "MembershipOptions::replacement is out of range";
  } else if (!(options.check_seconds >= 0.0) || !(options.dead_after_seconds >= 0.0) ||
             !(options.agree_seconds > 0.0) || !(options.spare_sleep_seconds >= 0.0) ||
             !std::isfinite(options.check_seconds + options.dead_after_seconds +
                            options.agree_seconds + options.spare_sleep_seconds)) {
    bad = "MembershipOptions: check_seconds, dead_after_seconds and spare_sleep_seconds must be "
          "finite and >= 0, agree_seconds finite and > 0";
  }
  int any_bad = bad.empty() ? 0 : 1;
  detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &any_bad, 1, MPI_INT, MPI_MAX, world),
                    "MPI_Allreduce");
  if (any_bad != 0) {
    throw InvalidArgument("paramwin: Membership: " +
                          (bad.empty() ? std::string("another rank's options are invalid") : bad));
  }
  s.host = detail::host_id();
  if (options.join.joining) {
    s.join_population(world);
    return;
  }
  if (spawned) {
    // The other side of the parents' enter_refill: merge, then their header and the rest.
    s.start_spawned(parent);
    return;
  }
  s.gather_processes(world);
  detail::check_mpi(MPI_Comm_dup(world, &s.ctl), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(s.ctl, MPI_ERRORS_RETURN);
  detail::check_mpi(MPI_Comm_dup(world, &s.groups), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(s.groups, MPI_ERRORS_RETURN);
  s.nslots = members;
  for (int r = 0; r < members; ++r) s.members.push_back(r);
  for (int r = members; r < s.world_size; ++r) s.spares.push_back(r);
  s.gone.assign(static_cast<std::size_t>(members), 0);
  s.done.assign(static_cast<std::size_t>(members), 0);
  s.seen.assign(static_cast<std::size_t>(members), State::Seen{});
  s.standing = options.replacement == Replacement::standing_window;
  if (s.standing) {
    detail::check_mpi(MPI_Comm_dup(world, &s.comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN);
  }
  if (s.world_rank < members) {
    s.role = MemberRole::member;
    s.slot = s.world_rank;
    if (!s.standing) s.comm = s.create_comm(s.members, epoch_tag(0));
  } else {
    s.role = MemberRole::spare;
  }
}

Membership::Membership(Membership&&) noexcept = default;
Membership& Membership::operator=(Membership&&) noexcept = default;
Membership::~Membership() = default;  // the communicators are left to the process's end

MemberRole Membership::role() const noexcept { return s_->role; }
int Membership::slot() const noexcept { return s_->slot; }
int Membership::slots() const noexcept { return s_->nslots; }
std::uint64_t Membership::epoch() const noexcept { return s_->epoch; }
MPI_Comm Membership::comm() const noexcept {
  if (s_->standing) return s_->comm;
  return s_->role == MemberRole::member || (s_->role == MemberRole::finished && s_->slot >= 0)
             ? s_->comm
             : MPI_COMM_NULL;
}
MPI_Comm Membership::create_members_comm() const {
  const State& s = *s_;
  const bool finished = s.role == MemberRole::finished && !s.finished_members.empty();
  return s.create_comm(finished ? s.finished_members : s.members,
                       kMembersTagBase + static_cast<int>(s.epoch % 1000));
}
const MembershipOptions& Membership::options() const noexcept { return s_->o; }
const std::vector<int>& Membership::members() const noexcept { return s_->members; }
const std::vector<int>& Membership::spares() const noexcept { return s_->spares; }
std::int64_t Membership::resume_iteration() const noexcept { return s_->resume_iteration; }
int Membership::world_rank() const noexcept { return s_->world_rank; }
const RefillStats& Membership::refills() const noexcept { return s_->refill_stats; }
const std::optional<EpochChange>& Membership::last_change() const noexcept { return s_->last; }

bool Membership::check_due() const noexcept {
  return s_->role == MemberRole::member && MPI_Wtime() - s_->last_check >= s_->o.check_seconds;
}

bool Membership::wait_for_slot() {
  State& s = *s_;
  if (s.role == MemberRole::member) return true;
  if (s.role != MemberRole::spare) return false;
  Message m;
  MPI_Status st;
  while (true) {
    while (s.receive(m, st)) {
      if (st.MPI_TAG == kStop) s.stop_pending = true;
      if (s.stop_pending) {
        s.release_ahead();
        s.role = MemberRole::finished;
        return false;
      }
      if (st.MPI_TAG == kPropose && s.ahead_group != MPI_COMM_NULL) {
        s.send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});  // holds a spawn ahead
      } else if (st.MPI_TAG == kPropose) {
        // A spare learns the epoch from the proposal itself.
        if (!m.empty() && m[0] >= 1) s.epoch = static_cast<std::uint64_t>(m[0]) - 1;
        if (s.on_proposal(m, st.MPI_SOURCE)) return true;
        if (s.role == MemberRole::finished) return false;
      } else if (st.MPI_TAG == kRefill) {
        s.on_refill(m, st.MPI_SOURCE);  // a spare takes part, and waits on
      } else {
        (void)s.bookkeeping(m, st);
      }
    }
    if (s.stop_pending) {  // read inside an agreement
      s.release_ahead();
      s.role = MemberRole::finished;
      return false;
    }
    if (s.spawn_due) {
      s.spawn_ahead();
      continue;
    }
    sleep_seconds(s.o.spare_sleep_seconds);
  }
}

std::optional<EpochChange> Membership::poll(std::span<const RosterEntry> roster) {
  State& s = *s_;
  if (s.role != MemberRole::member) {
    throw InvalidArgument("paramwin: Membership::poll: this process is not a member (role " +
                          std::to_string(static_cast<int>(s.role)) + ")");
  }
  Message m;
  MPI_Status st;
  auto evicted = [&s](const Message& msg) -> std::optional<EpochChange> {
    if (!s.evicted_by(msg)) return std::nullopt;
    EpochChange change;
    change.epoch = s.epoch;
    change.members = s.members;
    return change;
  };
  if (s.spawn_due) {  // asked to spawn ahead while a spare, given a slot since: declines
    s.spawn_due = false;
    if (s.ahead) s.tell_everyone(kAheadReady, {s.ahead->id, s.ahead->nspawn, -1});
    s.ahead.reset();
  }
  if (s.evict_pending) {  // read inside an agreement since the last poll
    const Message e = std::move(*s.evict_pending);
    s.evict_pending.reset();
    if (auto change = evicted(e)) return change;
  }
  while (s.receive(m, st)) {
    if (s.settles_pending(m, st)) {
      if (auto change = s.settle(st)) return change;
    } else if (st.MPI_TAG == kPropose) {
      if (s.pending) {
        s.send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});  // waits for another
      } else if (auto change = s.on_proposal(m, st.MPI_SOURCE)) {
        return change;
      }
    } else if (st.MPI_TAG == kRefill) {
      s.on_refill(m, st.MPI_SOURCE);  // no new epoch: the members keep their communicator
    } else if (st.MPI_TAG == kEvict) {
      if (auto change = evicted(m)) return change;
    } else {
      (void)s.bookkeeping(m, st);
    }
    if (s.evict_pending) {
      const Message e = std::move(*s.evict_pending);
      s.evict_pending.reset();
      if (auto change = evicted(e)) return change;
    }
  }
  if (s.pending &&
      (s.process_gone(s.pending->proposer) || MPI_Wtime() - s.pending->started > s.commit_wait())) {
    if (tracing()) s.trace("drops its answer to " + std::to_string(s.pending->proposer));
    s.pending.reset();  // its proposer is gone, or never decided
  }
  if (roster.empty() && !check_due()) return std::nullopt;
  s.last_check = MPI_Wtime();
  const std::vector<int> dead = s.judge(roster);
  if (tracing() && dead != s.traced_dead) {
    s.trace("judges (0 alive, 1 gone or resigned, 2 silent) " + listed(dead) + ", members " +
            listed(s.members));
    s.traced_dead = dead;
  }
  if (s.pending) {
    // A proposer judged dead (silent: it stalled after proposing), or no longer a member, will
    // not commit in time (may_commit): give the answer up, so that the slots are judged again.
    const int at = s.slot_of(s.pending->proposer);
    if (at >= 0 && dead[static_cast<std::size_t>(at)] == 0) return std::nullopt;
    if (tracing()) s.trace("drops its answer to " + std::to_string(s.pending->proposer));
    s.pending.reset();
  }
  if (s.coordinator(dead) != s.slot || MPI_Wtime() < s.backoff_until) return std::nullopt;
  const auto ndead = static_cast<std::size_t>(
      std::count_if(dead.begin(), dead.end(), [](int d) { return d != 0; }));
  if (s.refill_proposed(dead, ndead)) return std::nullopt;  // the dead slots: at the next check
  if (s.join_due()) {
    if (std::optional<std::string> port = s.look_for_joiner()) {
      s.propose_refill(1, dead, *port);
      return std::nullopt;  // the joiner is a spare at the next check
    }
  }
  if (ndead == 0) return std::nullopt;
  return s.propose(dead, roster);
}

void Membership::resign() {
  State& s = *s_;
  if (s.role != MemberRole::member) return;
  if (tracing()) s.trace("resigns");
  for (int r : s.members) {
    if (r != s.world_rank) s.send(r, kResign, {static_cast<std::int64_t>(s.epoch), s.slot});
  }
  s.role = MemberRole::spare;
  s.slot = -1;
}

void Membership::rejoin_as_spare() {
  State& s = *s_;
  if (s.role != MemberRole::evicted) return;
  if (tracing()) s.trace("rejoins as a spare: tells " + listed(s.members));
  for (int r : s.members) {
    if (r != s.world_rank) s.send(r, kSpare, {});
  }
  s.role = MemberRole::spare;
}

void Membership::start_finish() {
  State& s = *s_;
  if (s.role != MemberRole::member) return;
  s.done[static_cast<std::size_t>(s.slot)] = 1;
  s.finish_started = MPI_Wtime();
  for (int r : s.members) {
    if (r != s.world_rank) s.send(r, kDone, {static_cast<std::int64_t>(s.epoch), s.slot});
  }
}

bool Membership::finish_step(std::span<const RosterEntry> roster) {
  State& s = *s_;
  if (s.role != MemberRole::member) return true;
  Message m;
  MPI_Status st;
  while (s.receive(m, st)) {
    if (s.settles_pending(m, st)) {
      // A yes given before finishing: the epoch holds (nothing collective), and its joiner
      // must hear that this slot is done.
      if (s.settle(st)) {
        for (int r : s.members) {
          if (r != s.world_rank) s.send(r, kDone, {static_cast<std::int64_t>(s.epoch), s.slot});
        }
      }
    } else if (st.MPI_TAG == kPropose) {
      s.send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});  // no new epoch at the end
    } else if (st.MPI_TAG == kEvict) {
      // Judged dead while it stalled (a SIGSTOP, a long pause) and woken at the end: its slot
      // is another process's; it ends evicted (ElasticAgent::finish throws EvictedError).
      if (s.evicted_by(m)) return true;
    } else {
      (void)s.bookkeeping(m, st);
    }
  }
  if (!roster.empty()) s.last_check = MPI_Wtime();
  const std::vector<int> dead = s.judge(roster);
  // Messages sent while this process stalled (an eviction) arrive within a few checks.
  const bool settled = MPI_Wtime() - s.finish_started >= 2.0 * s.o.check_seconds;
  for (int k = 0; k < s.nslots; ++k) {
    const auto i = static_cast<std::size_t>(k);
    if ((s.done[i] == 0 && dead[i] == 0) || !settled) {
      sleep_seconds(0.001);
      return false;
    }
  }
  if (s.coordinator(dead) == s.slot) {
    for (int r : s.spares) s.send(r, kStop, {});
    // A member judged dead at the end may only have stalled: were it to wake, it must not
    // finish in a population that ended without it (its finish() throws EvictedError), and
    // it waits for the end as a spare.
    Message evict{static_cast<std::int64_t>(s.epoch + 1), s.nslots};
    for (int r : s.members) evict.push_back(r);
    for (int k = 0; k < s.nslots; ++k) {
      const int r = s.members[static_cast<std::size_t>(k)];
      if (s.done[static_cast<std::size_t>(k)] != 0 || r == s.world_rank || s.process_gone(r)) {
        continue;
      }
      s.send(r, kEvict, evict);
      s.send(r, kStop, {});
    }
    // A process evicted earlier that has not told anyone it is a spare yet (it was still
    // stopped when its slot was given away): it would wait for a slot after the end forever.
    for (int r = 0; r < s.world_size; ++r) {
      const bool known = r == s.world_rank || s.slot_of(r) >= 0 ||
                         std::find(s.spares.begin(), s.spares.end(), r) != s.spares.end();
      if (known || s.process_gone(r)) continue;
      s.send(r, kEvict, evict);
      s.send(r, kStop, {});
    }
  }
  s.finished_members.clear();
  for (int k = 0; k < s.nslots; ++k) {
    if (s.done[static_cast<std::size_t>(k)] != 0) {
      s.finished_members.push_back(s.members[static_cast<std::size_t>(k)]);
    }
  }
  s.role = MemberRole::finished;
  return true;
}

}  // namespace paramwin
