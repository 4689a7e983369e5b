#pragma once
/// @file membership.hpp
/// Membership epochs (docs/elastic.md): which process trains in which slot of the
/// population, agreed by the live processes without asking the MPI library to detect
/// failures. A coordinator (the lowest slot it does not judge dead) proposes a new epoch when
/// a member died and a spare can take its slot; the processes of the new epoch answer, the
/// coordinator commits, and they build the epoch's communicator over themselves alone
/// (MPI_Comm_create_group), so no collective ever involves a dead process. ElasticAgent
/// (elastic_agent.hpp) drives it for an Agent.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paramwin/roster.hpp"

namespace paramwin {

/// How a dead member's slot is given to a spare.
enum class Replacement : std::uint8_t {
  /// Each epoch builds a communicator over its processes only (MPI_Comm_create_group), and
  /// ElasticAgent a new window over it: collectives over the population (checkpoints,
  /// synchronous PBT) work again after a recovery, at the cost of one window creation per
  /// epoch on every member, and of the old window's memory (abandoned, never freed).
  new_window = 0,
  /// The spares hold ranks of the one window from the start (asleep, paused); a replacement
  /// is messages only: no collective, no new window, no memory kept per epoch. The dead
  /// stay in the window's communicator, so nothing collective may run over it afterwards.
  standing_window = 1,
};

/// Refills of the spare pool by MPI_Comm_spawn (docs/elastic.md, "Refilling the spares"):
/// Open MPI only (MPICH's ch4:ucx has no MPI_Comm_spawn), and Replacement::new_window only
/// (the standing window is over the processes of the start). When the live spares are fewer
/// than `low` (default: `pool`) or than the dead slots waiting, the coordinator proposes a
/// refill up to `pool` (or to the dead slots waiting): every
/// live process (members and spares) agrees, and together they spawn the missing spares and
/// merge with them into a new communicator of every process (the dead left out). The members
/// keep their epoch's communicator and window; the new processes wait as spares.
struct SpawnOptions {
  /// Keep this many live spares; 0: never spawn.
  int pool = 0;
  /// Refill only when the live spares fall below this many (or below the dead slots
  /// waiting), then back up to `pool`: fewer, larger spawns. 0 (the default): `pool`, a
  /// refill as soon as one spare is used up.
  int low = 0;
  /// Spawn ahead: a live spare that the dead slots do not need spawns the new spares alone
  /// while the members train on; the members only merge with them (milliseconds) once they
  /// have started. Needs the UCX PML (`--mca pml ucx`): over ob1 and TCP the second merge
  /// hung here (docs/elastic.md, "Refilling the spares"). false: every live process takes
  /// part in the spawn and waits for the new processes' start.
  bool ahead = false;
  /// The program the spares run; empty: this process's own executable (/proc/self/exe).
  /// Not an executable file (a path, or a name in PATH): refused with InvalidArgument (Open
  /// MPI's spawn of a missing program hangs).
  std::string command{};
  /// Its arguments; std::nullopt: this process's own (/proc/self/cmdline without argv[0]).
  /// A spawned process must construct the same Membership options (its MPI_Comm_get_parent
  /// is the refill's): the same program and arguments do.
  std::optional<std::vector<std::string>> args{};
};

/// Joins of processes launched on their own (docs/elastic.md, "Joining from outside"), e.g. a
/// preempted agent requeued by Slurm: Open MPI with its name server (`ompi-server`, and every
/// mpirun given `--ompi-server`), Replacement::new_window only. A joiner (joining = true; its
/// whole MPI_COMM_WORLD joins) opens a port, publishes it as `service` + ".join"
/// (MPI_Publish_name) and waits in its Membership's constructor; the population's coordinator
/// looks the name up every look_seconds, every live process agrees, and together they connect
/// to the port (MPI_Comm_connect) and merge with the joiner into a new communicator of every
/// process, as a refill does. The joiner then waits as a spare.
struct JoinOptions {
  /// The name the population and its joiners meet under; empty: no joins.
  std::string service{};
  /// This process joins the population that serves `service` (instead of starting one).
  bool joining = false;
  /// How often the coordinator looks for a joiner (one MPI_Lookup_name, about 1 ms here).
  double look_seconds = 0.5;
  /// How long a joiner tries to publish its port (the name is taken while another joiner
  /// waits) before its constructor throws an Error on every rank.
  double publish_seconds = 60.0;
};

/// How a Membership judges and agrees.
struct MembershipOptions {
  /// How a slot is given to a spare (see Replacement).
  Replacement replacement = Replacement::new_window;
  /// World ranks [0, members) train from the start, one slot each; the others are spares.
  /// 0: every rank trains (no spares).
  int members = 0;
  /// How often the coordinator judges the members (its poll() asks for a roster this often).
  double check_seconds = 0.05;
  /// A member whose heartbeat has not moved (or whose roster has not answered) for this long
  /// is dead. On its own host a member is dead as soon as its process is gone, with no bound.
  double dead_after_seconds = 30.0;
  /// How long a proposal waits for every answer, and an answer for the commit, before it is
  /// given up (a member answers at its next step). With a silence bound, a proposal waits at
  /// most half of dead_after_seconds and an answer at most dead_after_seconds, if shorter.
  double agree_seconds = 60.0;
  /// How long a spare sleeps between looks for a message.
  double spare_sleep_seconds = 0.002;
  /// Refills of the spare pool by MPI_Comm_spawn (none by default).
  SpawnOptions spawn{};
  /// Joins of processes launched on their own through a name server (none by default).
  JoinOptions join{};
};

/// The refills a process took part in (Membership::refills()).
struct RefillStats {
  std::uint64_t refills = 0;   ///< refills this process took part in (or, spawned, was made by)
  std::uint64_t spawned = 0;   ///< processes those refills started
  std::uint64_t failed = 0;    ///< refills whose spawn failed: no more are proposed (under Open
                               ///< MPI 4.1 the next spawn would end the job)
  std::uint64_t joins = 0;     ///< joins (JoinOptions) this process took part in, or made
  std::uint64_t joined = 0;    ///< processes those joins brought in
  double last_seconds = 0.0;   ///< the last refill, from its proposal to the new communicator
  double total_seconds = 0.0;  ///< all of them (the members' time away from training)
  bool spawned_here = false;   ///< this process was started by a refill
  bool joined_here = false;    ///< this process joined from outside (JoinOptions::joining)
};

/// What a process does in the population now.
enum class MemberRole : std::uint8_t {
  member = 0,   ///< trains in a slot of the current epoch
  spare = 1,    ///< waits for a slot (wait_for_slot)
  evicted = 2,  ///< was judged dead while alive (a long stall): must drop its state, become a spare
  finished = 3  ///< the population finished
};

/// A new epoch, as poll() or wait_for_slot() returns it.
struct EpochChange {
  std::uint64_t epoch = 0;       ///< the new epoch (1 is the first after the start)
  std::vector<int> dead;         ///< slots whose member was judged dead or resigned
  std::vector<int> reasons_pid;  ///< of dead: 1 when judged by its process gone, 0 by silence
  std::vector<int> joined;       ///< slots a spare took (the same as dead)
  std::vector<int> members;      ///< world rank of every slot in the new epoch
  /// Slots whose member had finished (Membership::finish) when the epoch was proposed: never
  /// judged dead, never replaced.
  std::vector<int> finished;
  /// Per slot of dead: the iteration its member's roster last said (the joiner resumes there).
  std::vector<std::int64_t> iterations;
  double judged_at = 0.0;      ///< MPI_Wtime at which the coordinator judged the death
  double agree_seconds = 0.0;  ///< from the proposal to the epoch's communicator
};

/// Membership of the population's processes in epochs. Not thread-safe; one per process.
/// Collective over the world communicator at construction only; afterwards only point to
/// point messages and, at an epoch change, MPI_Comm_create_group over the new epoch's
/// processes. No communicator that may hold a dead process is ever freed.
class Membership {
 public:
  /// @note Collective over @p world (every rank, members and spares: an MPI_Allgather of
  /// pids and host ids, two duplicates of @p world (messages; the parent of the epochs'
  /// communicators, apart: Open MPI builds those with messages under their tag), the first epoch's
  /// communicator over the members). InvalidArgument on every rank for bad options. A process
  /// started by a refill (SpawnOptions::pool > 0 and a parent communicator) instead joins its
  /// parents' population as a spare: collective over its parents and the other new processes.
  /// A joiner (JoinOptions::joining) waits here until the population takes it in as a spare.
  explicit Membership(MPI_Comm world, MembershipOptions options = {});
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;
  /// Moves the membership; the source is left empty (only destruction and assignment).
  Membership(Membership&&) noexcept;
  /// Takes over @p other's membership (this one's communicators are left, never freed).
  Membership& operator=(Membership&&) noexcept;
  /// Frees nothing collective (communicators may hold dead ranks); never throws.
  ~Membership();

