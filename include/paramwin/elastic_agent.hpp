#pragma once
/// @file elastic_agent.hpp
/// ElasticAgent: an Agent whose population outlives its processes (docs/elastic.md). Its
/// Membership moves the live members to a new window over a new communicator when a member
/// dies, and gives the dead member's slot to a spare, whose first step is a rebirth from live
/// donors (no checkpoint file is read).

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "paramwin/agent.hpp"
#include "paramwin/error.hpp"
#include "paramwin/membership.hpp"

namespace paramwin {

/// One process of an elastic population: a member that trains in a slot, or a spare that
/// sleeps until it is given one. Not thread-safe. The trainer's loop:
///
///     paramwin::ElasticAgent<> agent(MPI_COMM_WORLD, layout, options, window_options,
///                                    {.members = 8});
///     while (agent.wait_for_slot()) {          // a spare sleeps here; false: all finished
///       try {
///         for (auto it = agent.resume_iteration(); it < steps; ++it) {
///           train(params);
///           agent.step(it, metric, params);    // may move to a new epoch first
///         }
///         agent.finish();
///         break;
///       } catch (const paramwin::EvictedError&) {  // stalled past the bound: a spare now
///       } catch (const std::exception&) { agent.resign(); }  // give the slot to a spare
///     }
///     std::_Exit(0);  // never MPI_Finalize: it waits for dead ranks forever
///
/// Every window it ever held is abandoned, never freed (Window::abandon); under
/// Replacement::new_window each epoch keeps one window's memory until the process ends.
template <class MemorySpace = Kokkos::HostSpace>
class ElasticAgent {
 public:
  using agent_type = Agent<MemorySpace>;                 ///< the agent of a slot
  using window_type = typename agent_type::window_type;  ///< its window

  /// @note Collective over @p world (the Membership), then over the members
  /// (Replacement::new_window) or every process (standing_window) for the agents' window,
  /// named after window_options.name (or "paramwin.elastic") and the epoch. A spare's agent
  /// (standing_window) starts paused.
  ElasticAgent(MPI_Comm world, Layout layout, AgentOptions options = {},
               WindowOptions window_options = {}, MembershipOptions membership = {})
      : membership_(world, membership),
        layout_(std::move(layout)),
        options_(std::move(options)),
        window_options_(std::move(window_options)) {
    if (window_options_.name.empty()) window_options_.name = "paramwin.elastic";
    if (standing() || member()) {
      agent_.emplace(membership_.comm(), layout_, options_, epoch_window_options());
      if (!member()) agent_->pause();
    }
  }
  ElasticAgent(const ElasticAgent&) = delete;
  ElasticAgent& operator=(const ElasticAgent&) = delete;
  /// Not movable: the agent's callbacks may refer to it.
  ElasticAgent(ElasticAgent&&) = delete;
  ElasticAgent& operator=(ElasticAgent&&) = delete;
  /// Abandons the agent's window (never frees it: it may hold a rank that died since).
  ~ElasticAgent() {
    if (agent_) agent_->abandon();
  }

  /// A member: true at once. A spare: sleeps until it is given a dead member's slot, then
  /// marks its agent to be reborn from donors at its first step (Agent::join) and returns
  /// true; under Replacement::new_window it first creates the new epoch's window with the
  /// members (collective over them). False when the population finished.
  bool wait_for_slot() {
    if (member()) return true;
    if (!membership_.wait_for_slot()) return false;
    if (standing()) {
      agent_->resume();
    } else {
      agent_.emplace(window_type(membership_.comm(), layout_, epoch_window_options()), options_);
      barrier();  // the members have republished into the new window
    }
    agent_->join();
    return true;
  }

