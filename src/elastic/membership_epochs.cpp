// Membership epochs (docs/elastic.md, "Epochs and spares"): the messages, the coordinator's
// judgement of the members, the proposal / answer / commit exchange over point-to-point
// messages, and the epoch's communicator built by MPI_Comm_create_group over the new epoch's
// processes only.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "detail/mpi_check.hpp"
#include "elastic/membership_state.hpp"
#include "paramwin/error.hpp"
#include "window/liveness.hpp"

namespace paramwin {
// The membership's tags, messages and trace (membership_state.hpp).
using namespace detail::membership;  // NOLINT(google-build-using-namespace): its own vocabulary

void Membership::State::trace(const std::string& what) const {
  std::fprintf(stderr, "paramwin membership: world %d epoch %llu slot %d role %d t %.6f: %s\n",
               world_rank, static_cast<unsigned long long>(epoch), slot, static_cast<int>(role),
               MPI_Wtime(), what.c_str());
}

void Membership::State::reap() {
  std::erase_if(outbox, [](Outgoing& m) {
    int flag = 0;
    MPI_Test(&m.request, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  });
}

void Membership::State::send(int dest, int tag, Message msg, MPI_Comm on) {
  if (dest < 0) return;
  reap();
  detail::check_mpi(post(dest, tag, std::move(msg), on == MPI_COMM_NULL ? ctl : on), "MPI_Isend");
}

int Membership::State::post(int dest, int tag, Message msg, MPI_Comm on) {
  Outgoing out;
  out.data = std::make_unique<Message>(std::move(msg));
  const int rc = MPI_Isend(out.data->data(), static_cast<int>(out.data->size()), MPI_INT64_T, dest,
                           tag, on, &out.request);
  if (rc == MPI_SUCCESS) outbox.push_back(std::move(out));
  return rc;
}

bool Membership::State::receive(Message& msg, MPI_Status& status) {
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

void Membership::State::tell_left_out(const OldUniverse& u, int rank) {
  send(rank, kEvict, {static_cast<std::int64_t>(epoch + 1), nslots}, u.ctl);
  send(rank, kStop, {}, u.ctl);
}

bool Membership::State::receive_on(MPI_Comm on, Message& msg, MPI_Status& status) {
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
  detail::check_mpi(MPI_Recv(msg.data(), count, MPI_INT64_T, status.MPI_SOURCE, status.MPI_TAG, on,
                             MPI_STATUS_IGNORE),
                    "MPI_Recv");
  return true;
}

std::optional<Membership::State::Message> Membership::State::receive_within(MPI_Comm on, int tag,
                                                                            std::ptrdiff_t size,
                                                                            double seconds) {
  const double started = MPI_Wtime();
  Message m;
  MPI_Status st;
  while (true) {
    if (receive_on(on, m, st) && st.MPI_TAG == tag &&
        (size < 0 || m.size() == static_cast<std::size_t>(size)))
      return m;
    if (MPI_Wtime() - started > seconds) return std::nullopt;
    beat_children();  // a spawner ahead waiting for its new processes' port
    sleep_seconds(o.spare_sleep_seconds);
  }
}

std::string Membership::State::share_port(std::string port, int root, MPI_Comm on) {
  auto n = static_cast<std::int64_t>(port.size());
  detail::check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, root, on), "MPI_Bcast");
  port.resize(static_cast<std::size_t>(n));
  detail::check_mpi(MPI_Bcast(port.data(), static_cast<int>(n), MPI_CHAR, root, on), "MPI_Bcast");
  return port;
}

bool Membership::State::process_gone(int world) const {
  if (world < 0) return true;  // a slot whose process a refill left out
  return hosts[static_cast<std::size_t>(world)] == host &&
         !detail::process_alive(pids[static_cast<std::size_t>(world)]);
}

int Membership::State::slot_of(int world) const {
  const auto it = std::find(members.begin(), members.end(), world);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

std::vector<int> Membership::State::judge(std::span<const RosterEntry> roster) {
  const double now = MPI_Wtime();
  std::vector<int> dead(static_cast<std::size_t>(nslots), 0);
  for (int s = 0; s < nslots; ++s) {
    const auto i = static_cast<std::size_t>(s);
    // A slot that finished is never replaced: its member stamps no more while it waits for the
    // others (or has ended), however long they train on.
    if (s == slot || done[i] != 0) continue;
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

int Membership::State::coordinator(const std::vector<int>& dead) const {
  for (int s = 0; s < nslots; ++s) {
    if (dead[static_cast<std::size_t>(s)] == 0) return s;
  }
  return slot;
}

void Membership::State::tell_done() {
  const std::int64_t open = done[static_cast<std::size_t>(slot)] == kDoneOpen ? 1 : 0;
  for (int r : members) {
    if (r != world_rank) send(r, kDone, {static_cast<std::int64_t>(epoch), slot, open});
  }
}

int Membership::State::proposer(const std::vector<int>& dead) const {
  for (int s = 0; s < nslots; ++s) {
    const auto i = static_cast<std::size_t>(s);
    if (dead[i] == 0 && done[i] == 0) return s;
  }
  return -1;
}

MPI_Comm Membership::State::create_comm(const std::vector<int>& ranks, int tag) const {
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

bool Membership::State::parse_proposal(const Message& m, EpochChange& change,
                                       std::vector<int>& spares_left) {
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
  const std::int64_t f = next();
  change.finished.clear();
  for (std::int64_t k = 0; k < f; ++k) {
    const std::int64_t s = next();
    if (s < 0 || s >= n) return false;
    change.finished.push_back(static_cast<int>(s));
  }
  return f >= 0 && i <= m.size();
}

EpochChange Membership::State::enter(EpochChange change, const std::vector<int>& spares_left,
                                     double started) {
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
    resume_iteration = at == change.dead.end()
                           ? 0
                           : change.iterations[static_cast<std::size_t>(at - change.dead.begin())];
  }
  slot = mine;
  role = MemberRole::member;
  // A joiner learns here which slots finished (their members stamp no more, and take part in
  // epochs: they took part in this one), whatever order their kDone and the commit reach it in.
  for (int k : change.finished) done[static_cast<std::size_t>(k)] = kDoneOpen;
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

bool Membership::State::evicted_by(const Message& m) {
  if (m.size() < 2 || static_cast<std::uint64_t>(m[0]) <= epoch) return false;
  epoch = static_cast<std::uint64_t>(m[0]);
  members.clear();
  for (std::size_t k = 2; k < m.size(); ++k) members.push_back(static_cast<int>(m[k]));
  role = MemberRole::evicted;
  slot = -1;
  if (tracing()) trace("evicted: members " + listed(members));
  return true;
}

bool Membership::State::bookkeeping(const Message& m, const MPI_Status& st) {
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
      if (m.size() == 3 && m[1] >= 0 && m[1] < nslots &&
          members[static_cast<std::size_t>(m[1])] == st.MPI_SOURCE) {
        done[static_cast<std::size_t>(m[1])] = m[2] == 1 ? kDoneOpen : kDoneClosed;
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

void Membership::State::add_spare(int world, bool resigned) {
  if (std::find(spares.begin(), spares.end(), world) == spares.end() &&
      (resigned || slot_of(world) < 0)) {
    spares.push_back(world);
    if (tracing()) trace("spare " + std::to_string(world) + " known: spares " + listed(spares));
  }
}

std::optional<EpochChange> Membership::State::await_commit(int proposer, const EpochChange& change,
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

bool Membership::State::settles_pending(const Message& m, const MPI_Status& st) const {
  return pending && st.MPI_SOURCE == pending->proposer &&
         (st.MPI_TAG == kCommit || st.MPI_TAG == kAbort) && !m.empty() &&
         static_cast<std::uint64_t>(m[0]) == pending->change.epoch;
}

std::optional<EpochChange> Membership::State::settle(const MPI_Status& st) {
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

std::optional<EpochChange> Membership::State::on_proposal(const Message& m, int proposer) {
  EpochChange change;
  std::vector<int> spares_left;
  const bool ok =
      parse_proposal(m, change, spares_left) && change.epoch == epoch + 1 &&
      std::find(change.members.begin(), change.members.end(), world_rank) != change.members.end() &&
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

bool Membership::State::collect_answers(const std::vector<int>& targets, int tag, std::int64_t id,
                                        double started, std::vector<int>& yes) {
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
          trace("proposal " + std::to_string(id) + ": " + std::to_string(w) + "'s process is gone");
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

double Membership::State::answer_wait() const {
  return o.dead_after_seconds > 0.0 ? std::min(o.agree_seconds, 0.5 * o.dead_after_seconds)
                                    : o.agree_seconds;
}

double Membership::State::commit_wait() const {
  return o.dead_after_seconds > 0.0 ? std::min(o.agree_seconds, o.dead_after_seconds)
                                    : o.agree_seconds;
}

bool Membership::State::may_commit(double started) const {
  return !evict_pending &&
         (o.dead_after_seconds <= 0.0 || MPI_Wtime() - started <= 0.5 * o.dead_after_seconds);
}

void Membership::State::back_off() {
  std::uniform_real_distribution<double> wait(0.02, 0.2);
  backoff_until = MPI_Wtime() + wait(rng);
}

std::optional<EpochChange> Membership::State::propose(const std::vector<int>& dead,
                                                      std::span<const RosterEntry> roster) {
  const double judged = MPI_Wtime();
  std::vector<int> live_spares;
  for (int r : spares) {
    if (!process_gone(r) && !busy_spawning(r)) live_spares.push_back(r);
  }
  if (std::find(done.begin(), done.end(), kDoneClosed) != done.end()) {
    // A member that finished without its parameters cannot make a new window (new_window):
    // it would answer no to every proposal.
    if (tracing() && traced_wait != "closed") trace("proposes no epoch: a slot finished closed");
    traced_wait = "closed";
    return std::nullopt;
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
  for (int s = 0; s < nslots; ++s) {
    if (done[static_cast<std::size_t>(s)] != 0) change.finished.push_back(s);
  }
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
  msg.push_back(static_cast<std::int64_t>(change.finished.size()));
  for (int s : change.finished) msg.push_back(s);
  std::vector<int> targets;
  for (int r : change.members) {
    if (r != world_rank) targets.push_back(r);
  }
  for (int r : targets) send(r, kPropose, msg);
  if (tracing()) {
    trace("proposes epoch " + std::to_string(change.epoch) + ": dead slots " + listed(change.dead) +
          ", members " + listed(change.members) + ", spares left " + listed(spares_left));
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

}  // namespace paramwin
