#pragma once
/// @file agent_interface.hpp
/// AgentInterface: what every kind of agent offers a training loop, so that code driving an
/// agent (the LibTorch adapter, a user's trainer) holds one type whether the agent is one
/// rank (Agent) or g ranks (GroupAgent).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "paramwin/agent_options.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/event.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/pause_guard.hpp"
#include "paramwin/pull.hpp"

namespace paramwin {

class LayerRef;       // layer_ref.hpp: the caller's layers (with Kokkos views)
class ConstLayerRef;  // layer_ref.hpp

/// One member of a population, of any kind. See Agent and GroupAgent for the collectives
/// each kind's calls involve.
class AgentInterface {
 public:
  virtual ~AgentInterface() = default;

  /// One training step: may die and be reborn into @p params, publishes per the cadence.
  virtual StepEvent step(std::int64_t iteration, double metric,
                         std::span<const LayerRef> params) = 0;
  /// Publishes @p params now, outside the cadence.
  virtual PublishResult publish(std::span<const ConstLayerRef> params) = 0;
  /// Leaves the population: others stop choosing this agent; step() throws from then on.
  virtual void leave() = 0;
  /// Lets MPI progress once on this rank's window, serving agents that read it over RMA;
  /// cheap (one MPI_Iprobe). step() does it once per step (AgentOptions::serve); call it
  /// inside long computations between steps too.
  virtual void progress() = 0;
  /// Pauses the agent (evaluation, checkpointing): its roster says paused, so no other
  /// agent chooses it as a donor or ranks it; step() keeps counting and deciding but never
  /// publishes by the cadence; deaths follow AgentOptions::paused_deaths. publish() is
  /// still allowed. No-op when already paused; InvalidArgument after leave().
  virtual void pause() = 0;
  /// Ends a pause: the roster says active again. Publishes nothing by itself: the next
  /// step publishes what is owed (a rebirth while paused) or what the cadence asks for.
  /// No-op when not paused (or after leave()).
  virtual void resume() = 0;
  /// Whether the agent is paused.
  [[nodiscard]] virtual bool is_paused() const = 0;
  /// Frees the agent's window, reporting errors as exceptions (collective).
  virtual void close() = 0;

  /// The layout of the caller's parameters (a GroupAgent's: the full model).
  [[nodiscard]] virtual const Layout& layout() const = 0;
  /// Counters and phase timers so far.
  [[nodiscard]] virtual const AgentStats& stats() const = 0;
  /// Options in force.
  [[nodiscard]] virtual const AgentOptions& options() const = 0;
  [[nodiscard]] virtual std::int64_t steps() const = 0;        ///< steps so far
  [[nodiscard]] virtual std::int64_t age() const = 0;          ///< steps since (re)birth
  [[nodiscard]] virtual std::int64_t max_age() const = 0;      ///< drawn maximum age
  [[nodiscard]] virtual std::uint64_t generation() const = 0;  ///< rebirths

  /// This agent's hyperparameters (declared with the layout): what its next publish
  /// carries; a rebirth replaces them (see AgentOptions::explore). Empty if none declared.
  [[nodiscard]] virtual const Hyperparameters& hyperparameters() const = 0;
  /// Sets this agent's hyperparameters (e.g. a trainer's schedule); the next publish (by
  /// the cadence or publish()) carries them. @p values must have the layout's declarations
  /// (InvalidArgument otherwise). A GroupAgent: call on every rank with the same values.
  virtual void set_hyperparameters(const Hyperparameters& values) = 0;
  /// Saves the population into checkpoint @p path (docs/checkpoints.md; see Agent's and
  /// GroupAgent's for who takes part). Collective over all the population's ranks.
  virtual void save_checkpoint(const std::string& path, std::span<const ConstLayerRef> params) = 0;
  /// Continues from checkpoint @p path into @p params. Collective over the population's ranks.
  virtual CheckpointLoad load_checkpoint(const std::string& path,
                                         std::span<const LayerRef> params) = 0;
  /// Loads the newest checkpoint of AgentOptions::checkpoint.path, if any. Collective.
  virtual std::optional<CheckpointLoad> resume_newest(std::span<const LayerRef> params) = 0;
  /// Waits for an asynchronous save in flight and throws its error. Collective.
  virtual void wait_checkpoint() = 0;
  /// Adds the owner's own state (e.g. an optimizer's) to every checkpoint of this agent.
  virtual void set_checkpoint_hooks(CheckpointHooks hooks) = 0;

  /// Sets one hyperparameter by name (see Hyperparameters::set and set_hyperparameters).
  void set_hyperparameter(std::string_view name, double value) {
    Hyperparameters h = hyperparameters();
    h.set(name, value);
    set_hyperparameters(h);
  }

 protected:
  AgentInterface() = default;                                  ///< for the agents only
  AgentInterface(const AgentInterface&) = default;             ///< for the agents only
  AgentInterface& operator=(const AgentInterface&) = default;  ///< for the agents only
  AgentInterface(AgentInterface&&) = default;                  ///< for the agents' moves
  AgentInterface& operator=(AgentInterface&&) = default;       ///< for the agents' moves
};

}  // namespace paramwin
