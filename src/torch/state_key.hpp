#pragma once
// LibTorch adapter, internal: the key an Optimizer::state() map files a parameter's state
// under, for LibTorch 1.13 and 2.x alike.

#include <torch/types.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace paramwin::torch::detail {

/// The key under which @p state (an Optimizer::state() map) holds @p param's entry: the
/// TensorImpl's address as text (LibTorch <= 1.13, via c10::guts::to_string, i.e. an
/// ostream of the pointer) or the address itself (LibTorch 2.x, a void* key).
template <class State>
auto state_key(const State& state, const ::torch::Tensor& param) {
  using Key = std::remove_cvref_t<decltype(state.begin()->first)>;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << static_cast<const void*>(param.unsafeGetTensorImpl());
    return text.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

}  // namespace paramwin::torch::detail
