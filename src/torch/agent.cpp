// LibTorch adapter: TorchAgent (an Agent driven by a module and its optimizer).
#include "paramwin/torch/agent.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "../mpi/agree.hpp"
#include "device_layers.hpp"
#include "device_staging.hpp"
#include "layer_source.hpp"
#include "optimizer_hyper.hpp"
#include "optimizer_state.hpp"
#include "paramwin/device_choice.hpp"
#include "paramwin/error.hpp"
#include "state_key.hpp"
#include "tensor_watch.hpp"

namespace paramwin::torch {

using detail::state_key;

std::size_t reset_optimizer_state(::torch::optim::Optimizer& optimizer,
                                  const std::vector<::torch::Tensor>& params) {
  // set_data keeps the TensorImpl, so live binding and adoption keep the keys valid.
  auto& state = optimizer.state();
  std::size_t erased = 0;
  for (const ::torch::Tensor& p : params) {
    if (!p.defined()) continue;
    erased += state.erase(state_key(state, p));
  }
  return erased;
}

::torch::optim::OptimizerParamState* optimizer_state(::torch::optim::Optimizer& optimizer,
                                                     const ::torch::Tensor& param) {
  if (!param.defined()) return nullptr;
  auto& state = optimizer.state();
  const auto it = state.find(state_key(state, param));
  return it == state.end() ? nullptr : it->second.get();
}

struct TorchAgent::Impl {
  ::torch::nn::Module* module = nullptr;
  ::torch::optim::Optimizer* borrowed = nullptr;
  std::unique_ptr<::torch::optim::Optimizer> owned;
  OptimizerBuilder builder;
  TorchAgentOptions options;
  RebirthCallback user_on_rebirth;
  PrepareParamsCallback user_prepare;
  ResetCallback user_reset;
  // The module's own layers (the window's layout less the optimizer's state layers).
  Layout module_layout;
  // With TorchAgentOptions::inherit_optimizer_state: the state layers (the optimizer's own
  // state tensors in place where they fit, else buffers).
  std::optional<detail::OptimizerStateLayers> state_layers;
  std::uint64_t states_inherited = 0;
  // With TorchAgentOptions::hyperparameters: the optimizer options published.
  std::optional<detail::OptimizerHyperparameters> hyper;
  std::vector<std::string> skipped;
  std::uint64_t built = 0;
  std::uint64_t states_reset = 0;
  bool live = false;
  // An Agent<> (one rank) or a GroupAgent (g ranks): the adapter needs only the interface.
  std::unique_ptr<AgentInterface> agent;

  // The module's tensors as bound (collected again only when the watch sees them changed),
  // where the window's layers for them are (host staging buffers, or the tensors in place),
  // and the refs the agent is given: those layers, then the optimizer's state layers.
  detail::TensorWatch watch;
  std::unique_ptr<detail::LayerSource> layers;
  std::vector<LayerRef> refs;
  mutable TorchStagingStats stats;  // staging_stats()'s answer

  ::torch::optim::Optimizer& optimizer() { return owned ? *owned : *borrowed; }

  /// An Impl training @p m with a borrowed optimizer (its state reset on rebirths).
  static std::unique_ptr<Impl> borrowing(::torch::nn::Module& m, ::torch::optim::Optimizer& opt,
                                         TorchAgentOptions o) {
    auto impl = std::make_unique<Impl>();
    impl->module = &m;
    impl->borrowed = &opt;
    impl->options = std::move(o);
    impl->layers = std::make_unique<detail::DeviceStaging>(impl->options.module);
    return impl;
  }

  /// An Impl that builds its optimizer now and on every rebirth.
  static std::unique_ptr<Impl> owning(::torch::nn::Module& m, OptimizerBuilder build,
                                      TorchAgentOptions o) {
    if (!build) {
      // Thrown before the collective creation; every rank passes the same kind of argument.
      throw InvalidArgument("paramwin::torch: TorchAgent needs an optimizer builder (empty)");
    }
    auto impl = std::make_unique<Impl>();
    impl->module = &m;
    impl->builder = std::move(build);
    impl->options = std::move(o);
    impl->layers = std::make_unique<detail::DeviceStaging>(impl->options.module);
    impl->build_optimizer();
    return impl;
  }

