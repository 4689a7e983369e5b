#pragma once
/// @file agent.hpp
/// Agent: the facade a training loop calls once per step. It owns one ParameterWindow and a
/// Policy; it decides whether this agent dies, chooses donors, pulls and mixes their
/// parameters into the caller's storage, republishes and returns a StepEvent.

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>

#include "paramwin/agent_interface.hpp"
#include "paramwin/agent_options.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/detail/agent_base.hpp"
#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/window.hpp"

namespace paramwin {

/// One member of a population. @p MemorySpace is where the caller's parameters live (see
/// ParameterWindow). Move-only; not thread-safe (one thread per agent). Collective: the
/// constructor from a communicator, close(), the destructor, the checkpoint calls
/// (save_checkpoint, load_checkpoint, resume_newest, wait_checkpoint) and a step() that saves
/// (AgentOptions::checkpoint; with checkpoint.every_seconds also one MPI_Allreduce every 16
/// steps). Otherwise step() never waits for other agents beyond ReadOptions::timeout_seconds.
template <class MemorySpace = Kokkos::HostSpace>
class Agent final : public AgentInterface {
 public:
  using memory_space = MemorySpace;                  ///< where the parameters live
  using window_type = ParameterWindow<MemorySpace>;  ///< the owned window

  /// Validates @p options (their explore rules against @p layout's hyperparameters too) on
  /// every rank (InvalidArgument on every rank if any rank's are invalid), then creates the
  /// window over @p comm. @p site (leave the default: the caller's line) is the window's
  /// creation site (see ParameterWindow's constructor), so unnamed agents created at
  /// different places on different ranks throw InvalidArgument on every rank; name the
  /// window (WindowOptions::name) to create them anywhere, and when two agents of one layout
  /// over the same ranks are alive at once (two unnamed ones are refused).
  /// @note Collective over @p comm.
  Agent(MPI_Comm comm, Layout layout, AgentOptions options = {},
        const WindowOptions& window_options = {},
        const std::source_location& site = std::source_location::current())
      : core_(detail::AgentBase::create_collective(comm, std::move(options), layout)),
        window_(comm, std::move(layout),
                detail::serving_window_options(window_options, core_.options().serve), site) {}

  /// Takes ownership of an existing @p window; validates @p options locally (not collective).
  /// With serve.progress_thread the window must have been created with a progress thread.
  explicit Agent(window_type&& window, AgentOptions options = {})
      : core_(std::move(options), window.rank(), window.size(), window.layout()),
        window_(std::move(window)) {
    detail::check_serving(window_.options(), core_.options().serve);
  }

  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  /// Moves the agent; the source is left empty (only destruction and assignment allowed).
  Agent(Agent&&) noexcept = default;
  /// Frees this agent's window (collectively) and takes over @p other's; self-move keeps it.
  Agent& operator=(Agent&& other) noexcept {
    if (this != &other) {
      core_ = std::move(other.core_);
      window_ = std::move(other.window_);
    }
    return *this;
  }
  /// Frees the window; never throws.
  /// @note Collective over the window's communicator.
  ~Agent() override = default;

