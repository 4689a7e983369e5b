#pragma once
/// @file averaging.hpp
/// AveragingAgent: data-parallel training of one model by ranks that average their parameters
/// with each other one-sidedly (asynchronous model averaging, gossip): no deaths, no resets.
/// Every interval an agent reads the latest published snapshots of the peers its Topology
/// names and mixes them into its own parameters, new = w_self * own + sum_i w_i * peer_i,
/// then publishes. Warm-up and cool-down steps average synchronously (MPI_Allreduce).
/// See docs/averaging.md.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/checkpoint.hpp"
#include "paramwin/enum_names.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/pull.hpp"
#include "paramwin/window_core.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin {

/// How the peers of each averaging round are chosen.
enum class TopologyKind : std::uint8_t {
  all = 0,          ///< every other rank, every round (Bagua's mode)
  random = 1,       ///< k distinct other ranks drawn per round from a seeded stream (KungFu: k 1)
  ring = 2,         ///< the two neighbours rank - 1 and rank + 1 (one when the size is 2)
  exponential = 3,  ///< one peer, (rank + 2^i) mod size at round r, i = r mod #{i : 2^i < size}
  neighbours = 4,   ///< an explicit list of peers per rank (Topology::neighbours)
  custom = 5,       ///< a callable (round, rank, size) -> peers (Topology::custom)
};

namespace detail {
inline constexpr EnumName<TopologyKind> kTopologyKindNames[] = {{TopologyKind::all, "all"},
                                                                {TopologyKind::random, "random"},
                                                                {TopologyKind::ring, "ring"},
                                                                {TopologyKind::exponential,
                                                                 "exponential"},
                                                                {TopologyKind::neighbours,
                                                                 "neighbours"},
                                                                {TopologyKind::custom, "custom"}};
}  // namespace detail
/// Names of TopologyKind.
template <>
inline constexpr EnumTable<TopologyKind> enum_table<TopologyKind>{"topology",
                                                                  detail::kTopologyKindNames};

/// A custom topology: the peers of @p rank at its averaging round @p round (0, 1, ...) in a
/// population of @p size. Peers must be ranks in [0, size), not @p rank, without repeats.
using TopologyFunction = std::function<std::vector<int>(std::int64_t round, int rank, int size)>;

/// Which peers an agent reads at each of its averaging rounds (round: the agent's own count of
/// asynchronous rounds, so the choice is reproducible whatever the other ranks do).
struct Topology {
  TopologyKind kind = TopologyKind::all;  ///< the rule
  int k = 1;                              ///< TopologyKind::random: peers per round, 1..size-1
  std::uint64_t seed = 0;                 ///< TopologyKind::random: the stream's seed
  /// TopologyKind::neighbours: one list per rank (size lists), each of distinct other ranks.
  std::vector<std::vector<int>> neighbours{};
  TopologyFunction custom{};  ///< TopologyKind::custom: the callable

  /// Every other rank.
  [[nodiscard]] static Topology all_peers() { return {}; }
  /// @p peers distinct other ranks per round, drawn from the stream of @p stream_seed.
  [[nodiscard]] static Topology random_peers(int peers, std::uint64_t stream_seed = 0) {
    return {.kind = TopologyKind::random, .k = peers, .seed = stream_seed};
  }
  /// The two ring neighbours.
  [[nodiscard]] static Topology ring_peers() { return {.kind = TopologyKind::ring}; }
  /// SGP's exponential graph: one peer, 2^i ranks ahead.
  [[nodiscard]] static Topology exponential_peers() { return {.kind = TopologyKind::exponential}; }
  /// An explicit list of peers per rank.
  [[nodiscard]] static Topology neighbour_lists(std::vector<std::vector<int>> lists) {
    return {.kind = TopologyKind::neighbours, .neighbours = std::move(lists)};
  }
  /// A callable.
  [[nodiscard]] static Topology custom_peers(TopologyFunction function) {
    return {.kind = TopologyKind::custom, .custom = std::move(function)};
  }

