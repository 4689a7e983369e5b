#pragma once
// AveragingState: what an AveragingAgent holds (its window, options, counters, what it saw of
// its peers, the pending background correction or the background round in flight on the
// worker, the event log), and the round's parts.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "averaging/background_worker.hpp"
#include "averaging/exchange_inbox.hpp"
#include "mpi/handles.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin::detail {

/// One peer's version as this agent last observed it, and its step then (stale_steps).
struct SeenVersion {
  std::uint64_t version = 0;
  std::int64_t since_step = 0;
};

/// Records what the pull read from each peer still in (in order; the pull's donors are
/// those peers): version, stamp, transport, a non-finite skip, and its weight in the mix.
void record_reads(const PullResult& result, double self, AveragingRound& out);

/// The weights of one round: the peers read and their given weights, and the self weight.
struct RoundPlan {
  std::vector<int> donors;
  std::vector<double> weights;
  double self = 1.0;
};

/// A background round read on the worker: what the owner hands over (round, step, peers)
/// and what the worker fills (out: peers, weights, bytes, seconds, note; mixed; error).
struct BackgroundJob {
  std::int64_t round = -1;
  std::int64_t step = 0;
  std::vector<int> peers;
  AveragingRound out;
  bool mixed = false;        // the worker's mix holds the peers' weighted mean: apply it
  std::exception_ptr error;  // what the read threw: rethrown by the step that collects it
};

class AveragingState {
 public:
  AveragingState(MPI_Comm comm, Layout layout, AveragingOptions options,
                 const std::source_location& site);
  /// Adopts @p window (AveragingAgent's constructor from a window): local, no communicator
  /// for collectives; @p options checked on this rank against @p members.
  AveragingState(Window&& window, AveragingOptions options, std::vector<int> members);

  /// The asynchronous round of step steps_ into @p params (inline or background), filling
  /// @p out. Never collective.
  void gossip(const BoundLayers<LayerRef>& params, AveragingRound& out);
  /// The peers the topology names for round rounds_, as indices into the population
  /// (population_rank / population_size): asked once per round index (a custom callable is
  /// called once, whether step() checks them early or the round reads them).
  [[nodiscard]] const std::vector<int>& round_peers();
  /// round_peers() as window ranks (members_[i], or i itself when members_ is empty).
  [[nodiscard]] std::vector<int> round_ranks();
  /// This rank's index in the population (-1 when set_members left it out) and its size.
  [[nodiscard]] int population_rank() const noexcept {
    return members_.empty() ? rank_ : member_index_;
  }
  [[nodiscard]] int population_size() const noexcept {
    return members_.empty() ? size_ : static_cast<int>(members_.size());
  }
  /// Sets the population (AveragingAgent::set_members); InvalidArgument, unchanged, if bad.
  void set_members(std::vector<int> members);
  /// The join of step steps_ (AveragingAgent::join): the uniform mix of every usable member
  /// into @p params, inline; clears joining_ once a member was read.
  void join_round(const BoundLayers<LayerRef>& params, AveragingRound& out);
  /// The roster's status after a step that did not publish (a heartbeat: liveness).
  void beat();
  /// AveragingAgent::abandon: the worker stopped, the window abandoned, the communicator
  /// and the symmetric inbox left allocated (they may hold a dead rank). Never throws.
  void abandon() noexcept;
  /// InvalidArgument naming @p what when the agent has no communicator for collectives
  /// (made from a window).
  void require_collectives(const char* what) const;
  /// Symmetric averaging: adds the exchanges peers deposited in this agent's inbox to
  /// @p params; returns how many (0 when not symmetric).
  std::int64_t drain(const BoundLayers<LayerRef>& params) {
    return inbox_ ? inbox_->drain(params) : 0;
  }
  /// Symmetric averaging before a synchronous mean: every rank's deposits are in (a barrier:
  /// no rank is in an asynchronous round then), drained into @p params. @note Collective.
  std::int64_t drain_all(const BoundLayers<LayerRef>& params);
  /// A checkpoint's values of @p ordered (host layers): with symmetric averaging, after a
  /// barrier (every rank's exchanges are in), copies (kept in @p copies) with this rank's
  /// pending exchanges added, the inbox left as it is; @p ordered itself otherwise.
  /// @note Collective with symmetric averaging.
  [[nodiscard]] BoundLayers<ConstLayerRef> with_pending(
      const BoundLayers<ConstLayerRef>& ordered, std::vector<std::vector<std::byte>>& copies);
  /// After a load: the inbox emptied and opened unless paused (nothing without symmetric).
  void reset_inbox();
  /// Opens or closes the inbox (resume, pause); nothing without symmetric averaging.
  void set_inbox_open(bool open) {
    if (inbox_) {
      inbox_->set_open(open);
    }
  }
  /// Adds the pending background correction to @p params, if any.
  bool apply_correction(const BoundLayers<LayerRef>& params);
  /// MPI_Allreduce mean of @p params over the communicator. @note Collective.
  void synchronous_mean(const BoundLayers<LayerRef>& params);
  /// Whether step @p step (1-based) is synchronous (warm-up or cool-down).
  [[nodiscard]] bool synchronous(std::int64_t step) const;
  /// Whether an asynchronous round is due at this step (and resets the interval clock).
  [[nodiscard]] bool round_due();
  /// Publishes @p params with the step as stamp; sets the roster active unless paused.
  PublishResult publish(const BoundLayers<ConstLayerRef>& params);
  /// Writes @p round to the event log, if any.
  void log(const AveragingRound& round);

