// LibTorch adapter, internal: a TorchAgent's tensors in place on a device window (see
// device_layers.hpp).
#include "device_layers.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/types.h>

#include <string>
#include <utility>

#include "paramwin/error.hpp"

namespace paramwin::torch::detail {

void DeviceLayers::bind(ModuleTensors tensors) {
  for (std::size_t i = 0; i < tensors.tensors.size(); ++i) {
    const ::torch::Tensor& t = tensors.tensors[i];
    if (!t.is_cuda() || t.device().index() != device_) {
      throw InvalidArgument(
          "paramwin::torch: '" + tensors.names[i] + "' is on " + t.device().str() +
          ", but this TorchAgent's window is a device window on "
          "cuda:" +
          std::to_string(device_) + " (keep the module there, or use DeviceWindows::never)");
    }
  }
  current_ = std::move(tensors);
  refs_.clear();
  refs_.reserve(current_.tensors.size());
  for (std::size_t i = 0; i < current_.tensors.size(); ++i) {
    const LayerSpec& spec = current_.layout[i];
    refs_.emplace_back(spec.name, current_.tensors[i].data_ptr(), spec.count, spec.dtype,
                       paramwin::device_memory);
  }
  stats_.staged_tensors = 0;
  stats_.pinned_tensors = 0;
  stats_.device_window = true;
  ++stats_.binds;
}

void DeviceLayers::to_layers() {
  // The training kernels that produced the values may run on another stream than the
  // window's: wait for the current one of the device.
  const ::torch::Device device(::torch::kCUDA, static_cast<c10::DeviceIndex>(device_));
  const c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

}  // namespace paramwin::torch::detail