  /// The peers of @p rank at its round @p round, in a population of @p size (unchecked for
  /// TopologyKind::custom: see check_peers).
  [[nodiscard]] std::vector<int> peers(std::int64_t round, int rank, int size) const;
};

/// "" when @p peers are valid peers of @p rank in a population of @p size (ranks in range, not
/// @p rank, no repeats), else what is wrong with them.
[[nodiscard]] std::string check_peers(std::span<const int> peers, int rank, int size);

/// Options of an AveragingAgent. check_options() says what is wrong with them.
struct AveragingOptions {
  Topology topology{};  ///< which peers each round reads
  /// Steps between two asynchronous rounds (>= 1): a round at steps interval, 2*interval, ...
  /// (counted from the end of the warm-up). Ignored when interval_ms > 0.
  std::int64_t interval = 1;
  /// > 0: a round at the first step at least this many milliseconds after the previous round
  /// (Bagua's sync_interval_ms) instead of every interval steps. Finite, >= 0.
  double interval_ms = 0.0;
  /// Weight of the agent's own parameters, in [0, 1) (finite and >= 0 when normalize_weights
  /// scales it with peer_weights). NaN (default): uniform,
  /// 1 / (usable peers + 1). Given without peer_weights: the peers share 1 - self_weight
  /// equally.
  double self_weight = std::numeric_limits<double>::quiet_NaN();
  /// One weight per peer of a round, in the order the topology names them (finite, >= 0);
  /// needs self_weight; self_weight + sum must be 1 (within 1e-9) unless normalize_weights.
  /// Empty: the peers share 1 - self_weight equally. A skipped peer's weight is spread over
  /// the peers read, in proportion to theirs; self_weight is kept.
  std::vector<double> peer_weights{};
  /// Scale self_weight and peer_weights to sum 1 instead of refusing weights that do not.
  bool normalize_weights = false;
  /// Steps that average synchronously (MPI_Allreduce mean over the communicator, every step)
  /// before asynchronous rounds start. Collective: every rank must step through them.
  std::int64_t warmup_steps = 0;
  /// Synchronous steps at the end: steps after total_steps - cooldown_steps average with
  /// MPI_Allreduce (needs total_steps). Collective, as the warm-up.
  std::int64_t cooldown_steps = 0;
  /// The run's number of steps, for cooldown_steps (0: unknown, no cool-down).
  std::int64_t total_steps = 0;
  /// Publish every this many steps (>= 1): the parameters after the step's mix.
  std::int64_t publish_every = 1;
  /// > 0: a peer whose version has not changed over this many of this agent's steps (as this
  /// agent observed it) is stale and skipped.
  std::int64_t stale_steps = 0;
  /// > 0: a peer whose latest publish is older than this (reader's MPI_Wtime minus the
  /// roster's publish time) is stale and skipped.
  double stale_seconds = 0.0;
  /// Background averaging (Bagua's design): a round's read of the peers runs while the
  /// trainer computes, and its mix lands as a correction at a later step(), added to the
  /// parameters as they are then, so that the local progress made meanwhile is kept:
  /// own_now + (1 - self)(peers' mix - own_at_read). With background_worker (and a window
  /// where it is safe, see AveragingAgent::background_inline_reason) the read runs on the
  /// agent's worker thread and step() never waits for it; otherwise it runs inside the step
  /// that begins the round and lands at the next step. Host float32 and float64 layers only.
  bool background = false;
  /// Background: read on the agent's worker thread (true), or inside step() (false: the read
  /// does not overlap the trainer; its correction still lands at the next step).
  bool background_worker = true;
  /// Symmetric, mean-preserving averaging (pairwise exchange): a round that moves this
  /// agent w_i (y_i - own) towards peer i's snapshot y_i also moves peer i by -w_i (y_i - own),
  /// added to a shared-memory inbox of peer i under its lock and drained into its parameters
  /// at its next step (or synchronous step, or finish()). The two changes cancel, so averaging
  /// leaves the population's mean unchanged (up to rounding into the layer's type), which
  /// pull-only gossip does not. Needs every rank on one node, host float32 or float64 layers
  /// and inline rounds (background false); costs one float64 per element per rank. Default
  /// weights: w_i = 1 / (2 * usable peers + 1) (each exchange is applied on both sides).
  bool symmetric = false;
  /// Deadline of one round's reads (roster and pull) over RMA, in seconds (0: none). Past it
  /// the round is left out (parameters unchanged) and says why.
  double timeout_seconds = 0.0;
  /// Path of a JSON-lines log of the rounds ("{rank}" is replaced by the rank); empty: none.
  std::string event_log{};
  WindowOptions window{};  ///< the agent's window
};