  /// What this process does now (member, spare, evicted, finished).
  [[nodiscard]] MemberRole role() const noexcept;
  /// This process's slot (its rank in comm()), -1 unless a member.
  [[nodiscard]] int slot() const noexcept;
  /// Number of slots (the population's size).
  [[nodiscard]] int slots() const noexcept;
  /// The current epoch (0 at the start).
  [[nodiscard]] std::uint64_t epoch() const noexcept;
  /// Replacement::new_window: the epoch's communicator (rank = slot) while a member, and
  /// after a member's finish(); MPI_COMM_NULL otherwise. Replacement::standing_window: the
  /// communicator of every process, members and spares (rank = world rank), for the one
  /// window; it may hold dead ranks: nothing collective over it once one died.
  [[nodiscard]] MPI_Comm comm() const noexcept;
  /// A new communicator over the current members in slot order, or after finish() over the
  /// slots that finished (a dead one that no spare replaced is left out), e.g. to gather
  /// results at the end. @note Collective over them.
  [[nodiscard]] MPI_Comm create_members_comm() const;
  /// The options in force.
  [[nodiscard]] const MembershipOptions& options() const noexcept;
  /// World rank of every slot in the current epoch, as this process knows it.
  [[nodiscard]] const std::vector<int>& members() const noexcept;
  /// The spares this process knows of (world ranks), in the order they are given slots.
  [[nodiscard]] const std::vector<int>& spares() const noexcept;
  /// The iteration the slot's previous member had reached, once a spare was given a slot.
  [[nodiscard]] std::int64_t resume_iteration() const noexcept;
  /// This process's rank among every process of the population (members and spares): in
  /// the world communicator, and after a refill in the communicator it made (members() and
  /// spares() are ranks of the same).
  [[nodiscard]] int world_rank() const noexcept;
  /// The refills of the spare pool (SpawnOptions) this process took part in.
  [[nodiscard]] const RefillStats& refills() const noexcept;

