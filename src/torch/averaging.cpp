// LibTorch adapter: torch::AveragingAgent, the core's AveragingAgent driven by a module's tensors
// (detail::ModuleLayers: in place on the CPU, through the adapter's host staging otherwise),
// optionally with the optimizer's state mixed as extra layers.
#include "paramwin/torch/averaging.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../mpi/agree.hpp"
#include "module_layers.hpp"
#include "optimizer_state.hpp"
#include "paramwin/error.hpp"

namespace paramwin::torch {

struct AveragingAgent::Impl {
  detail::ModuleLayers layers;
  std::unique_ptr<paramwin::AveragingAgent> agent;

  Impl(::torch::nn::Module& m, ::torch::optim::Optimizer* opt, TorchAveragingOptions o)
      : layers(m, opt, std::move(o)) {}

  void create(MPI_Comm comm, AveragingOptions averaging, const std::source_location& site) {
    std::exception_ptr error;
    Layout layout;
    try {
      layout = layers.prepare(averaging.window, "AveragingAgent");
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
      if (layers.optimizer() != nullptr) {
        blobs.push_back(
            {.name = "optimizer", .bytes = detail::optimizer_archive(*layers.optimizer())});
      }
      return blobs;
    };
    h.load = [this](const std::vector<CheckpointBlob>& blobs, bool /*reborn*/) {
      layers.take_module_layers();
      for (const CheckpointBlob& b : blobs) {
        if (b.name == "optimizer" && layers.optimizer() != nullptr) {
          detail::load_optimizer_archive(*layers.optimizer(), b.bytes);
        }
      }
    };
    return h;
  }

  /// layers.bind(), or, when the module no longer fits, the core's call with no parameters
  /// (bad input: thrown on every rank in a synchronous step, on this rank only otherwise,
  /// before anything changes), then this rank's own error.
  template <class Call>
  void bind_or_fail(Call&& with_no_params) {
    try {
      layers.bind();
    } catch (const InvalidArgument&) {
      try {
        (void)with_no_params();
      } catch (const Error&) {  // NOLINT(bugprone-empty-catch): the bind's error is the one
      }
      throw;
    }
  }

  /// A round's layers into the module and the optimizer (Adam's step count stays each rank's
  /// own: its bias correction follows its own steps).
  AveragingRound taken(AveragingRound round) {
    if (round.applied) layers.take_layers(/*keep_own_counts=*/true);
    return round;
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
  impl.layers.stage_in();
  return impl.taken(impl.agent->step(impl.layers.refs()));
}

PublishResult AveragingAgent::publish() {
  Impl& impl = live();
  impl.layers.bind();
  impl.layers.stage_in();
  return impl.agent->publish(impl.layers.const_refs());
}

AveragingRound AveragingAgent::finish() {
  Impl& impl = live();
  impl.bind_or_fail([&] { return impl.agent->finish(std::span<const LayerRef>()); });
  impl.layers.stage_in();
  return impl.taken(impl.agent->finish(impl.layers.refs()));
}

void AveragingAgent::save_checkpoint(const std::string& path) {
  Impl& impl = live();
  impl.bind_or_fail([&] { impl.agent->save_checkpoint(path, std::span<const ConstLayerRef>()); });
  impl.layers.stage_in();
  impl.agent->save_checkpoint(path, impl.layers.const_refs());
}

CheckpointLoad AveragingAgent::load_checkpoint(const std::string& path) {
  Impl& impl = live();
  impl.bind_or_fail([&] { return impl.agent->load_checkpoint(path, std::span<const LayerRef>()); });
  return impl.agent->load_checkpoint(path, impl.layers.refs());
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
::torch::nn::Module& AveragingAgent::module() { return live().layers.module(); }
const std::vector<std::string>& AveragingAgent::skipped() const { return live().layers.skipped(); }
const TorchStagingStats& AveragingAgent::staging_stats() const {
  return live().layers.staging_stats();
}
std::uint64_t AveragingAgent::optimizer_states_mixed() const {
  return live().layers.states_mixed();
}

}  // namespace paramwin::torch
