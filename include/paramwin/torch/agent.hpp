#pragma once
/// @file agent.hpp
/// LibTorch adapter, part 2: TorchAgent, a paramwin::Agent driven by a torch::nn::Module and
/// its optimizer. One call per training step; on a rebirth the module holds the donors' mix
/// and the optimizer forgets (or is rebuilt for) the replaced parameters.

#include <mpi.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "paramwin/agent.hpp"
#include "paramwin/group_agent.hpp"
#include "paramwin/torch/device_windows.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch {

/// Builds an optimizer over @p module's parameters (called at construction and on every
/// rebirth when the agent owns its optimizer).
using OptimizerBuilder =
    std::function<std::unique_ptr<::torch::optim::Optimizer>(::torch::nn::Module& module)>;

/// What a TorchAgent does besides the Agent's own options.
struct TorchAgentOptions {
  ModuleOptions module{};  ///< which tensors are exchanged, forced staging
  /// With a borrowed optimizer: on a rebirth, erase the optimizer's per-parameter state
  /// (Adam moments and step count, SGD momentum buffers, ...) of every replaced parameter,
  /// so that it restarts as for fresh parameters. Off: the state is kept.
  bool reset_optimizer_state = true;
  /// Opt-in: exchange the optimizer's per-parameter state as extra layers after the module's
  /// ("optimizer/<param>/exp_avg", ".../exp_avg_sq", ".../max_exp_avg_sq" with amsgrad,
  /// ".../step" for Adam and AdamW; ".../momentum_buffer", ".../has_momentum_buffer" for SGD
  /// with momentum), published with the weights in the same snapshot. On a rebirth the
  /// optimizer (borrowed, or the builder's new one) gets the donors' state mixed like the
  /// weights instead of a reset; the step count is mixed too and rounded (see docs/torch.md,
  /// "Optimizer state inheritance"). On the CPU the state layers are the optimizer's own state
  /// tensors once it has made them (in place: nothing is copied for them; see
  /// TorchStagingStats::state_layers_in_place). Other optimizers, SGD without momentum, live
  /// exposure and grouped agents are refused with InvalidArgument on every rank. Off (the
  /// default): reset.
  bool inherit_optimizer_state = false;
  /// Options of the optimizer's parameter groups published as float64 hyperparameters of the
  /// agent's layout (population-based training): "lr" for any optimizer; "weight_decay",
  /// "eps", "beta1", "beta2" (Adam, AdamW); "momentum", "dampening", "weight_decay" (SGD);
  /// "alpha", "eps", "momentum", "weight_decay" (RMSprop); "lr_decay", "eps", "weight_decay"
  /// (Adagrad). Each step publishes the optimizer's current values (a scheduler's changes
  /// included); on a rebirth the agent's new values (AgentOptions::explore: inherited, then
  /// explored) are written into every parameter group before AgentOptions::on_rebirth.
  /// Every group must hold the same value of each named option. Empty (the default): none.
  std::vector<std::string> hyperparameters{};
  /// On a rebirth, drop the replaced parameters' gradients (they belong to the parameters
  /// that died).
  bool clear_gradients = true;
  /// Device window or host staging for CUDA modules (a WindowOptions::memory of Memory::cuda
  /// given to the constructor counts as DeviceWindows::always).
  DeviceWindows device_windows = DeviceWindows::automatic;
};

/// What a TorchAgent copied between the module's tensors and its host staging buffers, and
/// how often it bound the module's tensors. Only tensors that are staged (not on the CPU,
/// or all with ModuleOptions::stage_through_host) are copied; a step that neither publishes
/// nor attempts a rebirth copies nothing (see docs/torch.md for the cost of each case).
struct TorchStagingStats {
  std::uint64_t device_to_host = 0;  ///< tensor copies from the module to a host buffer
  std::uint64_t host_to_device = 0;  ///< tensor copies from a host buffer to the module
  /// Times the staged tensors were copied to the host (each: one copy per staged tensor).
  std::uint64_t stage_passes = 0;
  /// Times the module's tensors were collected and bound: the first step or publish, then
  /// only after the module's tensors changed (replaced, moved, reshaped).
  std::uint64_t binds = 0;
  std::size_t staged_tensors = 0;  ///< tensors exchanged through a host buffer (last binding)
  std::size_t pinned_tensors = 0;  ///< of those, with a page-locked buffer (CUDA tensors)
  /// The agent's window is a device window: the tensors are read and written in place on
  /// the GPU, nothing is staged.
  bool device_window = false;
  /// Optimizer state layers (TorchAgentOptions::inherit_optimizer_state,
  /// TorchAveragingOptions::mix_optimizer_state) that are the optimizer's own state tensors
  /// (last binding): the window reads and writes them in place, nothing is copied for them.
  /// CPU state tensors are, once the optimizer has made them (its first step), unless
  /// ModuleOptions::stage_through_host; the scalar layers (Adam's step count) never are.
  std::size_t state_layers_in_place = 0;
  /// Tensor copies between the optimizer's state and the state layers' own buffers (a
  /// publish's capture, a rebirth's or a round's write into the optimizer).
  std::uint64_t state_copies = 0;
};

