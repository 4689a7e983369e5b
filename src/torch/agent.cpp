// LibTorch adapter: TorchAgent (an Agent driven by a module and its optimizer).
#include "paramwin/torch/agent.hpp"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "paramwin/error.hpp"

namespace paramwin::torch {

std::size_t reset_optimizer_state(::torch::optim::Optimizer& optimizer,
                                  const std::vector<::torch::Tensor>& params) {
  // LibTorch 1.13 keys the per-parameter state by the address of the TensorImpl, as text;
  // set_data keeps the TensorImpl, so live binding and adoption keep the keys valid.
  auto& state = optimizer.state();
  std::size_t erased = 0;
  for (const ::torch::Tensor& p : params) {
    if (!p.defined()) continue;
    erased += state.erase(c10::guts::to_string(p.unsafeGetTensorImpl()));
  }
  return erased;
}

struct TorchAgent::Impl {
  ::torch::nn::Module* module = nullptr;
  ::torch::optim::Optimizer* borrowed = nullptr;
  std::unique_ptr<::torch::optim::Optimizer> owned;
  OptimizerBuilder builder;
  TorchAgentOptions options;
  RebirthCallback user_on_rebirth;
  std::vector<std::string> skipped;
  std::uint64_t built = 0;
  std::uint64_t states_reset = 0;
  bool live = false;
  // An Agent<> (one rank) or a GroupAgent (g ranks): the adapter needs only the interface.
  std::unique_ptr<AgentInterface> agent;

  // The tensors of the step in progress and, when staged, their host copies.
  ModuleTensors current;
  std::vector<::torch::Tensor> staged;

  ::torch::optim::Optimizer& optimizer() { return owned ? *owned : *borrowed; }

  /// An Impl training @p m with a borrowed optimizer (its state reset on rebirths).
  static std::unique_ptr<Impl> borrowing(::torch::nn::Module& m, ::torch::optim::Optimizer& opt,
                                         TorchAgentOptions o) {
    auto impl = std::make_unique<Impl>();
    impl->module = &m;
    impl->borrowed = &opt;
    impl->options = std::move(o);
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
    impl->build_optimizer();
    return impl;
  }

  void build_optimizer() {
    std::unique_ptr<::torch::optim::Optimizer> fresh = builder(*module);
    if (!fresh) throw InvalidArgument("paramwin::torch: the optimizer builder returned null");
    owned = std::move(fresh);
    ++built;
  }

  /// Takes over the user's rebirth hook and returns the module's layout.
  Layout prepare(AgentOptions& agent_options) {
    ModuleTensors mt = collect(*module, options.module);
    skipped = mt.skipped;
    user_on_rebirth = std::move(agent_options.on_rebirth);
    // `this` is stable (heap-allocated Impl), so the hook survives moves of the TorchAgent.
    agent_options.on_rebirth = [this](const StepEvent& event, std::span<const LayerRef> params) {
      on_rebirth(event, params);
    };
    return std::move(mt.layout);
  }

  void create(MPI_Comm comm, AgentOptions agent_options, const WindowOptions& window_options) {
    Layout layout = prepare(agent_options);
    live = window_options.exposure == Exposure::live;
    auto solo = std::make_unique<Agent<>>(comm, std::move(layout), std::move(agent_options),
                                          window_options);
    if (live) bind_live(solo->window(), *module, options.module);
    agent = std::move(solo);
  }

  void create(const AgentGroups& groups, AgentOptions agent_options,
              const WindowOptions& window_options) {
    Layout layout = prepare(agent_options);
    agent = std::make_unique<GroupAgent>(groups, std::move(layout), std::move(agent_options),
                                         window_options);
  }

