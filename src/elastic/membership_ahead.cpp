// Membership spawns ahead (docs/elastic.md, "Refilling the spares", SpawnOptions::ahead): a
// live spare spawns the new spares alone while the members train on; the first new process
// opens a port, and the population (the spare among it) connects to the new processes there
// (MPI_Comm_connect / MPI_Comm_accept). The new processes meet their spawner only by point-to-
// point messages, so they end when it dies: on its host when its pid is gone, elsewhere when its
// beats stop.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
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
  if (ahead->spawner != world_rank) {
    // Another spare spawns: the population forgot this one's spawn (not ready in time).
    let_go_of_forgotten_spawn("another spare spawns");
    return;
  }
  if (role == MemberRole::spare && ahead_children == MPI_COMM_NULL) {
    spawn_due = true;
  } else if (role == MemberRole::spare) {
    // Still holds the processes of a spawn ahead that a coordinator forgot (not ready in
    // time): offers those, as they are, under the new id.
    int n = 0;
    MPI_Comm_remote_size(ahead_children, &n);
    ahead->nspawn = n;
    ahead->ready = true;
    ahead->port = ahead_port;
    if (tracing()) trace("offers the processes it still holds from a forgotten spawn ahead");
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
    ahead->port.assign(m.begin() + 3, m.end());
    return;
  }
  if (m[2] == 0) ++refill_stats.failed;  // as a failed refill: no more are proposed
  ahead.reset();
}

