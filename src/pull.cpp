// Pull: the reader's side of the versioned double buffer, fused over k donors.
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
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "detail/window_impl.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {
namespace {

constexpr std::size_t kShmChunkBytes = 32 * 1024;
constexpr std::size_t kRmaChunkBytes = 4 * 1024 * 1024;  // few round trips: each costs the target a trip through MPI progress
constexpr unsigned kMaxPinTries = 1U << 20;
constexpr std::size_t kLine1 = offsetof(HeadWords, version);      // version .. stamp
constexpr std::size_t kLine1Bytes = offsetof(HeadWords, pad1) - kLine1;

struct Donor {
  int rank = -1;
  Transport transport = Transport::shm;
  SegmentHeader* shm = nullptr;  // same-node header, nullptr over RMA
  bool live = false;             // donor exposes live memory: no snapshot, no finiteness record
  double user_weight = 1.0;
  double weight = 0.0;           // normalised over the donors still in
  std::uint64_t version = 0;
  std::uint64_t bad_layer = 0;   // the read slot's finiteness record (see SegmentHeader)
  std::uint64_t stamp = 0;       // the read slot's publish stamp
  unsigned attempts = 0;
  bool pinned = false;           // the current read holds a pin
  bool ever_pinned = false;
  bool skipped = false;
  bool torn = false;
  bool non_finite = false;
  std::size_t bad_index = 0;     // layer index for the error message
  double metric = 0.0;
  std::byte* buffers[2] = {nullptr, nullptr};  // RMA chunk buffers
};

struct Chunk {
  std::size_t layer;
  std::size_t first;  // element index inside the layer
  std::size_t count;
};

class PullEngine {
 public:
  PullEngine(WindowImpl& w, std::span<const int> donors, std::span<const LayerRef> out,
             const PullOptions& options)
      : w_(w), out_(out), options_(options) {
    validate(donors);
    order_ = bind_layers(w.layout(), out, "pull");
    for (std::size_t i = 0; i < donors.size(); ++i) {
      Donor d;
      d.rank = donors[i];
      d.transport = w.transport_for(d.rank);
      d.shm = d.transport == Transport::shm ? w.shm_header(d.rank) : nullptr;
      d.user_weight = options.reduction == Reduction::weighted ? options.weights[i] : 1.0;
      donors_.push_back(d);
    }
  }
  PullEngine(const PullEngine&) = delete;
  PullEngine& operator=(const PullEngine&) = delete;
  PullEngine(PullEngine&&) = delete;
  PullEngine& operator=(PullEngine&&) = delete;
  ~PullEngine() { unpin_all_noexcept(); }

  PullResult run() {
    const double t0 = MPI_Wtime();
    deadline_ = options_.timeout_seconds > 0.0 ? t0 + options_.timeout_seconds : 0.0;
    w_.reap_finished();
    read_heads();
    plan_chunks();
    const bool all_shm_snapshots = std::all_of(donors_.begin(), donors_.end(), [](const Donor& d) {
      return d.shm != nullptr && !d.live;
    });
    if (all_shm_snapshots && options_.read_mode != ReadMode::optimistic) {
      run_direct();
    } else {
      run_staged();
    }
    return result(MPI_Wtime() - t0);
  }

