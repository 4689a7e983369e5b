#pragma once
/// @file detail/agent_base.hpp
/// The non-template boundary of Agent<MemorySpace> (as WindowBase is ParameterWindow's):
/// the window operations the agent needs whatever the memory space (WindowAccess), and
/// AgentBase, which holds the step core (private to the library) behind a pointer.

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

namespace detail {

/// The window operations the agent needs, independent of the memory space.
class WindowAccess {
 public:
  WindowAccess() = default;
  WindowAccess(const WindowAccess&) = delete;
  WindowAccess& operator=(const WindowAccess&) = delete;
  WindowAccess(WindowAccess&&) = delete;
  WindowAccess& operator=(WindowAccess&&) = delete;
  virtual ~WindowAccess() = default;

  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual MPI_Comm comm() const = 0;
  virtual void continue_versions(std::uint64_t next) = 0;
  [[nodiscard]] virtual const Layout& layout() const = 0;
  [[nodiscard]] virtual std::uint64_t version() const = 0;
  [[nodiscard]] virtual RosterEntry roster(int rank) const = 0;
  [[nodiscard]] virtual std::vector<RosterEntry> roster_all(double timeout_seconds) const = 0;
  virtual void set_status(const AgentStatus& status) = 0;
  virtual PublishResult publish(const BoundLayers<ConstLayerRef>& layers,
                                const Hyperparameters& hyper) = 0;
  virtual PullResult pull(std::span<const int> donors, const BoundLayers<LayerRef>& out,
                          const PullOptions& options) = 0;
  /// Lets MPI progress once (serves RMA readers, completes their pin releases).
  virtual void progress() = 0;
  /// Whether some rank reads this window over RMA.
  [[nodiscard]] virtual bool has_rma_readers() const = 0;
};

/// WindowAccess over a ParameterWindow<MemorySpace> (or anything with the same members).
template <class Window>
class WindowAccessOf final : public WindowAccess {
 public:
  explicit WindowAccessOf(Window& window) : w_(window) {}
  [[nodiscard]] int rank() const override { return w_.rank(); }
  [[nodiscard]] int size() const override { return w_.size(); }
  [[nodiscard]] MPI_Comm comm() const override { return w_.comm(); }
  void continue_versions(std::uint64_t next) override { w_.continue_versions(next); }
  [[nodiscard]] const Layout& layout() const override { return w_.layout(); }
  [[nodiscard]] std::uint64_t version() const override { return w_.version(); }
  [[nodiscard]] RosterEntry roster(int rank) const override { return w_.roster(rank); }
  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds) const override {
    return w_.roster_all(timeout_seconds);
  }
  void set_status(const AgentStatus& status) override { w_.set_status(status); }
  PublishResult publish(const BoundLayers<ConstLayerRef>& layers,
                        const Hyperparameters& hyper) override {
    return w_.publish(layers, hyper);
  }
  PullResult pull(std::span<const int> donors, const BoundLayers<LayerRef>& out,
                  const PullOptions& options) override {
    return w_.pull(donors, out, options);
  }
  void progress() override { w_.progress(); }
  [[nodiscard]] bool has_rma_readers() const override { return w_.has_rma_readers(); }

 private:
  Window& w_;
};

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
/// points, each over the window it is given. Move-only; a moved-from AgentBase throws
/// InvalidArgument from every call but destruction and assignment (the noexcept queries
/// end the program instead).
class AgentBase {
 public:
  /// Validates @p options (InvalidArgument), their explore rules against @p layout too.
  AgentBase(AgentOptions options, int rank, int population, const Layout& layout);
  /// Validates on every rank of @p comm and throws InvalidArgument on every rank if any
  /// rank's options are invalid (so that the window creation that follows cannot hang).
  /// @note Collective over @p comm.
  [[nodiscard]] static AgentBase create_collective(MPI_Comm comm, AgentOptions options,
                                                   const Layout& layout);

  StepEvent step(WindowAccess& w, std::int64_t iteration, double metric,
                 std::span<const LayerRef> params);
  PublishResult publish(WindowAccess& w, std::span<const ConstLayerRef> params);
  void leave(WindowAccess& w);
  void pause(WindowAccess& w);
  void resume(WindowAccess& w);
  [[nodiscard]] bool paused() const noexcept;

  void save_checkpoint(WindowAccess& w, const std::string& path,
                       std::span<const ConstLayerRef> params);
  void wait_checkpoint(WindowAccess& w);
  CheckpointLoad load_checkpoint(WindowAccess& w, const std::string& path,
                                 std::span<const LayerRef> params);
  std::optional<CheckpointLoad> resume_newest(WindowAccess& w, std::span<const LayerRef> params);
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
