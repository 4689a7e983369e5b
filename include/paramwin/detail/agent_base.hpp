#pragma once
/// @file detail/agent_base.hpp
/// The non-template boundary of Agent<MemorySpace>: AgentBase, which holds the step core
/// (private to the library) behind a pointer and drives it over the agent's Window.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "paramwin/agent_options.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/event.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin {

class Policy;
class Window;

namespace detail {

/// @p options with the progress thread that @p serve asks for (progress_thread and its
/// interval); unchanged when serve.progress_thread is false.
[[nodiscard]] WindowOptions serving_window_options(WindowOptions options,
                                                   const ServeOptions& serve);
/// Throws InvalidArgument when @p serve asks for a progress thread that a window created
/// with @p options does not have.
void check_serving(const WindowOptions& options, const ServeOptions& serve);

class SoloAgent;  // src/agent/agent_base.cpp: the step core and what one rank adds to it
/// Deletes a SoloAgent (defined in the library, where SoloAgent is complete).
struct SoloAgentDeleter {
  void operator()(SoloAgent* p) const noexcept;
};

/// What Agent<MemorySpace> calls, whatever its memory space: the one-rank agent's entry
/// points, each over the agent's window (its ParameterWindow, as the Window it is). Move-only; a
/// moved-from AgentBase throws InvalidArgument from every call but destruction and assignment (the
/// noexcept queries end the program instead).
class AgentBase {
 public:
  /// Validates @p options (InvalidArgument), their explore rules against @p layout too.
  AgentBase(AgentOptions options, int rank, int population, const Layout& layout);
  /// Validates on every rank of @p comm and throws InvalidArgument on every rank if any
  /// rank's options are invalid (so that the window creation that follows cannot hang).
  /// @note Collective over @p comm.
  [[nodiscard]] static AgentBase create_collective(MPI_Comm comm, AgentOptions options,
                                                   const Layout& layout);

  StepEvent step(Window& w, std::int64_t iteration, double metric,
                 std::span<const LayerRef> params);
  PublishResult publish(Window& w, std::span<const ConstLayerRef> params);
  void leave(Window& w);
  void pause(Window& w);
  void resume(Window& w);
  [[nodiscard]] bool paused() const noexcept;
  /// The next step is a rebirth from donors (Policy::join).
  void join();
  /// The agent's window was replaced: the cached roster fingerprint is read again.
  void rebound();

  void save_checkpoint(Window& w, const std::string& path, std::span<const ConstLayerRef> params);
  void wait_checkpoint(Window& w);
  CheckpointLoad load_checkpoint(Window& w, const std::string& path,
                                 std::span<const LayerRef> params);
  std::optional<CheckpointLoad> resume_newest(Window& w, std::span<const LayerRef> params);
  void set_checkpoint_hooks(CheckpointHooks hooks);

  [[nodiscard]] const Policy& policy() const noexcept;
  [[nodiscard]] const AgentOptions& options() const noexcept;
  [[nodiscard]] const AgentStats& stats() const noexcept;
  [[nodiscard]] const Hyperparameters& hyperparameters() const noexcept;
  void set_hyperparameters(const Hyperparameters& values);
  void set_event_log(EventLog log) noexcept;

 private:
  explicit AgentBase(std::unique_ptr<SoloAgent, SoloAgentDeleter> agent);
  [[nodiscard]] SoloAgent& live() const;

  std::unique_ptr<SoloAgent, SoloAgentDeleter> agent_;
};

}  // namespace detail
}  // namespace paramwin