/// "" when @p options are valid for rank @p rank of @p size ranks, else the first problem.
[[nodiscard]] std::string check_options(const AveragingOptions& options, int rank, int size);

/// What a step did with the parameters.
enum class RoundKind : std::uint8_t {
  none = 0,         ///< no round was due (or the agent is paused)
  gossip = 1,       ///< an asynchronous round: peers read one-sidedly and mixed in
  synchronous = 2,  ///< warm-up, cool-down or finish(): MPI_Allreduce mean over every rank
  /// The first step after AveragingAgent::join(): the uniform mix of every usable member of
  /// the population replaced the parameters (self weight 0), whatever the topology.
  joined = 3,
};

/// Why a peer of a round was not mixed in.
enum class SkipReason : std::uint8_t {
  none = 0,             ///< read and mixed in
  never_published = 1,  ///< version 0
  paused = 2,           ///< its roster says paused
  left = 3,             ///< its roster says left
  stale = 4,            ///< AveragingOptions::stale_steps or stale_seconds
  non_finite = 5,       ///< its snapshot holds NaN or infinity
  unreachable = 6,      ///< its roster or snapshot was not read before the deadline
  zero_weight = 7,      ///< its weight is 0
  suspect = 8,          ///< its process is judged dead or stalled (RosterEntry::suspect)
};

namespace detail {
inline constexpr EnumName<RoundKind> kRoundKindNames[] = {{RoundKind::none, "none"},
                                                          {RoundKind::gossip, "gossip"},
                                                          {RoundKind::synchronous, "synchronous"},
                                                          {RoundKind::joined, "joined"}};
inline constexpr EnumName<SkipReason> kSkipReasonNames[] =
    {{SkipReason::none, "none"},
     {SkipReason::never_published, "never_published"},
     {SkipReason::paused, "paused"},
     {SkipReason::left, "left"},
     {SkipReason::stale, "stale"},
     {SkipReason::non_finite, "non_finite"},
     {SkipReason::unreachable, "unreachable"},
     {SkipReason::zero_weight, "zero_weight"},
     {SkipReason::suspect, "suspect"}};
}  // namespace detail
/// Names of RoundKind.
template <>
inline constexpr EnumTable<RoundKind> enum_table<RoundKind>{"round kind", detail::kRoundKindNames};
/// Names of SkipReason.
template <>
inline constexpr EnumTable<SkipReason> enum_table<SkipReason>{"skip reason",
                                                              detail::kSkipReasonNames};

/// One peer of an averaging round.
struct AveragingPeer {
  int rank = -1;                          ///< the peer's rank
  std::uint64_t version = 0;              ///< the version read (roster's version if skipped)
  std::uint64_t stamp = 0;                ///< the stamp of that version (the peer's step)
  double weight = 0.0;                    ///< the weight it got in the mix (0 if skipped)
  SkipReason skipped = SkipReason::none;  ///< why it was left out
  Transport transport = Transport::shm;   ///< how it was read
};

