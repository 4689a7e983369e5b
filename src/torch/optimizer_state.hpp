#pragma once
// LibTorch adapter, internal: an optimizer's per-parameter state (Adam/AdamW moments and
// step count, SGD momentum buffers) as extra layers of the agent's layout, so that a reborn
// agent inherits the state mixed from its donors like the weights (see docs/torch.md,
// "Optimizer state").

#include <torch/optim/optimizer.h>

#include <cstddef>
#include <string>
#include <vector>

#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch::detail {

/// The optimizer families whose state can travel.
enum class OptimizerFamily : unsigned char { adam, adamw, sgd };

/// The state layers of one TorchAgent and their buffers (host memory, or the module's GPU for
/// a device window: place_on()). The layers are fixed at
/// construction from the optimizer then in force (its family, and per parameter group amsgrad
/// or momentum); capture() and restore() work with any later optimizer of the same family
/// over the same parameter tensors (a builder's rebuilt one).
class OptimizerStateLayers {
 public:
  /// Inspects @p optimizer for the parameters of @p module_tensors (buffers have no state).
  /// Throws InvalidArgument for an optimizer other than Adam, AdamW or SGD, and for an SGD
  /// none of whose groups has momentum (it keeps no state).
  /// @p option names the option that asked for the state, in those messages.
  OptimizerStateLayers(::torch::optim::Optimizer& optimizer, const ModuleTensors& module_tensors,
                       std::string option = "TorchAgentOptions::inherit_optimizer_state");

  /// Appends the state layers to @p layout (after the module's).
  void append_to(Layout& layout) const;
  /// Refs to the buffers, in the order append_to() added the layers.
  [[nodiscard]] const std::vector<LayerRef>& refs() const noexcept { return refs_; }
  /// Number of state layers.
  [[nodiscard]] std::size_t size() const noexcept { return fields_.size(); }

  /// Copies @p optimizer's state of @p params (the module's exchanged tensors in layout order)
  /// into the buffers; a parameter without state yet (before the optimizer's first step, or
  /// erased) is written as zeros with step 0 (what the optimizer starts from).
  void capture(::torch::optim::Optimizer& optimizer, const std::vector<::torch::Tensor>& params);
  /// Writes the buffers (a rebirth's mix) into @p optimizer's state of @p params. A parameter
  /// whose mixed step (Adam, AdamW) or mixed presence (SGD) rounds to 0 gets no state (erased:
  /// the optimizer starts it afresh). With @p keep_own_counts (averaging) the mixed tensors are
  /// always written and Adam's step count stays the entry's own (0 for a new entry): the mixed
  /// count and presence are ignored. Returns the number of entries written.
  std::size_t restore(::torch::optim::Optimizer& optimizer,
                      const std::vector<::torch::Tensor>& params, bool keep_own_counts = false);
  /// Zeros every buffer (step 0: restore() then erases every entry).
  void clear();
  /// Moves the buffers (zeros) to CUDA device @p device, with refs tagged device_memory: the
  /// layers of a device window. capture() then copies on the device's current stream (the
  /// caller waits for it before the window reads the buffers).
  void place_on(const ::torch::Device& device);

 private:
  /// One layer: field @p field of the state of the parameter at @p param in layout order.
  struct Field {
    std::size_t param = 0;
    std::string field;       // "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step", ...
    ::torch::Tensor buffer;  // the buffer the agent reads and writes
    LayerSpec spec;          // name, shape, dtype
  };
  void check_family(::torch::optim::Optimizer& optimizer) const;

  std::string option_;
  OptimizerFamily family_;
  std::vector<Field> fields_;
  std::vector<LayerRef> refs_;
};

/// @p optimizer's whole state in LibTorch's own archive (per parameter e.g. Adam's step and
/// moments, and the parameter groups' options): the blob "optimizer" of a checkpoint.
[[nodiscard]] std::string optimizer_archive(::torch::optim::Optimizer& optimizer);
/// Loads optimizer_archive's @p bytes into @p optimizer.
void load_optimizer_archive(::torch::optim::Optimizer& optimizer, const std::string& bytes);

/// Demangled type name of @p optimizer (for messages).
[[nodiscard]] std::string optimizer_type_name(const ::torch::optim::Optimizer& optimizer);

}  // namespace paramwin::torch::detail
