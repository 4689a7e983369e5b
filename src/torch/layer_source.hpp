#pragma once
// LibTorch adapter, internal: the seam between a TorchAgent and the memory its window's
// layers are read from (publish, checkpoint save) and written into (pull, checkpoint load)
// for the module's exchanged tensors. TorchAgent talks only to this interface; today
// DeviceStaging (device_staging.hpp) implements it with host buffers, and a GPU-window
// implementation can give the window the device tensors' memory instead.

#include <torch/types.h>

#include <vector>

#include "paramwin/layer_ref.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch::detail {

/// Where a TorchAgent's window layers come from for the module's exchanged tensors, and how
/// values move between the tensors and those layers. Not copyable (refs() point into memory
/// it may own); not thread-safe.
class LayerSource {
 public:
  LayerSource() = default;
  virtual ~LayerSource() = default;
  LayerSource(const LayerSource&) = delete;
  LayerSource& operator=(const LayerSource&) = delete;
  LayerSource(LayerSource&&) = delete;
  LayerSource& operator=(LayerSource&&) = delete;

  /// Binds @p tensors (collected and already checked against the window's layout): refs()
  /// then reach them. On an exception the previous binding is kept.
  virtual void bind(ModuleTensors tensors) = 0;
  /// The bound tensors of the module, in layout order.
  [[nodiscard]] virtual const std::vector<::torch::Tensor>& tensors() const = 0;
  /// One ref per bound tensor, in layout order: what the window reads and writes.
  [[nodiscard]] virtual const std::vector<LayerRef>& refs() const = 0;
  /// Whether some ref is a copy that to_layers() and from_layers() keep in step with its
  /// tensor (false: every ref is the tensor's own memory and both calls copy nothing).
  [[nodiscard]] virtual bool copies() const = 0;
  /// Gives refs() the tensors' current values; returns once the host may read them.
  virtual void to_layers() = 0;
  /// Writes refs()' values into the tensors; returns once the tensors hold them and refs()
  /// may be overwritten.
  virtual void from_layers() = 0;
  /// Copies and bindings so far.
  [[nodiscard]] virtual const TorchStagingStats& stats() const = 0;
};

}  // namespace paramwin::torch::detail