/// What one AveragingAgent::step (or finish) did.
struct AveragingRound {
  int rank = -1;                     ///< the agent's rank
  std::int64_t step = 0;             ///< step() calls so far, this one included
  std::int64_t round = -1;           ///< the agent's asynchronous round index (-1: none)
  RoundKind kind = RoundKind::none;  ///< what kind of averaging ran
  /// The parameters changed: a synchronous mean, or a gossip round with at least one peer
  /// read (inline), or a background correction added.
  bool applied = false;
  /// Background: a correction read at an earlier step was added in this step.
  bool background_applied = false;
  /// Background: the round reported here (round, peers, self_weight, bytes, seconds, note)
  /// was read on the agent's worker thread. Its read began at read_step and finished before
  /// this step, which collected it (and added its correction: background_applied). False for
  /// a round read inside step() (AveragingAgent::background_inline_reason says why).
  bool overlapped = false;
  /// Background: the step whose call began the read of the round reported here (inline:
  /// this step; its correction lands at the next); 0 when no round is reported.
  std::int64_t read_step = 0;
  /// Background on the worker: the round whose read this step began (-1: none).
  std::int64_t started_round = -1;
  /// Background on the worker: a round was due, but the read of the previous one had not
  /// finished, so none began (the step did not wait; note says which read was running).
  bool busy = false;
  /// Symmetric averaging: the exchanges peers made with this agent since its previous step
  /// (their -w (y - x) terms) that this step added to the parameters before its own round.
  std::int64_t received = 0;
  double self_weight = 1.0;            ///< weight of the agent's own parameters (1: unchanged)
  std::vector<AveragingPeer> peers{};  ///< the round's peers in topology order
  std::string note{};                  ///< why nothing changed, or the read's error
  bool paused = false;                 ///< the agent was paused
  bool published = false;              ///< the parameters were published in this step
  /// A join (AveragingAgent::join) is still pending after this step: it read no member yet.
  bool joining = false;
  std::uint64_t version = 0;  ///< the agent's publish version after the step
  std::size_t bytes = 0;      ///< bytes read from peers
  /// Wall time of the averaging in this step (read and mix); for a round read on the worker
  /// (overlapped), the read's own time there.
  double seconds = 0.0;
};

/// One JSON object (no newline) describing @p round (the lines of the event log).
[[nodiscard]] std::string to_json(const AveragingRound& round);

namespace detail {
class AveragingState;
}  // namespace detail
class HierarchicalAveragingAgent;

/// One rank of a model trained data-parallel by ranks that average with each other
/// one-sidedly. Owns its window (every rank of @p comm holds one agent), and with background
/// averaging on a worker thread that reads the peers. Move-only; not thread-safe (one thread
/// calls it; the worker is internal). Asynchronous steps never wait for another rank; warm-up,
/// cool-down and finish() are collective.
class AveragingAgent {
 public:
  using window_type = Window;  ///< the owned window

  /// Checks @p options on every rank (InvalidArgument on every rank, naming the first failing
  /// rank, when any is invalid), refuses ranks with another layout, and creates the window.
  /// @p site (leave the default: the caller's line) is the window's creation site (see
  /// ParameterWindow's constructor): unnamed windows pair up by it.
  /// @note Collective over @p comm.
  AveragingAgent(MPI_Comm comm, Layout layout, AveragingOptions options = {},
                 const std::source_location& site = std::source_location::current());
  /// Adopts @p window, created by the caller (options.window is ignored: the window's own
  /// options are used), as an elastic population does at each epoch (ElasticAveragingAgent).
  /// Local, no collective: @p options are checked on this rank only, against the population
  /// @p members (window ranks in slot order, see set_members; empty: every rank). Such an
  /// agent has no communicator of its own for collectives, so warm-up, cool-down, symmetric
  /// averaging (InvalidArgument here), finish() and checkpoints (InvalidArgument there) are
  /// refused. Every InvalidArgument here comes before @p window is taken: it stays the
  /// caller's, valid.
  AveragingAgent(Window&& window, AveragingOptions options, std::vector<int> members = {});
  AveragingAgent(const AveragingAgent&) = delete;
  AveragingAgent& operator=(const AveragingAgent&) = delete;
  /// Takes over @p other's window and state; @p other throws InvalidArgument from every call.
  AveragingAgent(AveragingAgent&& other) noexcept;
  /// Frees this agent's window (collectively) and takes over @p other's.
  AveragingAgent& operator=(AveragingAgent&& other) noexcept;
  /// Frees the window. @note Collective over the communicator.
  ~AveragingAgent();

