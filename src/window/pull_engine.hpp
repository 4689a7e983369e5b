#pragma once
// The pull engine: the reader's side of the versioned double buffer, fused over k donors.
// Private to src/window/pull*.cpp. Its interface to the window is narrow: const queries of
// WindowImpl (layout, slot format, ranks, transports, same-node segments) and a PullPort
// with what a pull may use or leave behind (the RMA window, the graveyard, the scratch).
//
//   pull.cpp         WindowImpl::pull, run(), the result
//   pull_plan.cpp    planning: validation, donors' headers, chunks, weights, non-finite policy
//   pull_direct.cpp  direct path: every donor on this node, pinned, streamed into the output
//   pull_staged.cpp  staged path: scratch, seqlock validation and retries, the RMA pipeline
//   pull_landing.cpp direct landing (Landing::direct): pinned RMA reads into the caller's memory
//
// Two ways through, both adding every donor's values (weighted, widened to float / double):
//
//  * direct (every donor on this node, ReadMode automatic or pinned): pin every donor's
//    current slot first, check the per-slot finiteness record its publish left, then stream
//    the weighted sum straight into the caller's memory, one pass per layer that reads all
//    k donors at once (mix()). Nothing can fail after the first write, so the pull stays
//    transactional at (k + 1) memory streams.
//  * staged (some donor over RMA, a live donor, or ReadMode optimistic): accumulate into a
//    library-owned scratch, validate every donor's copy (seqlock), retry torn donors and pin
//    those that keep tearing, and commit into the caller's memory only once all are accepted.
//    RMA donors are read with MPI_Rget, the next chunk of each in flight while this one is
//    accumulated.
//  * landing (PullOptions::landing = Landing::direct, some donor over RMA, no live donor):
//    pin every donor with its header read (one round trip), then land the bytes in the
//    caller's memory: straight (one donor, wire = layer type, no momentum, no deadline) or
//    through double-buffered chunk buffers mixed into it as they land. The header read with
//    the pin may predate the pin, so the first data batch re-reads the seqlock words; if a
//    publish slipped in, the reads restart from the version the pin holds. No scratch, no
//    final copy; a failure after the first write is a PartialPullError.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "paramwin/layer_ref.hpp"
#include "paramwin/options.hpp"
#include "window/rma_batch.hpp"
#include "window/segment.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

inline constexpr std::size_t kShmChunkBytes = std::size_t{32} * 1024;
// Few round trips over RMA: each costs the target a trip through MPI progress.
inline constexpr std::size_t kRmaChunkBytes = std::size_t{4} * 1024 * 1024;
inline constexpr unsigned kMaxPinTries = 1U << 20;
inline constexpr std::size_t kLine1 = offsetof(HeadWords, version);  // version .. stamp
inline constexpr std::size_t kLine1Bytes = offsetof(HeadWords, pad1) - kLine1;

/// What a pull may use of its window besides the const queries: the RMA window it reads
/// through, the graveyard that keeps abandoned reads, the accumulation scratch.
struct PullPort {
  MPI_Win rma_win;
  Graveyard& graveyard;
  Scratch& scratch;
};

/// One donor of a pull and the state of its read.
struct Donor {
  int rank = -1;
  Transport transport = Transport::shm;
  SegmentHeader* shm = nullptr;  // same-node header, nullptr over RMA
  bool live = false;             // donor exposes live memory: no snapshot, no finiteness record
  double user_weight = 1.0;
  double weight = 0.0;  // normalised over the donors still in
  std::uint64_t version = 0;
  std::uint64_t bad_layer = 0;  // the read slot's finiteness record (see SegmentHeader)
  std::uint64_t stamp = 0;      // the read slot's publish stamp
  unsigned attempts = 0;
  bool pinned = false;  // the current read holds a pin
  bool ever_pinned = false;
  bool skipped = false;
  bool torn = false;
  bool non_finite = false;
  std::size_t bad_index = 0;  // layer index for the error message
  double metric = 0.0;
  std::byte* buffers[2] = {nullptr, nullptr};  // RMA chunk buffers
  std::uint64_t* hyper = nullptr;              // the hyperparameters of the version read (arena)
};

/// A piece of one layer read and accumulated at once (staged path).
struct Chunk {
  std::size_t layer;
  std::size_t first;  // element index inside the layer
  std::size_t count;
};

class PullEngine {
 public:
  /// @p bound: @p out is already in layout order and checked (BoundLayers).
  PullEngine(const WindowImpl& w, PullPort port, std::span<const int> donors,
             std::span<const LayerRef> out, const PullOptions& options, bool bound = false);
  PullEngine(const PullEngine&) = delete;
  PullEngine& operator=(const PullEngine&) = delete;
  PullEngine(PullEngine&&) = delete;
  PullEngine& operator=(PullEngine&&) = delete;
  ~PullEngine() { unpin_all_noexcept(); }

  PullResult run();