void Membership::State::spawn_ahead() {
  spawn_due = false;
  if (!ahead || ahead->spawner != world_rank) return;
  const double started = MPI_Wtime();
  MPI_Comm children = MPI_COMM_NULL;
  Refill self;
  self.nspawn = ahead->nspawn;
  self.root = 0;
  // The new processes never wait in a collective with this spare before the population
  // connects to them: its word, its go or stop and their port are point-to-point messages
  // over the spawn's intercommunicator, and they accept the connection over their own world.
  // So they end when this spare dies at any moment after their MPI_Init. The connection
  // (MPI_Comm_connect / MPI_Comm_accept, as a join's) is also how Open MPI learns which of the
  // processes share a node, which MPI_Intercomm_create does not tell it (the next epoch's
  // shared-memory window needs it).
  bool ok = spawn_spares(self, MPI_COMM_SELF, children, /*spawned_ahead=*/true);
  if (ok) ok = await_ahead_port(children);
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

bool Membership::State::await_ahead_port(MPI_Comm children) {
  ahead_children = children;
  int n = 0;
  MPI_Comm_remote_size(children, &n);
  for (Outgoing& b : beats) {  // an earlier spawn's beats still on their way: the outbox keeps them
    if (b.request != MPI_REQUEST_NULL) outbox.push_back(std::move(b));
  }
  beats.clear();
  beats.resize(static_cast<std::size_t>(n));
  next_beat = 0.0;
  const std::optional<Message> port = receive_within(children, kAheadPortTag, -1, o.agree_seconds);
  if (!port) {
    tell_children(kGoStop);
    return false;
  }
  ahead_port.assign(port->begin(), port->end());
  ahead->port = ahead_port;
  return true;
}

void Membership::State::beat_children() {
  if (ahead_children == MPI_COMM_NULL) return;
  const double now = MPI_Wtime();
  if (now < next_beat) return;
  next_beat = now + std::min(kBeatSeconds, o.agree_seconds / 4);
  for (std::size_t c = 0; c < beats.size(); ++c) {
    Outgoing& b = beats[c];
    if (b.request != MPI_REQUEST_NULL) {
      int sent = 0;
      MPI_Test(&b.request, &sent, MPI_STATUS_IGNORE);
      if (sent == 0) continue;  // the last one is still on its way (or the process ended)
    }
    b.data = std::make_unique<Message>(Message{kGoBeat});
    if (MPI_Isend(b.data->data(), 1, MPI_INT64_T, static_cast<int>(c), kAheadGoTag, ahead_children,
                  &b.request) != MPI_SUCCESS) {
      b.request = MPI_REQUEST_NULL;
    }
  }
}

void Membership::State::tell_children(std::int64_t go) {
  int n = 0;
  MPI_Comm_remote_size(ahead_children, &n);
  for (int c = 0; c < n; ++c) send(c, kAheadGoTag, {go}, ahead_children);
  if (go == kGoStop) {
    ahead_children = MPI_COMM_NULL;  // never freed, as the others
    ahead_port.clear();
  }
}

void Membership::State::release_ahead() {
  if (ahead_children == MPI_COMM_NULL) return;
  tell_children(kGoStop);
  // The stop must leave before this process ends: they would take its end for its death.
  const double until = MPI_Wtime() + kReleaseSeconds;
  while (!outbox.empty() && MPI_Wtime() < until) {
    reap();
    sleep_seconds(0.0005);
  }
}

void Membership::State::let_go_of_forgotten_spawn(const char* why) {
  // Its processes would wait for a go that never comes, and a spare that holds them answers no
  // to every slot: a dead slot proposed to it would never be filled. A spawn asked for and not
  // begun yet is dropped too (it would start processes nobody merges).
  const bool mine = ahead && ahead->spawner == world_rank;
  if (ahead_children == MPI_COMM_NULL && !(spawn_due && mine)) return;
  if (tracing()) trace(std::string("lets go of a forgotten spawn ahead: ") + why);
  if (ahead_children != MPI_COMM_NULL) tell_children(kGoStop);
  spawn_due = false;
  if (mine) {
    announce_ahead(-1);
    ahead.reset();
  }
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

bool Membership::State::await_ahead_merge(MPI_Comm world, MPI_Comm parent, std::int64_t spawner_pid,
                                          std::uint64_t spawner_host) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::vector<char> port(MPI_MAX_PORT_NAME + 1, '\0');
  if (rank == 0) {
    detail::check_mpi(MPI_Open_port(MPI_INFO_NULL, port.data()), "MPI_Open_port");
    // Posted, not checked: a spawner that died already is found below (its pid, its beats).
    (void)post(0, kAheadPortTag, Message(port.data(), port.data() + std::strlen(port.data())),
               parent);
  }
  auto close_port = [&] {
    if (rank == 0) MPI_Close_port(port.data());
  };
  Message m;
  MPI_Status st;
  double heard = MPI_Wtime();  // its word, just now
  bool merge = false;
  while (!merge) {
    while (!merge && receive_on(parent, m, st)) {
      heard = MPI_Wtime();
      if (st.MPI_TAG != kAheadGoTag || m.size() != 1 || m[0] == kGoBeat) continue;
      if (m[0] != kGoMerge) {
        close_port();
        return false;
      }
      merge = true;
    }
    if (merge) break;
    if (spawner_host == host && !detail::process_alive(spawner_pid)) {
      close_port();
      throw Error("paramwin: Membership: the spare that spawned this process (pid " +
                  std::to_string(spawner_pid) + ") died before it merged it into the population");
    }
    if (spawner_host != host && MPI_Wtime() - heard > o.agree_seconds) {
      close_port();
      throw Error("paramwin: Membership: the spare that spawned this process (pid " +
                  std::to_string(spawner_pid) + ", on another host) sent nothing for " +
                  std::to_string(o.agree_seconds) +
                  " s (agree_seconds) before it merged it into the population: taken for dead");
    }
    sleep_seconds(o.spare_sleep_seconds);
  }
  if (tracing()) trace("spawned ahead: told to merge");
  MPI_Comm inter = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_accept(port.data(), MPI_INFO_NULL, 0, world, &inter),
                    "MPI_Comm_accept");
  close_port();
  if (tracing()) trace("spawned ahead: accepted");
  MPI_Comm universe = MPI_COMM_NULL;
  detail::check_mpi(MPI_Intercomm_merge(inter, 1, &universe), "MPI_Intercomm_merge");
  adopt_universe(universe, {});
  return true;
}

void Membership::State::enter_ahead_merge(const Refill& r, double started) {
  if (r.spawner == world_rank) tell_children(kGoMerge);
  MPI_Comm live = live_comm(r);
  const bool proposer = r.live[static_cast<std::size_t>(r.root)] == world_rank;
  const std::string port =
      share_port(proposer && ahead ? ahead->port : std::string(), r.root, live);
  if (tracing()) trace("connects to " + port);
  MPI_Comm inter = MPI_COMM_NULL;
  detail::check_mpi(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, r.root, live, &inter),
                    "MPI_Comm_connect");
  if (tracing()) trace("refill " + std::to_string(r.id) + ": connected");
  ++refill_stats.refills;
  refill_stats.spawned += static_cast<std::uint64_t>(r.nspawn);
  adopt_refill(r, inter, r.nspawn, started);
  if (tracing()) trace("refill " + std::to_string(r.id) + ": the spawn ahead merged");
}

}  // namespace paramwin