 private:
  // --- checks -----------------------------------------------------------------------------
  void validate(std::span<const int> donors) const {
    const std::string where = "paramwin: pull: ";
    if (donors.empty()) {
      throw InvalidArgument(where + "the donor list is empty");
    }
    for (std::size_t i = 0; i < donors.size(); ++i) {
      w_.check_rank(donors[i], "pull: donor");
      if (donors[i] == w_.rank()) {
        throw InvalidArgument(where + "donor " + std::to_string(donors[i]) +
                              " is this rank itself");
      }
      for (std::size_t j = 0; j < i; ++j) {
        if (donors[j] == donors[i]) {
          throw InvalidArgument(where + "donor " + std::to_string(donors[i]) +
                                " is listed twice (positions " + std::to_string(j) + " and " +
                                std::to_string(i) + ")");
        }
      }
    }
    if (options_.reduction == Reduction::mean && !options_.weights.empty()) {
      throw InvalidArgument(where + "weights given with Reduction::mean; use Reduction::weighted");
    }
    if (options_.reduction == Reduction::weighted) {
      if (options_.weights.size() != donors.size()) {
        throw InvalidArgument(where + "got " + std::to_string(options_.weights.size()) +
                              " weights for " + std::to_string(donors.size()) + " donors");
      }
      double sum = 0.0;
      for (std::size_t i = 0; i < donors.size(); ++i) {
        const double wi = options_.weights[i];
        if (!std::isfinite(wi) || wi < 0.0) {
          throw InvalidArgument(where + "weight " + std::to_string(i) + " (donor " +
                                std::to_string(donors[i]) + ") is " + std::to_string(wi) +
                                "; weights must be finite and >= 0");
        }
        sum += wi;
      }
      if (!(sum > 0.0)) {
        throw InvalidArgument(where + "weights sum to 0");
      }
    } else if (options_.reduction != Reduction::mean) {
      throw InvalidArgument(where + "unknown reduction");
    }
    if (!std::isfinite(options_.momentum) || options_.momentum < 0.0 || options_.momentum >= 1.0) {
      throw InvalidArgument(where + "momentum " + std::to_string(options_.momentum) +
                            " is outside [0, 1)");
    }
    if (options_.non_finite > NonFinitePolicy::allow) {
      throw InvalidArgument(where + "unknown non-finite policy");
    }
    if (options_.read_mode > ReadMode::pinned) {
      throw InvalidArgument(where + "unknown read mode");
    }
    if (!std::isfinite(options_.timeout_seconds) || options_.timeout_seconds < 0.0) {
      throw InvalidArgument(where + "timeout_seconds " + std::to_string(options_.timeout_seconds) +
                            " must be finite and >= 0 (0: no deadline)");
    }
    if (options_.chunk_bytes != 0 &&
        (options_.chunk_bytes < 256 || options_.chunk_bytes > (std::size_t{1} << 30))) {
      throw InvalidArgument(where + "chunk_bytes " + std::to_string(options_.chunk_bytes) +
                            " is outside [256, 2^30] (0 picks the default)");
    }
  }

  /// A batch whose reads land in the arena and that honours the pull's deadline.
  [[nodiscard]] RmaBatch batch() const {
    return RmaBatch(w_.rma_win(), &w_.graveyard(), arena_, deadline_);
  }

  // --- setup ------------------------------------------------------------------------------
  void read_heads() {
    HeadWords* heads = arena_->make<HeadWords>(donors_.size());
    std::uint64_t* metrics = arena_->make<std::uint64_t>(donors_.size());
    {
      RmaBatch batch = this->batch();
      for (std::size_t i = 0; i < donors_.size(); ++i) {
        const Donor& d = donors_[i];
        if (d.shm == nullptr) {
          batch.get(&heads[i], sizeof(HeadWords), d.rank, 0);
          batch.get(&metrics[i], 8, d.rank, offsetof(SegmentHeader, metric));
        } else {
          heads[i].magic = d.shm->magic.load(std::memory_order_relaxed);
          heads[i].fingerprint = d.shm->fingerprint.load(std::memory_order_relaxed);
          heads[i].exposure = d.shm->exposure.load(std::memory_order_relaxed);
          heads[i].version = d.shm->version.load(std::memory_order_acquire);
          heads[i].stamp[heads[i].version & 1U] =
              d.shm->stamp[heads[i].version & 1U].load(std::memory_order_relaxed);
          metrics[i] = d.shm->metric.load(std::memory_order_relaxed);
        }
      }
      batch.wait();
    }
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      Donor& d = donors_[i];
      if (heads[i].magic != kMagic) {
        throw DonorError(d.rank, "paramwin: pull: donor " + std::to_string(d.rank) +
                                     " has no valid window header");
      }
      if (heads[i].fingerprint != w_.slots().fingerprint) {
        throw DonorError(d.rank, "paramwin: pull: donor " + std::to_string(d.rank) +
                                     " has an incompatible layout or wire format (fingerprint " +
                                     std::to_string(heads[i].fingerprint) + ", this rank " +
                                     std::to_string(w_.slots().fingerprint) + ")");
      }
      if (heads[i].version == 0) {
        throw DonorError(d.rank, "paramwin: pull: donor " + std::to_string(d.rank) +
                                     " has never published");
      }
      d.live = heads[i].exposure == static_cast<std::uint64_t>(Exposure::live);
      d.version = heads[i].version;
      d.bad_layer = heads[i].bad_layer[heads[i].version & 1U];
      d.stamp = heads[i].stamp[heads[i].version & 1U];
      d.metric = std::bit_cast<double>(metrics[i]);
    }
  }