  /// One training step's averaging: a synchronous mean (warm-up, cool-down: collective), or,
  /// when a round is due and the agent is not paused, an asynchronous round over the
  /// topology's peers, then a publish when due. Background on the worker: a round whose read
  /// has finished is collected and its correction added first; then, when a round is due and
  /// no read is running, the next read begins on the worker (own parameters copied as
  /// own_at_read) and step() returns without waiting for it; what the read threw other than
  /// a DonorError (which becomes the round's note) is rethrown by the step that collects it,
  /// before anything changes. Background inline: the previous round's correction is added
  /// first, then the round is read. A round without any usable peer leaves @p params unchanged and
  /// says why. Bad @p params: InvalidArgument before anything changes (on every rank in synchronous
  /// steps; on this rank only in asynchronous ones, where nobody waits for it).
  AveragingRound step(std::span<const LayerRef> params);
  /// @copydoc step(std::span<const LayerRef>)
  AveragingRound step(std::initializer_list<LayerRef> params) {
    return step(std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// Publishes @p params now (e.g. the initial parameters before the first step).
  PublishResult publish(std::span<const ConstLayerRef> params);
  /// @copydoc publish(std::span<const ConstLayerRef>)
  PublishResult publish(std::initializer_list<ConstLayerRef> params) {
    return publish(std::span<const ConstLayerRef>(params.begin(), params.size()));
  }
  /// Ends the run with one synchronous mean (every rank then holds the same parameters) and
  /// publishes it; a pending background correction is dropped (a read still running on the
  /// worker is waited for first). @note Collective.
  AveragingRound finish(std::span<const LayerRef> params);
  /// @copydoc finish(std::span<const LayerRef>)
  AveragingRound finish(std::initializer_list<LayerRef> params) {
    return finish(std::span<const LayerRef>(params.begin(), params.size()));
  }

  /// Saves the whole averaging population into one parallel-HDF5 checkpoint @p path (the
  /// format of Agent's checkpoints, docs/checkpoints.md; one agent per rank): every rank's
  /// @p params (host memory, or device memory CUDA knows), its state (steps, rounds, paused,
  /// publish version, what it saw of its peers) and the blobs of its checkpoint hooks.
  /// Written as "<path>.tmp" and renamed once complete. Background averaging: a read running
  /// on the worker is waited for, and it and a pending correction are dropped (as by a
  /// synchronous step), so that a run resumed from the file continues as this one does.
  /// Symmetric averaging: each rank's parameters are saved with the exchanges still pending
  /// in its inbox added (after a barrier), and a load empties the inbox.
  /// Bad @p params: InvalidArgument on every rank; a failed write: CheckpointError on every
  /// rank (the previous file at @p path is intact). @note Collective.
  void save_checkpoint(const std::string& path, std::span<const ConstLayerRef> params);
  /// @copydoc save_checkpoint(const std::string&, std::span<const ConstLayerRef>)
  void save_checkpoint(const std::string& path, std::initializer_list<ConstLayerRef> params) {
    save_checkpoint(path, std::span<const ConstLayerRef>(params.begin(), params.size()));
  }
  /// Continues from checkpoint @p path, written by save_checkpoint over as many ranks as this
  /// agent's: fills @p params with this rank's saved parameters, restores the agent's state
  /// (its next rounds are the ones the saving run made after the save: same round indices,
  /// so the same peers) and publishes the loaded parameters under the saved version number
  /// (unless the saved agent had never published). A pending background correction is
  /// dropped. Everything is checked on every rank before anything changes: a missing or
  /// corrupted file, another layout, another number of ranks, a checkpoint of Agents (a
  /// population of dying agents) throw CheckpointError on every rank, bad @p params
  /// InvalidArgument; the agent and @p params are then unchanged. @note Collective.
  CheckpointLoad load_checkpoint(const std::string& path, std::span<const LayerRef> params);
  /// @copydoc load_checkpoint(const std::string&, std::span<const LayerRef>)
  CheckpointLoad load_checkpoint(const std::string& path, std::initializer_list<LayerRef> params) {
    return load_checkpoint(path, std::span<const LayerRef>(params.begin(), params.size()));
  }
  /// Adds the owner's own state to this agent's checkpoints (as Agent::set_checkpoint_hooks:
  /// e.g. the LibTorch adapter's optimizer state). The load hook gets reborn = false.
  void set_checkpoint_hooks(CheckpointHooks hooks);

  /// Bagua's abort(): no more asynchronous reads, no publishes, roster says paused (so no
  /// peer reads this agent). Synchronous steps still take part (they are collective). A
  /// pending background correction is dropped; a read still running on the worker is not
  /// waited for and is dropped when it ends. No-op when paused.
  void pause();
  /// Bagua's resume(): roster active again; rounds continue. No-op when not paused.
  void resume();
  [[nodiscard]] bool is_paused() const;  ///< whether paused

  /// Makes the next step (not paused) a join: the parameters are replaced by the uniform mix
  /// of every usable member of the population (self weight 0, whatever the topology; read
  /// inline), reported as RoundKind::joined, and published. Until a join has read at least
  /// one member, the agent publishes nothing and its roster says it is being reborn (so no
  /// peer mixes its stale parameters in). A pending background correction is dropped; the
  /// window entry gets a new incarnation (a new life in the slot). With symmetric averaging
  /// the join is a pull only. Local.
  void join();
  /// Whether a join is pending (join() was called and no join step has read a member yet).
  [[nodiscard]] bool joining() const;
  /// The population within the window: @p members are window ranks in slot order (every
  /// rank at most once); the topology then ranges over them (its rank: this rank's index
  /// among them, its size: their count) and no other rank is ever read; a join mixes them
  /// all. Empty: every rank of the window (the default). An elastic population in one
  /// standing window sets it at each epoch (the spares and the dead hold ranks outside).
  /// InvalidArgument (nothing changed) for ranks out of range or repeated, or options (a
  /// topology) invalid over them (for this rank's index, or the first when it is not among
  /// them). Local.
  void set_members(std::vector<int> members);
  /// The window ranks set_members gave (empty: every rank).
  [[nodiscard]] const std::vector<int>& members() const;
  /// Gives the window up without freeing it (Window::abandon), for a window whose
  /// communicator holds a dead rank: the background worker is stopped (a read in flight
  /// completes first: bound it with timeout_seconds), and the agent's communicators and
  /// symmetric inbox are left allocated, never freed. Local; the agent is then empty (as moved
  /// from) but for destruction.
  void abandon() noexcept;
  /// Moves the agent to @p window, a new window over a new communicator (a membership epoch)
  /// with this agent's rank, size and layout, keeping its counters and what it saw of its
  /// peers; the new window continues the old one's versions and status. The old window is
  /// abandoned, never freed. Nothing is published: publish() before others may read this
  /// agent. A background read in flight is waited for and dropped. InvalidArgument (nothing
  /// changed) when rank, size or layout differ. Local.
  void replace_window(Window&& window);

  [[nodiscard]] int rank() const;                         ///< rank in the communicator
  [[nodiscard]] int size() const;                         ///< ranks in the communicator
  [[nodiscard]] std::int64_t steps() const;               ///< step() calls so far
  [[nodiscard]] std::int64_t rounds() const;              ///< asynchronous rounds so far
  [[nodiscard]] const AveragingOptions& options() const;  ///< as given
  /// The layout (never waits for a background read, unlike window()).
  [[nodiscard]] const Layout& layout() const;
  /// The agent's window. Waits for a background read running on the worker (its round is
  /// still collected by the next step()), so the caller may use the window until then.
  [[nodiscard]] Window& window();
  /// @copydoc window()
  [[nodiscard]] const Window& window() const;
  /// Background averaging: "" when its reads run on the worker thread, else why they run
  /// inside step() (decided once, at construction): AveragingOptions::background_worker is
  /// false, the window's slots live on a GPU, or MPI's thread level is not
  /// MPI_THREAD_MULTIPLE. "background averaging is off" without AveragingOptions::background.
  [[nodiscard]] const std::string& background_inline_reason() const;

 private:
  friend class HierarchicalAveragingAgent;  // its checkpoints hold its leader's agent's state
  [[nodiscard]] detail::AveragingState& state() const;
  std::unique_ptr<detail::AveragingState> state_;
};

}  // namespace paramwin
