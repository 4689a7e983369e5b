#pragma once
// Readers: where a transport lives under the pull engine (pull_engine.hpp). A pull's paths
// (direct, staged, landing) are algorithms over donors; every donor is read through one
// Reader, which owns everything transport-specific: how the donor's header and seqlock words
// are read, how its slots are pinned, where its bytes are (in place, or fetched into buffers)
// and, for readers of mapped slots, the kernels of the memory those slots live in.
//
//   shm_reader.cpp    same-node host memory: header words and pins with CPU atomics, slots
//                     read in place; also the host memory kind (mix, commit into host layers)
//   rma_reader.cpp    MPI RMA: MPI_Rget / MPI_Rget_accumulate batches (RmaBatch) in two lanes,
//                     so that the next chunk is in flight while this one is accumulated
//   make_memory_reader() a window whose slots live in a non-host memory kind (one file per
//                     kind, docs/design.md): the protocol words are ShmReader's, the bytes
//                     and kernels its own
//
// The calls are per pull, per donor, per layer or per chunk, never per element: the kernels
// (mix(), accumulate(), commit()) stay fused over all donors of a layer or chunk. A new
// transport is one new Reader (CONTRIBUTING.md, "Adding things").

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "detail/kernels.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/options.hpp"
#include "window/rma_batch.hpp"
#include "window/segment.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

class Reader;

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

/// What a pull's readers share with its engine (alive as long as the engine).
struct PullContext {
  const WindowImpl& w;
  PullPort port;
  const std::shared_ptr<RmaArena>& arena;  // destination of every RMA read of the pull
  const double& deadline;                  // absolute MPI_Wtime, 0: none (set by run())
};

/// One donor of a pull and the state of its read.
struct Donor {
  int rank = -1;
  Transport transport = Transport::shm;
  Reader* reader = nullptr;  // the reader of this donor's transport
  bool live = false;         // donor exposes live memory: no snapshot, no finiteness record
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
  std::byte* buffers[2] = {nullptr, nullptr};  // chunk buffers of a fetching reader (lanes)
  std::uint64_t* hyper = nullptr;              // the hyperparameters of the version read (arena)
};

/// A piece of one layer read and accumulated at once.
struct Chunk {
  std::size_t layer;
  std::size_t first;  // element index inside the layer
  std::size_t count;
};

/// Offset, inside a donor's host segment, of chunk @p c of the version @p d is reading.
[[nodiscard]] inline std::size_t data_offset(const SlotLayout& slots, const Donor& d,
                                             const Chunk& c) noexcept {
  const SlotLayout::Entry& e = slots.entries[c.layer];
  return slot_offset(d.version, slots.stride, d.live) + e.offset + c.first * dtype_size(e.wire);
}

/// The reader of one transport, for the donors of one pull that use it. Operations named
/// start_*() may complete at once (same node) or only at wait() of their lane (RMA): a
/// fetching reader keeps two lanes of reads in flight, and close() hands what is still in
/// flight to the graveyard (a deadline, an error, a round ended early).
class Reader {
 public:
  explicit Reader(const PullContext& ctx) : ctx_(ctx) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  Reader(Reader&&) = delete;
  Reader& operator=(Reader&&) = delete;
  virtual ~Reader() = default;

  // --- what the paths ask of a transport ----------------------------------------------------
  /// True when the donors' bytes are fetched into buffers (Donor::buffers, or memory the
  /// caller names) and so can land in the caller's memory (Landing::direct); false when they
  /// are read in place, from slots mapped here.
  [[nodiscard]] virtual bool fetches() const noexcept = 0;
  /// Bytes per chunk of the staged path when a donor of this reader takes part (the pull
  /// takes the largest; PullOptions::chunk_bytes overrides it).
  [[nodiscard]] virtual std::size_t chunk_bytes() const noexcept = 0;
  /// Starts reading @p d's header lines and metric into @p head and @p metric; with @p pin,
  /// a reader whose pin would cost a round trip of its own pins both slots in the same batch
  /// (Landing::direct) and marks @p d pinned.
  virtual void start_head(Donor& d, HeadWords& head, std::uint64_t& metric, bool pin) = 0;
  /// Starts re-reading @p d's seqlock words (version, begun, records, stamps) into @p line1
  /// (lane 0); on the first attempt a reader may take what start_head() read instead.
  virtual void start_line1(const Donor& d, HeadWords& line1) = 0;
  /// Starts reading @p d's begun word into @p begun (lane 0), after the reads it validates.
  virtual void start_begun(const Donor& d, std::uint64_t& begun) = 0;
  /// A live donor: its version and stamp as they are now (a fetching reader keeps the
  /// header's).
  virtual void refresh_live(Donor& /*d*/) const {}
  /// Whether a publish has begun overwriting @p d's slot (checked per chunk while reading
  /// in place); a reader that can only tell at start_begun() says false.
  [[nodiscard]] virtual bool overtaken(const Donor& /*d*/) const { return false; }
  /// Pins the slot of @p d's current version (sets version, records, stamp, pinned).
  virtual void pin(Donor& d) = 0;
  /// Releases @p d's pin and waits for the release (deadline).
  virtual void unpin(Donor& d) = 0;
  /// Releases @p d's pin without waiting for the release.
  virtual void release(Donor& d) = 0;
  /// As release(), while an error unwinds (best effort).
  virtual void release_noexcept(Donor& d) noexcept = 0;
  /// Copies @p d's hyperparameters of the version being read into Donor::hyper now (a
  /// reader of mapped slots; validated with the layers by the seqlock check or the pin).
  virtual void copy_hyper(Donor& /*d*/) {}
  /// Starts reading them in lane @p lane (a fetching reader: with a chunk, no round trip of
  /// their own).
  virtual void start_hyper(Donor& /*d*/, unsigned /*lane*/) {}
  /// Starts reading chunk @p c of @p d into @p into (nullptr: Donor::buffers[lane]) in lane
  /// @p lane (a fetching reader; a mapped one has nothing to start).
  virtual void start_chunk(Donor& /*d*/, const Chunk& /*c*/, void* /*into*/, unsigned /*lane*/) {}
  /// Makes the reads started later in lane @p lane plain gets flushed at wait() (no
  /// deadline; RmaBatch::flush_gets).
  virtual void flush_gets(unsigned /*lane*/) {}
  /// Completes what lane @p lane started (TimeoutError past the deadline).
  virtual void wait(unsigned /*lane*/) {}
  /// Hands what is still in flight to the graveyard (both lanes).
  virtual void close() noexcept {}
  /// Where chunk @p c of @p d is once read: in the donor's mapped slot, or the lane's
  /// buffer of a fetching reader.
  [[nodiscard]] virtual const std::byte* at(const Donor& d, const Chunk& c,
                                            unsigned lane) const = 0;

