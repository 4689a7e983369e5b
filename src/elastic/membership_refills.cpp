// Membership refills (docs/elastic.md, "Refilling the spares", "Joining from outside"): the
// spares' pool refilled by MPI_Comm_spawn, a process launched apart joining through a port,
// the merged universe adopted by every process, and a spawned or joining process's start.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "detail/mpi_check.hpp"
#include "elastic/membership_state.hpp"
#include "paramwin/error.hpp"

namespace paramwin {
// The membership's tags, messages and trace (membership_state.hpp).
using namespace detail::membership;  // NOLINT(google-build-using-namespace): its own vocabulary

namespace {

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

}  // namespace

Message Membership::State::refill_message(const Refill& r) {
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

bool Membership::State::parse_refill(const Message& m, Refill& r) {
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

bool Membership::State::any_done() const {
  return std::any_of(done.begin(), done.end(), [](char d) { return d != 0; });
}

bool Membership::State::refill_allowed() const {
  return o.spawn.pool > 0 && refill_stats.failed == 0 && !any_done();
}

bool Membership::State::join_due() const {
  return !o.join.service.empty() && MPI_Wtime() >= next_look && !any_done();
}

std::optional<std::string> Membership::State::look_for_joiner() {
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

void Membership::State::propose_refill(int nspawn, const std::vector<int>& dead,
                                       const std::string& port) {
  Refill r;
  r.id = static_cast<std::int64_t>(rng() >> 2);
  r.nspawn = nspawn;
  r.join = port.empty() ? 0 : 1;
  join_port = port;
  offer_refill(r, dead);
}

void Membership::State::offer_refill(Refill& r, const std::vector<int>& dead) {
  const double started = MPI_Wtime();
  for (int k = 0; k < nslots; ++k) {
    const int w = members[static_cast<std::size_t>(k)];
    const bool alive = dead[static_cast<std::size_t>(k)] == 0 && w >= 0;
    r.members.push_back(alive ? w : -1);
    if (alive) r.live.push_back(w);
  }
  for (int w : spares) {
    if (!process_gone(w)) {
      r.spares.push_back(w);
      r.live.push_back(w);
    }
  }
  if (r.join == 2 && std::find(r.live.begin(), r.live.end(), r.spawner) == r.live.end()) {
    // The spawner died (or took a slot) since it was ready: its new processes end alone.
    if (tracing()) trace("forgets the spawn ahead of " + std::to_string(r.spawner));
    ahead.reset();
    return;
  }
  r.root = static_cast<int>(std::find(r.live.begin(), r.live.end(), world_rank) - r.live.begin());
  const Message msg = refill_message(r);
  std::vector<int> targets;
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

bool Membership::State::refill_proposed(const std::vector<int>& dead, std::size_t ndead) {
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

void Membership::State::on_refill(const Message& m, int proposer) {
  Refill r;
  const bool parsed = parse_refill(m, r);
  // A spawn by every live process, or the merge of another spare's spawn ahead: the proposer
  // knows of no spawn ahead of this one's.
  if (parsed && (r.join == 0 || (r.join == 2 && r.spawner != world_rank)))
    let_go_of_forgotten_spawn("the population refills without it");
  // The spawner of a spawn ahead takes part in its merge only while it holds its processes.
  const bool part = parsed && std::find(r.live.begin(), r.live.end(), world_rank) != r.live.end() &&
                    (r.join != 2 || r.spawner != world_rank || ahead_children != MPI_COMM_NULL);
  const bool ok = parsed && part && !pending &&
                  (role == MemberRole::member || role == MemberRole::spare) &&
                  r.members.size() == static_cast<std::size_t>(nslots) &&
                  r.live[static_cast<std::size_t>(r.root)] == proposer;
  send(proposer, kRefillAnswer, {r.id, ok ? 1 : 0});
  if (parsed && r.join == 2 && r.spawner == world_rank && ahead_children == MPI_COMM_NULL) {
    // The merge of a spawn this process let go of (or never made): every process that still
    // takes it for ready drops it, or its coordinator would propose it again and again.
    tell_everyone(kAheadReady, {r.id, r.nspawn, -1});
  }
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

void Membership::State::enter_refill(const Refill& r, double started) {
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
  } else if (!spawn_spares(r, live, inter, /*spawned_ahead=*/false)) {
    return;
  }
  if (tracing()) trace("refill " + std::to_string(r.id) + ": " + std::to_string(nnew) + " new");
  adopt_refill(r, inter, nnew, started);
  if (tracing()) trace("refill " + std::to_string(r.id) + ": merged");
}

MPI_Comm Membership::State::live_comm(const Refill& r) const {
  // The tag from the refill's id, which every live process has alike (their counts of
  // refills need not agree: a spawner ahead counted its own spawn).
  return create_comm(r.live, kRefillTagBase + static_cast<int>(r.id % 700));
}

bool Membership::State::connect_joiner(const Refill& r, MPI_Comm live, MPI_Comm& inter, int& nnew) {
  join_port = share_port(join_port, r.root, live);
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

bool Membership::State::spawn_spares(const Refill& r, MPI_Comm live, MPI_Comm& inter,
                                     bool spawned_ahead) {
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
  MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
  int me = 0;
  MPI_Comm_rank(live, &me);
  if (me == r.root) {
    const Message word = spawned_ahead ? Message{1, static_cast<std::int64_t>(getpid()),
                                                 static_cast<std::int64_t>(host)}
                                       : Message{0, 0, 0};
    for (int c = 0; c < r.nspawn; ++c) send(c, kSpawnWordTag, word, inter);
  }
  return true;
}

void Membership::State::adopt_refill(const Refill& r, MPI_Comm inter, int nnew, double started) {
  MPI_Comm universe = MPI_COMM_NULL;
  detail::check_mpi(MPI_Intercomm_merge(inter, 0, &universe), "MPI_Intercomm_merge");
  // The live processes keep their order in the merged communicator; the new ones follow.
  std::vector<int> to_new(static_cast<std::size_t>(world_size), -1);
  for (std::size_t i = 0; i < r.live.size(); ++i) {
    to_new[static_cast<std::size_t>(r.live[i])] = static_cast<int>(i);
  }
  auto mapped = [&](const std::vector<int>& ranks) {
    std::vector<int> out;
    out.reserve(ranks.size());
    for (int w : ranks) out.push_back(w < 0 ? -1 : to_new[static_cast<std::size_t>(w)]);
    return out;
  };
  std::vector<int> new_spares = mapped(r.spares);
  for (int j = 0; j < nnew; ++j) new_spares.push_back(static_cast<int>(r.live.size()) + j);
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
    ahead_children = MPI_COMM_NULL;  // the spawner's: never freed, as the others
    ahead_port.clear();
  }
}

void Membership::State::adopt_universe(MPI_Comm universe, Message header) {
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

void Membership::State::join_population(MPI_Comm world) {
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

void Membership::State::start_spawned(MPI_Comm world, MPI_Comm parent) {
  MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
  refill_stats.spawned_here = true;
  const Message word = await_spawn_word(parent);
  if (word[0] == 0) {
    MPI_Comm merged = MPI_COMM_NULL;
    detail::check_mpi(MPI_Intercomm_merge(parent, 1, &merged), "MPI_Intercomm_merge");
    adopt_universe(merged, {});
  } else if (!await_ahead_merge(world, parent, word[1], static_cast<std::uint64_t>(word[2]))) {
    role = MemberRole::finished;
    return;
  }
  become_new_spare();
}

Membership::State::Message Membership::State::await_spawn_word(MPI_Comm parent) {
  std::optional<Message> word = receive_within(parent, kSpawnWordTag, 3, o.agree_seconds);
  if (!word) {
    throw Error("paramwin: Membership: the processes that spawned this one sent no word within "
                "agree_seconds (" +
                std::to_string(o.agree_seconds) + " s): the spawner died during the spawn");
  }
  return *word;
}

void Membership::State::become_new_spare() {
  gone.assign(static_cast<std::size_t>(nslots), 0);
  done.assign(static_cast<std::size_t>(nslots), 0);
  seen.assign(static_cast<std::size_t>(nslots), Seen{});
  role = MemberRole::spare;
  slot = -1;
}

void Membership::State::gather_processes(MPI_Comm all) {
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

}  // namespace paramwin
