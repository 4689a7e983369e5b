#pragma once
// LibTorch adapter, internal: named options of an optimizer's parameter groups (lr,
// weight_decay, momentum, ...) as paramwin hyperparameters, read from and applied to every
// group (see docs/torch.md, "Hyperparameters").

#include <torch/optim/optimizer.h>

#include <string>
#include <vector>

#include "paramwin/hyper.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::torch::detail {

/// The optimizer options a TorchAgent publishes as float64 hyperparameters.
class OptimizerHyperparameters {
 public:
  /// Checks @p names against @p optimizer: each must be an option of its kind ("lr" for
  /// every optimizer; weight_decay, eps, beta1, beta2 for Adam/AdamW; momentum, dampening,
  /// weight_decay for SGD; alpha, eps, momentum, weight_decay for RMSprop; lr_decay, eps,
  /// weight_decay for Adagrad), named once, with the same value in every parameter group.
  /// InvalidArgument naming the option otherwise.
  OptimizerHyperparameters(std::vector<std::string> names,
                           const ::torch::optim::Optimizer& optimizer);

  /// Declares the hyperparameters (float64) in @p layout.
  void declare(Layout& layout) const;
  /// True when no option is published.
  [[nodiscard]] bool empty() const noexcept { return names_.empty(); }
  /// Writes @p optimizer's current values (its first group's) into @p hyper; returns whether
  /// any value differed from what @p hyper held.
  bool read(const ::torch::optim::Optimizer& optimizer, Hyperparameters& hyper) const;
  /// Sets every parameter group of @p optimizer to @p hyper's values.
  void apply(::torch::optim::Optimizer& optimizer, const Hyperparameters& hyper) const;

 private:
  std::vector<std::string> names_;
};

}  // namespace paramwin::torch::detail
