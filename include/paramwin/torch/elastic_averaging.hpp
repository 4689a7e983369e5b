#pragma once
/// @file torch/elastic_averaging.hpp
/// LibTorch adapter, part 5: paramwin::torch::ElasticAveragingAgent, one module trained
/// data-parallel by ranks that average one-sidedly, in a population that outlives its
/// processes (docs/elastic.md, "Averaging populations"): paramwin::ElasticAveragingAgent driven
/// by a module's tensors as torch::AveragingAgent drives an AveragingAgent. A spare given a
/// dead member's slot starts from the uniform mix of the live members, read one-sidedly: its
/// module's parameters and, with TorchAveragingOptions::mix_optimizer_state, its optimizer's
/// state (Adam's step count included: it takes over the members' training).

#include <mpi.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "paramwin/averaging.hpp"
#include "paramwin/elastic_averaging.hpp"
#include "paramwin/membership.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/averaging.hpp"

namespace paramwin::torch {

/// One process of an elastic averaging population of modules: a member that trains its
/// module in a slot, or a spare that sleeps until it is given one. Every process builds the
/// module (and its optimizer). Both replacement kinds (MembershipOptions::replacement). The
/// module's CPU tensors are averaged in place, others (CUDA) staged through host buffers.
/// Keeps references to the module (and optimizer): they must outlive the agent. Not
/// thread-safe; move-only. The loop:
///
///     paramwin::torch::ElasticAveragingAgent agent(MPI_COMM_WORLD, model, optimizer,
///         averaging_options, {.mix_optimizer_state = true}, {.members = 8});
///     while (agent.wait_for_slot()) {           // a spare sleeps here; false: all finished
///       try {
///         for (auto it = agent.resume_iteration(); it < steps; ++it) {
///           optimizer.zero_grad();
///           loss_of(model).backward();
///           optimizer.step();
///           agent.step();                       // a joined spare's first: the members' mix
///         }
///         agent.finish();
///         break;
///       } catch (const paramwin::EvictedError&) {  // stalled past the bound: a spare now
///       } catch (const std::exception&) { agent.resign(); }  // give the slot to a spare
///     }
///     std::_Exit(0);  // never MPI_Finalize: it waits for dead ranks forever
///
/// What is collective over the population is refused, as by paramwin::ElasticAveragingAgent
/// (warm-up, cool-down, symmetric averaging; there is no finish() mean and no checkpoint).
class ElasticAveragingAgent {
 public:
  /// Collects @p module's exchanged tensors (InvalidArgument for an unsupported dtype, a
  /// sparse or a non-contiguous parameter; WindowOptions::exposure live and Memory::cuda in
  /// @p options.window are refused), then creates paramwin::ElasticAveragingAgent over their
  /// layout (its checks: the options against every slot, one layout everywhere). A process's
  /// error is thrown on every process of @p world.
  /// @note Collective over @p world.
  ElasticAveragingAgent(MPI_Comm world, ::torch::nn::Module& module, AveragingOptions options = {},
                        TorchAveragingOptions torch_options = {},
                        MembershipOptions membership = {});
  /// As above, with the module's optimizer (borrowed: it must outlive the agent), whose state
  /// is mixed with TorchAveragingOptions::mix_optimizer_state and kept otherwise.
  /// @note Collective over @p world.
  ElasticAveragingAgent(MPI_Comm world, ::torch::nn::Module& module,
                        ::torch::optim::Optimizer& optimizer, AveragingOptions options = {},
                        TorchAveragingOptions torch_options = {},
                        MembershipOptions membership = {});
  ElasticAveragingAgent(const ElasticAveragingAgent&) = delete;
  ElasticAveragingAgent& operator=(const ElasticAveragingAgent&) = delete;
  /// Moves the agent; the source throws paramwin::Error from every call.
  ElasticAveragingAgent(ElasticAveragingAgent&&) noexcept;
  /// Abandons this agent's windows and takes over @p other's.
  ElasticAveragingAgent& operator=(ElasticAveragingAgent&&) noexcept;
  /// Abandons the windows (never frees them: they may hold a rank that died).
  ~ElasticAveragingAgent();

  /// A member: true at once. A spare: sleeps until it is given a dead member's slot (true:
  /// its next step() is the join) or the population finished (false).
  bool wait_for_slot();
  /// One step, after the optimizer's: paramwin::ElasticAveragingAgent::step on the module's
  /// tensors (the membership's messages, then the round). When the round says applied, the
  /// tensors (and with mix_optimizer_state the optimizer's state) hold the mix, their autograd
  /// versions bumped; a join (RoundKind::joined) writes the members' mixed Adam step count
  /// too, other rounds keep the rank's own. InvalidArgument naming the tensor when the
  /// module's tensors no longer fit the layout (nothing changed). EvictedError when this
  /// process was judged dead while it stalled: a spare now (call wait_for_slot()).
  AveragingRound step();
  /// After a trainer's exception: gives the slot up (a spare takes it); this process is a
  /// spare now (call wait_for_slot()). Local.
  void resign();
  /// At the end of training: waits until every slot finished or is dead, then releases the
  /// spares (paramwin::ElasticAveragingAgent's finish: no mean). A slot that dies meanwhile
  /// is given to a spare, this member republishing the module's parameters in the new
  /// epoch's window (Replacement::new_window).
  void finish();

  [[nodiscard]] bool member() const;                    ///< whether this process has a slot
  [[nodiscard]] std::int64_t resume_iteration() const;  ///< where a joined spare resumes
  /// The process's membership: slot, epoch, members, spares, the last change.
  [[nodiscard]] const Membership& membership() const;
  /// The core's elastic agent (its slot's AveragingAgent: elastic().agent()).
  [[nodiscard]] paramwin::ElasticAveragingAgent& elastic();
  /// The module the agent averages.
  [[nodiscard]] ::torch::nn::Module& module();
  /// Tensors of the module that are not exchanged, with the reason.
  [[nodiscard]] const std::vector<std::string>& skipped() const;
  /// Host copies made so far (staged tensors only) and bindings of the module's tensors.
  [[nodiscard]] const TorchStagingStats& staging_stats() const;
  /// Optimizer state entries written from a mix so far (mix_optimizer_state).
  [[nodiscard]] std::uint64_t optimizer_states_mixed() const;

 private:
  struct Impl;
  /// The state, or paramwin::Error once this agent was moved from.
  [[nodiscard]] Impl& live() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace paramwin::torch
