// AgentBase: the one-rank agent (Agent<MemorySpace>) over the step core: a solo executor
// around the window it is given for every call, the window's communicator for every
// checkpoint collective, and the roster fingerprint cached across steps.
#include "paramwin/detail/agent_base.hpp"

#include <utility>

#include "agent/agent_core.hpp"
#include "agent/solo_executor.hpp"
#include "paramwin/error.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin::detail {

/// The step core and what a one-rank agent keeps beside it.
class SoloAgent {
 public:
  explicit SoloAgent(AgentCore c) : core(std::move(c)) {}

  /// A solo executor over @p w for one call.
  [[nodiscard]] SoloExecutor<Window> over(Window& w) { return {w, fingerprint}; }

  AgentCore core;
  std::optional<std::uint64_t> fingerprint;  // own roster fingerprint, read once
};

void SoloAgentDeleter::operator()(SoloAgent* p) const noexcept { delete p; }

WindowOptions serving_window_options(WindowOptions options, const ServeOptions& serve) {
  if (serve.progress_thread) {
    options.progress_thread = true;
    options.progress_interval_us = serve.progress_interval_us;
  }
  return options;
}

void check_serving(const WindowOptions& options, const ServeOptions& serve) {
  if (serve.progress_thread && !options.progress_thread) {
    throw InvalidArgument("paramwin: AgentOptions::serve.progress_thread asks for a progress "
                          "thread, but the window given to the Agent was created without one "
                          "(WindowOptions::progress_thread)");
  }
}

AgentBase::AgentBase(std::unique_ptr<SoloAgent, SoloAgentDeleter> agent)
    : agent_(std::move(agent)) {}

AgentBase::AgentBase(AgentOptions options, int rank, int population, const Layout& layout)
    : agent_(new SoloAgent(AgentCore(std::move(options), rank, population, layout))) {}

AgentBase AgentBase::create_collective(MPI_Comm comm, AgentOptions options, const Layout& layout) {
  return AgentBase(std::unique_ptr<SoloAgent, SoloAgentDeleter>(
      new SoloAgent(AgentCore::create_collective(comm, std::move(options), layout))));
}

SoloAgent& AgentBase::live() const {
  if (!agent_) throw InvalidArgument("paramwin: use of an Agent that was moved from");
  return *agent_;
}

StepEvent AgentBase::step(Window& w, std::int64_t iteration, double metric,
                          std::span<const LayerRef> params) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  return a.core.step(ex, solo_comms(w), iteration, metric, params);
}

PublishResult AgentBase::publish(Window& w, std::span<const ConstLayerRef> params) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  return a.core.publish(ex, params);
}

void AgentBase::leave(Window& w) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  a.core.leave(ex);
}

void AgentBase::pause(Window& w) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  a.core.pause(ex);
}

void AgentBase::resume(Window& w) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  a.core.resume(ex);
}

bool AgentBase::paused() const noexcept { return live().core.paused(); }

void AgentBase::join() { live().core.join(); }

void AgentBase::rebound() { live().fingerprint.reset(); }

void AgentBase::save_checkpoint(Window& w, const std::string& path,
                                std::span<const ConstLayerRef> params) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  a.core.save_checkpoint(ex, solo_comms(w), path, params);
}

void AgentBase::wait_checkpoint(Window& w) { live().core.wait_checkpoint(solo_comms(w)); }

CheckpointLoad AgentBase::load_checkpoint(Window& w, const std::string& path,
                                          std::span<const LayerRef> params) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  return a.core.load_checkpoint(ex, solo_comms(w), path, params);
}

std::optional<CheckpointLoad> AgentBase::resume_newest(Window& w,
                                                       std::span<const LayerRef> params) {
  SoloAgent& a = live();
  SoloExecutor<Window> ex = a.over(w);
  return a.core.resume_newest(ex, solo_comms(w), params);
}

void AgentBase::set_checkpoint_hooks(CheckpointHooks hooks) {
  live().core.set_checkpoint_hooks(std::move(hooks));
}

const Policy& AgentBase::policy() const noexcept { return live().core.policy(); }
const AgentOptions& AgentBase::options() const noexcept { return live().core.policy().options(); }
const AgentStats& AgentBase::stats() const noexcept { return live().core.stats(); }
const Hyperparameters& AgentBase::hyperparameters() const noexcept {
  return live().core.hyperparameters();
}
void AgentBase::set_hyperparameters(const Hyperparameters& values) {
  live().core.set_hyperparameters(values);
}
void AgentBase::set_event_log(EventLog log) noexcept { live().core.set_event_log(std::move(log)); }

}  // namespace paramwin::detail
