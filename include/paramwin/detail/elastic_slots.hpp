#pragma once
/// @file detail/elastic_slots.hpp
/// ElasticSlots: what every elastic agent kind shares (docs/elastic.md, "Epochs and spares"):
/// the Membership, the slot's agent of the kind (an Agent, or a torch::TorchAgent holding
/// one), a spare's wait for a slot, a member's move to a new epoch, eviction, resignation and
/// the end. The public kinds (ElasticAgent, torch::ElasticTorchAgent) derive from it and add
/// their step().

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "paramwin/agent.hpp"
#include "paramwin/agent_options.hpp"
#include "paramwin/error.hpp"
#include "paramwin/membership.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin::detail {

/// How ElasticSlots reaches the Agent inside a slot's agent of kind @p Slot (specialised by
/// each kind: type, and `static type& of(Slot&)`).
template <class Slot>
struct ElasticCore;

/// An Agent is its own core.
template <class MemorySpace>
struct ElasticCore<Agent<MemorySpace>> {
  using type = Agent<MemorySpace>;
  static type& of(type& agent) noexcept { return agent; }
};

/// The membership side of an elastic population whose slots hold agents of kind @p Slot.
/// Not thread-safe; not movable (the agents' callbacks may refer to the derived object).
template <class Slot>
class ElasticSlots {
 public:
  using core_type = typename ElasticCore<Slot>::type;   ///< the Agent inside a slot's agent
  using window_type = typename core_type::window_type;  ///< its window

  ElasticSlots(const ElasticSlots&) = delete;
  ElasticSlots& operator=(const ElasticSlots&) = delete;
  ElasticSlots(ElasticSlots&&) = delete;
  ElasticSlots& operator=(ElasticSlots&&) = delete;

  /// A member: true at once. A spare: sleeps until it is given a dead member's slot, then
  /// marks its agent to be reborn from donors at its first step (Agent::join) and returns
  /// true; under Replacement::new_window it first creates the new epoch's window with the
  /// members (collective over them). False when the population finished.
  bool wait_for_slot() {
    if (member()) return true;
    if (!membership_.wait_for_slot()) return false;
    if (standing()) {
      core().resume();
    } else {
      slot_.emplace(make_(membership_.comm(), epoch_window_options(), true));
      barrier();  // the members have republished into the new window
    }
    core().join();
    return true;
  }

  /// After a trainer's exception: gives the slot up (a spare takes it) and makes this process
  /// a spare (call wait_for_slot()). Its agent is paused (standing_window) or its window
  /// abandoned (new_window). Local.
  void resign() {
    if (!member()) return;
    drop_slot();
    membership_.resign();
  }

  /// At the end of training: waits until every slot finished or is dead, answering the
  /// others, then releases the spares (Membership::finish). A slot that dies meanwhile is
  /// given to a spare under Replacement::standing_window; under new_window only by the kinds'
  /// finish(params), which can republish this member's parameters in the new epoch's window
  /// (here the slot stays empty: a lost agent). The window stays (abandoned at destruction);
  /// end the process with std::_Exit. EvictedError when this process was judged dead while
  /// it stalled before it finished (its slot went on without it): it is a spare now, and
  /// wait_for_slot() returns false once the others finish.
  void finish() {
    core_type& a = live_core();
    membership_.finish([&] { return slot_roster(a); });
    if (membership_.role() == MemberRole::evicted) evicted(membership_.epoch());
  }

  /// Whether this process trains in a slot now.
  [[nodiscard]] bool member() const noexcept { return membership_.role() == MemberRole::member; }
  /// The process's membership: slot, epoch, members, spares, the last change.
  [[nodiscard]] Membership& membership() noexcept { return membership_; }
  /// @copydoc membership()
  [[nodiscard]] const Membership& membership() const noexcept { return membership_; }
  /// Where a joined spare's training resumes: the slot's previous member's last iteration
  /// (0 for a member of the first epoch).
  [[nodiscard]] std::int64_t resume_iteration() const noexcept {
    return membership_.resume_iteration();
  }

 protected:
  /// Makes a slot's agent over a communicator with the epoch's window options: at
  /// construction (`joining` false: collective over the communicator as the kind's own
  /// constructor is), and under Replacement::new_window for a spare given a slot (`joining`
  /// true: its only collective must be the window's creation, which the members make in
  /// their step).
  using Make = std::function<Slot(MPI_Comm comm, const WindowOptions& options, bool joining)>;

  /// @note Collective over @p world (the Membership), then over the members (new_window) or
  /// every process (standing_window) for the agents' window, named after
  /// window_options.name (or "paramwin.elastic") and the epoch. A spare's agent
  /// (standing_window) starts paused. @p agent_options: the slots' agents' options (their
  /// serving options shape the windows; their roster bound bounds the roster reads).
  ElasticSlots(MPI_Comm world, Make make, WindowOptions window_options,
               MembershipOptions membership, const AgentOptions& agent_options)
      : membership_(world, std::move(membership)),
        make_(std::move(make)),
        window_options_(std::move(window_options)),
        serve_(agent_options.serve),
        roster_timeout_(agent_options.read.roster_timeout_seconds > 0.0
                            ? agent_options.read.roster_timeout_seconds
                            : 1.0) {  // a dead member over RMA never answers
    if (window_options_.name.empty()) window_options_.name = "paramwin.elastic";
    if (standing() || member()) {
      slot_.emplace(make_(membership_.comm(), epoch_window_options(), false));
      if (!member()) core().pause();
    }
  }
  /// Abandons the agent's window (never frees it: it may hold a rank that died since).
  ~ElasticSlots() {
    if (slot_) core().abandon();
  }