  /// Refs to the module's tensors (or to fresh host copies of them) for one step.
  std::vector<LayerRef> refs() {
    current = collect(*module, options.module);
    check_against(current, agent->layout());
    staged.assign(current.tensors.size(), ::torch::Tensor());
    std::vector<LayerRef> out;
    out.reserve(current.tensors.size());
    for (std::size_t i = 0; i < current.tensors.size(); ++i) {
      const ::torch::Tensor& t = current.tensors[i];
      const LayerSpec& spec = current.layout[i];
      if (options.module.stage_through_host || !t.device().is_cpu()) {
        staged[i] = t.detach().to(::torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
        out.emplace_back(spec.name, staged[i].data_ptr(), spec.count, spec.dtype);
      } else {
        out.emplace_back(spec.name, t.data_ptr(), spec.count, spec.dtype);
      }
    }
    return out;
  }

  void on_rebirth(const StepEvent& event, std::span<const LayerRef> params) {
    {
      ::torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < current.tensors.size(); ++i) {
        ::torch::Tensor& t = current.tensors[i];
        if (staged[i].defined()) t.detach().copy_(staged[i]);
        t.unsafeGetTensorImpl()->bump_version();
        if (options.clear_gradients && t.grad().defined()) t.mutable_grad() = ::torch::Tensor();
      }
    }
    if (builder) {
      build_optimizer();
    } else if (options.reset_optimizer_state) {
      states_reset += reset_optimizer_state(*borrowed, current.tensors);
    }
    if (user_on_rebirth) user_on_rebirth(event, params);
    // The user may have changed the module in the callback: republish what it holds now.
    ::torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < current.tensors.size(); ++i) {
      if (staged[i].defined()) staged[i].copy_(current.tensors[i].detach());
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
                       TorchAgentOptions options, const WindowOptions& window_options)
    : impl_(Impl::borrowing(module, optimizer, std::move(options))) {
  impl_->create(comm, std::move(agent_options), window_options);
}

TorchAgent::TorchAgent(MPI_Comm comm, ::torch::nn::Module& module, OptimizerBuilder builder,
                       AgentOptions agent_options, TorchAgentOptions options,
                       const WindowOptions& window_options)
    : impl_(Impl::owning(module, std::move(builder), std::move(options))) {
  impl_->create(comm, std::move(agent_options), window_options);
}

TorchAgent::TorchAgent(const AgentGroups& groups, ::torch::nn::Module& module,
                       ::torch::optim::Optimizer& optimizer, AgentOptions agent_options,
                       TorchAgentOptions options, const WindowOptions& window_options)
    : impl_(Impl::borrowing(module, optimizer, std::move(options))) {
  impl_->create(groups, std::move(agent_options), window_options);
}

TorchAgent::TorchAgent(const AgentGroups& groups, ::torch::nn::Module& module,
                       OptimizerBuilder builder, AgentOptions agent_options,
                       TorchAgentOptions options, const WindowOptions& window_options)
    : impl_(Impl::owning(module, std::move(builder), std::move(options))) {
  impl_->create(groups, std::move(agent_options), window_options);
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

StepEvent TorchAgent::step(std::int64_t iteration, double metric) {
  std::vector<LayerRef> params = impl_->refs();
  return impl_->agent->step(iteration, metric, params);
}

PublishResult TorchAgent::publish() {
  std::vector<LayerRef> params = impl_->refs();
  std::vector<ConstLayerRef> as_const;
  as_const.reserve(params.size());
  for (const LayerRef& p : params) as_const.push_back(p.as_const());
  return impl_->agent->publish(as_const);
}

void TorchAgent::pause() { impl_->agent->pause(); }
void TorchAgent::resume() { impl_->agent->resume(); }
bool TorchAgent::is_paused() const { return impl_->agent->is_paused(); }

::torch::optim::Optimizer& TorchAgent::optimizer() { return impl_->optimizer(); }
::torch::nn::Module& TorchAgent::module() { return *impl_->module; }
namespace {
[[noreturn]] void wrong_kind(const char* want) {
  throw InvalidArgument(std::string("paramwin::torch: this TorchAgent has no ") + want +
                        " (see grouped())");
}
}  // namespace

Agent<>& TorchAgent::agent() {
  auto* a = dynamic_cast<Agent<>*>(impl_->agent.get());
  if (a == nullptr) wrong_kind("Agent: it drives a GroupAgent");
  return *a;
}
const Agent<>& TorchAgent::agent() const {
  const auto* a = dynamic_cast<const Agent<>*>(impl_->agent.get());
  if (a == nullptr) wrong_kind("Agent: it drives a GroupAgent");
  return *a;
}
bool TorchAgent::grouped() const {
  return dynamic_cast<const GroupAgent*>(impl_->agent.get()) != nullptr;
}
GroupAgent& TorchAgent::group_agent() {
  auto* g = dynamic_cast<GroupAgent*>(impl_->agent.get());
  if (g == nullptr) wrong_kind("GroupAgent: it was made from a communicator");
  return *g;
}
AgentInterface& TorchAgent::member() { return *impl_->agent; }
const AgentStats& TorchAgent::stats() const { return impl_->agent->stats(); }
const std::vector<std::string>& TorchAgent::skipped() const { return impl_->skipped; }
std::uint64_t TorchAgent::optimizers_built() const { return impl_->built; }
std::uint64_t TorchAgent::optimizer_states_reset() const { return impl_->states_reset; }

void TorchAgent::close() {
  impl_->unbind();
  impl_->agent->close();
}

}  // namespace paramwin::torch
