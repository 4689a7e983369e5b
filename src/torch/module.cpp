// LibTorch adapter: module tensors <-> paramwin layers (layout, publish, adopt, live binding).
#include "paramwin/torch/module.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "device_staging.hpp"
#include "paramwin/error.hpp"

namespace paramwin::torch {
namespace {

std::string shape_text(std::span<const std::size_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<std::size_t> shape_of(const ::torch::Tensor& t) {
  std::vector<std::size_t> shape;
  shape.reserve(static_cast<std::size_t>(t.dim()));
  for (const std::int64_t d : t.sizes()) shape.push_back(static_cast<std::size_t>(d));
  return shape;
}

std::string kind_of(bool buffer) { return buffer ? "buffer" : "parameter"; }

bool is_exchangeable_type(::torch::ScalarType type) {
  return type == ::torch::kFloat || type == ::torch::kDouble || type == ::torch::kBFloat16 ||
         type == ::torch::kHalf;
}

[[noreturn]] void fail(const std::string& message) {
  throw InvalidArgument("paramwin::torch: " + message);
}

/// The window memory of layer @p i of a live window (its dtype is the layout's by
/// construction: the layout was made from the module).
void* live_memory(Window& window, std::size_t i) { return window.live_layer(i); }

/// Collects and checks @p module against @p window's layout.
ModuleTensors checked(const Window& window, const ::torch::nn::Module& module,
                      const ModuleOptions& options) {
  ModuleTensors mt = collect(module, options);
  check_against(mt, window.layout());
  return mt;
}

void bump_versions(const std::vector<::torch::Tensor>& tensors) {
  for (const ::torch::Tensor& t : tensors) t.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

DType dtype_of(::torch::ScalarType type, const std::string& what) {
  switch (type) {
    case ::torch::kFloat: return DType::float32;
    case ::torch::kDouble: return DType::float64;
    case ::torch::kBFloat16: return DType::bfloat16;
    case ::torch::kHalf: return DType::float16;
    default: break;
  }
  fail(what + " has dtype " + std::string(c10::toString(type)) +
       ", which paramwin cannot exchange (supported: float32, float64, bfloat16, float16)");
}

ModuleTensors collect(const ::torch::nn::Module& module, const ModuleOptions& options) {
  ModuleTensors mt;
  auto take = [&](const std::string& name, const ::torch::Tensor& t, bool buffer) {
    const std::string what = kind_of(buffer) + " '" + name + "'";
    if (!t.defined()) {
      mt.skipped.push_back(name + ": undefined " + kind_of(buffer) + ", not exchanged");
      return;
    }
    if (buffer && !is_exchangeable_type(t.scalar_type())) {
      // Counters such as batch norm's num_batches_tracked: not averageable, stay local.
      mt.skipped.push_back(name + ": " + std::string(c10::toString(t.scalar_type())) +
                           " buffer, not exchanged (not float32/float64/bfloat16/float16)");
      return;
    }
    if (t.layout() != ::torch::kStrided) {
      fail(what + " is not a dense (strided) tensor; paramwin exchanges dense tensors only");
    }
    const DType dtype = dtype_of(t.scalar_type(), what);
    mt.layout.add(name, shape_of(t), dtype);  // throws on a duplicate name
    mt.names.push_back(name);
    mt.tensors.push_back(t);
    mt.is_buffer.push_back(buffer);
  };
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    take(item.key(), item.value(), false);
  }
  if (options.buffers) {
    for (const auto& item : module.named_buffers(/*recurse=*/true)) {
      take(item.key(), item.value(), true);
    }
  }
  return mt;
}

Layout layout_of(const ::torch::nn::Module& module, const ModuleOptions& options) {
  return collect(module, options).layout;
}

void check_against(const ModuleTensors& mt, const Layout& window_layout) {
  const std::size_t n = mt.tensors.size();
  for (std::size_t i = 0; i < n && i < window_layout.size(); ++i) {
    const LayerSpec& want = window_layout[i];
    const LayerSpec& have = mt.layout[i];
    const std::string what = kind_of(mt.is_buffer[i]) + " '" + have.name + "'";
    if (have.name != want.name) {
      fail("the module's tensor #" + std::to_string(i) + " is " + what + " but the window's " +
           "layer #" + std::to_string(i) + " is '" + want.name +
           "' (the module's parameters changed since the window was created)");
    }
    if (have.shape != want.shape) {
      fail(what + " has shape " + shape_text(have.shape) + " but the window was created with " +
           shape_text(want.shape) + " (the module changed since; create a new window)");
    }
    if (have.dtype != want.dtype) {
      fail(what + " has dtype " + std::string(dtype_name(have.dtype)) +
           " but the window was created with " + std::string(dtype_name(want.dtype)));
    }
    if (!mt.tensors[i].is_contiguous()) {
      std::ostringstream strides;
      strides << mt.tensors[i].strides();
      fail(what + " is not contiguous (shape " + shape_text(have.shape) + ", strides " +
           strides.str() + "); make it contiguous (param.set_data(param.contiguous())) first");
    }
  }
  if (n != window_layout.size()) {
    fail("the module has " + std::to_string(n) + " exchanged tensors but the window was " +
         "created with " + std::to_string(window_layout.size()) + " layers (" +
         (n > window_layout.size() ? "new: '" + mt.names[window_layout.size()] + "'"
                                   : "missing: '" + window_layout[n].name + "'") +
         "; the module changed since the window was created)");
  }
}

namespace {

/// Waits for the work enqueued on @p device's current stream.
void synchronize_current(const ::torch::Device& device) {
  const c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

/// A device window's layers for @p mt: every tensor's own memory, CUDA tensors tagged as
/// device memory (read once the device's current stream has produced them; momentum reads
/// the current values too); the window checks each layer's memory and device. Nothing is
/// staged: a device window takes device memory as it is.
std::vector<LayerRef> device_window_refs(const ModuleTensors& mt) {
  std::vector<LayerRef> refs;
  refs.reserve(mt.tensors.size());
  for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
    const ::torch::Tensor& t = mt.tensors[i];
    const LayerSpec& spec = mt.layout[i];
    if (t.is_cuda()) {
      synchronize_current(t.device());
      refs.emplace_back(spec.name, t.data_ptr(), spec.count, spec.dtype, device_memory);
    } else {
      refs.emplace_back(spec.name, t.data_ptr(), spec.count, spec.dtype);
    }
  }
  return refs;
}

}  // namespace

PublishResult publish(Window& window, const ::torch::nn::Module& module,
                      const ModuleOptions& options) {
  ModuleTensors mt = checked(window, module, options);
  if (window.options().exposure == Exposure::live) {
    for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
      if (mt.tensors[i].data_ptr() != live_memory(window, i)) {
        fail(kind_of(mt.is_buffer[i]) + " '" + mt.names[i] +
             "' does not live in the window (call bind_live() after creating a live window, "
             "and do not replace the tensor's data afterwards)");
      }
    }
    return window.publish();
  }
  if (window.options().memory == Memory::cuda) {
    return window.publish(const_refs(device_window_refs(mt)));
  }
  // The adapter's one staging of torch tensors (detail::DeviceStaging, as TorchAgent's):
  // tensors that need it through host buffers, the others in place.
  detail::DeviceStaging staging(options);
  staging.bind(std::move(mt));
  staging.to_layers();
  return window.publish(const_refs(staging.refs()));
}

PullResult adopt(Window& window, std::span<const int> donors, ::torch::nn::Module& module,
                 const PullOptions& pull_options, const ModuleOptions& options) {
  ModuleTensors mt = checked(window, module, options);
  ::torch::NoGradGuard no_grad;
  if (window.options().memory == Memory::cuda) {
    PullResult result = window.pull(donors, device_window_refs(mt), pull_options);
    bump_versions(mt.tensors);
    return result;
  }
  // Current values too (to_layers): momentum blends with them, and a failed pull leaves the
  // tensors as they are (from_layers only after a pull that returned).
  detail::DeviceStaging staging(options);
  staging.bind(std::move(mt));
  staging.to_layers();
  PullResult result = window.pull(donors, staging.refs(), pull_options);
  staging.from_layers();
  bump_versions(staging.tensors());
  return result;
}

void bind_live(Window& window, ::torch::nn::Module& module, const ModuleOptions& options) {
  if (window.options().exposure != Exposure::live) {
    fail("bind_live needs a window created with WindowOptions::exposure = Exposure::live");
  }
  if (options.stage_through_host) {
    fail("bind_live: a live module cannot be staged through host memory "
         "(ModuleOptions::stage_through_host is set)");
  }
  const ModuleTensors mt = checked(window, module, options);
  for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
    if (!mt.tensors[i].device().is_cpu()) {
      fail(kind_of(mt.is_buffer[i]) + " '" + mt.names[i] + "' is on " +
           mt.tensors[i].device().str() +
           ": live exposure needs CPU tensors (the window "
           "memory is host memory); use snapshot exposure, which stages device tensors");
    }
  }
  ::torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
    const ::torch::Tensor& t = mt.tensors[i];
    void* memory = live_memory(window, i);
    if (t.data_ptr() == memory) continue;  // already bound
    ::torch::Tensor blob = ::torch::from_blob(memory, t.sizes(), t.options());
    blob.copy_(t);
    ::torch::Tensor(t).set_data(blob);
  }
  bump_versions(mt.tensors);
}

void unbind_live(::torch::nn::Module& module, const ModuleOptions& options) {
  const ModuleTensors mt = collect(module, options);
  ::torch::NoGradGuard no_grad;
  for (const ::torch::Tensor& t : mt.tensors) {
    ::torch::Tensor(t).set_data(t.detach().clone());
  }
}

bool is_bound_live(Window& window, const ::torch::nn::Module& module,
                   const ModuleOptions& options) {
  if (window.options().exposure != Exposure::live) return false;
  const ModuleTensors mt = collect(module, options);
  if (mt.layout != window.layout()) return false;
  for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
    if (mt.tensors[i].data_ptr() != live_memory(window, i)) return false;
  }
  return true;
}

}  // namespace paramwin::torch