  // --- background rounds on the worker (averaging_background.cpp) --------------------------
  /// An asynchronous step with the worker: collects a finished round (its correction added
  /// to @p params), then begins the next read when one is due and none is in flight.
  void overlap_step(const BoundLayers<LayerRef>& params, AveragingRound& out);
  /// Paused: collects a finished round without applying it (nothing else).
  void collect_dropped();
  /// Waits for the read in flight and drops it (synchronous steps, finish()).
  void quiesce();
  /// pause(): the read in flight, if any, is dropped when it completes (no wait).
  void drop_in_flight() { drop_in_flight_ = in_flight_; }
  /// Waits for the read in flight; its result stays for the next step (window()).
  void wait_for_worker() const;
  /// Whether background rounds run on the worker thread.
  [[nodiscard]] bool has_worker() const noexcept { return worker_ != nullptr; }

  AveragingOptions options_;  // checked on every rank before the window exists
  Window window_;
  Comm sync_comm_;  // the synchronous means' communicator
  int rank_ = 0;
  int size_ = 1;
  std::int64_t steps_ = 0;
  std::int64_t rounds_ = 0;
  std::int64_t peers_round_ = -1;  // the round whose peers peers_ holds (round_peers)
  std::vector<int> peers_;
  double last_round_time_ = 0.0;
  bool paused_ = false;
  bool joining_ = false;      // join(): the next step mixes every usable member
  std::vector<int> members_;  // the population's window ranks (empty: every rank)
  int member_index_ = -1;     // this rank's index in members_ (-1: not among them)
  std::vector<SeenVersion> seen_;
  std::vector<std::vector<double>> correction_;    // per layer, background read inline
  std::vector<std::vector<char>> inline_scratch_;  // per layer, its peers' mix (inline)
  bool pending_ = false;
  std::unique_ptr<std::ofstream> log_;
  CheckpointHooks hooks_;  // the owner's blobs in checkpoints (averaging_checkpoint.cpp)
  // Background with the worker: "" when its reads overlap the trainer, else why not (or
  // "background averaging is off").
  std::string inline_reason_;

 private:
  /// Reads the roster of each of @p peers at step @p step (through @p reads: the worker's,
  /// or the window's own when null) and says which are usable (SkipReason::none).
  /// @p given_weights: a peer whose AveragingOptions::peer_weights entry (by position) is 0
  /// is skipped (false for a join, which weighs every member alike).
  void screen(std::span<const int> peers, std::int64_t step, WorkerReads* reads,
              AveragingRound& out, bool given_weights = true);
  /// Screens @p peers and forms the weights; false (out.note says why) when none is usable.
  bool plan_round(std::span<const int> peers, std::int64_t step, WorkerReads* reads,
                  AveragingRound& out, RoundPlan& plan);
  /// The pull of @p plan (weighted, momentum @p momentum, transactional).
  [[nodiscard]] PullOptions pull_options(const RoundPlan& plan, double momentum) const;
  /// Symmetric round (exchange.cpp): each usable peer read on its own into the scratch and
  /// exchanged through its inbox, then the accumulated moves added to @p params.
  void exchange_round(const BoundLayers<LayerRef>& params, const RoundPlan& plan,
                      AveragingRound& out);
  /// Runs @p read (the round's pull); a DonorError (every peer non-finite, or past the
  /// deadline) leaves out every peer still in and notes why instead of throwing.
  void guarded_read(AveragingRound& out, const std::function<void()>& read);
  /// The worker's job: the round of job_ read into mix_.
  void read_in_background();
  /// Starts the worker on round rounds_ of step steps_, over @p peers.
  void start_background_round(std::vector<int> peers);
  /// Takes the finished round off the worker into @p out (rethrows what it threw); returns
  /// whether its mix is to be applied.
  bool collect(AveragingRound& out);
  /// Sets up the worker (constructor).
  void start_worker();
  /// Background: the peers' mix into scratch, then the correction (1 - self)(mix - own).
  void begin_correction(const BoundLayers<LayerRef>& params, std::span<const int> donors,
                        const PullOptions& pull, double self, AveragingRound& out);

  // The round in flight on the worker. The worker writes job_ and mix_ between start() and
  // the end of its job; the owner reads them only after (BackgroundWorker::busy() false),
  // and writes at_read_ (own parameters when the round began) only while the worker is idle.
  std::vector<std::vector<std::byte>> mix_;      // per layer, the layer's type
  std::vector<LayerRef> mix_refs_;               // over mix_
  std::vector<std::vector<std::byte>> at_read_;  // per layer, the layer's type
  BackgroundJob job_;
  bool in_flight_ = false;                         // job_ handed to the worker, not collected yet
  bool drop_in_flight_ = false;                    // pause(): collect it without applying it
  std::unique_ptr<ExchangeInbox> inbox_;           // symmetric averaging's mailboxes
  std::vector<std::vector<double>> exchange_acc_;  // per layer, a symmetric round's moves
  std::unique_ptr<BackgroundWorker> worker_;       // last: stopped before the rest goes
};

}  // namespace paramwin::detail
