#pragma once
// LibTorch adapter, internal: a TorchAgent's window layers for tensors the window cannot
// hold in place (device tensors, or every tensor with ModuleOptions::stage_through_host) are
// host buffers, page-locked for CUDA tensors; other tensors are exchanged in place (see
// docs/torch.md, "Device tensors and staging").

#include <torch/types.h>

#include <vector>

#include "layer_source.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch::detail {

/// Whether @p t is exchanged through a host copy: it is not on the CPU, or @p options forces
/// every tensor through one (ModuleOptions::stage_through_host).
[[nodiscard]] bool needs_staging(const ::torch::Tensor& t, const ModuleOptions& options);

/// The LayerSource of host staging: per staged tensor one host buffer, allocated when it is
/// bound and kept across bindings while its shape, dtype and pinning still fit; copies are
/// enqueued for every staged tensor, then each device's current stream is synchronised once.
class DeviceStaging final : public LayerSource {
 public:
  /// Stages per @p options (needs_staging).
  explicit DeviceStaging(const ModuleOptions& options) : options_(options) {}

  void bind(ModuleTensors tensors) override;
  [[nodiscard]] const std::vector<::torch::Tensor>& tensors() const override {
    return current_.tensors;
  }
  [[nodiscard]] const std::vector<LayerRef>& refs() const override { return refs_; }
  [[nodiscard]] bool copies() const override { return stats_.staged_tensors != 0; }
  /// Copies every staged tensor into its buffer (non-blocking into page-locked ones).
  void to_layers() override;
  /// Copies every buffer into its staged tensor (non-blocking from page-locked ones).
  void from_layers() override;
  [[nodiscard]] const TorchStagingStats& stats() const override { return stats_; }

 private:
  /// A binding's buffers before it is committed.
  struct Buffers {
    std::vector<::torch::Tensor> host;     // per tensor; undefined: exchanged in place
    std::vector<bool> pinned;              // per tensor: its buffer is page-locked
    std::vector<::torch::Device> devices;  // distinct devices of the staged tensors
  };
  [[nodiscard]] Buffers buffers_for(const ModuleTensors& tensors) const;
  void commit(ModuleTensors tensors, Buffers buffers);
  /// Waits for the copies enqueued on the devices of the staged tensors.
  void wait_for_copies() const;

  ModuleOptions options_;
  ModuleTensors current_;
  std::vector<::torch::Tensor> host_;
  std::vector<bool> pinned_;
  std::vector<::torch::Device> devices_;
  std::vector<LayerRef> refs_;
  TorchStagingStats stats_;
};

}  // namespace paramwin::torch::detail
