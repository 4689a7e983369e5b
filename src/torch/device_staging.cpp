// LibTorch adapter, internal: host staging of a TorchAgent's tensors (see device_staging.hpp).
#include "device_staging.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/types.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace paramwin::torch::detail {
namespace {

/// Waits until the copies enqueued on @p device's current stream are done.
void synchronize(const ::torch::Device& device) {
  const c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

}  // namespace

bool needs_staging(const ::torch::Tensor& t, const ModuleOptions& options) {
  return options.stage_through_host || !t.device().is_cpu();
}

void DeviceStaging::bind(ModuleTensors tensors) {
  Buffers buffers = buffers_for(tensors);  // may throw (allocation): nothing changed yet
  commit(std::move(tensors), std::move(buffers));
}

DeviceStaging::Buffers DeviceStaging::buffers_for(const ModuleTensors& tensors) const {
  const std::size_t n = tensors.tensors.size();
  Buffers b;
  b.host.resize(n);
  b.pinned.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const ::torch::Tensor& t = tensors.tensors[i];
    if (!needs_staging(t, options_)) continue;
    // Page-locked host memory for CUDA tensors: the copies can then run asynchronously
    // (and faster); pinning needs the CUDA runtime, hence only for CUDA tensors.
    b.pinned[i] = t.is_cuda();
    if (!t.device().is_cpu() &&
        std::find(b.devices.begin(), b.devices.end(), t.device()) == b.devices.end()) {
      b.devices.push_back(t.device());
    }
    // The layout fixes the shape and dtype, so a buffer of the previous binding fits
    // unless its pinning changed (the module moved between the CPU and a CUDA device).
    if (i < host_.size() && host_[i].defined() && pinned_[i] == b.pinned[i]) {
      b.host[i] = host_[i];
    } else {
      b.host[i] = ::torch::empty(t.sizes(), ::torch::TensorOptions()
                                                .dtype(t.scalar_type())
                                                .device(::torch::kCPU)
                                                .pinned_memory(b.pinned[i]));
    }
  }
  return b;
}

void DeviceStaging::commit(ModuleTensors tensors, Buffers buffers) {
  current_ = std::move(tensors);
  host_ = std::move(buffers.host);
  pinned_ = std::move(buffers.pinned);
  devices_ = std::move(buffers.devices);
  refs_.clear();
  refs_.reserve(host_.size());
  stats_.staged_tensors = 0;
  stats_.pinned_tensors = 0;
  for (std::size_t i = 0; i < host_.size(); ++i) {
    const LayerSpec& spec = current_.layout[i];
    const ::torch::Tensor& memory = host_[i].defined() ? host_[i] : current_.tensors[i];
    refs_.emplace_back(spec.name, memory.data_ptr(), spec.count, spec.dtype);
    if (host_[i].defined()) ++stats_.staged_tensors;
    if (pinned_[i]) ++stats_.pinned_tensors;
  }
  ++stats_.binds;
}

void DeviceStaging::wait_for_copies() const {
  for (const ::torch::Device& d : devices_) synchronize(d);
}

void DeviceStaging::to_layers() {
  // All copies first, then one wait per device before the host reads the buffers.
  ::torch::NoGradGuard no_grad;
  bool any = false;
  for (std::size_t i = 0; i < host_.size(); ++i) {
    if (!host_[i].defined()) continue;
    host_[i].copy_(current_.tensors[i].detach(), /*non_blocking=*/pinned_[i]);
    ++stats_.device_to_host;
    any = true;
  }
  wait_for_copies();
  if (any) ++stats_.stage_passes;
}

void DeviceStaging::from_layers() {
  ::torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < host_.size(); ++i) {
    if (!host_[i].defined()) continue;
    current_.tensors[i].detach().copy_(host_[i], /*non_blocking=*/pinned_[i]);
    ++stats_.host_to_device;
  }
  // Before the optimizer or the user's callback touch the tensors, and before the next
  // step may overwrite the buffers (even from another stream).
  wait_for_copies();
}

}  // namespace paramwin::torch::detail
