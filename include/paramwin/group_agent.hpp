#pragma once
/// @file group_agent.hpp
/// GroupAgent: a member of a population whose agents are made of g ranks each (see
/// AgentGroups). Every rank of an agent exposes one shard of the agent's parameters (see
/// ShardPlan) in its own window over the shard peers; a rebirth pulls every shard from the
/// matching rank of each donor agent at once, on all g ranks, then gathers the shards inside
/// the agent. Decisions are taken once per agent, by its leader (in-agent rank 0), and shared.

#include <mpi.h>

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>

#include "paramwin/agent_interface.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/event.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/policy.hpp"
#include "paramwin/shard_plan.hpp"
#include "paramwin/window.hpp"

namespace paramwin {

/// One rank of an agent made of several ranks. Parameters live in host memory, or in device
/// memory with a device window (WindowOptions::memory = Memory::cuda, docs/gpu.md): the
/// caller's full replica on every rank, as in data-parallel training. Move-only.
///
/// Collectives: the constructor, close() and the checkpoint calls are collective over all
/// training ranks (AgentGroups::training_comm); step() is collective over the agent's own
/// ranks only (AgentGroups::agent_comm): it never waits for another agent, except for the
/// saves AgentOptions::checkpoint asks for. publish(), leave(), pause() and resume() are
/// local but must be called on every rank of the agent, in the same order.
///
/// Checkpoints (docs/checkpoints.md) have the format of Agent's: one group per agent
/// (agent index = agent id), written and read by the agents' leaders; the other ranks of an
/// agent receive what their leader read and end with the same parameters and state.
class GroupAgent final : public AgentInterface {
 public:
  /// Checks that every training rank passed the same @p layout and valid @p options
  /// (InvalidArgument / LayoutMismatch on every training rank otherwise), that the agents
  /// are uniform, and creates this rank's shard window over its shard peers. Buffer ranks
  /// and the coordinator must not construct one (InvalidArgument). Exposure::live is not
  /// supported (the window holds a shard, the trainer a full replica). @p site (leave the
  /// default: the caller's line) is the shard window's creation site (see ParameterWindow's
  /// constructor).
  /// @note Collective over @p groups.training_comm().
  GroupAgent(const AgentGroups& groups, Layout layout, AgentOptions options = {},
             const WindowOptions& window_options = {},
             const std::source_location& site = std::source_location::current());
  GroupAgent(const GroupAgent&) = delete;
  GroupAgent& operator=(const GroupAgent&) = delete;
  GroupAgent(GroupAgent&&) noexcept;             ///< moves; the source is left empty
  GroupAgent& operator=(GroupAgent&&) noexcept;  ///< frees this one's window, takes over
  /// Frees the window; never throws.
  /// @note Collective over the shard peers (every agent's rank with this in-agent rank).
  ~GroupAgent() override;

