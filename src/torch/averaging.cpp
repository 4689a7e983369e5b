// LibTorch adapter: torch::AveragingAgent, the core's AveragingAgent driven by a module's tensors
// (in place on the CPU, through the adapter's host staging otherwise), optionally with the
// optimizer's state mixed as extra layers.
#include "paramwin/torch/averaging.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../mpi/agree.hpp"
#include "device_staging.hpp"
#include "optimizer_state.hpp"
#include "paramwin/error.hpp"
#include "tensor_watch.hpp"

namespace paramwin::torch {

struct AveragingAgent::Impl {
  ::torch::nn::Module* module = nullptr;
  ::torch::optim::Optimizer* optimizer = nullptr;  // borrowed; may be null
  TorchAveragingOptions options;
  Layout module_layout;  // the module's layers (the core's layout less the state layers)
  std::vector<std::string> skipped;
  // With TorchAveragingOptions::mix_optimizer_state: the state layers and their buffers.
  std::optional<detail::OptimizerStateLayers> state_layers;
  std::uint64_t states_mixed = 0;
  // The adapter's one staging of tensors: CPU tensors in place, the others through host
  // buffers (TorchAgent's, detail::DeviceStaging).
  detail::DeviceStaging staging;
  detail::TensorWatch watch;
  std::vector<LayerRef> refs;  // the staging's refs, then the state layers'
  std::unique_ptr<paramwin::AveragingAgent> agent;

  Impl(::torch::nn::Module& m, ::torch::optim::Optimizer* opt, TorchAveragingOptions o)
      : module(&m), optimizer(opt), options(std::move(o)), staging(options.module) {}

  /// The core's layout for the module (and the optimizer's state); binds the module's
  /// tensors. Throws InvalidArgument naming what cannot be averaged.
  Layout prepare(const AveragingOptions& averaging) {
    if (averaging.window.exposure == Exposure::live) {
      throw InvalidArgument(
          "paramwin::torch: AveragingAgent needs snapshot exposure (WindowOptions::exposure "
          "live is not supported: the module's tensors keep their own memory)");
    }
    if (averaging.window.memory == Memory::cuda) {
      throw InvalidArgument(
          "paramwin::torch: AveragingAgent stages CUDA tensors through host memory (synchronous "
          "means and background corrections compute on the host); WindowOptions::memory "
          "Memory::cuda is not supported");
    }
    if (options.mix_optimizer_state && optimizer == nullptr) {
      throw InvalidArgument(
          "paramwin::torch: TorchAveragingOptions::mix_optimizer_state needs an optimizer (use "
          "the constructor that takes one)");
    }
    ModuleTensors mt = collect(*module, options.module);
    check_against(mt, mt.layout);  // contiguity: the core reads the tensors' memory as is
    if (mt.tensors.empty()) {
      throw InvalidArgument("paramwin::torch: AveragingAgent: the module has no tensor to average");
    }
    skipped = mt.skipped;
    module_layout = mt.layout;
    Layout layout = mt.layout;
    if (options.mix_optimizer_state) {
      state_layers.emplace(*optimizer, mt, "TorchAveragingOptions::mix_optimizer_state");
      state_layers->append_to(layout);
    }
    bind_collected(std::move(mt));
    return layout;
  }

  void create(MPI_Comm comm, AveragingOptions averaging, const std::source_location& site) {
    std::exception_ptr error;
    Layout layout;
    try {
      layout = prepare(averaging);
    } catch (...) {
      error = std::current_exception();
    }
    // A rank's error on every rank, before any of them enters the core's collective creation
    // (which agrees on the options and refuses other layouts on every rank itself).
    paramwin::detail::agree_or_rethrow<InvalidArgument>(comm, error);
    agent = std::make_unique<paramwin::AveragingAgent>(comm, std::move(layout),
                                                       std::move(averaging), site);
    agent->set_checkpoint_hooks(checkpoint_hooks());
  }

  /// Checkpoints: the optimizer's whole state (LibTorch's archive, as TorchAgent's) rides in
  /// the blob "optimizer"; a load writes the layers into the module, then the archive into
  /// the optimizer (`this` is stable: the hooks survive moves of the agent).
  CheckpointHooks checkpoint_hooks() {
    CheckpointHooks h;
    h.save = [this] {
      std::vector<CheckpointBlob> blobs;
      if (optimizer != nullptr) {
        blobs.push_back({.name = "optimizer", .bytes = detail::optimizer_archive(*optimizer)});
      }
      return blobs;
    };
    h.load = [this](const std::vector<CheckpointBlob>& blobs, bool /*reborn*/) {
      take_module_layers();
      for (const CheckpointBlob& b : blobs) {
        if (b.name == "optimizer" && optimizer != nullptr) {
          detail::load_optimizer_archive(*optimizer, b.bytes);
        }
      }
    };
    return h;
  }

  void bind_collected(ModuleTensors mt) {
    const std::vector<::torch::Tensor> all = detail::listed(*module, options.module);
    staging.bind(std::move(mt));
    watch.record(all);
    refs = staging.refs();
    if (state_layers) {
      refs.insert(refs.end(), state_layers->refs().begin(), state_layers->refs().end());
    }
  }

  /// Makes refs reach the module's current tensors: a cheap comparison each call; collected
  /// and checked against the layout again only when they changed.
  void bind() {
    if (watch.unchanged(detail::listed(*module, options.module))) return;
    ModuleTensors mt = collect(*module, options.module);
    check_against(mt, module_layout);
    bind_collected(std::move(mt));
  }

