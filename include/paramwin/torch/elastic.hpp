#pragma once
/// @file torch/elastic.hpp
/// LibTorch adapter, part 4: ElasticTorchAgent, a population of modules that outlives its
/// processes (docs/elastic.md, "Epochs and spares"): ElasticAgent's membership with a
/// TorchAgent in each slot. A spare given a dead member's slot starts with a rebirth from
/// live donors into its module: parameters, optimizer state (reset, rebuilt or inherited, as
/// TorchAgentOptions say) and the optimizer options published as hyperparameters.

#include <mpi.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>

#include "paramwin/agent_options.hpp"
#include "paramwin/agreement.hpp"
#include "paramwin/detail/elastic_slots.hpp"
#include "paramwin/error.hpp"
#include "paramwin/membership.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin::detail {

/// A TorchAgent's core is its Agent.
template <>
struct ElasticCore<torch::TorchAgent> {
  using type = Agent<>;
  static type& of(torch::TorchAgent& agent) { return agent.agent(); }
};

}  // namespace paramwin::detail

namespace paramwin::torch {

/// One process of an elastic population of modules: a member that trains its module in a
/// slot, or a spare that sleeps until it is given one. Every process builds the module and
/// its optimizer; the spares' TorchAgents hold paused ranks of the one standing window
/// (MembershipOptions::replacement must be Replacement::standing_window: a replacement is
/// messages only, and no TorchAgent is created after the start). Not thread-safe. The loop:
///
///     paramwin::torch::ElasticTorchAgent agent(MPI_COMM_WORLD, model, optimizer, options,
///         torch_options, window_options,
///         {.members = 8, .replacement = paramwin::Replacement::standing_window});
///     while (agent.wait_for_slot()) {           // a spare sleeps here; false: all finished
///       try {
///         for (auto it = agent.resume_iteration(); it < steps; ++it) {
///           auto loss = loss_of(model);
///           if (agent.step(it, loss.item<double>()).died) continue;  // the dead weights'
///           optimizer.zero_grad();
///           loss.backward();
///           agent.optimizer().step();
///         }
///         agent.finish();
///         break;
///       } catch (const paramwin::EvictedError&) {  // stalled past the bound: a spare now
///       } catch (const std::exception&) { agent.resign(); }  // give the slot to a spare
///     }
///     std::_Exit(0);  // never MPI_Finalize: it waits for dead ranks forever
///
/// The window is never freed (Window::abandon). Grouped agents (AgentGroups) have no elastic
/// side.
class ElasticTorchAgent : public paramwin::detail::ElasticSlots<TorchAgent> {
  using base = paramwin::detail::ElasticSlots<TorchAgent>;

 public:
  /// Borrows @p optimizer (which must outlive the agent); see TorchAgent.
  /// @note Collective over @p world: InvalidArgument on every rank when a rank's
  /// MembershipOptions::replacement is not standing_window; then the Membership and the
  /// TorchAgents (every process: members and spares).
  ElasticTorchAgent(MPI_Comm world, ::torch::nn::Module& module,
                    ::torch::optim::Optimizer& optimizer, AgentOptions agent_options = {},
                    TorchAgentOptions options = {}, WindowOptions window_options = {},
                    MembershipOptions membership = {})
      : base(
            world,
            [&module, &optimizer, agent_options, options](MPI_Comm comm, const WindowOptions& w,
                                                          bool) {
              return TorchAgent(comm, module, optimizer, agent_options, options, w);
            },
            std::move(window_options), standing_only(world, membership), agent_options) {}

  /// Owns its optimizer: @p builder makes it now and on every rebirth (call optimizer()
  /// each step); see TorchAgent.
  /// @note Collective over @p world, as the constructor above.
  ElasticTorchAgent(MPI_Comm world, ::torch::nn::Module& module, OptimizerBuilder builder,
                    AgentOptions agent_options = {}, TorchAgentOptions options = {},
                    WindowOptions window_options = {}, MembershipOptions membership = {})
      : base(
            world,
            [&module, builder = std::move(builder), agent_options,
             options](MPI_Comm comm, const WindowOptions& w, bool) {
              return TorchAgent(comm, module, builder, agent_options, options, w);
            },
            std::move(window_options), standing_only(world, membership), agent_options) {}

  /// One step: first the membership's messages, then TorchAgent::step (on a joined spare's
  /// first step the rebirth from live donors into the module). EvictedError when this
  /// process was judged dead while it stalled: it has dropped its slot without publishing
  /// and is a spare now (call wait_for_slot()).
  StepEvent step(std::int64_t iteration, double metric) {
    // The standing window never moves to a new one, so there is nothing to republish.
    TorchAgent& t = before_step([](TorchAgent&) {});
    return t.step(iteration, metric);
  }

  /// The slot's TorchAgent (InvalidArgument unless member()).
  [[nodiscard]] TorchAgent& torch_agent() { return live(); }
  /// The optimizer in force (TorchAgent::optimizer; a member's).
  [[nodiscard]] ::torch::optim::Optimizer& optimizer() { return live().optimizer(); }

 private:
  /// @p membership, when every rank of @p world asks for the standing window.
  static MembershipOptions standing_only(MPI_Comm world, MembershipOptions membership) {
    const std::string error =
        agreed_error(world,
                     membership.replacement == Replacement::standing_window
                         ? std::string()
                         : std::string(
                               "paramwin::torch: ElasticTorchAgent needs "
                               "MembershipOptions::replacement = Replacement::standing_window "
                               "(a new window per epoch would create TorchAgents after the "
                               "start, whose creation is collective over every member)"));
    if (!error.empty()) throw InvalidArgument(error);
    return membership;
  }
};

}  // namespace paramwin::torch