  void build_optimizer() {
    std::unique_ptr<::torch::optim::Optimizer> fresh = builder(*module);
    if (!fresh) throw InvalidArgument("paramwin::torch: the optimizer builder returned null");
    owned = std::move(fresh);
    ++built;
  }

  /// Takes over the user's rebirth and prepare hooks and returns the agent's layout: the
  /// module's, then the optimizer's state layers when they are inherited.
  Layout prepare(AgentOptions& agent_options, bool live_exposure, bool grouped) {
    ModuleTensors mt = collect(*module, options.module);
    skipped = mt.skipped;
    module_layout = mt.layout;
    Layout layout = mt.layout;
    if (!options.hyperparameters.empty()) {
      hyper.emplace(options.hyperparameters, optimizer());
      hyper->declare(layout);
    }
    if (options.inherit_optimizer_state) {
      if (live_exposure) {
        throw InvalidArgument(
            "paramwin::torch: TorchAgentOptions::inherit_optimizer_state needs snapshot "
            "exposure (a live window holds the module's tensors only)");
      }
      if (grouped) {
        throw InvalidArgument(
            "paramwin::torch: TorchAgentOptions::inherit_optimizer_state is not supported for "
            "grouped agents (AgentGroups) yet; use reset or a builder");
      }
      // In place unless the module is forced through host buffers (the device path's copies).
      state_layers.emplace(optimizer(), mt, "TorchAgentOptions::inherit_optimizer_state",
                           !options.module.stage_through_host);
      state_layers->append_to(layout);
      // MixingKind::reset re-initialises the module's layers (the user's callback sees only
      // those) and resets the optimizer's state (zeros, step 0: restore() erases it).
      user_reset = std::move(agent_options.reset);
      if (user_reset) {
        agent_options.reset = [this](std::span<const LayerRef> params, std::uint64_t seed) {
          user_reset(params.first(module_layout.size()), seed);
          state_layers->clear();
        };
      }
    }
    user_on_rebirth = std::move(agent_options.on_rebirth);
    user_prepare = std::move(agent_options.prepare_params);
    // `this` is stable (heap-allocated Impl), so the hooks survive moves of the TorchAgent.
    agent_options.on_rebirth = [this](const StepEvent& event, std::span<const LayerRef> params) {
      on_rebirth(event, params);
    };
    // The core calls this only when a step (or publish) is about to read or write the
    // parameters: the module is copied into the window's layers then, and only then.
    agent_options.prepare_params = [this] {
      stage_in();
      if (user_prepare) user_prepare();
    };
    return layout;
  }

  /// prepare() on every rank of @p comm: a rank's error (an unsupported optimizer, say) is
  /// thrown on every rank, before any of them enters the agent's collective creation.
  Layout prepare_agreed(MPI_Comm comm, AgentOptions& agent_options, bool live_exposure,
                        bool grouped) {
    std::exception_ptr error;
    Layout layout;
    try {
      layout = prepare(agent_options, live_exposure, grouped);
    } catch (...) {
      error = std::current_exception();
    }
    paramwin::detail::agree_or_rethrow<InvalidArgument>(comm, error);
    return layout;
  }

  /// Why this rank's agent cannot have a device window (paramwin::device_obstacle over the
  /// exchanged tensors, then the adapter's own obstacles).
  [[nodiscard]] DeviceObstacle device_obstacle_of(const WindowOptions& wo) const {
    const ModuleTensors mt = collect(*module, options.module);
    std::vector<TensorPlace> places;
    places.reserve(mt.tensors.size());
    for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
      const ::torch::Tensor& t = mt.tensors[i];
      places.push_back(TensorPlace{.name = mt.names[i],
                                   .cuda = t.is_cuda(),
                                   .device = t.is_cuda() ? t.device().index() : -1,
                                   .where = t.device().str()});
    }
    std::string other;
    if (options.module.stage_through_host) {
      other = "ModuleOptions::stage_through_host is set";
    } else if (wo.exposure == Exposure::live) {
      other = "live exposure needs host memory";
    }
    return device_obstacle(places, other);
  }