  /// One training step of the whole agent: every rank of the agent calls it with the same
  /// iteration and its own @p metric (the agent's metric is their mean) and its full
  /// replica of the parameters. The leader decides (triggers, donors, weights) and shares
  /// the decision; on a death every rank pulls its shard from the matching rank of each
  /// donor agent into scratch memory, the agent checks that every shard of each donor came
  /// from the same publish of that donor (the publish stamp), gathers the shards into
  /// every rank's @p params, calls on_rebirth on every rank and republishes. Shards from
  /// different publishes (a donor agent that went on training): the ranks that read the
  /// older publish read again (up to 3 times). A failed pull or shards that still differ:
  /// retried with a fresh choice (up to 3 times), then the death is deferred with @p params
  /// unchanged on every rank.
  ///
  /// When AgentOptions::checkpoint asks for it, the step ends with a save_checkpoint of
  /// @p params (collective over the training ranks: every agent saves at the same step).
  ///
  /// Bad @p params on any rank: InvalidArgument on every rank of the agent, nothing
  /// changed. The returned event is the same on every rank of the agent except for the
  /// timers (each rank's own) and the note (the leader's); `rank` is the agent id, donor
  /// `rank`s are agent ids and donor `version`s are the group publish stamps read.
  /// @note Collective over the agent's ranks.
  StepEvent step(std::int64_t iteration, double metric, std::span<const LayerRef> params) override;
  /// @copydoc step(std::int64_t, double, std::span<const LayerRef>)
  StepEvent step(std::int64_t iteration, double metric, std::initializer_list<LayerRef> params) {
    return step(iteration, metric, std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// Saves the whole population into one parallel-HDF5 checkpoint @p path, in Agent's format
  /// (Agent::save_checkpoint): each agent's leader writes its @p params (the full replica;
  /// device memory is copied through the host) and the agent's state as agent number agent(); the
  /// other ranks check their @p params and wait. Written as "<path>.tmp" and renamed once complete;
  /// then the oldest checkpoints of AgentOptions::checkpoint.path beyond checkpoint.keep are
  /// deleted. CheckpointError (or InvalidArgument for bad @p params) on every training rank when
  /// any rank fails. With CheckpointOptions::async it returns once the leaders copied their
  /// parameters, and the write goes on in the background (see wait_checkpoint).
  /// @note Collective over the training ranks: every rank calls it with the same path.
  void save_checkpoint(const std::string& path, std::span<const ConstLayerRef> params) override;
  /// @copydoc save_checkpoint(const std::string&, std::span<const ConstLayerRef>)
  void save_checkpoint(const std::string& path, std::initializer_list<ConstLayerRef> params) {
    save_checkpoint(path, std::span<const ConstLayerRef>(params.begin(), params.size()));
  }
  /// Continues from checkpoint @p path (Agent::load_checkpoint): the leaders read and
  /// validate the file, each shares its agent's part with the agent's ranks, and every rank
  /// fills @p params (its full replica) and restores the agent (random streams, age, maximum
  /// age, generation, pending death, counters, hyperparameters, publish stamp, roster), then
  /// republishes its shard. As many agents as the file holds: each continues its own; fewer:
  /// the best by metric; more: the extra agents are reborn from the best ones. Any problem
  /// on any rank: CheckpointError (InvalidArgument for bad @p params) on every training
  /// rank, with every agent and every rank's @p params untouched.
  /// @note Collective over the training ranks.
  CheckpointLoad load_checkpoint(const std::string& path,
                                 std::span<const LayerRef> params) override;
  /// @copydoc load_checkpoint(const std::string&, std::span<const LayerRef>)
  CheckpointLoad load_checkpoint(const std::string& path, std::initializer_list<LayerRef> params) {
    return load_checkpoint(path, std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// Loads the newest checkpoint of AgentOptions::checkpoint.path (training rank 0 looks;
  /// the highest step wins), or returns nothing (agent untouched) when there is none.
  /// @note Collective over the training ranks.
  std::optional<CheckpointLoad> resume_newest(std::span<const LayerRef> params) override;
  /// @copydoc resume_newest(std::span<const LayerRef>)
  std::optional<CheckpointLoad> resume_newest(std::initializer_list<LayerRef> params) {
    return resume_newest(std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// Waits for an asynchronous save in flight (CheckpointOptions::async) and throws its error
  /// (CheckpointError on every training rank); returns at once when none is in flight.
  /// @note Collective over the training ranks.
  void wait_checkpoint() override;
  /// Adds the owner's own state (e.g. an optimizer's) to every checkpoint of this agent: the
  /// leader's save hook writes the agent's blobs, every rank's load hook receives them.
  void set_checkpoint_hooks(CheckpointHooks hooks) override;

  /// Publishes this rank's shard of @p params (the full replica) now, outside the cadence,
  /// stamped with the agent's next publish epoch. Call on every rank of the agent.
  PublishResult publish(std::span<const ConstLayerRef> params) override;
  /// @copydoc publish(std::span<const ConstLayerRef>)
  PublishResult publish(std::initializer_list<ConstLayerRef> params) {
    return publish(std::span<const ConstLayerRef>(params.begin(), params.size()));
  }

  /// Marks the agent as having left (every shard's roster says so); step() throws from
  /// then on. Call on every rank of the agent.
  void leave() override;

  /// Lets MPI progress once on this rank's shard window (see AgentInterface::progress).
  void progress() override;
  /// Pauses the agent (see AgentInterface::pause): this rank's shard roster says paused.
  /// Local, but call it on every rank of the agent before its next step(): step() throws
  /// InvalidArgument on every rank of an agent paused on some ranks only (nothing changed).
  void pause() override;
  /// Ends the pause (see AgentInterface::resume); call it on every rank of the agent.
  void resume() override;
  /// Whether this rank of the agent is paused.
  [[nodiscard]] bool is_paused() const override;

  /// Frees the window, reporting errors as exceptions.
  /// @note Collective over the shard peers.
  void close() override;

  /// This rank's shard window (shard peers: rank = agent id).
  [[nodiscard]] ParameterWindow<>& window();
  /// @copydoc window()
  [[nodiscard]] const ParameterWindow<>& window() const;
  /// How the model is cut into shards.
  [[nodiscard]] const ShardPlan& plan() const;
  /// Counters and this rank's phase timers. Deaths, deferrals and publishes are the agent's
  /// (the same on its ranks); bytes_pulled are this rank's own.
  [[nodiscard]] const AgentStats& stats() const override;
  /// Options in force.
  [[nodiscard]] const AgentOptions& options() const override;
  /// The full layout (every rank holds the full replica).
  [[nodiscard]] const Layout& layout() const override;

  [[nodiscard]] int agent() const;                                    ///< this agent's id
  [[nodiscard]] int agents() const;                                   ///< agents in the population
  [[nodiscard]] int rank_in_agent() const;                            ///< 0 .. g-1 (0 decides)
  [[nodiscard]] int ranks_per_agent() const;                          ///< g
  [[nodiscard]] bool leader() const { return rank_in_agent() == 0; }  ///< decides for the agent
  [[nodiscard]] std::int64_t steps() const override;                  ///< steps so far
  [[nodiscard]] std::int64_t age() const override;                    ///< steps since birth
  [[nodiscard]] std::int64_t max_age() const override;      ///< drawn maximum age in force
  [[nodiscard]] std::uint64_t generation() const override;  ///< rebirths
  /// Publish epoch of the agent's latest group publish (the stamp of its shards).
  [[nodiscard]] std::uint64_t epoch() const;

  /// The agent's hyperparameters (the same on every rank of the agent; see
  /// AgentInterface::hyperparameters). Every shard of a publish carries them.
  [[nodiscard]] const Hyperparameters& hyperparameters() const override;
  /// Sets them on this rank; call on every rank of the agent with the same values before
  /// its next publish (see AgentInterface::set_hyperparameters).
  void set_hyperparameters(const Hyperparameters& values) override;

  /// Writes the counters and phase timers (see AgentStats::write_summary).
  void write_summary(std::ostream& out) const;
  /// Replaces the event log; only the leader writes events (one line per agent).
  void set_event_log(EventLog log);

 private:
  struct State;
  std::unique_ptr<State> s_;
  [[nodiscard]] State& state() const;
};

}  // namespace paramwin
