// Membership (docs/elastic.md): the public calls — construction (the options checked on every
// rank, the processes gathered, the first epoch), poll(), wait_for_slot(), resign(), finish —
// over Membership::State (membership_state.hpp).
#include "paramwin/membership.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "detail/mpi_check.hpp"
#include "elastic/membership_state.hpp"
#include "paramwin/error.hpp"
#include "window/liveness.hpp"

namespace paramwin {
// The membership's tags, messages and trace (membership_state.hpp).
using namespace detail::membership;  // NOLINT(google-build-using-namespace): its own vocabulary

namespace {

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

/// Whether @p command names an executable file: as a path when it holds a '/', else in PATH
/// (as MPI_Comm_spawn looks it up).
bool executable(const std::string& command) {
  if (command.find('/') != std::string::npos) return access(command.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    std::string file = end > start ? dirs.substr(start, end - start) : ".";
    file += '/';
    file += command;
    if (access(file.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

/// Whether this MPI has MPI_Comm_spawn here (Open MPI; MPICH's ch4:ucx has not).
constexpr bool kCanSpawn =
#if defined(OPEN_MPI)
    true;
#else
    false;
#endif

}  // namespace

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
  } else if (options.spawn.pool > 0 && !executable(s.spawn_command)) {
    // Open MPI's MPI_Comm_spawn of a missing program hangs instead of failing.
    bad = "SpawnOptions::command '" + s.spawn_command + "' is not an executable file";
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
    s.start_spawned(world, parent);
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
      if (st.MPI_TAG == kPropose) {
        // A proposer counts a spare that spawns ahead as busy: a slot for this one means the
        // spawn it may still hold was forgotten (not ready in time).
        s.let_go_of_forgotten_spawn("given a slot");
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
    s.beat_children();  // a spawn ahead's new processes, if it holds them
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
  if (s.proposer(dead) != s.slot || MPI_Wtime() < s.backoff_until) return std::nullopt;
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

void Membership::start_finish(bool takes_epochs) {
  State& s = *s_;
  if (s.role != MemberRole::member) return;
  // The proposers need to know whether this member can take part in a new epoch's window.
  s.done[static_cast<std::size_t>(s.slot)] = takes_epochs || s.standing ? kDoneOpen : kDoneClosed;
  s.finish_started = MPI_Wtime();
  s.tell_done();
}

Membership::FinishProgress Membership::finish_step(std::span<const RosterEntry> roster) {
  State& s = *s_;
  if (s.role != MemberRole::member) return FinishProgress::finished;
  Message m;
  MPI_Status st;
  while (s.receive(m, st)) {
    if (s.settles_pending(m, st)) {
      // A yes of the standing window: the epoch holds (nothing collective).
      if (s.settle(st)) s.tell_done();
    } else if (st.MPI_TAG == kPropose) {
      if (s.pending || s.done[static_cast<std::size_t>(s.slot)] == kDoneClosed) {
        s.send(st.MPI_SOURCE, kAnswer, {m.empty() ? 0 : m[0], 0});
      } else if (s.on_proposal(m, st.MPI_SOURCE)) {  // new_window: entered, its comm built
        s.tell_done();  // the joiner hears it again (its proposal named this slot too)
        return FinishProgress::epoch;
      }
    } else if (st.MPI_TAG == kEvict) {
      // Judged dead while it stalled (a SIGSTOP, a long pause) and woken at the end: its slot
      // is another process's; it ends evicted (ElasticAgent::finish throws EvictedError).
      if (s.evicted_by(m)) return FinishProgress::finished;
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
      return FinishProgress::waiting;
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
  return FinishProgress::finished;
}

}  // namespace paramwin