/// One member of a population training a LibTorch module. Owns one agent, held as an
/// AgentInterface: a paramwin::Agent (from a communicator) or a GroupAgent (from
/// AgentGroups), whose layout is layout_of(module, options.module). Keeps a reference to the
/// module: the module must outlive the agent. Move-only; not thread-safe.
///
/// With WindowOptions::exposure == Exposure::live the module's exchanged tensors are moved
/// into the window memory at construction (bind_live) and given their own memory back when
/// the agent is destroyed or closed.
///
/// Every constructor's last argument, `site` (leave the default: the caller's line), is the
/// window's creation site, forwarded to Agent or GroupAgent (see ParameterWindow's
/// constructor: the site names the window in messages; two unnamed windows of one layout
/// over the same ranks may not be alive at once).
class TorchAgent {
 public:
  /// Borrows @p optimizer (which must outlive the agent); on a rebirth its state for the
  /// replaced parameters is reset per TorchAgentOptions::reset_optimizer_state.
  /// @note Collective over @p comm.
  TorchAgent(MPI_Comm comm, ::torch::nn::Module& module, ::torch::optim::Optimizer& optimizer,
             AgentOptions agent_options = {}, TorchAgentOptions options = {},
             const WindowOptions& window_options = {},
             const std::source_location& site = std::source_location::current());

  /// Owns its optimizer: @p builder makes it now and makes a fresh one on every rebirth.
  /// Call optimizer() each step (a rebirth replaces the object).
  /// @note Collective over @p comm.
  TorchAgent(MPI_Comm comm, ::torch::nn::Module& module, OptimizerBuilder builder,
             AgentOptions agent_options = {}, TorchAgentOptions options = {},
             const WindowOptions& window_options = {},
             const std::source_location& site = std::source_location::current());

  /// A rank of an agent made of several ranks (data-parallel replicas of @p module, see
  /// GroupAgent): the module's tensors are exchanged shard by shard through a GroupAgent.
  /// Every rank of the agent holds a full replica and calls step() together. Exposure::live
  /// is refused (the window holds a shard). Borrowed optimizer, as above.
  /// @note Collective over @p groups.training_comm().
  TorchAgent(const AgentGroups& groups, ::torch::nn::Module& module,
             ::torch::optim::Optimizer& optimizer, AgentOptions agent_options = {},
             TorchAgentOptions options = {}, const WindowOptions& window_options = {},
             const std::source_location& site = std::source_location::current());
  /// A rank of a grouped agent that owns its optimizer (see the two constructors above).
  /// @note Collective over @p groups.training_comm().
  TorchAgent(const AgentGroups& groups, ::torch::nn::Module& module, OptimizerBuilder builder,
             AgentOptions agent_options = {}, TorchAgentOptions options = {},
             const WindowOptions& window_options = {},
             const std::source_location& site = std::source_location::current());
  TorchAgent(const TorchAgent&) = delete;
  TorchAgent& operator=(const TorchAgent&) = delete;
  /// Moves the agent; the source is left empty.
  TorchAgent(TorchAgent&&) noexcept;
  /// Frees this agent (collectively) and takes over @p other's.
  TorchAgent& operator=(TorchAgent&&) noexcept;
  /// Unbinds a live module, frees the window; never throws.
  /// @note Collective over the window's communicator.
  ~TorchAgent();

  /// One training step (Agent::step with the module's tensors): reports @p metric, may die
  /// and be reborn into the module, publishes per the cadence. Call it once per training
  /// step, after the forward pass that measured @p metric and before backward() and the
  /// optimizer's step, so that the metric belongs to the parameters it publishes; if the
  /// returned event says died, skip that step's backward() and optimizer step (the gradient
  /// belongs to the parameters that died). See examples/torch_population/main.cpp. On a
  /// rebirth, in this order: the module holds the mix; gradients cleared; a new optimizer
  /// built (builder); its state reset, or inherited from the mix (inherit_optimizer_state);
  /// AgentOptions::on_rebirth called; the result republished.
  /// Tensors exchanged through host buffers (device tensors) are copied only on a step that
  /// publishes or attempts a rebirth (see staging_stats()); the module's tensors are
  /// collected again only when they changed (InvalidArgument if they no longer fit).
  StepEvent step(std::int64_t iteration, double metric);

  /// Publishes the module's tensors now, outside the cadence (e.g. before the first step).
  PublishResult publish();