 private:
  // --- planning (pull_plan.cpp) -----------------------------------------------------------
  void validate(std::span<const int> donors) const;
  /// Reads every donor's header (RMA: one batch); with @p pin_rma, pins both slots of every
  /// RMA donor in the same batch (Landing::direct).
  void read_heads(bool pin_rma = false);
  void plan_chunks();
  void normalise_weights();
  /// Marks @p d non-finite from its slot's finiteness record (live slots have none).
  void note_record(Donor& d) const;
  /// Applies NonFinitePolicy to donors marked non-finite; returns true if one was dropped.
  bool apply_non_finite();
  /// Offset, inside the donor's segment, of chunk @p c of the version being read.
  [[nodiscard]] std::size_t data_offset(const Donor& d, const Chunk& c) const;
  /// A batch whose reads land in the arena and that honours the pull's deadline.
  [[nodiscard]] RmaBatch batch() const;
  [[nodiscard]] PullResult result(double seconds) const;
  /// Copies same-node donor @p d's hyperparameters of the version being read from its slot
  /// (validated with the layers: the seqlock check or the pin that follows covers them).
  void copy_shm_hyper(Donor& d) const;
  /// Starts the reads of every RMA donor's hyperparameters of the version being read, in
  /// @p batch: the first chunk's batch, so they cost no round trip of their own.
  void issue_hyper(RmaBatch& batch);

  // --- direct path (pull_direct.cpp) ------------------------------------------------------
  void run_direct();
  /// Pins the current slot of same-node donor @p d (CPU atomics, retried if a publish
  /// slipped in).
  void pin_shm(Donor& d);

  // --- device windows (pull_device.cpp) --------------------------------------------------
  /// The direct path of a device window: every donor on this node, pinned, mixed by one
  /// kernel per layer from the mapped device slots into the caller's device memory.
  void run_device_direct();
  /// One round of the staged path on a device window whose donors are all on this node:
  /// every donor's layers into the device scratch (acc_, device memory).
  void pass_device();
  /// Writes the accumulated mix into the caller's layers: host commit(), or on a device
  /// window the device commit (device scratch) or a host commit through a bounce buffer
  /// (donors read over RMA into the host scratch).
  void commit_out();

  // --- direct landing (pull_landing.cpp) ---------------------------------------------------
  /// True when a pull with Landing::direct can land directly (no live donor).
  [[nodiscard]] bool can_land() const;
  void run_landing();
  /// Whether the whole pull lands straight in the caller's memory (no chunk buffers).
  [[nodiscard]] bool lands_straight() const;
  /// One round of reads; @p validate: check the speculative versions in the first batch.
  /// Returns false if a publish slipped in before a pin (the versions are then updated).
  bool land_straight(bool validate, HeadWords* line1);
  bool land_chunks(bool validate, HeadWords* line1, std::size_t out_bytes);
  /// Starts the seqlock re-read of every RMA donor (validation of the speculative version).
  void issue_line1(RmaBatch& batch, HeadWords* line1);
  /// Checks the re-read seqlock words; false (and versions updated) when one was overtaken.
  bool check_line1(const HeadWords* line1);
  /// Releases RMA donor @p d's pins without waiting (MPI_Raccumulate, completed locally).
  void release_rma(Donor& d);

  // --- staged path and RMA pipeline (pull_staged.cpp) -------------------------------------
  void run_staged();
  void begin_reads(unsigned optimistic);
  void pin(Donor& d);
  /// Pins both slots of RMA donor @p d, then reads the version (see pull_staged.cpp).
  void pin_rma(Donor& d);
  /// Adds @p delta to the RMA pins of both slots at @p rank; waits (deadline) or, when
  /// @p wait is false, leaves the operations to complete in the background.
  void rma_pin_add(int rank, std::int64_t delta, bool wait);
  void unpin(Donor& d);
  void unpin_all_noexcept() noexcept;
  [[nodiscard]] bool lands_in_acc(const Donor& d, const Chunk& c) const;
  [[nodiscard]] std::byte* acc_at(const Chunk& c) const;
  bool issue(std::size_t c, RmaBatch& batch);
  void pass();
  void end_reads();
  bool settle();
  [[nodiscard]] int first_torn_rank() const;

  const WindowImpl& w_;
  PullPort port_;
  std::span<const LayerRef> out_;
  const PullOptions& options_;
  std::vector<std::size_t> order_;
  std::vector<Donor> donors_;
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> acc_offset_;
  std::size_t scratch_bytes_ = 0;
  std::byte* acc_ = nullptr;
  bool any_rma_ = false;
  bool written_ = false;  // Landing::direct wrote into the caller's memory
  // A device window whose donors are all on this node: their device slots are read (else
  // the host copies, over RMA or shared memory).
  bool device_read_ = false;
  Landing landing_ = Landing::transactional;
  double deadline_ = 0.0;  // absolute MPI_Wtime, 0: none
  // Destination of every RMA read of this pull; shared with the window's graveyard when a
  // deadline abandons reads in flight.
  std::shared_ptr<RmaArena> arena_ = std::make_shared<RmaArena>();
};

}  // namespace paramwin::detail