  /// Before a step: the membership's messages. Under Replacement::new_window a new epoch
  /// moves the agent to a new window and calls @p republish(slot) there (each member
  /// publishes its parameters before the barrier that lets the joiner read them). Throws
  /// EvictedError when this process was judged dead while it stalled: it has dropped its
  /// slot without publishing and is a spare now. Returns the slot's agent.
  template <class Republish>
  Slot& before_step(Republish&& republish) {
    Slot& s = live();
    core_type& a = ElasticCore<Slot>::of(s);
    std::vector<RosterEntry> roster;
    if (membership_.check_due()) roster = slot_roster(a);
    if (std::optional<EpochChange> change = membership_.poll(roster)) {
      if (membership_.role() == MemberRole::evicted) evicted(change->epoch);
      enter_epoch_window(s, republish);
    }
    return s;
  }

  /// finish(), taking part in every new epoch while it waits: under Replacement::new_window
  /// the agent moves to the epoch's window and calls @p republish(slot) there, as
  /// before_step() does, so that a slot that died after this one finished is filled too.
  template <class Republish>
  void finish_taking_epochs(Republish&& republish) {
    Slot& s = live();
    core_type& a = ElasticCore<Slot>::of(s);
    membership_.finish([&] { return slot_roster(a); }, [&] { enter_epoch_window(s, republish); });
    if (membership_.role() == MemberRole::evicted) evicted(membership_.epoch());
  }

  /// The slot's agent (InvalidArgument unless member()).
  [[nodiscard]] Slot& live() {
    if (!member() || !slot_) {
      throw InvalidArgument("paramwin: ElasticAgent: this process holds no slot (a spare: call "
                            "wait_for_slot() first)");
    }
    return *slot_;
  }
  [[nodiscard]] bool standing() const noexcept {
    return membership_.options().replacement == Replacement::standing_window;
  }

 private:
  /// A member that entered a new epoch (Replacement::new_window): its agent moves to the
  /// epoch's window (collective over the members), @p republish(s) publishes there, and a
  /// barrier lets the joiner read. Nothing under standing_window.
  template <class Republish>
  void enter_epoch_window(Slot& s, Republish& republish) {
    if (standing()) return;
    core_type& a = ElasticCore<Slot>::of(s);
    a.replace_window(window_type(membership_.comm(), a.window().layout(), epoch_window_options(),
                                 std::source_location::current()));
    republish(s);
    barrier();
  }
  [[nodiscard]] core_type& core() { return ElasticCore<Slot>::of(*slot_); }
  [[nodiscard]] core_type& live_core() { return ElasticCore<Slot>::of(live()); }
  /// This process was judged dead while it stalled and @p epoch went on without it: it
  /// drops its slot without publishing, tells the others it is a spare, and throws.
  [[noreturn]] void evicted(std::uint64_t epoch) {
    drop_slot();
    membership_.rejoin_as_spare();
    throw EvictedError("paramwin: ElasticAgent: this process was judged dead while it "
                       "stalled; epoch " +
                       std::to_string(epoch) +
                       " went on without it, and it is a spare now (wait_for_slot())");
  }
  /// The agent stops being a member: paused in the standing window, or its window abandoned.
  void drop_slot() noexcept {
    if (!slot_) return;
    if (standing()) {
      try {
        core().pause();
      } catch (...) {  // a local roster write: nothing to undo
      }
    } else {
      core().abandon();
      slot_.reset();
    }
  }
  /// The window's roster, one entry per slot (the standing window's ranks are world ranks).
  [[nodiscard]] std::vector<RosterEntry> slot_roster(core_type& a) const {
    std::vector<RosterEntry> all = a.window().roster_all(roster_timeout_);
    if (!standing()) return all;
    std::vector<RosterEntry> slots;
    slots.reserve(membership_.members().size());
    for (int r : membership_.members()) slots.push_back(all.at(static_cast<std::size_t>(r)));
    return slots;
  }
  [[nodiscard]] WindowOptions epoch_window_options() const {
    WindowOptions o = serving_window_options(window_options_, serve_);
    o.name += "#epoch" + std::to_string(membership_.epoch());
    return o;
  }
  void barrier() const {
    const int rc = MPI_Barrier(membership_.comm());
    if (rc != MPI_SUCCESS) throw MpiError(rc, "MPI_Barrier", "over the new epoch's members");
  }

  Membership membership_;
  Make make_;
  WindowOptions window_options_;
  ServeOptions serve_;
  double roster_timeout_;
  std::optional<Slot> slot_;
};

}  // namespace paramwin::detail
