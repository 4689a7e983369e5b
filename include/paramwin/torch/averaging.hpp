#pragma once
/// @file averaging.hpp
/// LibTorch adapter, part 3: paramwin::torch::AveragingAgent, the averaging agent
/// (paramwin::AveragingAgent, docs/averaging.md) driven by a torch::nn::Module: data-parallel
/// training by ranks that mix their peers' latest published parameters into the module's
/// tensors one-sidedly, with the core's options, topologies, schedules and rounds. Optionally
/// the optimizer's state (Adam's moments, SGD's momentum buffers) is mixed with the same weights.

#include <mpi.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "paramwin/averaging.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch {

/// What a torch AveragingAgent does besides the core's AveragingOptions.
struct TorchAveragingOptions {
  ModuleOptions module{};  ///< which tensors are exchanged (buffers), forced host staging
  /// Opt-in: mix the optimizer's per-parameter state with the same weights as the parameters
  /// (the same layers as TorchAgentOptions::inherit_optimizer_state, published in the same
  /// snapshot: "optimizer/<param>/exp_avg", ".../exp_avg_sq", ".../max_exp_avg_sq" with
  /// amsgrad, ".../step" for Adam and AdamW; ".../momentum_buffer", ".../has_momentum_buffer"
  /// for SGD with momentum). The mixed tensors are written into the optimizer (an entry is
  /// created for a parameter without one); Adam's step count stays each rank's own (its bias
  /// correction follows its own steps). Needs an optimizer (Adam, AdamW or SGD with momentum;
  /// InvalidArgument on every rank otherwise). Off (the default): every rank keeps its own
  /// optimizer state.
  bool mix_optimizer_state = false;
};

/// One rank of a LibTorch module trained data-parallel by ranks that average with each other
/// one-sidedly: a paramwin::AveragingAgent whose layout is layout_of(module, options.module)
/// (then the optimizer's state layers with TorchAveragingOptions::mix_optimizer_state). The
/// module's CPU tensors are given to the core in place (no copy); other tensors (CUDA) are
/// staged through the adapter's host buffers (as TorchAgent's DeviceWindows::never: the
/// synchronous means and background corrections compute on the host). Keeps references to
/// the module (and optimizer): they must outlive the agent. Move-only; not thread-safe.
/// Asynchronous steps never wait for another rank; warm-up, cool-down and finish() are
/// collective, as the core's.
class AveragingAgent {
 public:
  /// Collects @p module's exchanged tensors (InvalidArgument for an unsupported dtype, a
  /// sparse or a non-contiguous parameter) and creates the core agent over their layout.
  /// A rank's error is thrown on every rank (the others: "rank N failed: ..."); ranks whose
  /// modules have other layouts get LayoutMismatch on every rank (the core's check); the
  /// core's option checks apply. WindowOptions::exposure = live and Memory::cuda in
  /// @p options.window are refused (the adapter stages through host memory).
  /// @p site (leave the default: the caller's line) is the window's creation site.
  /// @note Collective over @p comm.
  AveragingAgent(MPI_Comm comm, ::torch::nn::Module& module, AveragingOptions options = {},
                 TorchAveragingOptions torch_options = {},
                 const std::source_location& site = std::source_location::current());
  /// As above, with the module's optimizer (borrowed: it must outlive the agent), whose state
  /// is mixed with TorchAveragingOptions::mix_optimizer_state and kept otherwise.
  /// @note Collective over @p comm.
  AveragingAgent(MPI_Comm comm, ::torch::nn::Module& module, ::torch::optim::Optimizer& optimizer,
                 AveragingOptions options = {}, TorchAveragingOptions torch_options = {},
                 const std::source_location& site = std::source_location::current());
  AveragingAgent(const AveragingAgent&) = delete;
  AveragingAgent& operator=(const AveragingAgent&) = delete;
  /// Moves the agent; the source throws paramwin::Error from every call.
  AveragingAgent(AveragingAgent&&) noexcept;
  /// Frees this agent's window (collectively) and takes over @p other's.
  AveragingAgent& operator=(AveragingAgent&&) noexcept;
  /// Frees the window. @note Collective over the communicator.
  ~AveragingAgent();

  /// The core's step (paramwin::AveragingAgent::step) on the module's tensors: a synchronous
  /// mean (warm-up, cool-down: collective) or, when due, an asynchronous round that mixes the
  /// peers into the tensors in place (background: the previous round's correction added
  /// first), then a publish when due. Call it once per training step, after the optimizer's
  /// step. When the returned round says applied, the tensors changed: their autograd versions
  /// are bumped (a backward through a graph recorded before fails) and, with
  /// mix_optimizer_state, the optimizer's state holds the mix. The module's tensors are
  /// collected again only when they changed (InvalidArgument naming the tensor if they no
  /// longer fit the layout, on every rank in a synchronous step, before anything changes).
  AveragingRound step();
  /// Publishes the module's tensors now (e.g. the initial parameters before the first step).
  PublishResult publish();
  /// The core's finish(): one synchronous mean of the module's tensors (and the optimizer's
  /// state with mix_optimizer_state), published; every rank then holds the same values.
  /// @note Collective.
  AveragingRound finish();

  /// Saves the averaging population into checkpoint @p path
  /// (paramwin::AveragingAgent::save_checkpoint): the module's tensors (and the optimizer's
  /// state layers with mix_optimizer_state), the agent's state and, in the agent's blob
  /// "optimizer", the optimizer's whole state (LibTorch's archive, as TorchAgent's
  /// checkpoints). Bad tensors: InvalidArgument on every rank. @note Collective.
  void save_checkpoint(const std::string& path);
  /// Continues from checkpoint @p path (paramwin::AveragingAgent::load_checkpoint): the
  /// module's tensors (autograd versions bumped), the agent's state (the next rounds are the
  /// saving run's) and, when the file holds one, the optimizer's state; then publishes.
  /// Errors on every rank, with the module, the optimizer and the agent unchanged.
  /// @note Collective.
  CheckpointLoad load_checkpoint(const std::string& path);

  /// Bagua's abort() (paramwin::AveragingAgent::pause): no reads, no publishes.
  void pause();
  /// Bagua's resume().
  void resume();
  [[nodiscard]] bool is_paused() const;  ///< whether paused

  [[nodiscard]] int rank() const;             ///< rank in the communicator
  [[nodiscard]] int size() const;             ///< ranks in the communicator
  [[nodiscard]] std::int64_t steps() const;   ///< step() calls so far
  [[nodiscard]] std::int64_t rounds() const;  ///< asynchronous rounds so far

  /// The underlying agent (its options, window, rounds).
  [[nodiscard]] paramwin::AveragingAgent& averaging();
  /// @copydoc averaging()
  [[nodiscard]] const paramwin::AveragingAgent& averaging() const;
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