  /// Pauses the agent (AgentInterface::pause): during evaluation or checkpointing it is
  /// nobody's donor and publishes nothing by the cadence. For a grouped agent call it on
  /// every rank of the agent. See also paramwin::PauseGuard.
  void pause();
  /// Ends the pause (AgentInterface::resume).
  void resume();
  /// Whether the agent is paused.
  [[nodiscard]] bool is_paused() const;

  /// The optimizer in force (the borrowed one, or the latest one the builder made).
  [[nodiscard]] ::torch::optim::Optimizer& optimizer();
  /// The module the agent trains.
  [[nodiscard]] ::torch::nn::Module& module();
  /// The underlying agent (policy, stats, window); InvalidArgument for a grouped agent.
  [[nodiscard]] Agent<>& agent();
  /// @copydoc agent()
  [[nodiscard]] const Agent<>& agent() const;
  /// True when constructed from AgentGroups (the module is exchanged shard by shard).
  [[nodiscard]] bool grouped() const;
  /// The underlying GroupAgent; InvalidArgument for a one-rank agent.
  [[nodiscard]] GroupAgent& group_agent();
  /// The agent that drives the module, of either kind.
  [[nodiscard]] AgentInterface& member();
  /// Counters and timers of whichever agent drives the module.
  [[nodiscard]] const AgentStats& stats() const;
  /// Tensors of the module that are not exchanged, with the reason.
  [[nodiscard]] const std::vector<std::string>& skipped() const;
  /// Optimizers built so far (1 + rebuilds; 0 for a borrowed optimizer).
  [[nodiscard]] std::uint64_t optimizers_built() const;
  /// Optimizer state entries erased by rebirths so far.
  [[nodiscard]] std::uint64_t optimizer_states_reset() const;
  /// Optimizer state entries written from the donors' mix by rebirths so far
  /// (TorchAgentOptions::inherit_optimizer_state).
  [[nodiscard]] std::uint64_t optimizer_states_inherited() const;
  /// Host copies made so far and bindings of the module's tensors.
  [[nodiscard]] const TorchStagingStats& staging_stats() const;

  /// Unbinds a live module and frees the window, reporting errors as exceptions. Nothing on
  /// an agent that was moved from; every other call on such an agent throws paramwin::Error.
  /// @note Collective over the window's communicator.
  void close();

  /// Saves the population into checkpoint @p path (Agent::save_checkpoint): the module's
  /// parameters and, in the agent's blob "optimizer", its optimizer's whole state (LibTorch's
  /// own archive: e.g. Adam's step count and both moments per parameter, and the groups'
  /// options). A grouped agent saves through GroupAgent::save_checkpoint: its leader writes
  /// the module and the optimizer's state of the agent.
  /// @note Collective over the agents' communicator (a grouped agent: the training ranks).
  void save_checkpoint(const std::string& path);
  /// Continues from checkpoint @p path (Agent::load_checkpoint): the module's parameters, the
  /// agent's state and the optimizer's state; an agent reborn from a donor (more agents than
  /// the file holds) starts with a fresh optimizer state. A grouped agent: every rank's
  /// module and optimizer receive the state its leader read (GroupAgent::load_checkpoint).
  /// @note Collective over the agents' communicator (a grouped agent: the training ranks).
  CheckpointLoad load_checkpoint(const std::string& path);
  /// Loads the newest checkpoint of AgentOptions::checkpoint.path, if any (Agent::resume_newest).
  /// @note Collective over the agents' communicator.
  std::optional<CheckpointLoad> resume_newest();
  /// Waits for an asynchronous save in flight and throws its error (Agent::wait_checkpoint,
  /// GroupAgent::wait_checkpoint).
  /// @note Collective over the agents' communicator.
  void wait_checkpoint();

 private:
  struct Impl;
  /// The state, or paramwin::Error once this agent was moved from.
  [[nodiscard]] Impl& live() const;
  std::unique_ptr<Impl> impl_;
};

/// Erases @p optimizer's per-parameter state for each of @p params (matched by tensor
/// identity); returns how many entries were erased. The optimizer re-initialises it lazily on
/// its next step (Adam: zero moments, step 0).
std::size_t reset_optimizer_state(::torch::optim::Optimizer& optimizer,
                                  const std::vector<::torch::Tensor>& params);

/// @p optimizer's per-parameter state for @p param (Adam's moments and step count, SGD's
/// momentum buffer, ...), or nullptr when it has none yet. LibTorch keys that state by the
/// parameter's TensorImpl: as the text of its address up to 1.13, as the address itself
/// since 2.x; this works with both.
[[nodiscard]] ::torch::optim::OptimizerParamState* optimizer_state(
    ::torch::optim::Optimizer& optimizer, const ::torch::Tensor& param);

}  // namespace paramwin::torch
