#pragma once
// Membership::State: what one process of an elastic population knows (its role, slot and
// epoch, the members and spares, the messages in flight, the refills) and the messages' tags.
// The work is split by subject: membership.cpp (the public calls), membership_epochs.cpp (the
// judgement, the messages, the proposal / answer / commit of an epoch), membership_refills.cpp
// (refills of the spares by spawn and joins from outside) and membership_ahead.cpp (spawns
// ahead: a spare spawns the new spares alone while the members train on).
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "paramwin/membership.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail::membership {

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
  // processes wait for the merge, a kRefill with join 2, at the port the first of them opened,
  // one char per value; 0: the spawn failed, refills stop; -1: it declined, no longer a
  // spare).
  kAheadReady = 15,
};
// On the intercommunicator of a spawn (the spawning processes and their new ones), point to
// point only, so that a new process never waits in a collective with a spawner that may die:
// the spawner's go, [1] merge (accept the population's connection) or [0] stop, and its beat,
// [2], every kBeatSeconds while it holds them (a new process on another host, which cannot
// watch the spawner's pid, takes agree_seconds without one for its death); the first word
// to the new processes, [0, 0, 0] (merge with the spawning processes now) or [1, pid, host]
// (spawned ahead by the spare of that pid and host, whose death ends their wait); a spawn
// ahead's port, one char per value, from its first new process to the spawner.
constexpr int kAheadGoTag = 7;
constexpr int kSpawnWordTag = 8;
constexpr int kAheadPortTag = 9;
// How long a spare released at the end waits for its stop to its new processes to leave
// (release_ahead()): they would take its end for its death.
constexpr double kReleaseSeconds = 1.0;
// How often a spare that spawned ahead tells its new processes it lives (at most; a quarter of
// agree_seconds when that is shorter).
constexpr double kBeatSeconds = 0.25;
constexpr std::int64_t kGoStop = 0;
constexpr std::int64_t kGoMerge = 1;
constexpr std::int64_t kGoBeat = 2;
// MPI_Comm_create_group's tags: an epoch's kCommTagBase + epoch % 30000, create_members_comm's
// kMembersTagBase + epoch % 1000 (all below 32767, the least MPI_TAG_UB allowed).
constexpr int kCommTagBase = 1000;
constexpr int kMembersTagBase = 31000;
// A refill's MPI_Comm_create_group over the live processes: kRefillTagBase + its id % 700.
constexpr int kRefillTagBase = 32000;
inline int epoch_tag(std::uint64_t epoch) { return kCommTagBase + static_cast<int>(epoch % 30000); }

using Message = std::vector<std::int64_t>;

inline void sleep_seconds(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

/// Membership::State::done: a finished slot whose member refuses new windows, and one that
/// takes part in new epochs.
constexpr char kDoneClosed = 1;
constexpr char kDoneOpen = 2;

/// Whether PARAMWIN_MEMBERSHIP_TRACE asks for every decision on stderr (docs/elastic.md,
/// "When a population does not recover"): set, non-empty and not "0".
inline bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("PARAMWIN_MEMBERSHIP_TRACE");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

/// "[a b c]" for a trace line.
inline std::string listed(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(v[i]);
  }
  return out + "]";
}

}  // namespace paramwin::detail::membership

namespace paramwin {

struct Membership::State {
  using Message = detail::membership::Message;

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
  std::vector<char> gone;  // per slot: resigned in this epoch
  /// Per slot: 0 training, kDoneClosed finished and refusing new windows (new_window, finish()
  /// without parameters), kDoneOpen finished and taking part in new epochs.
  std::vector<char> done;
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
  bool spawn_due = false;                   // this spare was asked to spawn ahead
  MPI_Comm ahead_children = MPI_COMM_NULL;  // the spawner: the intercommunicator to its new
                                            // processes (never freed, as the others)
  std::string ahead_port;       // the spawner: where its new processes accept (the first opened it)
  std::vector<Outgoing> beats;  // the spawner: the last beat to each new process (one in flight)
  double next_beat = 0.0;       // the spawner: when it beats next