  /// Chooses, alike on every rank of @p comm (collective), between a device window and host
  /// staging (TorchAgentOptions::device_windows, paramwin::choose_device_window); returns the
  /// window options to create the agent with and installs the matching LayerSource.
  WindowOptions choose_window(MPI_Comm comm, WindowOptions wo) {
    const bool required =
        wo.memory == Memory::cuda || options.device_windows == DeviceWindows::always;
    if (!required && options.device_windows == DeviceWindows::never) return wo;
    const DeviceChoice choice =
        choose_device_window(comm, required, false, [&] { return device_obstacle_of(wo); },
                             {.prefix = "paramwin::torch",
                              .required_by = "DeviceWindows::always or Memory::cuda"});
    if (!choice.device) {
      wo.memory = Memory::host;
      return wo;
    }
    wo.memory = Memory::cuda;
    wo.cuda_device = choice.cuda_device;
    layers = std::make_unique<detail::DeviceLayers>(choice.cuda_device);
    if (state_layers) {
      state_layers->place_on(
          ::torch::Device(::torch::kCUDA, static_cast<c10::DeviceIndex>(choice.cuda_device)));
    }
    return wo;
  }

  void create(MPI_Comm comm, AgentOptions agent_options, const WindowOptions& window_options,
              const std::source_location& site) {
    Layout layout =
        prepare_agreed(comm, agent_options, window_options.exposure == Exposure::live, false);
    live = window_options.exposure == Exposure::live;
    const WindowOptions chosen = choose_window(comm, window_options);
    auto solo =
        std::make_unique<Agent<>>(comm, std::move(layout), std::move(agent_options), chosen, site);
    if (live) bind_live(solo->window(), *module, options.module);
    solo->set_checkpoint_hooks(checkpoint_hooks());
    agent = std::move(solo);
    sync_hyperparameters();
  }

  void create(const AgentGroups& groups, AgentOptions agent_options,
              const WindowOptions& window_options, const std::source_location& site) {
    Layout layout = prepare_agreed(groups.training_comm(), agent_options,
                                   window_options.exposure == Exposure::live, true);
    const WindowOptions chosen = choose_window(groups.training_comm(), window_options);
    auto group = std::make_unique<GroupAgent>(groups, std::move(layout), std::move(agent_options),
                                              chosen, site);
    group->set_checkpoint_hooks(checkpoint_hooks());
    agent = std::move(group);
    sync_hyperparameters();
  }

  /// Gives the agent the optimizer's current option values, so that the next publish carries
  /// them (at creation, and before each step: a learning-rate schedule's changes too).
  void sync_hyperparameters() {
    if (!hyper) return;
    Hyperparameters values = agent->hyperparameters();
    if (hyper->read(optimizer(), values)) agent->set_hyperparameters(values);
  }

  /// Makes refs point at the window's layers for the module's current tensors (and the
  /// optimizer's current state tensors, when it is inherited): a cheap comparison each call;
  /// the module is collected and checked against the layout again only when its tensors
  /// changed (InvalidArgument naming the tensor if they no longer fit).
  void bind() {
    std::vector<::torch::Tensor> all = detail::listed(*module, options.module);
    if (watch.unchanged(all)) {
      if (state_layers && state_layers->bind(optimizer(), layers->tensors())) take_refs();
      return;
    }
    ModuleTensors mt = collect(*module, options.module);
    check_against(mt, module_layout);
    layers->bind(std::move(mt));
    watch.record(all);
    if (state_layers) state_layers->bind(optimizer(), layers->tensors());
    take_refs();
  }

  void take_refs() {
    refs = layers->refs();
    if (state_layers)
      refs.insert(refs.end(), state_layers->refs().begin(), state_layers->refs().end());
  }

  /// The staging's statistics with the state layers' count in place.
  const TorchStagingStats& staging_stats() const {
    stats = layers->stats();
    stats.state_layers_in_place = state_layers ? state_layers->in_place() : 0;
    stats.state_copies = state_layers ? state_layers->copies() : 0;
    return stats;
  }

  /// Gives the window's layers the module's values (and the optimizer's state, when it is
  /// inherited) before the core reads them. The state first: a device window's to_layers()
  /// waits for the device's current stream, on which the state's copies run too.
  void stage_in() {
    if (state_layers) state_layers->capture(optimizer(), layers->tensors());
    layers->to_layers();
  }

