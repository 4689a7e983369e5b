#pragma once
// The pull engine: the reader's side of the versioned double buffer, fused over k donors.
// Private to src/window/pull*.cpp. Its interface to the window is narrow: const queries of
// WindowImpl (layout, slot format, ranks, transports) and a PullPort with what a pull may use
// or leave behind (the RMA window, the graveyard, the scratch). The paths below are
// algorithms over donors; what a transport does (header words, pins, where the bytes are,
// the kernels of the memory they live in) is its Reader's (reader.hpp: shm_reader.cpp,
// rma_reader.cpp, and the reader of a window whose slots live outside host memory).
//
//   pull.cpp         WindowImpl::pull, the readers of a pull, run() (which path), the result
//   pull_plan.cpp    planning: validation, donors' headers, chunks, weights, non-finite policy
//   pull_direct.cpp  direct path: every donor read in place, pinned, mixed into the output
//   pull_staged.cpp  staged path: scratch, seqlock validation and retries, the read pipeline
//   pull_landing.cpp direct landing (Landing::direct): pinned fetched reads into the caller's
//                    memory
//
// The ways through, all adding every donor's values (weighted, widened to float / double):
//
//  * direct (every donor read in place, i.e. on this node, snapshot-exposed, ReadMode
//    automatic or pinned): pin every donor's current slot first, check the per-slot
//    finiteness record its publish left, then stream the weighted sum straight into the
//    caller's memory, one pass per layer that reads all k donors at once (the reader's
//    mix()). Nothing can fail after the first write, so the pull stays transactional at
//    (k + 1) memory streams.
//  * staged (some donor fetched over RMA, a live donor, or ReadMode optimistic): accumulate
//    into a library-owned scratch, validate every donor's copy (seqlock), retry torn donors
//    and pin those that keep tearing, and commit into the caller's memory only once all are
//    accepted. Fetched donors are read in two lanes, the next chunk of each in flight while
//    this one is accumulated; a reader that reads every donor of the pull may accumulate
//    them all with its own kernels (Reader::accumulate_all).
//  * landing (PullOptions::landing = Landing::direct, some fetched donor, no live donor,
//    host layers): pin every donor with its header read (one round trip), then land the
//    bytes in the caller's memory: straight (one donor, wire = layer type, no momentum, no
//    deadline) or through double-buffered chunk buffers mixed into it as they land. The
//    header read with the pin may predate the pin, so the first data batch re-reads the
//    seqlock words; if a publish slipped in, the reads restart from the version the pin
//    holds. No scratch, no final copy; a failure after the first write is a PartialPullError.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "paramwin/layer_ref.hpp"
#include "paramwin/options.hpp"
#include "window/reader.hpp"
#include "window/rma_batch.hpp"
#include "window/segment.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

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
  /// Closes every reader's lanes when a phase ends, normally or not: what is still in
  /// flight goes to the graveyard.
  class InFlight {
   public:
    explicit InFlight(const PullEngine& e) : readers_(e.readers_) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    InFlight(InFlight&&) = delete;
    InFlight& operator=(InFlight&&) = delete;
    ~InFlight() {
      for (Reader* r : readers_) r->close();
    }

   private:
    const std::vector<Reader*>& readers_;
  };

  // --- planning (pull_plan.cpp) -----------------------------------------------------------
  void validate(std::span<const int> donors) const;
  /// Reads every donor's header (fetching readers: one batch); with @p pin, pins both slots
  /// of every fetched donor in the same batch (Landing::direct).
  void read_heads(bool pin);
  void plan_chunks();
  void normalise_weights();
  /// Marks @p d non-finite from its slot's finiteness record (live slots have none).
  void note_record(Donor& d) const;
  /// Applies NonFinitePolicy to donors marked non-finite; returns true if one was dropped.
  bool apply_non_finite();
  [[nodiscard]] PullResult result(double seconds) const;
  /// Starts the reads of every fetched donor's hyperparameters of the version being read in
  /// lane @p lane: the first chunk's, so they cost no round trip of their own.
  void issue_hyper(unsigned lane);
  /// Completes lane @p lane of every reader.
  void wait_lane(unsigned lane);

  // --- direct path (pull_direct.cpp) ------------------------------------------------------
  void run_direct();

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
  /// Starts the seqlock re-read of every fetched donor (validation of the speculative
  /// version).
  void issue_line1(HeadWords* line1);
  /// Checks the re-read seqlock words; false (and versions updated) when one was overtaken.
  bool check_line1(const HeadWords* line1);

  // --- staged path and read pipeline (pull_staged.cpp) ------------------------------------
  void run_staged();
  void begin_reads(unsigned optimistic);
  void unpin(Donor& d) { d.reader->unpin(d); }
  void unpin_all_noexcept() noexcept;
  [[nodiscard]] bool lands_in_acc(const Donor& d, const Chunk& c) const;
  [[nodiscard]] std::byte* acc_at(const Chunk& c) const;
  bool issue(std::size_t c);
  void pass();
  void end_reads();
  bool settle();
  [[nodiscard]] int first_torn_rank() const;
  /// Writes the accumulated mix into the caller's layers (the output memory's commit).
  void commit_out();

  const WindowImpl& w_;
  PullPort port_;
  std::span<const LayerRef> out_;
  const PullOptions& options_;
  Landing landing_ = Landing::transactional;
  double deadline_ = 0.0;  // absolute MPI_Wtime, 0: none
  // Destination of every RMA read of this pull; shared with the window's graveyard when a
  // deadline abandons reads in flight.
  std::shared_ptr<RmaArena> arena_ = std::make_shared<RmaArena>();
  PullContext ctx_{w_, port_, arena_, deadline_};
  // The readers: same-node host memory, RMA (when a donor needs it), and the window's own
  // memory kind's (nullptr for a host window). output_ writes the caller's layers.
  std::unique_ptr<Reader> shm_;
  std::unique_ptr<Reader> rma_;
  std::unique_ptr<Reader> memory_;
  Reader* output_ = nullptr;
  std::vector<Reader*> readers_;  // the readers the donors use, each once
  std::vector<std::size_t> order_;
  std::vector<Donor> donors_;
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> acc_offset_;
  std::size_t scratch_bytes_ = 0;
  std::byte* acc_ = nullptr;
  bool acc_own_ = false;    // acc_ came from a reader's accumulate_all(), not the host scratch
  bool any_fetch_ = false;  // some donor's bytes are fetched into buffers
  bool written_ = false;    // Landing::direct wrote into the caller's memory
};

}  // namespace paramwin::detail
