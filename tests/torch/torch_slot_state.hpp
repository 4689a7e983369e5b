#pragma once
// What the elastic module tests (torch_elastic_spare.cpp, torch_elastic_averaging.cpp) share: a
// member's state that follows from its slot (a Linear's parameters and Adam's state), and the
// check that a joiner holds the exact weighted mix of the slots it read.
//
// Slot s's state: parameter element j of tensor t is 100 (s + 1) + 0.01 j + t, Adam's exp_avg
// 10 (s + 1), exp_avg_sq s + 1, step 5 (s + 1). Slot -1 is a spare's junk (10^6, step 1).

#include <torch/torch.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "paramwin/torch/agent.hpp"

namespace paramwin::test {

inline double slot_param_value(int slot, std::int64_t j, std::size_t t) {
  return 100.0 * (slot + 1) + 0.01 * static_cast<double>(j) + static_cast<double>(t);
}

inline ::torch::optim::AdamParamState& adam_of(::torch::optim::Optimizer& opt,
                                               const ::torch::Tensor& p) {
  ::torch::optim::OptimizerParamState* s = paramwin::torch::optimizer_state(opt, p);
  if (s == nullptr) throw std::runtime_error("no Adam state for a parameter");
  return static_cast<::torch::optim::AdamParamState&>(*s);
}

/// Writes slot @p slot's state into @p model and @p opt (-1: junk).
inline void encode_slot_state(::torch::nn::Linear& model, ::torch::optim::Adam& opt, int slot) {
  const ::torch::NoGradGuard no_grad;
  constexpr double kJunk = 1.0e6;
  std::size_t t = 0;
  for (::torch::Tensor& p : model->parameters()) {
    ::torch::optim::AdamParamState& s = adam_of(opt, p);
    if (slot < 0) {
      p.fill_(kJunk);
      s.exp_avg(::torch::full_like(p, kJunk));
      s.exp_avg_sq(::torch::full_like(p, kJunk));
      s.step(1);
      continue;
    }
    const ::torch::Tensor j = ::torch::arange(p.numel(), ::torch::kFloat64).reshape(p.sizes());
    p.copy_(100.0 * (slot + 1) + 0.01 * j + static_cast<double>(t++));
    s.exp_avg(::torch::full_like(p, 10.0 * (slot + 1)));
    s.exp_avg_sq(::torch::full_like(p, 1.0 * (slot + 1)));
    s.step(5 * (slot + 1));
  }
}

inline bool near(double got, double want) {
  return std::abs(got - want) <= 1e-4 * std::abs(want) + 1e-5;
}

/// Whether @p model and @p opt hold the exact mix of the slots @p read ((slot, weight) pairs):
/// parameters, exp_avg, exp_avg_sq, and the mixed step rounded.
inline bool holds_slot_mix(::torch::nn::Linear& model, ::torch::optim::Adam& opt,
                           const std::vector<std::pair<int, double>>& read) {
  if (read.empty()) return false;
  const auto mix = [&](auto f) {
    double out = 0.0;
    for (const auto& [slot, w] : read) out += w * f(slot);
    return out;
  };
  bool ok = true;
  std::size_t t = 0;
  for (const ::torch::Tensor& p : model->parameters()) {
    const ::torch::Tensor flat = p.detach().reshape(-1).to(::torch::kFloat64);
    for (std::int64_t j = 0; j < flat.numel(); ++j) {
      ok =
          ok && near(flat[j].item<double>(), mix([&](int s) { return slot_param_value(s, j, t); }));
    }
    ::torch::optim::OptimizerParamState* state = paramwin::torch::optimizer_state(opt, p);
    if (state == nullptr) return false;  // the state was reset, not mixed
    const auto& s = static_cast<const ::torch::optim::AdamParamState&>(*state);
    ok = ok && near(s.exp_avg().mean().item<double>(), mix([](int k) { return 10.0 * (k + 1); }));
    ok = ok && near(s.exp_avg_sq().mean().item<double>(), mix([](int k) { return 1.0 * (k + 1); }));
    ok = ok && s.step() == std::llround(mix([](int k) { return 5.0 * (k + 1); }));
    ++t;
  }
  return ok;
}

}  // namespace paramwin::test