  /// Writes the window's layers (a rebirth's mix, a loaded checkpoint) into the module and
  /// bumps its tensors' autograd versions; drops their gradients if @p clear_gradients.
  void take_layers(bool clear_gradients) {
    ::torch::NoGradGuard no_grad;
    layers->from_layers();
    for (const ::torch::Tensor& t : layers->tensors()) {
      t.unsafeGetTensorImpl()->bump_version();
      if (clear_gradients && t.grad().defined()) t.mutable_grad() = ::torch::Tensor();
    }
  }

  /// Checkpoints (docs/checkpoints.md): the optimizer's whole state (torch's own archive:
  /// per parameter e.g. Adam's step and moments, and the parameter groups' options) rides in
  /// the blob "optimizer"; the window's layers are refreshed from the module before a save
  /// and written into it after a load.
  CheckpointHooks checkpoint_hooks() {
    CheckpointHooks h;
    h.save = [this] {
      stage_in();  // the layers the save reads hold the module's current values
      return std::vector<CheckpointBlob>{
          CheckpointBlob{.name = "optimizer", .bytes = detail::optimizer_archive(optimizer())}};
    };
    h.load = [this](const std::vector<CheckpointBlob>& blobs, bool reborn) {
      take_layers(/*clear_gradients=*/true);
      if (builder) build_optimizer();
      if (reborn) {
        // A new agent reborn from a donor starts with a fresh optimizer, as on a rebirth.
        if (!builder) states_reset += reset_optimizer_state(*borrowed, layers->tensors());
        return;
      }
      for (const CheckpointBlob& b : blobs) {
        if (b.name == "optimizer") detail::load_optimizer_archive(optimizer(), b.bytes);
      }
    };
    return h;
  }

  void on_rebirth(const StepEvent& event, std::span<const LayerRef> params) {
    take_layers(options.clear_gradients);
    if (builder) build_optimizer();
    if (state_layers) {
      states_inherited += state_layers->restore(optimizer(), layers->tensors());
    } else if (!builder && options.reset_optimizer_state) {
      states_reset += reset_optimizer_state(*borrowed, layers->tensors());
    }
    if (hyper) hyper->apply(optimizer(), event.hyper);
    if (user_on_rebirth) {
      user_on_rebirth(event, params);
      // The user may have changed the module in the callback: republish what it holds now.
      stage_in();
    }
  }

  void unbind() {
    if (live && module != nullptr) {
      unbind_live(*module, options.module);
      live = false;
    }
  }
};

TorchAgent::TorchAgent(MPI_Comm comm, ::torch::nn::Module& module,
                       ::torch::optim::Optimizer& optimizer, AgentOptions agent_options,
                       TorchAgentOptions options, const WindowOptions& window_options,
                       const std::source_location& site)
    : impl_(Impl::borrowing(module, optimizer, std::move(options))) {
  impl_->create(comm, std::move(agent_options), window_options, site);
}

TorchAgent::TorchAgent(MPI_Comm comm, ::torch::nn::Module& module, OptimizerBuilder builder,
                       AgentOptions agent_options, TorchAgentOptions options,
                       const WindowOptions& window_options, const std::source_location& site)
    : impl_(Impl::owning(module, std::move(builder), std::move(options))) {
  impl_->create(comm, std::move(agent_options), window_options, site);
}

TorchAgent::TorchAgent(const AgentGroups& groups, ::torch::nn::Module& module,
                       ::torch::optim::Optimizer& optimizer, AgentOptions agent_options,
                       TorchAgentOptions options, const WindowOptions& window_options,
                       const std::source_location& site)
    : impl_(Impl::borrowing(module, optimizer, std::move(options))) {
  impl_->create(groups, std::move(agent_options), window_options, site);
}

TorchAgent::TorchAgent(const AgentGroups& groups, ::torch::nn::Module& module,
                       OptimizerBuilder builder, AgentOptions agent_options,
                       TorchAgentOptions options, const WindowOptions& window_options,
                       const std::source_location& site)
    : impl_(Impl::owning(module, std::move(builder), std::move(options))) {
  impl_->create(groups, std::move(agent_options), window_options, site);
}

TorchAgent::TorchAgent(TorchAgent&&) noexcept = default;

TorchAgent& TorchAgent::operator=(TorchAgent&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      try {
        impl_->unbind();
      } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor path must not throw
      }
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