  // --- trace (PARAMWIN_MEMBERSHIP_TRACE; membership_epochs.cpp) ---------------------------

  std::vector<int> traced_dead;  // the judgement last traced
  std::string traced_wait;       // the last "waits for a spare" traced

  /// One line on stderr: who says it (world rank, epoch, slot, role), when, and @p what.
  void trace(const std::string& what) const;

  // --- messages (membership_epochs.cpp) ---------------------------------------------------

  void reap();

  /// Sends @p msg to @p dest of @p on (the current ctl by default); a slot whose process a
  /// refill left out (dest -1) gets nothing.
  void send(int dest, int tag, Message msg, MPI_Comm on = MPI_COMM_NULL);

  /// MPI_Isend of @p msg to @p dest of @p on, kept in the outbox when posted; its code.
  int post(int dest, int tag, Message msg, MPI_Comm on);

  /// The next message to this process, if one has arrived: from the current ctl, else from
  /// an old one's (its source translated to the current rank). A process a refill left out
  /// is answered there with kEvict and kStop: the population has no place for it.
  bool receive(Message& msg, MPI_Status& status);

  /// Tells a process a refill left out (a member judged dead that only stalled) to drop its
  /// slot and end: kEvict of a later epoch (no members), then kStop.
  void tell_left_out(const OldUniverse& u, int rank);

  /// One message on @p on, if one has arrived.
  bool receive_on(MPI_Comm on, Message& msg, MPI_Status& status);

  /// Waits (sleeping spare_sleep_seconds between looks, beating to a spawn ahead's new
  /// processes if this process holds them) up to @p seconds for a message of @p tag on @p on,
  /// of @p size values if @p size >= 0; other messages there are dropped. std::nullopt when
  /// none came.
  std::optional<Message> receive_within(MPI_Comm on, int tag, std::ptrdiff_t size, double seconds);

  /// @p port, significant at @p root of @p on, on every process of @p on (collective).
  static std::string share_port(std::string port, int root, MPI_Comm on);

  // --- judgement (membership_epochs.cpp) --------------------------------------------------

  [[nodiscard]] bool process_gone(int world) const;

  [[nodiscard]] int slot_of(int world) const;

  /// Per slot: 0 alive, 1 dead by its process gone (or resigned), 2 dead by silence.
  std::vector<int> judge(std::span<const RosterEntry> roster);

  /// The lowest slot not judged dead in @p dead.
  [[nodiscard]] int coordinator(const std::vector<int>& dead) const;
  /// A finished member: tells the epoch's other members that its slot is done, and whether it
  /// takes part in new epochs (kDone: epoch, slot, 1 or 0).
  void tell_done();
  /// Who proposes epochs: the lowest slot neither judged dead in @p dead nor finished (a
  /// member in finish() answers proposals but makes none); -1 when there is none.
  [[nodiscard]] int proposer(const std::vector<int>& dead) const;

  // --- epochs (membership_epochs.cpp) -----------------------------------------------------

  /// MPI_Comm_create_group over @p ranks (in slot order) with @p tag. @note Collective over
  /// them.
  MPI_Comm create_comm(const std::vector<int>& ranks, int tag) const;

  /// Parses a proposal into @p change (members, dead, iterations) and the spares left.
  static bool parse_proposal(const Message& m, EpochChange& change, std::vector<int>& spares_left);

  /// Enters the committed epoch @p change (collective over its processes).
  EpochChange enter(EpochChange change, const std::vector<int>& spares_left, double started);

  /// A kEvict message [epoch, _, members...] of a later epoch than this process's: it takes
  /// that epoch's members and becomes evicted (true); a stale one changes nothing (false).
  bool evicted_by(const Message& m);

  /// Bookkeeping messages any process handles at any time; false for others.
  bool bookkeeping(const Message& m, const MPI_Status& st);