  // --- the memory kind of mapped slots and of the caller's layers -----------------------------
  /// "" when a pull may read @p donors donors, else why it may not.
  [[nodiscard]] virtual std::string donor_limit_error(std::size_t /*donors*/) const { return {}; }
  /// Whether the caller's layers are host memory (MPI may land reads in them).
  [[nodiscard]] virtual bool host_output() const noexcept { return true; }
  /// out = momentum * out + (1 - momentum) * sum weight_d * widen(src_d) (kernels.hpp mix()).
  virtual void mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
                   std::size_t count, double momentum, std::size_t out_bytes);
  /// A plain copy of @p bytes (one donor, no momentum, the layer's type).
  virtual void copy(void* dst, const void* src, std::size_t bytes);
  /// Waits for the kernels enqueued by mix() and copy() (before the unpin).
  virtual void sync() {}
  /// Every donor of the pull is this reader's: adds all their layers into a scratch of this
  /// memory kind with its own kernels and returns it; nullptr: the engine accumulates chunk
  /// by chunk into the host scratch.
  [[nodiscard]] virtual std::byte* accumulate_all(std::span<const Donor> /*donors*/,
                                                  std::span<const std::size_t> /*acc_offset*/,
                                                  std::size_t /*scratch_bytes*/) {
    return nullptr;
  }
  /// Writes the accumulated mix @p acc (layout order, at @p acc_offset) into the caller's
  /// layers @p out (in @p order); @p own: @p acc came from accumulate_all(), else it is the
  /// host scratch.
  virtual void commit(std::span<const LayerRef> out, std::span<const std::size_t> order,
                      const std::byte* acc, std::span<const std::size_t> acc_offset, bool own,
                      double momentum);

 protected:
  const PullContext& ctx_;
};

/// The same-node reader of host memory: header words and pins with CPU atomics in the
/// donor's shared segment, slots read in place; its memory kind is the host's.
class ShmReader : public Reader {
 public:
  using Reader::Reader;
  [[nodiscard]] bool fetches() const noexcept override { return false; }
  [[nodiscard]] std::size_t chunk_bytes() const noexcept override;
  void start_head(Donor& d, HeadWords& head, std::uint64_t& metric, bool pin) override;
  void start_line1(const Donor& d, HeadWords& line1) override;
  void start_begun(const Donor& d, std::uint64_t& begun) override;
  void refresh_live(Donor& d) const override;
  [[nodiscard]] bool overtaken(const Donor& d) const override;
  /// CPU atomics, retried if a publish slipped in between the version read and the pin.
  void pin(Donor& d) override;
  void unpin(Donor& d) override;
  void release(Donor& d) override { unpin(d); }
  void release_noexcept(Donor& d) noexcept override;
  void copy_hyper(Donor& d) override;
  [[nodiscard]] const std::byte* at(const Donor& d, const Chunk& c, unsigned lane) const override;

 protected:
  [[nodiscard]] SegmentHeader& header(const Donor& d) const noexcept {
    return *ctx_.w.shm_header(d.rank);
  }
};

/// The reader of donors on other nodes (or every donor, when the window does not share
/// memory): MPI RMA.
[[nodiscard]] std::unique_ptr<Reader> make_rma_reader(const PullContext& ctx);
/// The reader of same-node slots that live outside host memory (the window's Memory), or
/// nullptr for a host window; it also writes the caller's layers of that memory kind.
[[nodiscard]] std::unique_ptr<Reader> make_memory_reader(const PullContext& ctx);

}  // namespace paramwin::detail