  /// Gives the layers the module's values (staged tensors only) and the optimizer's state.
  void stage_in() {
    if (state_layers) state_layers->capture(*optimizer, staging.tensors());
    staging.to_layers();
  }

  /// The module's layers changed (a mix, a mean, a correction, a load): into its tensors,
  /// whose autograd versions are bumped.
  void take_module_layers() {
    ::torch::NoGradGuard no_grad;
    staging.from_layers();
    for (const ::torch::Tensor& t : staging.tensors()) t.unsafeGetTensorImpl()->bump_version();
  }

  /// The layers changed (a mix, a mean, a correction): into the module and the optimizer.
  void take_layers() {
    take_module_layers();
    if (state_layers) {
      // Adam's step count stays each rank's own (its bias correction follows its own steps).
      states_mixed +=
          state_layers->restore(*optimizer, staging.tensors(), /*keep_own_counts=*/true);
    }
  }

  /// bind(), or, when the module no longer fits, the core's call with no parameters (bad
  /// input: thrown on every rank in a synchronous step, on this rank only otherwise, before
  /// anything changes), then this rank's own error.
  template <class Call>
  void bind_or_fail(Call&& with_no_params) {
    try {
      bind();
    } catch (const InvalidArgument&) {
      try {
        (void)with_no_params();
      } catch (const Error&) {  // NOLINT(bugprone-empty-catch): the bind's error is the one
      }
      throw;
    }
  }
};

AveragingAgent::AveragingAgent(MPI_Comm comm, ::torch::nn::Module& module, AveragingOptions options,
                               TorchAveragingOptions torch_options,
                               const std::source_location& site)
    : impl_(std::make_unique<Impl>(module, nullptr, std::move(torch_options))) {
  impl_->create(comm, std::move(options), site);
}

AveragingAgent::AveragingAgent(MPI_Comm comm, ::torch::nn::Module& module,
                               ::torch::optim::Optimizer& optimizer, AveragingOptions options,
                               TorchAveragingOptions torch_options,
                               const std::source_location& site)
    : impl_(std::make_unique<Impl>(module, &optimizer, std::move(torch_options))) {
  impl_->create(comm, std::move(options), site);
}

AveragingAgent::AveragingAgent(AveragingAgent&&) noexcept = default;
AveragingAgent& AveragingAgent::operator=(AveragingAgent&&) noexcept = default;
AveragingAgent::~AveragingAgent() = default;

AveragingAgent::Impl& AveragingAgent::live() const {
  if (!impl_) throw Error("paramwin: use of a torch::AveragingAgent that was moved from");
  return *impl_;
}

AveragingRound AveragingAgent::step() {
  Impl& impl = live();
  impl.bind_or_fail([&] { return impl.agent->step(std::span<const LayerRef>()); });
  impl.stage_in();
  AveragingRound round = impl.agent->step(impl.refs);
  if (round.applied) impl.take_layers();
  return round;
}

PublishResult AveragingAgent::publish() {
  Impl& impl = live();
  impl.bind();
  impl.stage_in();
  std::vector<ConstLayerRef> as_const;
  as_const.reserve(impl.refs.size());
  for (const LayerRef& r : impl.refs) as_const.push_back(r.as_const());
  return impl.agent->publish(as_const);
}

AveragingRound AveragingAgent::finish() {
  Impl& impl = live();
  impl.bind_or_fail([&] { return impl.agent->finish(std::span<const LayerRef>()); });
  impl.stage_in();
  AveragingRound round = impl.agent->finish(impl.refs);
  if (round.applied) impl.take_layers();
  return round;
}

void AveragingAgent::save_checkpoint(const std::string& path) {
  Impl& impl = live();
  impl.bind_or_fail([&] { impl.agent->save_checkpoint(path, std::span<const ConstLayerRef>()); });
  impl.stage_in();
  std::vector<ConstLayerRef> as_const;
  as_const.reserve(impl.refs.size());
  for (const LayerRef& r : impl.refs) as_const.push_back(r.as_const());
  impl.agent->save_checkpoint(path, as_const);
}

CheckpointLoad AveragingAgent::load_checkpoint(const std::string& path) {
  Impl& impl = live();
  impl.bind_or_fail([&] { return impl.agent->load_checkpoint(path, std::span<const LayerRef>()); });
  return impl.agent->load_checkpoint(path, impl.refs);
}

void AveragingAgent::pause() { live().agent->pause(); }
void AveragingAgent::resume() { live().agent->resume(); }
bool AveragingAgent::is_paused() const { return live().agent->is_paused(); }
int AveragingAgent::rank() const { return live().agent->rank(); }
int AveragingAgent::size() const { return live().agent->size(); }
std::int64_t AveragingAgent::steps() const { return live().agent->steps(); }
std::int64_t AveragingAgent::rounds() const { return live().agent->rounds(); }
paramwin::AveragingAgent& AveragingAgent::averaging() { return *live().agent; }
const paramwin::AveragingAgent& AveragingAgent::averaging() const { return *live().agent; }
::torch::nn::Module& AveragingAgent::module() { return *live().module; }
const std::vector<std::string>& AveragingAgent::skipped() const { return live().skipped; }
const TorchStagingStats& AveragingAgent::staging_stats() const { return live().staging.stats(); }
std::uint64_t AveragingAgent::optimizer_states_mixed() const { return live().states_mixed; }

}  // namespace paramwin::torch
