// LibTorch adapter, internal: optimizer state as extra layers (see optimizer_state.hpp).
#include "optimizer_state.hpp"

#include "state_key.hpp"

#include <c10/util/Type.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "paramwin/error.hpp"

namespace paramwin::torch::detail {
namespace {

/// The options of the group of @p optimizer that holds @p param, or nullptr.
const ::torch::optim::OptimizerOptions* group_options(::torch::optim::Optimizer& optimizer,
                                                      const ::torch::Tensor& param) {
  for (const auto& group : optimizer.param_groups()) {
    for (const ::torch::Tensor& p : group.params()) {
      if (p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl()) {
        return group.has_options() ? &group.options() : &optimizer.defaults();
      }
    }
  }
  return nullptr;
}

/// The family of @p optimizer; InvalidArgument for any other optimizer (@p option: the option
/// that asked for its state, for the message).
OptimizerFamily family_of(::torch::optim::Optimizer& optimizer, const std::string& option) {
  // AdamW first: it is not derived from Adam in LibTorch, but be explicit anyway.
  if (dynamic_cast<::torch::optim::AdamW*>(&optimizer) != nullptr) return OptimizerFamily::adamw;
  if (dynamic_cast<::torch::optim::Adam*>(&optimizer) != nullptr) return OptimizerFamily::adam;
  if (dynamic_cast<::torch::optim::SGD*>(&optimizer) != nullptr) return OptimizerFamily::sgd;
  throw InvalidArgument("paramwin::torch: " + option +
                        " supports torch::optim::Adam, AdamW and SGD (with momentum); this "
                        "optimizer is " +
                        optimizer_type_name(optimizer) + " (turn the option off)");
}

const char* family_name(OptimizerFamily family) {
  switch (family) {
    case OptimizerFamily::adam: return "Adam";
    case OptimizerFamily::adamw: return "AdamW";
    case OptimizerFamily::sgd: return "SGD";
  }
  return "?";
}

/// Whether a group of the Adam family keeps max_exp_avg_sq.
template <class Options>
bool amsgrad_of(const ::torch::optim::OptimizerOptions& options) {
  return static_cast<const Options&>(options).amsgrad();
}

/// Layer memory @p buffer as a state tensor of parameter @p like: @p current itself when
/// the layer is that tensor (in place: nothing to copy); written into @p current, the entry's
/// tensor, when that has @p like's shape, dtype and device (no allocation: a fresh tensor of a
/// large model's size is page-faulted in on its first write, which cost more than the copy
/// itself); else a fresh copy with @p like's device and dtype.
::torch::Tensor to_param(const ::torch::Tensor& buffer, const ::torch::Tensor& like,
                         const ::torch::Tensor& current = {}) {
  if (current.defined() && current.sizes() == like.sizes() &&
      current.scalar_type() == like.scalar_type() && current.device() == like.device() &&
      current.is_contiguous()) {
    if (current.data_ptr() != buffer.data_ptr()) current.copy_(buffer.view(like.sizes()));
    return current;
  }
  return buffer.to(like.device(), like.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
}

/// Copies @p value (undefined: zeros) into @p buffer (nothing when @p buffer is @p value's
/// memory: the layer is in place).
void copy_or_zero(::torch::Tensor& buffer, const ::torch::Tensor& value) {
  if (value.defined()) {
    if (buffer.data_ptr() != value.data_ptr()) buffer.copy_(value.detach());
  } else {
    buffer.zero_();
  }
}

/// restore() for the Adam family: @p fields are the fields of one parameter.
template <class State>
void restore_adam(State& state, const std::string& field, const ::torch::Tensor& buffer,
                  const ::torch::Tensor& param, std::int64_t step) {
  if (field == "step") {
    state.step(step);
  } else if (field == "exp_avg") {
    state.exp_avg(to_param(buffer, param, state.exp_avg()));
  } else if (field == "exp_avg_sq") {
    state.exp_avg_sq(to_param(buffer, param, state.exp_avg_sq()));
  } else {
    state.max_exp_avg_sq(to_param(buffer, param, state.max_exp_avg_sq()));
  }
}

/// The step count of Adam's (AdamW's) entry @p entry; 0 without one, and for SGD.
std::int64_t own_step(OptimizerFamily family, const ::torch::optim::OptimizerParamState* entry) {
  if (entry == nullptr) return 0;
  switch (family) {
    case OptimizerFamily::adam:
      return static_cast<const ::torch::optim::AdamParamState*>(entry)->step();
    case OptimizerFamily::adamw:
      return static_cast<const ::torch::optim::AdamWParamState*>(entry)->step();
    case OptimizerFamily::sgd: return 0;
  }
  return 0;
}

}  // namespace

std::string optimizer_type_name(const ::torch::optim::Optimizer& optimizer) {
  return c10::demangle(typeid(optimizer).name());
}

OptimizerStateLayers::OptimizerStateLayers(::torch::optim::Optimizer& optimizer,
                                           const ModuleTensors& module_tensors, std::string option,
                                           bool in_place)
    : option_(std::move(option)),
      family_(family_of(optimizer, option_)),
      in_place_allowed_(in_place) {
  for (std::size_t i = 0; i < module_tensors.tensors.size(); ++i) {
    if (module_tensors.is_buffer[i]) continue;
    const ::torch::Tensor& param = module_tensors.tensors[i];
    const ::torch::optim::OptimizerOptions* options = group_options(optimizer, param);
    if (options == nullptr) continue;  // not optimized: no state
    std::vector<std::string> tensors;
    std::string scalar;
    switch (family_) {
      case OptimizerFamily::adam:
      case OptimizerFamily::adamw: {
        tensors = {"exp_avg", "exp_avg_sq"};
        const bool amsgrad = family_ == OptimizerFamily::adam
                                 ? amsgrad_of<::torch::optim::AdamOptions>(*options)
                                 : amsgrad_of<::torch::optim::AdamWOptions>(*options);
        if (amsgrad) tensors.emplace_back("max_exp_avg_sq");
        scalar = "step";
        break;
      }
      case OptimizerFamily::sgd:
        if (static_cast<const ::torch::optim::SGDOptions&>(*options).momentum() == 0.0) continue;
        tensors = {"momentum_buffer"};
        scalar = "has_momentum_buffer";
        break;
    }
    const LayerSpec& pspec = module_tensors.layout[i];
    auto add = [&](const std::string& field, std::vector<std::size_t> shape, DType dtype,
                   ::torch::ScalarType type) {
      Field f;
      f.param = i;
      f.field = field;
      f.type = type;
      f.spec.name = "optimizer/" + pspec.name + "/" + field;
      f.spec.shape = std::move(shape);
      f.spec.count = pspec.count;
      f.spec.dtype = dtype;
      fields_.push_back(std::move(f));
    };
    for (const std::string& field : tensors) {
      add(field, pspec.shape, pspec.dtype, param.scalar_type());
    }
    add(scalar, {}, DType::float64, ::torch::kDouble);
    fields_.back().spec.count = 1;
    fields_.back().scalar = true;
  }
  if (fields_.empty()) {
    throw InvalidArgument(
        "paramwin::torch: " + option_ + ": the " + family_name(family_) +
        " optimizer keeps no state for any exchanged parameter (SGD without momentum, or no "
        "parameter of the module in its groups)");
  }
  // Each layer the optimizer's tensor where it has one, else a buffer of its own (a large
  // model's Adam state is never held twice).
  (void)bind(optimizer, module_tensors.tensors);
}

void OptimizerStateLayers::own_buffer(Field& f, const ::torch::Device& device) {
  std::vector<std::int64_t> sizes(f.spec.shape.begin(), f.spec.shape.end());
  f.memory = ::torch::zeros(sizes, ::torch::TensorOptions().dtype(f.type).device(device));
  f.own = true;
}

void OptimizerStateLayers::make_refs() {
  refs_.clear();
  refs_.reserve(fields_.size());
  in_place_ = 0;
  for (const Field& f : fields_) {
    if (on_device_) {
      refs_.emplace_back(f.spec.name, f.memory.data_ptr(), f.spec.count, f.spec.dtype,
                         device_memory);
    } else {
      refs_.emplace_back(f.spec.name, f.memory.data_ptr(), f.spec.count, f.spec.dtype);
    }
    if (!f.own) ++in_place_;
  }
}

::torch::Tensor OptimizerStateLayers::state_tensor(const ::torch::optim::OptimizerParamState* entry,
                                                   const Field& f) const {
  if (entry == nullptr || f.scalar) return {};
  switch (family_) {
    case OptimizerFamily::adam:
    case OptimizerFamily::adamw: {
      // AdamParamState and AdamWParamState have the same fields (and no common base).
      const auto get = [&](const auto& state) {
        if (f.field == "exp_avg") return state.exp_avg();
        if (f.field == "exp_avg_sq") return state.exp_avg_sq();
        return state.max_exp_avg_sq();
      };
      return family_ == OptimizerFamily::adam
                 ? get(static_cast<const ::torch::optim::AdamParamState&>(*entry))
                 : get(static_cast<const ::torch::optim::AdamWParamState&>(*entry));
    }
    case OptimizerFamily::sgd:
      return static_cast<const ::torch::optim::SGDParamState&>(*entry).momentum_buffer();
  }
  return {};
}

bool OptimizerStateLayers::fits(const ::torch::Tensor& t, const Field& f) const {
  return in_place_allowed_ && !on_device_ && t.defined() && t.device().is_cpu() &&
         t.scalar_type() == f.type && t.is_contiguous() &&
         static_cast<std::size_t>(t.numel()) == f.spec.count && t.data_ptr() != nullptr;
}

bool OptimizerStateLayers::bind(::torch::optim::Optimizer& optimizer,
                                const std::vector<::torch::Tensor>& params) {
  if (on_device_) return false;  // place_on() gave every layer a buffer of its own for good
  if (in_place_allowed_) check_family(optimizer);
  auto& state = optimizer.state();
  bool changed = false;
  const ::torch::optim::OptimizerParamState* entry = nullptr;
  std::size_t entry_of = fields_.size();  // the parameter whose entry `entry` is
  for (Field& f : fields_) {
    ::torch::Tensor t;
    if (in_place_allowed_ && !f.scalar) {
      if (entry_of != f.param) {
        const auto it = state.find(state_key(state, params[f.param]));
        entry = it == state.end() ? nullptr : it->second.get();
        entry_of = f.param;
      }
      t = state_tensor(entry, f);
    }
    if (fits(t, f)) {
      if (f.own || f.memory.data_ptr() != t.data_ptr()) {
        f.memory = t;  // the buffer of its own, if any, is released
        f.own = false;
        changed = true;
      }
    } else if (!f.own || !f.memory.defined()) {
      own_buffer(f, ::torch::kCPU);
      changed = true;
    }
  }
  if (changed) make_refs();
  return changed;
}

void OptimizerStateLayers::append_to(Layout& layout) const {
  for (const Field& f : fields_) layout.add(f.spec.name, f.spec.shape, f.spec.dtype);
}

void OptimizerStateLayers::check_family(::torch::optim::Optimizer& optimizer) const {
  const OptimizerFamily now = family_of(optimizer, option_);
  if (now != family_) {
    throw InvalidArgument(std::string("paramwin::torch: the optimizer is now ") + family_name(now) +
                          " but its state layers were made for " + family_name(family_) +
                          " (the builder must build the same kind)");
  }
}

void OptimizerStateLayers::capture(::torch::optim::Optimizer& optimizer,
                                   const std::vector<::torch::Tensor>& params) {
  check_family(optimizer);
  ::torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  for (Field& f : fields_) {
    const auto it = state.find(state_key(state, params[f.param]));
    const ::torch::optim::OptimizerParamState* entry =
        it == state.end() ? nullptr : it->second.get();
    if (!f.scalar) {
      const ::torch::Tensor value = state_tensor(entry, f);
      if (value.defined() && value.data_ptr() != f.memory.data_ptr()) ++copies_;
      copy_or_zero(f.memory, value);
    } else if (family_ == OptimizerFamily::sgd) {  // has_momentum_buffer
      const auto* sgd = static_cast<const ::torch::optim::SGDParamState*>(entry);
      f.memory.fill_(sgd != nullptr && sgd->momentum_buffer().defined() ? 1.0 : 0.0);
    } else {  // Adam's step count
      f.memory.fill_(static_cast<double>(own_step(family_, entry)));
    }
  }
}

std::size_t OptimizerStateLayers::restore(::torch::optim::Optimizer& optimizer,
                                          const std::vector<::torch::Tensor>& params,
                                          bool keep_own_counts) {
  check_family(optimizer);
  ::torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  std::size_t written = 0;
  // The fields of one parameter are consecutive and end with its scalar (step or presence).
  std::size_t begin = 0;
  while (begin < fields_.size()) {
    std::size_t end = begin;
    while (end < fields_.size() && fields_[end].param == fields_[begin].param) ++end;
    const ::torch::Tensor& param = params[fields_[begin].param];
    const auto key = state_key(state, param);
    const double mixed = fields_[end - 1].memory.item<double>();
    auto count = static_cast<std::int64_t>(std::llround(std::isfinite(mixed) ? mixed : 0.0));
    if (keep_own_counts) {
      const auto it = state.find(key);
      count = own_step(family_, it == state.end() ? nullptr : it->second.get());
    }
    if (count <= 0 && !keep_own_counts) {
      state.erase(key);
    } else {
      auto& slot = state[key];
      for (std::size_t i = begin; i < end; ++i) {
        const ::torch::Tensor current = state_tensor(slot.get(), fields_[i]);
        if (!fields_[i].scalar &&
            (!current.defined() || current.data_ptr() != fields_[i].memory.data_ptr())) {
          ++copies_;
        }
      }
      switch (family_) {
        case OptimizerFamily::adam:
          if (slot == nullptr) slot = std::make_unique<::torch::optim::AdamParamState>();
          for (std::size_t i = begin; i < end; ++i) {
            restore_adam(static_cast<::torch::optim::AdamParamState&>(*slot), fields_[i].field,
                         fields_[i].memory, param, count);
          }
          break;
        case OptimizerFamily::adamw:
          if (slot == nullptr) slot = std::make_unique<::torch::optim::AdamWParamState>();
          for (std::size_t i = begin; i < end; ++i) {
            restore_adam(static_cast<::torch::optim::AdamWParamState&>(*slot), fields_[i].field,
                         fields_[i].memory, param, count);
          }
          break;
        case OptimizerFamily::sgd: {
          if (slot == nullptr) slot = std::make_unique<::torch::optim::SGDParamState>();
          auto& sgd = static_cast<::torch::optim::SGDParamState&>(*slot);
          sgd.momentum_buffer(to_param(fields_[begin].memory, param, sgd.momentum_buffer()));
          break;
        }
      }
      ++written;
    }
    begin = end;
  }
  return written;
}

void OptimizerStateLayers::clear() {
  for (Field& f : fields_) f.memory.zero_();
}

void OptimizerStateLayers::place_on(const ::torch::Device& device) {
  on_device_ = true;
  for (Field& f : fields_) own_buffer(f, device);
  make_refs();
}

std::string optimizer_archive(::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_optimizer_archive(::torch::optim::Optimizer& optimizer, const std::string& bytes) {
  std::istringstream in(bytes);
  ::torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer.load(archive);
}

}  // namespace paramwin::torch::detail