  /// A spare: sleeps until a coordinator gives it a slot (true: slot(), comm() and epoch()
  /// are the new epoch's, last_change() says which) or the population finished (false). A
  /// member: true at once.
  bool wait_for_slot();

  /// Whether poll() wants a roster of the epoch's window now (the coordinator, every
  /// check_seconds).
  [[nodiscard]] bool check_due() const noexcept;
  /// A member, once per step: answers proposals and commits; when check_due(), @p roster
  /// is the epoch's roster (RosterEntry per slot, as Window::roster_all reads it) and the
  /// coordinator judges the members and proposes a new epoch when a spare can take every
  /// dead slot. Returns the change when a new epoch began (then comm() is new, and
  /// role() is member), or when this process was evicted (role() is evicted: it must drop its
  /// state without touching its old windows, then call rejoin_as_spare()).
  std::optional<EpochChange> poll(std::span<const RosterEntry> roster = {});
  /// The latest epoch change this process took part in.
  [[nodiscard]] const std::optional<EpochChange>& last_change() const noexcept;

  /// A member gives its slot up while it can still send (a trainer's exception): the
  /// coordinator replaces it from a spare, and this process becomes a spare (role() spare)
  /// that may be given a slot again (wait_for_slot()).
  void resign();
  /// After eviction: tells the epoch's members that this process is a spare now.
  void rejoin_as_spare();

  /// A member at the end of its training: tells the others and answers their messages
  /// until every slot has finished or is dead (@p read_roster: the epoch's roster, for the
  /// silence rule), then the lowest live slot releases the spares (their wait_for_slot()
  /// returns false). role() is finished afterwards. A slot that dies meanwhile is given to a
  /// spare as during training, this member taking part in the new epoch, under
  /// Replacement::standing_window; under new_window the new epoch's window would need it (use
  /// the form with @p on_epoch), so no epoch is proposed while it waits, and such a slot is
  /// not filled.
  template <class ReadRoster>
  void finish(ReadRoster&& read_roster) {
    start_finish(false);
    while (finish_step(check_due() ? read_roster() : std::vector<RosterEntry>{}) !=
           FinishProgress::finished) {
    }
  }
  /// The same, taking part in every new epoch while it waits (a slot that died after this
  /// member finished, given to a spare): after it entered one (comm() and epoch() are the new
  /// epoch's), @p on_epoch() runs; under Replacement::new_window it must do what a member's
  /// step does for a new epoch: create the epoch's window over comm() with the others
  /// (collective), publish this member's parameters there, and meet them (MPI_Barrier over
  /// comm()) before the joiner reads.
  template <class ReadRoster, class OnEpoch>
  void finish(ReadRoster&& read_roster, OnEpoch&& on_epoch) {
    start_finish(true);
    while (true) {
      const FinishProgress p =
          finish_step(check_due() ? read_roster() : std::vector<RosterEntry>{});
      if (p == FinishProgress::finished) return;
      if (p == FinishProgress::epoch) on_epoch();
    }
  }

 private:
  enum class FinishProgress { waiting, epoch, finished };
  /// @p takes_epochs: it will answer a new_window epoch yes (the caller makes its window).
  void start_finish(bool takes_epochs);
  /// A new_window epoch is answered yes only when start_finish was told the caller makes its
  /// window (its slot's done mark).
  FinishProgress finish_step(std::span<const RosterEntry> roster);

  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace paramwin