  void add_spare(int world, bool resigned = false);

  /// Having answered yes to @p proposer's proposal of @p change: waits for its commit or
  /// abort (or its death, or agree_seconds), answering other proposals no.
  std::optional<EpochChange> await_commit(int proposer, const EpochChange& change,
                                          const std::vector<int>& spares_left);

  /// Whether @p m is the commit or abort of the proposal this process answered yes to and
  /// trains on meanwhile (standing window).
  [[nodiscard]] bool settles_pending(const Message& m, const MPI_Status& st) const;

  /// Ends the pending answer with @p st's commit (the epoch entered: no collective in the
  /// standing window) or abort (nullopt).
  std::optional<EpochChange> settle(const MPI_Status& st);

  /// A proposal received: answers it, and on yes waits for its end.
  std::optional<EpochChange> on_proposal(const Message& m, int proposer);

  /// Waits for every one of @p targets to answer the proposal @p id (messages @p tag:
  /// [id, ok]) made at @p started, answering other proposals no; @p yes gets those that said
  /// yes. False when one said no, one's process is gone or answer_wait() passed.
  bool collect_answers(const std::vector<int>& targets, int tag, std::int64_t id, double started,
                       std::vector<int>& yes);

  /// How long a proposer waits for the answers: agree_seconds, and no longer than half the
  /// silence bound, after which it may not commit (may_commit). A proposer does not step while
  /// it waits: waiting longer for a member that stopped would make the others judge the
  /// proposer itself dead by its silence.
  [[nodiscard]] double answer_wait() const;

  /// How long a process that answered yes waits for the commit: agree_seconds, and no longer
  /// than the silence bound (its proposer commits within half of it, or aborts).
  [[nodiscard]] double commit_wait() const;

  /// Whether a proposal made at @p started may still commit: not when this process was
  /// evicted meanwhile, nor when it took half the silence bound (the others may have judged
  /// its proposer dead by then and given up their answers).
  [[nodiscard]] bool may_commit(double started) const;

  /// After a proposal given up: no new one for a random 20-200 ms (two coordinators whose
  /// proposals collided do not collide again).
  void back_off();

  /// The coordinator: proposes the epoch that gives the slots in @p dead to spares.
  std::optional<EpochChange> propose(const std::vector<int>& dead,
                                     std::span<const RosterEntry> roster);

  // --- refills proposed (SpawnOptions, JoinOptions; membership_refills.cpp) ----------------

  /// What a refill proposal carries.
  struct Refill {
    std::int64_t id = 0;
    int nspawn = 0;
    int root = 0;              // the proposer's index in live
    std::vector<int> live;     // the processes that take part, current ranks
    std::vector<int> members;  // per slot, current rank (-1: none alive)
    std::vector<int> spares;   // current ranks
    std::int64_t join = 0;  // 1: connect to a joiner's port (JoinOptions); 2: merge a spawn ahead
    int spawner = -1;       // join 2: the spare that spawned ahead (one of live), current rank
  };

  static Message refill_message(const Refill& r);

  static bool parse_refill(const Message& m, Refill& r);

  /// Whether a slot has finished (no refill or join is proposed after that).
  [[nodiscard]] bool any_done() const;

  /// Whether a refill may be proposed now (the coordinator, no dead slot it can fill).
  [[nodiscard]] bool refill_allowed() const;

  /// Whether the coordinator looks for a joiner now (JoinOptions; not once a slot finished).
  [[nodiscard]] bool join_due() const;

  /// The coordinator: a joiner's port published under the service's name, if one waits there
  /// (and it is not one this population connected to already).
  std::optional<std::string> look_for_joiner();

  /// The coordinator: proposes a refill that spawns @p nspawn spares (or, with @p port, that
  /// connects to the joiner waiting there), to every process it does not judge dead (@p dead:
  /// per slot, as judge() says).
  void propose_refill(int nspawn, const std::vector<int>& dead, const std::string& port = {});