  /// One training step: reports @p metric, may die and be reborn from donors into
  /// @p params (the caller's layers, bound like ParameterWindow::publish), publishes per
  /// the cadence and returns what happened. On a rebirth @p params hold the mixed
  /// parameters and on_rebirth has been called before they are republished. A failed
  /// transactional pull leaves @p params unchanged and defers the death; under direct
  /// landing (ReadOptions::landing) a pull that fails after its first write ends in a
  /// rebirth by the reset callback (the event's note says "partial pull").
  ///
  /// Exceptions from user callbacks propagate and leave the agent consistent: its roster
  /// never stays "rebirth"; a throwing custom trigger undoes the step (age and step count
  /// unchanged, nothing published); a throwing reset callback keeps the death pending; a
  /// throwing on_rebirth keeps the rebirth (generation advanced, @p params hold the mix)
  /// and the next step publishes it. The event of a throwing step is not recorded.
  ///
  /// When AgentOptions::checkpoint asks for it, the step ends with a save_checkpoint of
  /// @p params (collective: every agent saves at the same step count).
  StepEvent step(std::int64_t iteration, double metric, std::span<const LayerRef> params) override {
    return core_.step(window_, iteration, metric, params);
  }
  /// @copydoc step(std::int64_t, double, std::span<const LayerRef>)
  StepEvent step(std::int64_t iteration, double metric, std::initializer_list<LayerRef> params) {
    return step(iteration, metric, std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// Publishes @p params now, outside the cadence (e.g. the initial parameters before the
  /// first step, so that early deaths elsewhere find this agent as a donor).
  PublishResult publish(std::span<const ConstLayerRef> params) override {
    return core_.publish(window_, params);
  }
  /// @copydoc publish(std::span<const ConstLayerRef>)
  PublishResult publish(std::initializer_list<ConstLayerRef> params) {
    return publish(std::span<const ConstLayerRef>(params.begin(), params.size()));
  }

  /// Marks this agent as having left the population: others stop choosing it as a donor
  /// and stop ranking it. Its window stays readable until destruction; step() throws
  /// InvalidArgument from then on (publish() is still allowed).
  void leave() override { core_.leave(window_); }

  /// Lets MPI progress once on the window (see AgentInterface::progress).
  void progress() override { window_.progress(); }
  /// Pauses this agent (see AgentInterface::pause and docs/agent.md, "Pause and resume"):
  /// a local roster update, not collective; other agents stop choosing and ranking it.
  void pause() override { core_.pause(window_); }
  /// Ends a pause (see AgentInterface::resume); local, not collective.
  void resume() override { core_.resume(window_); }
  /// Whether the agent is paused.
  [[nodiscard]] bool is_paused() const noexcept override { return core_.paused(); }

  /// Frees the window, reporting errors as exceptions.
  /// @note Collective over the window's communicator.
  void close() override { window_.close(); }

  /// Gives the window up without freeing it (Window::abandon): for an agent whose window
  /// holds a dead rank. Local; the agent is then empty (as moved from) but for destruction.
  void abandon() noexcept { window_.abandon(); }

  /// Moves the agent to @p window, a new window over a new communicator (a membership
  /// epoch, docs/elastic.md) with this agent's rank, population size and layout, keeping
  /// everything else: age, counters, hyperparameters, random streams, statistics, hooks. The
  /// old window is abandoned, never freed (it may hold a dead rank); the new one continues
  /// its versions. Nothing is published: publish() before others may read this agent.
  /// InvalidArgument (nothing changed) when rank, size or layout differ. Local.
  void replace_window(window_type&& window) {
    window.continue_from(window_, "paramwin: Agent::replace_window");
    window_ = std::move(window);
    core_.rebound();
  }

  /// Makes the next step() a rebirth from donors (reason DeathReason::joined) whatever the
  /// triggers, warm-up and cooldown: an agent that takes a dead member's slot starts from
  /// live donors' parameters, optimizer state (on_rebirth) and hyperparameters; its window
  /// entry gets a new incarnation (Window::renew_incarnation): a new life in the slot. Local.
  void join() {
    window_.renew_incarnation();
    core_.join();
  }

  /// The owned window (roster reads, transport queries, direct pulls).
  [[nodiscard]] window_type& window() noexcept { return window_; }
  /// @copydoc window()
  [[nodiscard]] const window_type& window() const noexcept { return window_; }
  /// The decision engine (age, maximum age, generation, options).
  [[nodiscard]] const Policy& policy() const noexcept { return core_.policy(); }
  /// Counters and timers so far.
  [[nodiscard]] const AgentStats& stats() const noexcept override { return core_.stats(); }
  /// Options in force.
  [[nodiscard]] const AgentOptions& options() const noexcept override { return core_.options(); }
  /// The layout of the parameters (the window's).
  [[nodiscard]] const Layout& layout() const override { return window_.layout(); }

  [[nodiscard]] int rank() const { return window_.rank(); }  ///< rank in the window
  [[nodiscard]] int size() const { return window_.size(); }  ///< agents in the window
  [[nodiscard]] std::int64_t steps() const noexcept override {
    return policy().steps();
  }  ///< steps
  [[nodiscard]] std::int64_t age() const noexcept override {
    return policy().age();
  }  ///< since birth
  [[nodiscard]] std::int64_t max_age() const noexcept override {
    return policy().max_age();
  }                                                                   ///< drawn
  [[nodiscard]] std::uint64_t generation() const noexcept override {  ///< rebirths
    return policy().generation();
  }

  /// This agent's hyperparameters (see AgentInterface::hyperparameters).
  [[nodiscard]] const Hyperparameters& hyperparameters() const override {
    return core_.hyperparameters();
  }
  /// Sets them; the next publish carries them (see AgentInterface::set_hyperparameters).
  void set_hyperparameters(const Hyperparameters& values) override {
    core_.set_hyperparameters(values);
  }

  /// Saves the whole population into one parallel-HDF5 checkpoint @p path: this agent's
  /// @p params (host memory) and state, every other rank's agent likewise
  /// (docs/checkpoints.md). Written as "<path>.tmp" and renamed once complete, so a crash
  /// leaves any previous file intact; then the oldest checkpoints of
  /// AgentOptions::checkpoint.path beyond checkpoint.keep are deleted. CheckpointError (or
  /// InvalidArgument for bad @p params) on every rank when any rank fails. With
  /// CheckpointOptions::async it returns once @p params are copied and the write, rename and
  /// deletions go on in the background (see wait_checkpoint).
  /// @note Collective over the window's communicator: every agent calls it with the same path.
  void save_checkpoint(const std::string& path, std::span<const ConstLayerRef> params) override {
    core_.save_checkpoint(window_, path, params);
  }
  /// @copydoc save_checkpoint(const std::string&, std::span<const ConstLayerRef>)
  void save_checkpoint(const std::string& path, std::initializer_list<ConstLayerRef> params) {
    save_checkpoint(path, std::span<const ConstLayerRef>(params.begin(), params.size()));
  }
  /// Continues from checkpoint @p path: fills @p params (host memory) and restores the agent
  /// (random streams, age, maximum age, generation, pending death, counters, hyperparameters,
  /// publish version, roster), then republishes. With as many agents as the file holds each
  /// rank continues its own; with fewer, the best by metric; with more, the extra agents are
  /// reborn from the best ones (CheckpointLoad::reborn). The file is validated entirely
  /// (format, library version, layout, agent count, checksums) before anything changes:
  /// CheckpointError on every rank otherwise, with the agent and @p params untouched.
  /// @note Collective over the window's communicator.
  CheckpointLoad load_checkpoint(const std::string& path,
                                 std::span<const LayerRef> params) override {
    return core_.load_checkpoint(window_, path, params);
  }
  /// @copydoc load_checkpoint(const std::string&, std::span<const LayerRef>)
  CheckpointLoad load_checkpoint(const std::string& path, std::initializer_list<LayerRef> params) {
    return load_checkpoint(path, std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// Loads the newest checkpoint of AgentOptions::checkpoint.path (rank 0 looks; the highest
  /// step wins) and returns what it loaded, or nothing (agent untouched) when there is none.
  /// @note Collective over the window's communicator.
  std::optional<CheckpointLoad> resume_newest(std::span<const LayerRef> params) override {
    return core_.resume_newest(window_, params);
  }
  /// @copydoc resume_newest(std::span<const LayerRef>)
  std::optional<CheckpointLoad> resume_newest(std::initializer_list<LayerRef> params) {
    return resume_newest(std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// Waits for an asynchronous save in flight (CheckpointOptions::async) and throws its error
  /// (CheckpointError on every rank); returns at once when none is in flight. Call it before
  /// relying on the newest file (e.g. before leaving); the destructor waits too, but can
  /// only print an error.
  /// @note Collective over the window's communicator.
  void wait_checkpoint() override { core_.wait_checkpoint(window_); }
  /// Adds the owner's own state (e.g. an optimizer's) to every checkpoint of this agent.
  void set_checkpoint_hooks(CheckpointHooks hooks) override {
    core_.set_checkpoint_hooks(std::move(hooks));
  }

  /// Writes the counters and phase timers (see AgentStats::write_summary).
  void write_summary(std::ostream& out) const { stats().write_summary(out); }
  /// Replaces the event log (the one opened from AgentOptions::event_log, if any).
  void set_event_log(EventLog log) noexcept { core_.set_event_log(std::move(log)); }

 private:
  detail::AgentBase core_;  // first: validated before the collective window creation
  window_type window_;
};

}  // namespace paramwin
