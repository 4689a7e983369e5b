// Membership spawns ahead (docs/elastic.md, "Refilling the spares", SpawnOptions::ahead): a
// live spare spawns the new spares alone while the members train on, opens a port, and the
// population merges with its group through MPI_Comm_connect / MPI_Comm_accept.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "detail/mpi_check.hpp"
#include "elastic/membership_state.hpp"
#include "paramwin/error.hpp"
#include "window/liveness.hpp"

namespace paramwin {
// The membership's tags, messages and trace (membership_state.hpp).
using namespace detail::membership;  // NOLINT(google-build-using-namespace): its own vocabulary

void Membership::State::tell_everyone(int tag, const Message& msg) {
  reap();
  for (int w = 0; w < world_size; ++w) {
    if (w != world_rank && !process_gone(w)) (void)post(w, tag, msg, ctl);
  }
}

void Membership::State::start_ahead(int nspawn, int spawner) {
  ahead = Ahead{static_cast<std::int64_t>(rng() >> 2), nspawn, spawner, false, {}, MPI_Wtime()};
  tell_everyone(kAhead, {ahead->id, nspawn, spawner});
  if (tracing())
    trace("asks " + std::to_string(spawner) + " to spawn " + std::to_string(nspawn) + " ahead");
}

void Membership::State::on_ahead(const Message& m) {
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

void Membership::State::announce_ahead(std::int64_t outcome) {
  Message m{ahead->id, ahead->nspawn, outcome};
  if (outcome == 1) m.insert(m.end(), ahead_port.begin(), ahead_port.end());
  tell_everyone(kAheadReady, m);
}

void Membership::State::on_ahead_ready(const Message& m) {
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

void Membership::State::spawn_ahead() {
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

void Membership::State::release_ahead() {
  if (ahead_group == MPI_COMM_NULL) return;
  int n = 0;
  MPI_Comm_size(ahead_group, &n);
  for (int c = 1; c < n; ++c) send(c, kAheadGoTag, {0}, ahead_group);
  MPI_Close_port(ahead_port.c_str());
}

void Membership::State::propose_ahead_merge(const std::vector<int>& dead) {
  Refill r;
  r.id = ahead->id;
  r.nspawn = ahead->nspawn;
  r.join = 2;
  r.spawner = ahead->spawner;
  if (tracing()) trace("proposes to merge the spawn ahead of " + std::to_string(r.spawner));
  offer_refill(r, dead);
}

bool Membership::State::await_ahead_merge(MPI_Comm group, std::int64_t spawner_pid,
                                          std::uint64_t spawner_host) {
  Message m;
  MPI_Status st;
  while (true) {
    int flag = 0;
    detail::check_mpi(MPI_Iprobe(0, kAheadGoTag, group, &flag, &st), "MPI_Iprobe");
    if (flag != 0) {
      m.assign(1, 0);
      detail::check_mpi(MPI_Recv(m.data(), 1, MPI_INT64_T, 0, kAheadGoTag, group, &st), "MPI_Recv");
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

void Membership::State::enter_ahead_merge(const Refill& r, double started) {
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
      std::copy_n(ahead->port.begin(), std::min(ahead->port.size(), port.size() - 1), port.begin());
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

}  // namespace paramwin