  /// The coordinator: proposes @p r (its kind, count and spawner set) to every live process
  /// (the members alive by @p dead, the live spares, a spawner ahead among them); on yes from
  /// all, commits and takes part. A merge of a spawn ahead whose spawner is no longer a live
  /// spare is forgotten instead.
  void offer_refill(Refill& r, const std::vector<int>& dead);

  /// The coordinator's refill decision at a check (spares first: enough for the @p ndead
  /// dead slots waiting, and the pool): true when it proposed one (the epoch waits for the
  /// next check); a spawn ahead started lets the epoch go on with the other spares.
  bool refill_proposed(const std::vector<int>& dead, std::size_t ndead);

  // --- spawns ahead: a spare spawns the new spares alone, the members train on
  //     (membership_ahead.cpp) -------------------------------------------------------------

  /// Whether @p world is the spare busy with a spawn ahead (not a candidate for a slot).
  [[nodiscard]] bool busy_spawning(int world) const { return ahead && ahead->spawner == world; }

  /// Sends @p msg with @p tag to every other live process of the population (the members'
  /// and spares' lists of a spare may be stale). A send the MPI refuses at once (UCX, to a
  /// process that died before this one ever reached it) is dropped: that process is dead.
  void tell_everyone(int tag, const Message& msg);

  /// The coordinator: asks @p spawner (a live spare not needed for a dead slot) to spawn
  /// @p nspawn spares alone; the members go on training (docs/elastic.md).
  void start_ahead(int nspawn, int spawner);

  /// kAhead: which spare spawns ahead; if this one (a spare), it spawns at its next wait.
  void on_ahead(const Message& m);

  /// The spawner: tells every process the outcome of its spawn ahead (1 ready, with the port
  /// its group accepts at; 0 failed; -1 declined).
  void announce_ahead(std::int64_t outcome);

  /// kAheadReady: the spawner's outcome.
  void on_ahead_ready(const Message& m);

  /// The spawner (a spare, in wait_for_slot): spawns ahead->nspawn processes over itself
  /// alone, waits for the port the first of them opened, and tells everyone the outcome. The
  /// others go on meanwhile; the new processes wait (sleeping) for its go or stop.
  void spawn_ahead();

  /// The spawner: the port its first new process opened, from @p children (false when none
  /// came within agree_seconds; then its new processes are told to stop). Beats meanwhile.
  bool await_ahead_port(MPI_Comm children);

  /// The spawner, while it holds its new processes (in wait_for_slot, receive_within):
  /// tells each it lives, every kBeatSeconds, one beat in flight per process at most (a
  /// process that ended gets no more).
  void beat_children();

  /// The spawner: tells its new processes @p go (1: accept the population's connection; 0:
  /// stop).
  void tell_children(std::int64_t go);

  /// The spawner, when the population finished: its new processes stop waiting, its port
  /// closes.
  void release_ahead();

  /// A spare whose spawn ahead the population forgot (it gives this spare a slot, or spawns
  /// without it; @p why, for the trace): tells the processes it still holds to stop, drops a
  /// spawn not begun yet, and tells every process that still takes its spawn for pending or
  /// ready to drop it (kAheadReady, -1). Nothing when it holds none and has none due.
  void let_go_of_forgotten_spawn(const char* why);

  /// The coordinator: proposes to merge the ready spawn ahead into the population (a refill
  /// with join 2: the live processes and the spawner's group build one communicator).
  void propose_ahead_merge(const std::vector<int>& dead);

  /// A process a spawn ahead started (@p world: the spawn's new processes, @p parent: the
  /// intercommunicator to the spawner): the first of them opens a port and sends it to the
  /// spawner; every one waits (sleeping) for the spawner's go, then accepts the population's
  /// connection over @p world and merges with it (true), or stops (false). Throws Error when
  /// the spawner's process is gone (on this host) or, on another host, it sent nothing (no
  /// beat) for agree_seconds before its go: no collective with it ever waits.
  bool await_ahead_merge(MPI_Comm world, MPI_Comm parent, std::int64_t spawner_pid,
                         std::uint64_t spawner_host);

