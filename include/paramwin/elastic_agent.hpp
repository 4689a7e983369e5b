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
#include "paramwin/detail/elastic_slots.hpp"
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
///         agent.finish(params);               // fills a slot that dies meanwhile too
///         break;
///       } catch (const paramwin::EvictedError&) {  // stalled past the bound: a spare now
///       } catch (const std::exception&) { agent.resign(); }  // give the slot to a spare
///     }
///     std::_Exit(0);  // never MPI_Finalize: it waits for dead ranks forever
///
/// Every window it ever held is abandoned, never freed (Window::abandon); under
/// Replacement::new_window each epoch keeps one window's memory until the process ends.
template <class MemorySpace = Kokkos::HostSpace>
class ElasticAgent : public detail::ElasticSlots<Agent<MemorySpace>> {
  using base = detail::ElasticSlots<Agent<MemorySpace>>;

 public:
  using agent_type = Agent<MemorySpace>;                 ///< the agent of a slot
  using window_type = typename agent_type::window_type;  ///< its window

  /// @note Collective over @p world (the Membership), then over the members
  /// (Replacement::new_window) or every process (standing_window) for the agents' window,
  /// named after window_options.name (or "paramwin.elastic") and the epoch. A spare's agent
  /// (standing_window) starts paused.
  ElasticAgent(MPI_Comm world, Layout layout, AgentOptions options = {},
               WindowOptions window_options = {}, MembershipOptions membership = {})
      : base(world, maker(std::move(layout), options), std::move(window_options), membership,
             options) {}

  /// One step: first the membership's messages (under Replacement::new_window a new epoch
  /// moves this agent to a new window and republishes @p params there), then Agent::step.
  /// EvictedError when this process was judged dead while it stalled: it has dropped its slot
  /// without publishing and is a spare now (call wait_for_slot()).
  StepEvent step(std::int64_t iteration, double metric, std::span<const LayerRef> params) {
    agent_type& a =
        this->before_step([&](agent_type& slot) { (void)slot.publish(const_refs(params)); });
    return a.step(iteration, metric, params);
  }
  /// @copydoc step(std::int64_t, double, std::span<const LayerRef>)
  StepEvent step(std::int64_t iteration, double metric, std::initializer_list<LayerRef> params) {
    return step(iteration, metric, std::span<const LayerRef>(params.begin(), params.size()));
  }

  using base::finish;
  /// finish() with the parameters of the last step: under Replacement::new_window a slot
  /// that dies while this member waits is given to a spare too (this member republishes
  /// @p params in the new epoch's window, which every member creates; they must stay valid
  /// until finish returns). Under standing_window the same as finish().
  void finish(std::span<const LayerRef> params) {
    this->finish_taking_epochs([&](agent_type& slot) { (void)slot.publish(const_refs(params)); });
  }
  /// @copydoc finish(std::span<const LayerRef>)
  void finish(std::initializer_list<LayerRef> params) {
    finish(std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// The slot's agent (InvalidArgument unless member()).
  [[nodiscard]] agent_type& agent() { return this->live(); }

 private:
  /// The slots' agents: over the communicator (collective, options agreed) at construction;
  /// a joining spare's over the new epoch's window, which is all the members create.
  static typename base::Make maker(Layout layout, AgentOptions options) {
    return [layout = std::move(layout),
            options = std::move(options)](MPI_Comm comm, const WindowOptions& w, bool joining) {
      if (joining) return agent_type(window_type(comm, layout, w), options);
      return agent_type(comm, layout, options, w);
    };
  }
};

}  // namespace paramwin
