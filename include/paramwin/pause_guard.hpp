#pragma once
/// @file pause_guard.hpp
/// PauseGuard: pauses an agent for a scope (evaluation, checkpointing) and resumes it when
/// the scope ends, by return or by exception.

#include <utility>

namespace paramwin {

/// Pauses @p agent in its constructor and resumes it in its destructor. Works with any
/// agent that has pause(), resume() and is_paused(): Agent, GroupAgent, AgentInterface,
/// torch::TorchAgent (`paramwin::PauseGuard guard(agent);` deduces the type). Move-only.
///
/// A guard made while the agent is already paused does nothing and resumes nothing, so
/// guards nest: only the outermost one resumes. resume() ends the pause early and reports
/// errors as exceptions; the destructor never throws (an error there is swallowed). For a
/// GroupAgent, every rank of the agent must hold its guard over the same steps (pause() and
/// resume() must be called on every rank of the agent).
template <class AgentT>
class PauseGuard {
 public:
  /// Pauses @p agent unless it is paused already (then the guard owns nothing).
  explicit PauseGuard(AgentT& agent) : agent_(&agent), owns_(!agent.is_paused()) {
    if (owns_) agent.pause();
  }
  PauseGuard(const PauseGuard&) = delete;
  PauseGuard& operator=(const PauseGuard&) = delete;
  /// Takes over @p other's pause; @p other resumes nothing.
  PauseGuard(PauseGuard&& other) noexcept
      : agent_(std::exchange(other.agent_, nullptr)), owns_(std::exchange(other.owns_, false)) {}
  /// Ends this guard's pause (if it owns one), then takes over @p other's.
  PauseGuard& operator=(PauseGuard&& other) noexcept {
    if (this != &other) {
      resume_noexcept();
      agent_ = std::exchange(other.agent_, nullptr);
      owns_ = std::exchange(other.owns_, false);
    }
    return *this;
  }
  /// Resumes the agent if this guard paused it; never throws.
  ~PauseGuard() { resume_noexcept(); }

  /// Resumes the agent now if this guard paused it (and is still owning the pause);
  /// errors propagate. The destructor then does nothing.
  void resume() {
    if (!owns_) return;
    owns_ = false;
    agent_->resume();
  }
  /// Whether this guard paused the agent and will resume it.
  [[nodiscard]] bool owns() const noexcept { return owns_; }
  /// Whether the guarded agent is paused (by this guard or otherwise).
  [[nodiscard]] bool is_paused() const { return agent_ != nullptr && agent_->is_paused(); }

 private:
  void resume_noexcept() noexcept {
    try {
      resume();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw
    }
  }

  AgentT* agent_;
  bool owns_;
};

}  // namespace paramwin
