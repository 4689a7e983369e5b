#pragma once
// LibTorch adapter, internal: a module's exchanged tensors (and, with
// TorchAveragingOptions::mix_optimizer_state, its optimizer's state) as the core's layers, for
// the adapter's averaging agents (torch::AveragingAgent, torch::ElasticAveragingAgent): CPU
// tensors in place, the others staged through host buffers (detail::DeviceStaging); collected
// and checked against the layout again only when the module's tensors changed.

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device_staging.hpp"
#include "optimizer_state.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/torch/averaging.hpp"
#include "paramwin/window_options.hpp"
#include "tensor_watch.hpp"

namespace paramwin::torch::detail {

/// The layers of one averaging agent's module. Borrows the module and the optimizer (null:
/// none); not movable (the agents hold it where their checkpoint hooks can reach it).
class ModuleLayers {
 public:
  ModuleLayers(::torch::nn::Module& module, ::torch::optim::Optimizer* optimizer,
               TorchAveragingOptions options)
      : module_(&module),
        optimizer_(optimizer),
        options_(std::move(options)),
        staging_(options_.module) {}
  ModuleLayers(const ModuleLayers&) = delete;
  ModuleLayers& operator=(const ModuleLayers&) = delete;
  ModuleLayers(ModuleLayers&&) = delete;
  ModuleLayers& operator=(ModuleLayers&&) = delete;
  ~ModuleLayers() = default;

  /// The core's layout for the module (then the optimizer's state layers); binds the module's
  /// tensors. Throws InvalidArgument naming what cannot be averaged (live exposure and
  /// Memory::cuda in @p window: the adapter stages through host memory); @p who names the
  /// agent in the messages.
  Layout prepare(const WindowOptions& window, std::string_view who);

  /// Makes refs() reach the module's current tensors: a cheap comparison each call; collected
  /// and checked against the layout again only when they changed (InvalidArgument naming the
  /// tensor that no longer fits).
  void bind();
  /// Gives the layers the module's values (staged tensors only) and the optimizer's state.
  void stage_in();
  /// The module's layers changed (a mix, a mean, a correction, a load): into its tensors,
  /// whose autograd versions are bumped.
  void take_module_layers();
  /// The layers changed: into the module and the optimizer. With @p keep_own_counts Adam's
  /// step count stays the rank's own (its bias correction follows its own steps); without,
  /// the mixed count is written (a joiner that takes over the members' training).
  void take_layers(bool keep_own_counts);

  /// The layers' refs: the module's tensors (or their host buffers), then the state layers.
  [[nodiscard]] const std::vector<LayerRef>& refs() const noexcept { return refs_; }
  /// refs() as read-only refs (a publish, a save).
  [[nodiscard]] std::vector<ConstLayerRef> const_refs() const;

  [[nodiscard]] ::torch::nn::Module& module() const noexcept { return *module_; }
  [[nodiscard]] ::torch::optim::Optimizer* optimizer() const noexcept { return optimizer_; }
  [[nodiscard]] const std::vector<std::string>& skipped() const noexcept { return skipped_; }
  /// The staging's statistics, with the state layers in place.
  [[nodiscard]] const TorchStagingStats& staging_stats() const;
  /// Optimizer state entries written from a mix so far.
  [[nodiscard]] std::uint64_t states_mixed() const noexcept { return states_mixed_; }

 private:
  void bind_collected(ModuleTensors mt);
  void take_refs();  // refs_ from the staging's and the state layers' refs

  ::torch::nn::Module* module_;
  ::torch::optim::Optimizer* optimizer_;  // borrowed; may be null
  TorchAveragingOptions options_;
  Layout module_layout_;  // the module's layers (the core's layout less the state layers)
  std::vector<std::string> skipped_;
  std::optional<OptimizerStateLayers> state_layers_;  // with mix_optimizer_state
  std::uint64_t states_mixed_ = 0;
  DeviceStaging staging_;
  TensorWatch watch_;
  std::vector<LayerRef> refs_;       // the staging's refs, then the state layers'
  mutable TorchStagingStats stats_;  // staging_stats()'s answer
};

}  // namespace paramwin::torch::detail
