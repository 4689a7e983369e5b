#pragma once
// LibTorch adapter, internal: a TorchAgent's window layers when its window is a device window
// (Memory::cuda, docs/gpu.md): the module's CUDA tensors themselves, on one device, exchanged in
// place with no host copy.

#include <torch/types.h>

#include <vector>

#include "layer_source.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch::detail {

/// The LayerSource of a device window: refs are the tensors' device memory (tagged
/// paramwin::device_memory). to_layers() waits for the device's current stream, so that a
/// publish (on the window's stream) reads finished values; from_layers() has nothing to do
/// (the pull returned once its kernels completed).
class DeviceLayers final : public LayerSource {
 public:
  /// Binds tensors on CUDA device @p device only.
  explicit DeviceLayers(int device) : device_(device) {}

  /// InvalidArgument naming the tensor unless every tensor is a CUDA tensor on the device.
  void bind(ModuleTensors tensors) override;
  [[nodiscard]] const std::vector<::torch::Tensor>& tensors() const override {
    return current_.tensors;
  }
  [[nodiscard]] const std::vector<LayerRef>& refs() const override { return refs_; }
  [[nodiscard]] bool copies() const override { return false; }
  void to_layers() override;
  void from_layers() override {}
  [[nodiscard]] const TorchStagingStats& stats() const override { return stats_; }

 private:
  int device_;
  ModuleTensors current_;
  std::vector<LayerRef> refs_;
  TorchStagingStats stats_;
};

}  // namespace paramwin::torch::detail