  void plan_chunks() {
    const bool any_rma = std::any_of(donors_.begin(), donors_.end(),
                                     [](const Donor& d) { return d.shm == nullptr; });
    const std::size_t chunk_bytes = options_.chunk_bytes != 0 ? options_.chunk_bytes
                                    : any_rma                 ? kRmaChunkBytes
                                                              : kShmChunkBytes;
    const Layout& layout = w_.layout();
    acc_offset_.resize(layout.size());
    std::size_t acc_bytes = 0;
    std::size_t max_chunk_wire = 0;
    for (std::size_t l = 0; l < layout.size(); ++l) {
      acc_offset_[l] = acc_bytes;
      const LayerSpec& spec = layout[l];
      acc_bytes = round_up(acc_bytes + spec.count * acc_size(spec.dtype), kLayerAlign);
      const std::size_t wsize = dtype_size(w_.slots().entries[l].wire);
      const std::size_t per_chunk = std::max<std::size_t>(1, chunk_bytes / wsize);
      for (std::size_t first = 0; first < spec.count; first += per_chunk) {
        const std::size_t n = std::min(per_chunk, spec.count - first);
        chunks_.push_back(Chunk{l, first, n});
        max_chunk_wire = std::max(max_chunk_wire, n * wsize);
      }
    }
    scratch_bytes_ = std::max<std::size_t>(acc_bytes, 64);
    if (any_rma) {
      const std::size_t stride = round_up(max_chunk_wire, kLayerAlign);
      std::size_t n_rma = 0;
      for (const Donor& d : donors_) {
        n_rma += d.shm == nullptr ? 1 : 0;
      }
      std::byte* buffers = arena_->make<std::byte>(2 * n_rma * stride);
      std::size_t k = 0;
      for (Donor& d : donors_) {
        if (d.shm == nullptr) {
          d.buffers[0] = buffers + (2 * k) * stride;
          d.buffers[1] = buffers + (2 * k + 1) * stride;
          ++k;
        }
      }
      any_rma_ = true;
    }
  }

  void normalise_weights() {
    double sum = 0.0;
    for (const Donor& d : donors_) {
      sum += d.skipped ? 0.0 : d.user_weight;
    }
    if (!(sum > 0.0)) {
      const Donor& last = donors_.back();
      throw DonorError(last.rank, "paramwin: pull: every donor was left out for non-finite "
                                  "values (NonFinitePolicy::skip_donor); nothing to average");
    }
    for (Donor& d : donors_) {
      d.weight = d.skipped ? 0.0 : d.user_weight / sum;
    }
  }

  /// Marks @p d non-finite from its slot's finiteness record (live slots have none).
  void note_record(Donor& d) const {
    if (d.live || d.bad_layer == 0 || d.bad_layer == kUnknownFinite) {
      return;
    }
    d.non_finite = true;
    d.bad_index = static_cast<std::size_t>(d.bad_layer - 1);
  }

