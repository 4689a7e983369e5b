// LibTorch adapter, internal: optimizer options as hyperparameters (see optimizer_hyper.hpp).
#include "optimizer_hyper.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "paramwin/error.hpp"

namespace paramwin::torch::detail {
namespace {

/// The option @p name of @p options, or nullptr when this kind of optimizer has none ("lr"
/// of an unknown kind is handled by the callers through get_lr/set_lr).
template <class Options>
double* field(Options& o, const std::string& name) {
  using O = std::remove_const_t<Options>;
  if constexpr (std::is_same_v<O, ::torch::optim::AdamOptions> ||
                std::is_same_v<O, ::torch::optim::AdamWOptions>) {
    if (name == "lr") return &o.lr();
    if (name == "weight_decay") return &o.weight_decay();
    if (name == "eps") return &o.eps();
    if (name == "beta1") return &std::get<0>(o.betas());
    if (name == "beta2") return &std::get<1>(o.betas());
  } else if constexpr (std::is_same_v<O, ::torch::optim::SGDOptions>) {
    if (name == "lr") return &o.lr();
    if (name == "momentum") return &o.momentum();
    if (name == "dampening") return &o.dampening();
    if (name == "weight_decay") return &o.weight_decay();
  } else if constexpr (std::is_same_v<O, ::torch::optim::RMSpropOptions>) {
    if (name == "lr") return &o.lr();
    if (name == "alpha") return &o.alpha();
    if (name == "eps") return &o.eps();
    if (name == "momentum") return &o.momentum();
    if (name == "weight_decay") return &o.weight_decay();
  } else if constexpr (std::is_same_v<O, ::torch::optim::AdagradOptions>) {
    if (name == "lr") return &o.lr();
    if (name == "lr_decay") return &o.lr_decay();
    if (name == "eps") return &o.eps();
    if (name == "weight_decay") return &o.weight_decay();
  }
  return nullptr;
}

/// field() for whichever kind @p options is; nullptr for an unknown kind or option.
double* find_field(::torch::optim::OptimizerOptions& options, const std::string& name) {
  if (auto* a = dynamic_cast<::torch::optim::AdamOptions*>(&options)) return field(*a, name);
  if (auto* w = dynamic_cast<::torch::optim::AdamWOptions*>(&options)) return field(*w, name);
  if (auto* s = dynamic_cast<::torch::optim::SGDOptions*>(&options)) return field(*s, name);
  if (auto* r = dynamic_cast<::torch::optim::RMSpropOptions*>(&options)) return field(*r, name);
  if (auto* g = dynamic_cast<::torch::optim::AdagradOptions*>(&options)) return field(*g, name);
  return nullptr;
}

const char* supported_for(const ::torch::optim::OptimizerOptions& options) {
  if (dynamic_cast<const ::torch::optim::AdamOptions*>(&options) != nullptr ||
      dynamic_cast<const ::torch::optim::AdamWOptions*>(&options) != nullptr) {
    return "lr, weight_decay, eps, beta1, beta2";
  }
  if (dynamic_cast<const ::torch::optim::SGDOptions*>(&options) != nullptr) {
    return "lr, momentum, dampening, weight_decay";
  }
  if (dynamic_cast<const ::torch::optim::RMSpropOptions*>(&options) != nullptr) {
    return "lr, alpha, eps, momentum, weight_decay";
  }
  if (dynamic_cast<const ::torch::optim::AdagradOptions*>(&options) != nullptr) {
    return "lr, lr_decay, eps, weight_decay";
  }
  return "lr";
}

/// The groups' options (a group without its own options uses the optimizer's defaults).
std::vector<::torch::optim::OptimizerOptions*> group_options(::torch::optim::Optimizer& opt) {
  std::vector<::torch::optim::OptimizerOptions*> all;
  for (auto& group : opt.param_groups()) {
    all.push_back(group.has_options() ? &group.options() : &opt.defaults());
  }
  if (all.empty()) all.push_back(&opt.defaults());
  return all;
}

/// The value of @p name in @p options; InvalidArgument when it has no such option.
double get(::torch::optim::OptimizerOptions& options, const std::string& name) {
  if (double* f = find_field(options, name)) return *f;
  if (name == "lr") return options.get_lr();
  throw InvalidArgument("paramwin::torch: TorchAgentOptions::hyperparameters: '" + name +
                        "' is not an option of this optimizer (" +
                        std::string(supported_for(options)) + ")");
}

void set(::torch::optim::OptimizerOptions& options, const std::string& name, double value) {
  if (double* f = find_field(options, name)) {
    *f = value;
  } else {
    options.set_lr(value);  // the constructor admitted only "lr" for other kinds
  }
}

}  // namespace

OptimizerHyperparameters::OptimizerHyperparameters(std::vector<std::string> names,
                                                   const ::torch::optim::Optimizer& optimizer)
    : names_(std::move(names)) {
  // The accessors are non-const (TORCH_ARG); nothing is written here.
  auto& opt = const_cast<::torch::optim::Optimizer&>(optimizer);  // NOLINT
  for (std::size_t i = 0; i < names_.size(); ++i) {
    const std::string& name = names_[i];
    if (std::find(names_.begin(), names_.begin() + static_cast<std::ptrdiff_t>(i), name) !=
        names_.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw InvalidArgument("paramwin::torch: TorchAgentOptions::hyperparameters names '" + name +
                            "' twice");
    }
    const std::vector<::torch::optim::OptimizerOptions*> groups = group_options(opt);
    const double first = get(*groups.front(), name);
    for (std::size_t g = 1; g < groups.size(); ++g) {
      const double v = get(*groups[g], name);
      if (std::bit_cast<std::uint64_t>(v) != std::bit_cast<std::uint64_t>(first)) {
        std::ostringstream msg;
        msg << "paramwin::torch: TorchAgentOptions::hyperparameters: the optimizer's parameter "
               "groups have different '"
            << name << "' (group 0: " << first << ", group " << g << ": " << v
            << "); a hyperparameter sets every group to one value";
        throw InvalidArgument(msg.str());
      }
    }
  }
}

void OptimizerHyperparameters::declare(Layout& layout) const {
  for (const std::string& name : names_) layout.add_hyperparameter(name, HyperType::float64);
}

bool OptimizerHyperparameters::read(const ::torch::optim::Optimizer& optimizer,
                                    Hyperparameters& hyper) const {
  auto& opt = const_cast<::torch::optim::Optimizer&>(optimizer);  // NOLINT: read only
  ::torch::optim::OptimizerOptions& first = *group_options(opt).front();
  bool changed = false;
  for (const std::string& name : names_) {
    const std::size_t i = hyper.index_of(name);
    const double v = get(first, name);
    if (std::bit_cast<std::uint64_t>(v) != hyper.words()[i]) {
      hyper.set(i, v);
      changed = true;
    }
  }
  return changed;
}

void OptimizerHyperparameters::apply(::torch::optim::Optimizer& optimizer,
                                     const Hyperparameters& hyper) const {
  for (::torch::optim::OptimizerOptions* options : group_options(optimizer)) {
    for (const std::string& name : names_) {
      (void)get(*options, name);  // a builder's optimizer of another kind: a clear error
      set(*options, name, hyper.get(name));
    }
  }
}

}  // namespace paramwin::torch::detail
