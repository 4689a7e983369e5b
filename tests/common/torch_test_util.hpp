#pragma once
// Shared by the LibTorch adapter's tests: a tiny trainable module and a helper that returns an
// exception's message.
#include <torch/torch.h>

#include <string>

// Outside namespace paramwin: there `torch::` (in TORCH_MODULE) would name paramwin::torch.
namespace torch_test {

/// A small trainable module: y = scale * fc(x), three parameters (scale is 0-dim and, being the
/// module's own, comes first in named_parameters()).
struct TinyImpl : ::torch::nn::Module {
  TinyImpl() {
    fc = register_module("fc", ::torch::nn::Linear(3, 2));
    scale = register_parameter("scale", ::torch::ones({}));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x) { return scale * fc(x); }
  ::torch::nn::Linear fc{nullptr};
  ::torch::Tensor scale;
};
TORCH_MODULE(Tiny);

/// The message of the E that @p f throws, or "(no exception)".
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace torch_test
