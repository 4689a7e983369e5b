#pragma once
/// @file elastic_averaging.hpp
/// ElasticAveragingAgent: one model trained data-parallel by ranks that average one-sidedly
/// (AveragingAgent), whose population outlives its processes (docs/elastic.md, "Averaging
/// populations"). When a member dies, the live processes agree on a new epoch and a spare
/// takes the dead member's slot: its first step replaces its parameters with the uniform mix
/// of the live members (RoundKind::joined), read one-sidedly; nobody waits for it.

#include <mpi.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>

#include "paramwin/averaging.hpp"
#include "paramwin/detail/elastic_slots.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/membership.hpp"

namespace paramwin {

namespace detail {
/// An AveragingAgent is its own core.
template <>
struct ElasticCore<AveragingAgent> {
  using type = AveragingAgent;
  static type& of(type& agent) noexcept { return agent; }
};
}  // namespace detail

/// One process of an elastic averaging population: a member that trains in a slot, or a
/// spare that sleeps until it is given one. Not thread-safe. The trainer's loop:
///
///     paramwin::ElasticAveragingAgent agent(MPI_COMM_WORLD, layout, options, {.members = 8});
///     while (agent.wait_for_slot()) {          // a spare sleeps here; false: all finished
///       try {
///         for (auto it = agent.resume_iteration(); it < steps; ++it) {
///           train(params);
///           agent.step(params);                // a joined spare's first step: the members' mix
///         }
///         agent.finish(params);               // fills a slot that dies meanwhile too
///         break;
///       } catch (const paramwin::EvictedError&) {  // stalled past the bound: a spare now
///       } catch (const std::exception&) { agent.resign(); }  // give the slot to a spare
///     }
///     std::_Exit(0);  // never MPI_Finalize: it waits for dead ranks forever
///
/// The slots' AveragingAgents are made from their epoch's window (AveragingAgent's constructor
/// from a window), so nothing collective runs over the population after the start: warm-up,
/// cool-down, symmetric averaging, AveragingAgent::finish and checkpoints are refused. With
/// Replacement::standing_window the topology ranges over the slots (AveragingAgent::set_members:
/// the spares' and the dead's ranks are never read); with new_window the window's ranks are the
/// slots. Every window it held is abandoned, never freed.
class ElasticAveragingAgent : public detail::ElasticSlots<AveragingAgent> {
  using base = detail::ElasticSlots<AveragingAgent>;

 public:
  /// Checks @p options on every process against the population's slots (every slot's
  /// topology; warm-up, cool-down and symmetric averaging refused): InvalidArgument on every
  /// process, naming the first failing one. AveragingOptions::window is the population's
  /// window (named "paramwin.elastic" and the epoch unless named). Set
  /// AveragingOptions::timeout_seconds when members may sit on other nodes: a dead member
  /// over RMA never answers.
  /// @note Collective over @p world (the Membership), then over the members (new_window) or
  /// every process (standing_window) for the window. A spare's agent (standing_window)
  /// starts paused.
  ElasticAveragingAgent(MPI_Comm world, Layout layout, AveragingOptions options = {},
                        MembershipOptions membership = {});

  /// One step: first the membership's messages (under Replacement::new_window a new epoch
  /// moves the agent to a new window and republishes @p params there, unless it is still
  /// joining), then AveragingAgent::step. EvictedError when this process was judged dead while
  /// it stalled: it has dropped its slot without publishing and is a spare now (call
  /// wait_for_slot()).
  AveragingRound step(std::span<const LayerRef> params);
  /// @copydoc step(std::span<const LayerRef>)
  AveragingRound step(std::initializer_list<LayerRef> params) {
    return step(std::span<const LayerRef>(params.begin(), params.size()));
  }

  using base::finish;
  /// finish() with the parameters of the last step: under Replacement::new_window a slot
  /// that dies while this member waits is given to a spare too (this member republishes
  /// @p params in the new epoch's window, whose mix the joiner starts from; they must stay
  /// valid until finish returns). Under standing_window the same as finish().
  void finish(std::span<const LayerRef> params);
  /// @copydoc finish(std::span<const LayerRef>)
  void finish(std::initializer_list<LayerRef> params) {
    finish(std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// The slot's agent (InvalidArgument unless member()).
  [[nodiscard]] AveragingAgent& agent() { return this->live(); }

 private:
  /// Publishes @p params in @p slot's window (a new epoch's), unless it is still joining.
  static void republish(AveragingAgent& slot, std::span<const LayerRef> params);

  /// The constructor after the options were checked on every process.
  ElasticAveragingAgent(MPI_Comm world, Layout&& layout, const AveragingOptions& options,
                        MembershipOptions&& membership, int checked);

  std::uint64_t members_epoch_ = std::numeric_limits<std::uint64_t>::max();
};

}  // namespace paramwin