  /// Applies NonFinitePolicy to donors marked non-finite; returns true if one was dropped.
  bool apply_non_finite() {
    bool dropped = false;
    for (Donor& d : donors_) {
      if (d.skipped || !d.non_finite || d.torn || options_.non_finite == NonFinitePolicy::allow) {
        continue;
      }
      if (options_.non_finite == NonFinitePolicy::fail) {
        throw DonorError(d.rank, "paramwin: pull: donor " + std::to_string(d.rank) +
                                     " (version " + std::to_string(d.version) +
                                     ") holds NaN or infinity in layer " +
                                     w_.layout()[std::min(d.bad_index, w_.layout().size() - 1)].describe());
      }
      d.skipped = true;
      dropped = true;
      unpin(d);
    }
    return dropped;
  }

  // --- direct path ------------------------------------------------------------------------
  void run_direct() {
    for (Donor& d : donors_) {
      pin(d);
      d.bad_layer = d.shm->bad_layer[d.version & 1U].load(std::memory_order_relaxed);
      d.stamp = d.shm->stamp[d.version & 1U].load(std::memory_order_relaxed);
      d.attempts = 1;
      note_record(d);
    }
    (void)apply_non_finite();
    normalise_weights();
    const Layout& layout = w_.layout();
    std::vector<MixSource> sources;
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const SlotLayout::Entry& e = w_.slots().entries[l];
      const LayerRef& ref = out_[order_[l]];
      if (e.count == 0) {
        continue;
      }
      sources.clear();
      for (const Donor& d : donors_) {
        if (!d.skipped) {
          sources.push_back({w_.shm_segment(d.rank) + data_offset(d, Chunk{l, 0, e.count}), d.weight});
        }
      }
      if (sources.size() == 1 && options_.momentum == 0.0 && e.wire == layout[l].dtype) {
        // One donor, no momentum, same type: a plain copy, which lets memcpy use streaming
        // stores on large layers.
        std::memcpy(ref.data(), sources[0].data, bytes_of(e.count, e.wire));
      } else {
        // Every donor in one pass over the layer (see mix()).
        mix(ref.data(), ref.dtype(), sources, e.wire, e.count, options_.momentum);
      }
    }
    for (Donor& d : donors_) {
      unpin(d);
    }
  }

  // --- staged path ------------------------------------------------------------------------
  void run_staged() {
    const unsigned optimistic =
        options_.read_mode == ReadMode::pinned ? 0U : options_.optimistic_attempts;
    const unsigned max_rounds = optimistic + 64;
    for (unsigned round = 0;; ++round) {
      if (round >= max_rounds) {
        throw DonorError(first_torn_rank(), "paramwin: pull could not read a consistent "
                                            "snapshot after " + std::to_string(round) + " rounds");
      }
      normalise_weights();
      begin_reads(optimistic);
      pass();
      end_reads();
      if (settle()) {
        break;
      }
    }
    const Layout& layout = w_.layout();
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const LayerRef& ref = out_[order_[l]];
      commit(ref.data(), ref.dtype(), acc_ + acc_offset_[l], layout[l].count, options_.momentum);
    }
  }

  void begin_reads(unsigned optimistic) {
    HeadWords* line1 = arena_->make<HeadWords>(donors_.size());
    {
      RmaBatch batch = this->batch();
      for (std::size_t i = 0; i < donors_.size(); ++i) {
        Donor& d = donors_[i];
        d.torn = false;
        d.non_finite = false;
        if (d.skipped || d.attempts >= optimistic || d.live) {
          continue;
        }
        if (d.shm != nullptr) {
          line1[i].version = d.shm->version.load(std::memory_order_acquire);
          line1[i].bad_layer[line1[i].version & 1U] =
              d.shm->bad_layer[line1[i].version & 1U].load(std::memory_order_relaxed);
          line1[i].stamp[line1[i].version & 1U] =
              d.shm->stamp[line1[i].version & 1U].load(std::memory_order_relaxed);
        } else if (d.attempts > 0) {  // the first attempt uses what read_heads saw
          batch.get(&line1[i].version, kLine1Bytes, d.rank, kLine1);
        } else {
          line1[i].version = d.version;
          line1[i].bad_layer[d.version & 1U] = d.bad_layer;
          line1[i].stamp[d.version & 1U] = d.stamp;
        }
      }
      batch.wait();
    }
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      Donor& d = donors_[i];
      if (d.skipped) {
        continue;
      }
      if (d.live) {
        // Live memory has one slot and no protocol: read it as it is now.
        d.version = d.shm != nullptr ? d.shm->version.load(std::memory_order_acquire) : d.version;
        d.stamp = d.shm != nullptr ? d.shm->stamp[d.version & 1U].load(std::memory_order_relaxed)
                                   : d.stamp;
      } else if (d.attempts >= optimistic) {
        pin(d);
      } else {
        d.version = line1[i].version;
        d.bad_layer = line1[i].bad_layer[d.version & 1U];
        d.stamp = line1[i].stamp[d.version & 1U];
      }
      ++d.attempts;
      note_record(d);
    }
  }

  void pin(Donor& d) {
    for (unsigned tries = 0; tries < kMaxPinTries; ++tries) {
      if (d.shm != nullptr) {
        const std::uint64_t v = d.shm->version.load(std::memory_order_acquire);
        d.shm->shm_pins[v & 1U].fetch_add(1, std::memory_order_seq_cst);
        const std::uint64_t b = d.shm->begun.load(std::memory_order_seq_cst);
        if (b <= v + 1) {
          d.version = v;
          d.bad_layer = d.shm->bad_layer[v & 1U].load(std::memory_order_relaxed);
          d.stamp = d.shm->stamp[v & 1U].load(std::memory_order_relaxed);
          d.pinned = d.ever_pinned = true;
          return;
        }
        d.shm->shm_pins[v & 1U].fetch_sub(1, std::memory_order_seq_cst);
      } else {
        // Over RMA a pin cannot be raced against the version read: every round trip waits
        // for the donor's next trip through MPI, and a donor that publishes faster than
        // that would make a version-then-pin loop fail forever. So pin both slots first
        // (the owner then skips every publish), then read the version: the slot it names
        // cannot be rewritten until the pins are released. Two round trips, no retry.
        // Marked pinned before the increment: if it is abandoned at the deadline, the release
        // is issued too, and MPI applies accumulates to one location in order.
        d.pinned = true;
        rma_pin_add(d.rank, 1, true);
        HeadWords* head = arena_->make<HeadWords>(1);
        {
          RmaBatch batch = this->batch();
          batch.get(&head->version, kLine1Bytes, d.rank, kLine1);
          batch.wait();
        }
        d.version = head->version;
        d.bad_layer = head->bad_layer[d.version & 1U];
        d.stamp = head->stamp[d.version & 1U];
        d.ever_pinned = true;
        return;
      }
    }
    throw DonorError(d.rank, "paramwin: pull: could not pin a snapshot of donor " +
                                 std::to_string(d.rank) + " (it publishes too fast)");
  }

  /// Adds @p delta to the RMA pins of both slots at @p rank; waits (deadline) or, when
  /// @p wait is false, leaves the operations to complete in the background.
  void rma_pin_add(int rank, std::int64_t delta, bool wait) {
    auto* in = arena_->make<std::int64_t>(4);
    in[0] = delta;
    in[2] = delta;
    RmaBatch batch = this->batch();
    batch.fetch_add(&in[0], &in[1], rank, kRmaPinsOffset);
    batch.fetch_add(&in[2], &in[3], rank, kRmaPinsOffset + 8);
    if (wait) {
      batch.wait();
    } else {
      batch.abandon();
    }
  }

  void unpin(Donor& d) {
    if (!d.pinned) {
      return;
    }
    d.pinned = false;
    if (d.shm != nullptr) {
      d.shm->shm_pins[d.version & 1U].fetch_sub(1, std::memory_order_seq_cst);
    } else {
      rma_pin_add(d.rank, -1, true);
    }
  }

  void unpin_all_noexcept() noexcept {
    for (Donor& d : donors_) {
      if (!d.pinned) {
        continue;
      }
      d.pinned = false;
      if (d.shm != nullptr) {
        d.shm->shm_pins[d.version & 1U].fetch_sub(1, std::memory_order_seq_cst);
        continue;
      }
      // Unwinding (possibly from a deadline): release the pin without waiting for it; the
      // request completes in the background (MPI orders accumulates to one location, so it
      // applies after the pin's increment).
      try {
        rma_pin_add(d.rank, -1, false);
      } catch (...) {  // NOLINT(bugprone-empty-catch): best effort while an error unwinds
      }
    }
  }

  /// Offset, inside the donor's segment, of chunk @p c of the version being read.
  [[nodiscard]] std::size_t data_offset(const Donor& d, const Chunk& c) const {
    const SlotLayout::Entry& e = w_.slots().entries[c.layer];
    return slot_offset(d.version, w_.slots().stride, d.live) + e.offset +
           c.first * dtype_size(e.wire);
  }

  /// True when @p d's values of chunk @p c are the mix itself and can land straight in the
  /// accumulation scratch instead of a chunk buffer (saving a pass over the model): the only
  /// donor left (weight 1), over RMA, a snapshot (live donors are checked for non-finite values
  /// while accumulated), and a wire type that is the accumulation type.
  [[nodiscard]] bool lands_in_acc(const Donor& d, const Chunk& c) const {
    if (d.skipped || d.shm != nullptr || d.live || d.weight != 1.0 ||
        std::count_if(donors_.begin(), donors_.end(), [](const Donor& o) { return !o.skipped; }) != 1) {
      return false;
    }
    const DType layer_dtype = w_.layout()[c.layer].dtype;
    return (layer_dtype == DType::float32 || layer_dtype == DType::float64) &&
           w_.slots().entries[c.layer].wire == layer_dtype;
  }

  [[nodiscard]] std::byte* acc_at(const Chunk& c) const {
    return acc_ + acc_offset_[c.layer] + c.first * acc_size(w_.layout()[c.layer].dtype);
  }

  /// Starts the reads of chunk @p c from every RMA donor; true if one lands in the scratch.
  bool issue(std::size_t c, RmaBatch& batch) {
    const Chunk& chunk = chunks_[c];
    const std::size_t bytes = chunk.count * dtype_size(w_.slots().entries[chunk.layer].wire);
    bool into_acc = false;
    for (Donor& d : donors_) {
      if (!d.skipped && d.shm == nullptr) {
        const bool direct = lands_in_acc(d, chunk);
        batch.get(direct ? acc_at(chunk) : d.buffers[c & 1U], bytes, d.rank, data_offset(d, chunk));
        into_acc = into_acc || direct;
      }
    }
    return into_acc;
  }

  void pass() {
    const bool check_live = options_.non_finite != NonFinitePolicy::allow;
    const bool any_rma = any_rma_;
    acc_ = w_.scratch(scratch_bytes_);
    RmaBatch batches[2] = {batch(), batch()};
    // Reads that land in the scratch may still be in flight if this pass ends early (deadline,
    // error, torn donor): the scratch then goes to the graveyard with them.
    struct RetireScratch {
      WindowImpl& w;
      bool armed = false;
      bool done = false;
      ~RetireScratch() {
        if (armed && !done) {
          w.retire_scratch();
        }
      }
    } guard{w_};
    if (any_rma && !chunks_.empty()) {
      guard.armed = issue(0, batches[0]);
    }
    const Layout& layout = w_.layout();
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      if (any_rma) {
        if (c + 1 < chunks_.size()) {
          guard.armed = issue(c + 1, batches[(c + 1) & 1U]) || guard.armed;
        }
        batches[c & 1U].wait();
      }
      const Chunk& chunk = chunks_[c];
      const DType layer_dtype = layout[chunk.layer].dtype;
      const DType wire = w_.slots().entries[chunk.layer].wire;
      std::byte* acc = acc_ + acc_offset_[chunk.layer] + chunk.first * acc_size(layer_dtype);
      bool first = true;
      for (Donor& d : donors_) {
        if (d.skipped) {
          continue;
        }
        if (lands_in_acc(d, chunk)) {
          first = false;  // already there
          continue;
        }
        const std::byte* src = d.shm != nullptr ? w_.shm_segment(d.rank) + data_offset(d, chunk)
                                                : d.buffers[c & 1U];
        const bool finite = accumulate(acc, layer_dtype, src, wire, chunk.count, d.weight, first,
                                       check_live && d.live);
        first = false;
        if (!finite && !d.non_finite) {
          d.non_finite = true;
          d.bad_index = chunk.layer;
        }
        if (d.shm != nullptr && !d.pinned && !d.live) {
          std::atomic_thread_fence(std::memory_order_acquire);
          if (d.shm->begun.load(std::memory_order_relaxed) > d.version + 1) {
            d.torn = true;  // its slot is being overwritten: no use finishing this round
            return;         // reads still in flight complete in the background (graveyard)
          }
        }
      }
    }
    guard.done = true;
  }

  void end_reads() {
    std::uint64_t* begun = arena_->make<std::uint64_t>(donors_.size());
    {
      RmaBatch batch = this->batch();
      for (std::size_t i = 0; i < donors_.size(); ++i) {
        const Donor& d = donors_[i];
        if (!d.skipped && !d.pinned && !d.live && d.shm == nullptr) {
          batch.get(&begun[i], 8, d.rank, kBegunOffset);
        }
      }
      batch.wait();
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      Donor& d = donors_[i];
      if (d.skipped || d.live) {
        continue;
      }
      if (d.pinned) {
        unpin(d);
        continue;
      }
      const std::uint64_t b = d.shm != nullptr ? d.shm->begun.load(std::memory_order_relaxed)
                                               : begun[i];
      d.torn = d.torn || b > d.version + 1;
    }
  }

  /// True when the round's copies are all accepted; otherwise marks what to redo.
  bool settle() {
    const bool any_torn = std::any_of(donors_.begin(), donors_.end(),
                                      [](const Donor& d) { return !d.skipped && d.torn; });
    const bool dropped = apply_non_finite();
    return !any_torn && !dropped;
  }

  [[nodiscard]] int first_torn_rank() const {
    for (const Donor& d : donors_) {
      if (d.torn) {
        return d.rank;
      }
    }
    return donors_.front().rank;
  }

  PullResult result(double seconds) const {
    PullResult r;
    r.seconds = seconds;
    for (const Donor& d : donors_) {
      DonorRead read;
      read.rank = d.rank;
      read.version = d.version;
      read.stamp = d.stamp;
      read.transport = d.transport;
      read.bytes = w_.slots().payload_bytes;
      read.attempts = d.attempts;
      read.pinned = d.ever_pinned;
      read.skipped = d.skipped;
      read.weight = d.weight;
      read.metric = d.metric;
      r.bytes += read.bytes;
      r.donors.push_back(read);
    }
    return r;
  }

  WindowImpl& w_;
  std::span<const LayerRef> out_;
  const PullOptions& options_;
  std::vector<std::size_t> order_;
  std::vector<Donor> donors_;
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> acc_offset_;
  std::size_t scratch_bytes_ = 0;
  std::byte* acc_ = nullptr;
  bool any_rma_ = false;
  double deadline_ = 0.0;  // absolute MPI_Wtime, 0: none
  // Destination of every RMA read of this pull; shared with the window's graveyard when a
  // deadline abandons reads in flight.
  std::shared_ptr<RmaArena> arena_ = std::make_shared<RmaArena>();
};

}  // namespace

PullResult WindowImpl::pull(std::span<const int> donors, std::span<const LayerRef> out,
                            const PullOptions& options) {
  return PullEngine(*this, donors, out, options).run();
}

}  // namespace paramwin::detail
