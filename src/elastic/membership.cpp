// Membership epochs (docs/elastic.md, "Epochs and spares"): the coordinator's judgement of
// the members, the proposal / answer / commit exchange over point-to-point messages, and the
// epoch's communicator built by MPI_Comm_create_group over the new epoch's processes only.
#include "paramwin/membership.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
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
};
// MPI_Comm_create_group's tags: an epoch's kCommTagBase + epoch % 30000, create_members_comm's
// kMembersTagBase + epoch % 1000 (all below 32767, the least MPI_TAG_UB allowed).
constexpr int kCommTagBase = 1000;
constexpr int kMembersTagBase = 31000;
int epoch_tag(std::uint64_t epoch) { return kCommTagBase + static_cast<int>(epoch % 30000); }

using Message = std::vector<std::int64_t>;

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

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
  struct Outgoing {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<Message> data;
  };
  std::vector<Outgoing> outbox;  // sends to a dead rank never complete: kept, small
  std::mt19937_64 rng{std::random_device{}()};

  // --- messages -------------------------------------------------------------------------

  void reap() {
    std::erase_if(outbox, [](Outgoing& m) {
      int flag = 0;
      MPI_Test(&m.request, &flag, MPI_STATUS_IGNORE);
      return flag != 0;
    });
  }

  void send(int dest, int tag, Message msg) {
    reap();
    Outgoing out;
    out.data = std::make_unique<Message>(std::move(msg));
    detail::check_mpi(MPI_Isend(out.data->data(), static_cast<int>(out.data->size()), MPI_INT64_T,
                                dest, tag, ctl, &out.request),
                      "MPI_Isend");
    outbox.push_back(std::move(out));
  }

  /// The next message from @p source (MPI_ANY_SOURCE: anyone) with @p tag (MPI_ANY_TAG: any),
  /// if one has arrived.
  bool receive(int source, int tag, Message& msg, MPI_Status& status) {
    int flag = 0;
    detail::check_mpi(MPI_Iprobe(source, tag, ctl, &flag, &status), "MPI_Iprobe");
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
                               ctl, MPI_STATUS_IGNORE),
                      "MPI_Recv");
    return true;
  }

  // --- judgement ------------------------------------------------------------------------

  [[nodiscard]] bool process_gone(int world) const {
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
    spares = spares_left;
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
    return true;
  }

  /// Bookkeeping messages any process handles at any time; false for others.
  bool bookkeeping(const Message& m, const MPI_Status& st) {
    switch (st.MPI_TAG) {
      case kResign:
        if (m.size() == 2 && static_cast<std::uint64_t>(m[0]) == epoch && m[1] >= 0 &&
            m[1] < nslots) {
          gone[static_cast<std::size_t>(m[1])] = 1;
          add_spare(st.MPI_SOURCE, true);  // the resigned process waits as a spare
        }
        return true;
      case kSpare: add_spare(st.MPI_SOURCE); return true;
      case kDone:
        // Only from the slot's holder: a member evicted while it stalled may finish late,
        // and its slot's new holder has not finished then.
        if (m.size() == 2 && m[1] >= 0 && m[1] < nslots &&
            members[static_cast<std::size_t>(m[1])] == st.MPI_SOURCE) {
          done[static_cast<std::size_t>(m[1])] = 1;
        }
        return true;
      case kCommit:
      case kAbort:
      case kAnswer: return true;  // stale: of a proposal given up
      default: return false;
    }
  }

  void add_spare(int world, bool resigned = false) {
    if (std::find(spares.begin(), spares.end(), world) == spares.end() &&
        (resigned || slot_of(world) < 0)) {
      spares.push_back(world);
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
      while (receive(MPI_ANY_SOURCE, MPI_ANY_TAG, m, st)) {
        if (st.MPI_SOURCE == proposer && (st.MPI_TAG == kCommit || st.MPI_TAG == kAbort) &&
            !m.empty() && static_cast<std::uint64_t>(m[0]) == change.epoch) {
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
      if (process_gone(proposer) || MPI_Wtime() - started > o.agree_seconds) return std::nullopt;
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
    if (!ok) return std::nullopt;
    if (standing && role == MemberRole::member) {
      pending = Pending{proposer, std::move(change), std::move(spares_left), MPI_Wtime()};
      return std::nullopt;
    }
    return await_commit(proposer, change, spares_left);
  }

  /// The coordinator: proposes the epoch that gives the slots in @p dead to spares.
  std::optional<EpochChange> propose(const std::vector<int>& dead,
                                     std::span<const RosterEntry> roster) {
    const double judged = MPI_Wtime();
    std::vector<int> live_spares;
    for (int r : spares) {
      if (!process_gone(r)) live_spares.push_back(r);
    }
    EpochChange change;
    change.epoch = epoch + 1;
    change.members = members;
    change.judged_at = judged;
    std::size_t next_spare = 0;
    for (int s = 0; s < nslots; ++s) {
      const int how = dead[static_cast<std::size_t>(s)];
      if (how == 0) continue;
      if (next_spare == live_spares.size()) return std::nullopt;  // wait for a spare
      change.dead.push_back(s);
      change.reasons_pid.push_back(how == 1 ? 1 : 0);
      change.iterations.push_back(roster.size() == static_cast<std::size_t>(nslots)
                                      ? roster[static_cast<std::size_t>(s)].status.iteration
                                      : 0);
      change.members[static_cast<std::size_t>(s)] = live_spares[next_spare++];
    }
    change.joined = change.dead;
    const std::vector<int> spares_left(live_spares.begin() +
                                           static_cast<std::ptrdiff_t>(next_spare),
                                       live_spares.end());
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
    const double started = MPI_Wtime();
    std::vector<int> yes;
    bool failed = false;
    Message m;
    MPI_Status st;
    while (!failed && yes.size() < targets.size()) {
      while (receive(MPI_ANY_SOURCE, MPI_ANY_TAG, m, st)) {
        if (st.MPI_TAG == kAnswer && m.size() == 2 &&
            static_cast<std::uint64_t>(m[0]) == change.epoch &&
            std::find(targets.begin(), targets.end(), st.MPI_SOURCE) != targets.end()) {
          if (m[1] == 1) {
            yes.push_back(st.MPI_SOURCE);
          } else {
            failed = true;
          }
        } else if (st.MPI_TAG == kPropose) {
          send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});  // busy with its own
        } else {
          (void)bookkeeping(m, st);
        }
      }
      for (int r : targets) {
        if (std::find(yes.begin(), yes.end(), r) == yes.end() && process_gone(r)) failed = true;
      }
      if (MPI_Wtime() - started > o.agree_seconds) failed = true;
      if (!failed && yes.size() < targets.size()) sleep_seconds(0.0005);
    }
    if (failed) {
      for (int r : yes) send(r, kAbort, {static_cast<std::int64_t>(change.epoch)});
      std::uniform_real_distribution<double> wait(0.02, 0.2);
      backoff_until = MPI_Wtime() + wait(rng);
      return std::nullopt;
    }
    for (int r : targets) send(r, kCommit, {static_cast<std::int64_t>(change.epoch)});
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
};

Membership::Membership(MPI_Comm world, MembershipOptions options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.o = options;
  MPI_Comm_rank(world, &s.world_rank);
  MPI_Comm_size(world, &s.world_size);
  const int members = options.members == 0 ? s.world_size : options.members;
  std::string bad;
  if (members < 1 || members > s.world_size) {
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
  const std::int64_t mine[2] = {static_cast<std::int64_t>(getpid()),
                                static_cast<std::int64_t>(s.host)};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(s.world_size));
  detail::check_mpi(MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, world),
                    "MPI_Allgather");
  for (int r = 0; r < s.world_size; ++r) {
    s.pids.push_back(all[2 * static_cast<std::size_t>(r)]);
    s.hosts.push_back(static_cast<std::uint64_t>(all[2 * static_cast<std::size_t>(r) + 1]));
  }
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
    while (s.receive(MPI_ANY_SOURCE, MPI_ANY_TAG, m, st)) {
      if (st.MPI_TAG == kStop) {
        s.role = MemberRole::finished;
        return false;
      }
      if (st.MPI_TAG == kPropose) {
        // A spare learns the epoch from the proposal itself.
        if (!m.empty() && m[0] >= 1) s.epoch = static_cast<std::uint64_t>(m[0]) - 1;
        if (s.on_proposal(m, st.MPI_SOURCE)) return true;
        if (s.role == MemberRole::finished) return false;
      } else {
        (void)s.bookkeeping(m, st);
      }
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
  while (s.receive(MPI_ANY_SOURCE, MPI_ANY_TAG, m, st)) {
    if (s.settles_pending(m, st)) {
      if (auto change = s.settle(st)) return change;
    } else if (st.MPI_TAG == kPropose) {
      if (s.pending) {
        s.send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});  // waits for another
      } else if (auto change = s.on_proposal(m, st.MPI_SOURCE)) {
        return change;
      }
    } else if (st.MPI_TAG == kEvict) {
      if (s.evicted_by(m)) {
        EpochChange change;
        change.epoch = s.epoch;
        change.members = s.members;
        return change;
      }
    } else {
      (void)s.bookkeeping(m, st);
    }
  }
  if (s.pending && (s.process_gone(s.pending->proposer) ||
                    MPI_Wtime() - s.pending->started > s.o.agree_seconds)) {
    s.pending.reset();  // its proposer is gone, or never decided
  }
  if (s.pending || (roster.empty() && !check_due())) return std::nullopt;
  s.last_check = MPI_Wtime();
  const std::vector<int> dead = s.judge(roster);
  if (s.coordinator(dead) != s.slot || MPI_Wtime() < s.backoff_until) return std::nullopt;
  if (std::none_of(dead.begin(), dead.end(), [](int d) { return d != 0; })) return std::nullopt;
  return s.propose(dead, roster);
}

void Membership::resign() {
  State& s = *s_;
  if (s.role != MemberRole::member) return;
  for (int r : s.members) {
    if (r != s.world_rank) s.send(r, kResign, {static_cast<std::int64_t>(s.epoch), s.slot});
  }
  s.role = MemberRole::spare;
  s.slot = -1;
}

void Membership::rejoin_as_spare() {
  State& s = *s_;
  if (s.role != MemberRole::evicted) return;
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
  while (s.receive(MPI_ANY_SOURCE, MPI_ANY_TAG, m, st)) {
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