  /// One step: first the membership's messages (under Replacement::new_window a new epoch
  /// moves this agent to a new window and republishes @p params there), then Agent::step.
  /// EvictedError when this process was judged dead while it stalled: it has dropped its slot
  /// without publishing and is a spare now (call wait_for_slot()).
  StepEvent step(std::int64_t iteration, double metric, std::span<const LayerRef> params) {
    agent_type& a = live();
    std::vector<RosterEntry> roster;
    if (membership_.check_due()) roster = slot_roster(a);
    if (std::optional<EpochChange> change = membership_.poll(roster)) {
      if (membership_.role() == MemberRole::evicted) {
        drop_slot();
        membership_.rejoin_as_spare();
        throw EvictedError("paramwin: ElasticAgent: this process was judged dead while it "
                           "stalled; epoch " +
                           std::to_string(change->epoch) +
                           " went on without it, and it is a spare now (wait_for_slot())");
      }
      if (!standing()) {
        a.replace_window(window_type(membership_.comm(), layout_, epoch_window_options()));
        std::vector<ConstLayerRef> out;
        out.reserve(params.size());
        for (const LayerRef& p : params) out.push_back(p.as_const());
        (void)a.publish(out);
        barrier();
      }
    }
    return a.step(iteration, metric, params);
  }
  /// @copydoc step(std::int64_t, double, std::span<const LayerRef>)
  StepEvent step(std::int64_t iteration, double metric, std::initializer_list<LayerRef> params) {
    return step(iteration, metric, std::span<const LayerRef>(params.begin(), params.size()));
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
  /// others, then releases the spares (Membership::finish). The window stays (abandoned at
  /// destruction); end the process with std::_Exit.
  void finish() {
    agent_type& a = live();
    membership_.finish([&] { return slot_roster(a); });
  }

  /// Whether this process trains in a slot now.
  [[nodiscard]] bool member() const noexcept { return membership_.role() == MemberRole::member; }
  /// The slot's agent (InvalidArgument unless member()).
  [[nodiscard]] agent_type& agent() { return live(); }
  /// The process's membership: slot, epoch, members, spares, the last change.
  [[nodiscard]] Membership& membership() noexcept { return membership_; }
  /// @copydoc membership()
  [[nodiscard]] const Membership& membership() const noexcept { return membership_; }
  /// Where a joined spare's training resumes: the slot's previous member's last iteration
  /// (0 for a member of the first epoch).
  [[nodiscard]] std::int64_t resume_iteration() const noexcept {
    return membership_.resume_iteration();
  }

 private:
  [[nodiscard]] bool standing() const noexcept {
    return membership_.options().replacement == Replacement::standing_window;
  }
  [[nodiscard]] agent_type& live() {
    if (!member() || !agent_) {
      throw InvalidArgument("paramwin: ElasticAgent: this process holds no slot (a spare: call "
                            "wait_for_slot() first)");
    }
    return *agent_;
  }
  /// The agent stops being a member: paused in the standing window, or its window abandoned.
  void drop_slot() noexcept {
    if (!agent_) return;
    if (standing()) {
      try {
        agent_->pause();
      } catch (...) {  // a local roster write: nothing to undo
      }
    } else {
      agent_->abandon();
      agent_.reset();
    }
  }
  /// The window's roster, one entry per slot (the standing window's ranks are world ranks).
  [[nodiscard]] std::vector<RosterEntry> slot_roster(agent_type& a) const {
    std::vector<RosterEntry> all = a.window().roster_all(roster_timeout());
    if (!standing()) return all;
    std::vector<RosterEntry> slots;
    slots.reserve(membership_.members().size());
    for (int r : membership_.members()) slots.push_back(all.at(static_cast<std::size_t>(r)));
    return slots;
  }
  [[nodiscard]] WindowOptions epoch_window_options() const {
    WindowOptions o = detail::serving_window_options(window_options_, options_.serve);
    o.name += "#epoch" + std::to_string(membership_.epoch());
    return o;
  }
  /// A roster read's bound: the agent's own, else 1 s (a dead member over RMA never answers).
  [[nodiscard]] double roster_timeout() const {
    return options_.read.roster_timeout_seconds > 0.0 ? options_.read.roster_timeout_seconds : 1.0;
  }
  void barrier() const {
    const int rc = MPI_Barrier(membership_.comm());
    if (rc != MPI_SUCCESS) throw MpiError(rc, "MPI_Barrier", "over the new epoch's members");
  }

  Membership membership_;
  Layout layout_;
  AgentOptions options_;
  WindowOptions window_options_;
  std::optional<agent_type> agent_;
};

}  // namespace paramwin