TorchAgent::~TorchAgent() {
  if (!impl_) return;
  try {
    impl_->unbind();
  } catch (...) {  // NOLINT(bugprone-empty-catch): the module keeps window memory; nothing to do
  }
}

TorchAgent::Impl& TorchAgent::live() const {
  if (!impl_) throw Error("paramwin: use of a TorchAgent that was moved from");
  return *impl_;
}

StepEvent TorchAgent::step(std::int64_t iteration, double metric) {
  Impl& impl = live();
  try {
    impl.bind();
  } catch (const InvalidArgument&) {
    // A grouped agent's other ranks are on their way into the step's agreement: join it with
    // no parameters (a bad input there too), so that they throw with this rank instead of
    // waiting for it; this rank reports its own error (the module's tensor that changed).
    if (grouped()) {
      try {
        (void)impl.agent->step(iteration, metric, {});
      } catch (const Error&) {  // NOLINT(bugprone-empty-catch): the bind's error is the one
      }
    }
    throw;
  }
  impl.sync_hyperparameters();
  return impl.agent->step(iteration, metric, impl.refs);
}

void TorchAgent::save_checkpoint(const std::string& path) {
  Impl& impl = live();
  impl.bind();
  impl.sync_hyperparameters();
  impl.agent->save_checkpoint(path, const_refs(impl.refs));
}

CheckpointLoad TorchAgent::load_checkpoint(const std::string& path) {
  Impl& impl = live();
  impl.bind();
  return impl.agent->load_checkpoint(path, impl.refs);
}

void TorchAgent::wait_checkpoint() { live().agent->wait_checkpoint(); }

std::optional<CheckpointLoad> TorchAgent::resume_newest() {
  Impl& impl = live();
  impl.bind();
  return impl.agent->resume_newest(impl.refs);
}

PublishResult TorchAgent::publish() {
  Impl& impl = live();
  impl.bind();
  impl.sync_hyperparameters();
  return impl.agent->publish(const_refs(impl.refs));
}

void TorchAgent::pause() { live().agent->pause(); }
void TorchAgent::resume() { live().agent->resume(); }
bool TorchAgent::is_paused() const { return live().agent->is_paused(); }

::torch::optim::Optimizer& TorchAgent::optimizer() { return live().optimizer(); }
::torch::nn::Module& TorchAgent::module() { return *live().module; }
namespace {
[[noreturn]] void wrong_kind(const char* want) {
  throw InvalidArgument(std::string("paramwin::torch: this TorchAgent has no ") + want +
                        " (see grouped())");
}
}  // namespace

Agent<>& TorchAgent::agent() {
  auto* a = dynamic_cast<Agent<>*>(live().agent.get());
  if (a == nullptr) wrong_kind("Agent: it drives a GroupAgent");
  return *a;
}
const Agent<>& TorchAgent::agent() const {
  const auto* a = dynamic_cast<const Agent<>*>(live().agent.get());
  if (a == nullptr) wrong_kind("Agent: it drives a GroupAgent");
  return *a;
}
bool TorchAgent::grouped() const {
  return dynamic_cast<const GroupAgent*>(live().agent.get()) != nullptr;
}
GroupAgent& TorchAgent::group_agent() {
  auto* g = dynamic_cast<GroupAgent*>(live().agent.get());
  if (g == nullptr) wrong_kind("GroupAgent: it was made from a communicator");
  return *g;
}
AgentInterface& TorchAgent::member() { return *live().agent; }
const AgentStats& TorchAgent::stats() const { return live().agent->stats(); }
const std::vector<std::string>& TorchAgent::skipped() const { return live().skipped; }
std::uint64_t TorchAgent::optimizers_built() const { return live().built; }
std::uint64_t TorchAgent::optimizer_states_reset() const { return live().states_reset; }
std::uint64_t TorchAgent::optimizer_states_inherited() const { return live().states_inherited; }
const TorchStagingStats& TorchAgent::staging_stats() const { return live().staging_stats(); }

void TorchAgent::close() {
  if (!impl_) return;  // moved from: the agent it moved to closes (as ParameterWindow::close)
  impl_->unbind();
  impl_->agent->close();
}

}  // namespace paramwin::torch
