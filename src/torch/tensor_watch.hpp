#pragma once
// LibTorch adapter, internal: whether a module's exchanged tensors are still the ones an agent
// bound (TorchAgent, torch::AveragingAgent). A cheap comparison each step; only a difference
// makes the agent collect the module again and check it against its layout.

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "paramwin/torch/module.hpp"

namespace paramwin::torch::detail {

/// What one tensor of the module looked like when the agent bound it: any difference on a
/// later step means the module's tensors changed (a parameter replaced or added, the module
/// moved to another device, a tensor reshaped or made non-contiguous).
struct SeenTensor {
  const c10::TensorImpl* impl = nullptr;
  const void* data = nullptr;
  std::vector<std::int64_t> sizes;
  ::torch::ScalarType dtype = ::torch::kFloat;
  ::torch::Device device{::torch::kCPU};
  bool contiguous = true;

  explicit SeenTensor(const ::torch::Tensor& t) {
    if (!t.defined()) return;
    impl = t.unsafeGetTensorImpl();
    data = t.data_ptr();
    sizes = t.sizes().vec();
    dtype = t.scalar_type();
    device = t.device();
    contiguous = t.is_contiguous();
  }

  [[nodiscard]] bool matches(const ::torch::Tensor& t) const {
    if (!t.defined()) return impl == nullptr;
    return impl == t.unsafeGetTensorImpl() && data == t.data_ptr() && dtype == t.scalar_type() &&
           device == t.device() && contiguous == t.is_contiguous() && t.sizes().equals(sizes);
  }
};

/// The module's tensors an agent exchanges, in collection order and unchecked (parameters,
/// then buffers with ModuleOptions::buffers): what a TensorWatch compares.
[[nodiscard]] inline std::vector<::torch::Tensor> listed(const ::torch::nn::Module& module,
                                                         const ModuleOptions& options) {
  std::vector<::torch::Tensor> all = module.parameters(/*recurse=*/true);
  if (options.buffers) {
    std::vector<::torch::Tensor> buffers = module.buffers(/*recurse=*/true);
    all.insert(all.end(), buffers.begin(), buffers.end());
  }
  return all;
}

/// The tensors an agent bound last, to tell whether the module's tensors changed since.
class TensorWatch {
 public:
  /// Whether @p all (listed()) are the tensors recorded, unchanged; false before record().
  [[nodiscard]] bool unchanged(const std::vector<::torch::Tensor>& all) const {
    if (!recorded_ || all.size() != seen_.size()) return false;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!seen_[i].matches(all[i])) return false;
    }
    return true;
  }
  /// Remembers @p all as the tensors bound.
  void record(const std::vector<::torch::Tensor>& all) {
    seen_.clear();
    seen_.reserve(all.size());
    for (const ::torch::Tensor& t : all) seen_.emplace_back(t);
    recorded_ = true;
  }

 private:
  bool recorded_ = false;
  std::vector<SeenTensor> seen_;
};

}  // namespace paramwin::torch::detail
