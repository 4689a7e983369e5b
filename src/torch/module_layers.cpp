// LibTorch adapter, internal: ModuleLayers, a module's tensors (and optimizer state) as the
// layers of the adapter's averaging agents.
#include "module_layers.hpp"

#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "paramwin/error.hpp"

namespace paramwin::torch::detail {

Layout ModuleLayers::prepare(const WindowOptions& window, std::string_view who) {
  const std::string agent = "paramwin::torch: " + std::string(who);
  if (window.exposure == Exposure::live) {
    throw InvalidArgument(agent + " needs snapshot exposure (WindowOptions::exposure live is not "
                                  "supported: the module's tensors keep their own memory)");
  }
  if (window.memory == Memory::cuda) {
    throw InvalidArgument(agent +
                          " stages CUDA tensors through host memory (synchronous means and "
                          "background corrections compute on the host); WindowOptions::memory "
                          "Memory::cuda is not supported");
  }
  if (options_.mix_optimizer_state && optimizer_ == nullptr) {
    throw InvalidArgument(
        "paramwin::torch: TorchAveragingOptions::mix_optimizer_state needs an optimizer (use "
        "the constructor that takes one)");
  }
  ModuleTensors mt = collect(*module_, options_.module);
  check_against(mt, mt.layout);  // contiguity: the core reads the tensors' memory as is
  if (mt.tensors.empty()) throw InvalidArgument(agent + ": the module has no tensor to average");
  skipped_ = mt.skipped;
  module_layout_ = mt.layout;
  Layout layout = mt.layout;
  if (options_.mix_optimizer_state) {
    state_layers_.emplace(*optimizer_, mt, "TorchAveragingOptions::mix_optimizer_state",
                          !options_.module.stage_through_host);
    state_layers_->append_to(layout);
  }
  bind_collected(std::move(mt));
  return layout;
}

void ModuleLayers::bind_collected(ModuleTensors mt) {
  const std::vector<::torch::Tensor> all = listed(*module_, options_.module);
  staging_.bind(std::move(mt));
  watch_.record(all);
  if (state_layers_) state_layers_->bind(*optimizer_, staging_.tensors());
  take_refs();
}

void ModuleLayers::take_refs() {
  refs_ = staging_.refs();
  if (state_layers_) {
    refs_.insert(refs_.end(), state_layers_->refs().begin(), state_layers_->refs().end());
  }
}

void ModuleLayers::bind() {
  if (watch_.unchanged(listed(*module_, options_.module))) {
    if (state_layers_ && state_layers_->bind(*optimizer_, staging_.tensors())) take_refs();
    return;
  }
  ModuleTensors mt = collect(*module_, options_.module);
  check_against(mt, module_layout_);
  bind_collected(std::move(mt));
}

void ModuleLayers::stage_in() {
  if (state_layers_) state_layers_->capture(*optimizer_, staging_.tensors());
  staging_.to_layers();
}

void ModuleLayers::take_module_layers() {
  const ::torch::NoGradGuard no_grad;
  staging_.from_layers();
  for (const ::torch::Tensor& t : staging_.tensors()) t.unsafeGetTensorImpl()->bump_version();
}

void ModuleLayers::take_layers(bool keep_own_counts) {
  take_module_layers();
  if (state_layers_) {
    states_mixed_ += state_layers_->restore(*optimizer_, staging_.tensors(), keep_own_counts);
  }
}

std::vector<ConstLayerRef> ModuleLayers::const_refs() const { return paramwin::const_refs(refs_); }

const TorchStagingStats& ModuleLayers::staging_stats() const {
  stats_ = staging_.stats();
  stats_.state_layers_in_place = state_layers_ ? state_layers_->in_place() : 0;
  stats_.state_copies = state_layers_ ? state_layers_->copies() : 0;
  return stats_;
}

}  // namespace paramwin::torch::detail