  // --- refills entered: the spawn, the join's connection, the merge, a new process's start
  //     (membership_refills.cpp; enter_ahead_merge: membership_ahead.cpp) -----------------

  /// A refill proposal received: answers it, and on yes waits for its commit and takes part.
  void on_refill(const Message& m, int proposer);

  /// The committed refill @p r: the live processes build a communicator over themselves,
  /// spawn the new spares (or connect to the joiner) and merge with them; every process of
  /// the result then takes it as its communicator of every process. Collective over the live
  /// processes (and, through the spawn or connection, the new ones). A failed spawn leaves
  /// everything as it was (refills stop); a failed connection too (that port is not tried
  /// again).
  void enter_refill(const Refill& r, double started);

  /// The communicator over the live processes of refill @p r (collective over them).
  MPI_Comm live_comm(const Refill& r) const;

  /// The committed merge of a spawn ahead: the spawner tells its new processes to go on (they
  /// accept at their port), the live processes, the spawner among them, connect to it over a
  /// communicator of theirs (the root's copy of the port sent to them), and both merge over
  /// the connection. Collective over the live processes and the new ones; no process starts.
  void enter_ahead_merge(const Refill& r, double started);

  /// A join's connection: the root's port to every live process (each remembers it), then
  /// MPI_Comm_connect over @p live; @p nnew gets the joiner's processes. False (the port
  /// remembered, nothing else changed) when the connection failed on any live process.
  bool connect_joiner(const Refill& r, MPI_Comm live, MPI_Comm& inter, int& nnew);

  /// A refill's spawn over @p live (the new processes' intercommunicator in @p inter); the
  /// root then sends each new process its first word (@p spawned_ahead: by this process
  /// alone). False when it failed on any live process (refills stop).
  bool spawn_spares(const Refill& r, MPI_Comm live, MPI_Comm& inter, bool spawned_ahead);

  /// After a refill's spawn or a join's connection: merges with the @p nnew new processes
  /// over @p inter and takes the result as the communicator of every process (the dead and
  /// the processes the refill left out out of it; the latter are told to stop).
  void adopt_refill(const Refill& r, MPI_Comm inter, int nnew, double started);

  /// Takes @p universe (every process of the population, after a refill) as the
  /// communicator of every process: the header from its rank 0 (@p header there: epoch,
  /// slots, refills, spawned, joins, joined, members, spares), the pids and hosts, the two
  /// duplicates.
  /// Collective over @p universe.
  void adopt_universe(MPI_Comm universe, Message header);

  /// JoinOptions::joining: this world's rank 0 opens a port and publishes it under the
  /// service's name (trying for publish_seconds: the name is taken while another joiner waits
  /// there), then every process of @p world waits for the population to connect
  /// (MPI_Comm_accept), merges with it, and waits as a spare. Collective over @p world.
  void join_population(MPI_Comm world);

  /// A process a refill started (@p world: the refill's new processes, @p parent:
  /// MPI_Comm_get_parent). The spawning processes' first word: merge with them now (0: the
  /// population's communicator follows), or spawned ahead by one spare (1: the population
  /// connects later; then the spawner's pid and host). Then a spare, or finished when the
  /// population ended before it was merged. Throws Error when no word came within
  /// agree_seconds (the spawner died during the spawn).
  void start_spawned(MPI_Comm world, MPI_Comm parent);

  /// A process a refill started: the spawning processes' first word (kSpawnWordTag).
  Message await_spawn_word(MPI_Comm parent);

  /// A process a refill or join brought in, once it adopted its population: a spare.
  void become_new_spare();

  /// Every process's pid and host over @p all (MPI_Allgather).
  void gather_processes(MPI_Comm all);
};

}  // namespace paramwin
