#pragma once
// LibTorch adapter, internal: an optimizer's per-parameter state (Adam/AdamW moments and
// step count, SGD momentum buffers) as extra layers of the agent's layout, so that a reborn
// agent inherits the state mixed from its donors like the weights (see docs/torch.md,
// "Optimizer state").

#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/torch/module.hpp"

namespace paramwin::torch::detail {

/// The optimizer families whose state can travel.
enum class OptimizerFamily : unsigned char { adam, adamw, sgd };

/// The state layers of one TorchAgent and their memory. The layers are fixed at construction
/// from the optimizer then in force (its family, and per parameter group amsgrad or momentum);
/// capture() and restore() work with any later optimizer of the same family over the same
/// parameter tensors (a builder's rebuilt one).
///
/// Where a layer's ref points (bind()): at the optimizer's own state tensor of its parameter
/// when there is one that fits (a CPU tensor, contiguous, of the layer's dtype and size, with
/// in-place use allowed), so that the window reads and writes the optimizer's state itself and
/// capture() and restore() copy nothing for it; else at a buffer of its own (host memory, or
/// the module's GPU for a device window: place_on()), allocated only while it is needed. The
/// scalar layers (Adam's step, SGD's presence) always have their own buffer.
class OptimizerStateLayers {
 public:
  /// Inspects @p optimizer for the parameters of @p module_tensors (buffers have no state).
  /// Throws InvalidArgument for an optimizer other than Adam, AdamW or SGD, and for an SGD
  /// none of whose groups has momentum (it keeps no state).
  /// @p option names the option that asked for the state, in those messages. @p in_place
  /// false: every layer keeps a buffer of its own (ModuleOptions::stage_through_host).
  OptimizerStateLayers(::torch::optim::Optimizer& optimizer, const ModuleTensors& module_tensors,
                       std::string option = "TorchAgentOptions::inherit_optimizer_state",
                       bool in_place = true);

  /// Appends the state layers to @p layout (after the module's).
  void append_to(Layout& layout) const;
  /// Refs to the layers' memory, in the order append_to() added the layers; valid until a
  /// bind() that returns true or a place_on().
  [[nodiscard]] const std::vector<LayerRef>& refs() const noexcept { return refs_; }
  /// Number of state layers.
  [[nodiscard]] std::size_t size() const noexcept { return fields_.size(); }
  /// Number of layers whose ref is the optimizer's own tensor (last bind()).
  [[nodiscard]] std::size_t in_place() const noexcept { return in_place_; }
  /// Tensor copies between the optimizer's state and the layers so far (capture() and
  /// restore(); a layer in place costs none).
  [[nodiscard]] std::uint64_t copies() const noexcept { return copies_; }

  /// Points each tensor layer at @p optimizer's own state tensor of its parameter in @p params
  /// (the module's exchanged tensors in layout order) when that fits, else at a buffer of its
  /// own (zeros when newly allocated). Returns whether a ref changed (the caller takes refs()
  /// again). A cheap comparison when nothing changed; call it before refs()
  /// are handed to the core, every time (the optimizer may have replaced or erased its state
  /// since).
  bool bind(::torch::optim::Optimizer& optimizer, const std::vector<::torch::Tensor>& params);

  /// Copies @p optimizer's state of @p params (the module's exchanged tensors in layout order)
  /// into the layers (nothing for a layer that is the state tensor itself); a parameter
  /// without state yet (before the optimizer's first step, or erased) is written as zeros
  /// with step 0 (what the optimizer starts from).
  void capture(::torch::optim::Optimizer& optimizer, const std::vector<::torch::Tensor>& params);
  /// Writes the layers (a rebirth's mix) into @p optimizer's state of @p params (nothing to copy
  /// for a layer that is the entry's tensor itself). A parameter
  /// whose mixed step (Adam, AdamW) or mixed presence (SGD) rounds to 0 gets no state (erased:
  /// the optimizer starts it afresh). With @p keep_own_counts (averaging) the mixed tensors are
  /// always written and Adam's step count stays the entry's own (0 for a new entry): the mixed
  /// count and presence are ignored. Returns the number of entries written.
  std::size_t restore(::torch::optim::Optimizer& optimizer,
                      const std::vector<::torch::Tensor>& params, bool keep_own_counts = false);
  /// Zeros every layer (step 0: restore() then erases every entry).
  void clear();
  /// Moves the layers to buffers (zeros) on CUDA device @p device, with refs tagged
  /// device_memory: the layers of a device window (never in place afterwards). capture() then
  /// copies on the device's current stream (the caller waits for it before the window reads
  /// the buffers).
  void place_on(const ::torch::Device& device);

 private:
  /// One layer: field @p field of the state of the parameter at @p param in layout order.
  struct Field {
    std::size_t param = 0;
    std::string field;  // "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step", ...
    /// What the layer's ref points at: a buffer of the layer's own, or (in place) a handle to
    /// the optimizer's state tensor, which keeps its memory alive should the optimizer drop it.
    ::torch::Tensor memory;
    bool own = true;      // memory is the layer's own buffer
    bool scalar = false;  // the step count or the presence flag: never in place
    ::torch::ScalarType type = ::torch::kFloat;
    LayerSpec spec;  // name, shape, dtype
  };
  void check_family(::torch::optim::Optimizer& optimizer) const;
  /// The state tensor of field @p f in @p entry (undefined when none), for the family.
  [[nodiscard]] ::torch::Tensor state_tensor(const ::torch::optim::OptimizerParamState* entry,
                                             const Field& f) const;
  /// Whether @p t can be field @p f's memory in place.
  [[nodiscard]] bool fits(const ::torch::Tensor& t, const Field& f) const;
  /// Gives @p f a zeroed buffer of its own on @p device (host: the CPU).
  static void own_buffer(Field& f, const ::torch::Device& device);
  void make_refs();

  std::string option_;
  OptimizerFamily family_;
  bool in_place_allowed_ = true;
  bool on_device_ = false;
  std::size_t in_place_ = 0;
  std::uint64_t copies_ = 0;
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
