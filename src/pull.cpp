// Pull: the reader's side of the versioned double buffer, fused over k donors.
//
// One pass walks the model chunk by chunk; for each chunk it adds every donor's values
// (weighted, widened to float / double) into the accumulation scratch while the chunk is
// hot in cache. Same-node donors are read with plain loads from their shared segments;
// other donors with MPI_Rget, the next chunk in flight while this one is accumulated.
// Each donor's copy is accepted only if no second publish started on its slot (checked
// per chunk on shared memory, once at the end over RMA); a donor that keeps tearing is
// pinned, which makes its owner skip (never wait for) the publish that would overwrite it.
// The caller's memory is written only after every donor's copy has been accepted.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <string>

#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "detail/window_impl.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {
namespace {

constexpr std::size_t kShmChunkBytes = 32 * 1024;
constexpr std::size_t kRmaChunkBytes = 512 * 1024;
constexpr unsigned kMaxPinTries = 1U << 20;

struct Donor {
  int rank = -1;
  Transport transport = Transport::shm;
  SegmentHeader* shm = nullptr;  // same-node header, nullptr over RMA
  double user_weight = 1.0;
  double weight = 0.0;           // normalised over the donors still in
  std::uint64_t version = 0;
  unsigned attempts = 0;
  bool pinned = false;           // the current read holds a pin
  bool ever_pinned = false;
  bool skipped = false;
  bool torn = false;
  bool non_finite = false;
  std::size_t bad_layer = 0;
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

  PullResult run() {
    const double t0 = MPI_Wtime();
    read_heads();
    plan_chunks();
    const unsigned max_rounds = options_.optimistic_attempts + 64;
    for (unsigned round = 0;; ++round) {
      if (round >= max_rounds) {
        throw DonorError(first_torn_rank(), "paramwin: pull could not read a consistent "
                                            "snapshot after " + std::to_string(round) + " rounds");
      }
      normalise_weights();
      begin_reads();
      try {
        pass();
      } catch (...) {
        end_pins_noexcept();
        throw;
      }
      end_reads();
      if (!settle()) {
        continue;
      }
      break;
    }
    commit();
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
    if (options_.chunk_bytes != 0 &&
        (options_.chunk_bytes < 256 || options_.chunk_bytes > (std::size_t{1} << 30))) {
      throw InvalidArgument(where + "chunk_bytes " + std::to_string(options_.chunk_bytes) +
                            " is outside [256, 2^30] (0 picks the default)");
    }
  }

  // --- setup ------------------------------------------------------------------------------
  struct HeadWords {
    std::uint64_t magic, fingerprint, slot_bytes, stride, pad[4];
    std::uint64_t version, begun, publish_time, pad2[5];
  };

  void read_heads() {
    std::vector<HeadWords> heads(donors_.size());
    std::vector<std::uint64_t> metrics(donors_.size());
    {
      RmaBatch batch(w_.rma_win());
      for (std::size_t i = 0; i < donors_.size(); ++i) {
        const Donor& d = donors_[i];
        if (d.shm == nullptr) {
          batch.get(&heads[i], sizeof(HeadWords), d.rank, 0);
          batch.get(&metrics[i], 8, d.rank, kStatusOffset + 24);
        } else {
          heads[i].magic = d.shm->magic.load(std::memory_order_relaxed);
          heads[i].fingerprint = d.shm->fingerprint.load(std::memory_order_relaxed);
          heads[i].version = d.shm->version.load(std::memory_order_acquire);
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
      d.version = heads[i].version;
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
    acc_ = w_.scratch(std::max<std::size_t>(acc_bytes, 64));
    if (any_rma) {
      const std::size_t stride = round_up(max_chunk_wire, kLayerAlign);
      std::size_t n_rma = 0;
      for (const Donor& d : donors_) {
        n_rma += d.shm == nullptr ? 1 : 0;
      }
      rma_buffers_.resize(std::max<std::size_t>(1, 2 * n_rma * stride));
      std::size_t k = 0;
      for (Donor& d : donors_) {
        if (d.shm == nullptr) {
          d.buffers[0] = rma_buffers_.data() + (2 * k) * stride;
          d.buffers[1] = rma_buffers_.data() + (2 * k + 1) * stride;
          ++k;
        }
      }
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

  // --- one read of every donor ------------------------------------------------------------
  void begin_reads() {
    std::vector<std::uint64_t> versions(donors_.size());
    {
      RmaBatch batch(w_.rma_win());
      for (std::size_t i = 0; i < donors_.size(); ++i) {
        Donor& d = donors_[i];
        d.torn = false;
        d.non_finite = false;
        if (d.skipped || d.attempts >= options_.optimistic_attempts) {
          continue;
        }
        if (d.shm != nullptr) {
          versions[i] = d.shm->version.load(std::memory_order_acquire);
        } else if (d.attempts > 0) {  // the first attempt uses the version read_heads saw
          batch.get(&versions[i], 8, d.rank, kVersionOffset);
        } else {
          versions[i] = d.version;
        }
      }
      batch.wait();
    }
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      Donor& d = donors_[i];
      if (d.skipped) {
        continue;
      }
      if (d.attempts >= options_.optimistic_attempts) {
        pin(d);
      } else {
        d.version = versions[i];
      }
      ++d.attempts;
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
          d.pinned = d.ever_pinned = true;
          return;
        }
        d.shm->shm_pins[v & 1U].fetch_sub(1, std::memory_order_seq_cst);
      } else {
        std::uint64_t v = 0;
        std::uint64_t b = 0;
        get_word(&v, d.rank, kVersionOffset);
        rma_pin_add(d.rank, v, 1);
        get_word(&b, d.rank, kBegunOffset);
        if (b <= v + 1) {
          d.version = v;
          d.pinned = d.ever_pinned = true;
          return;
        }
        rma_pin_add(d.rank, v, -1);
      }
    }
    throw DonorError(d.rank, "paramwin: pull: could not pin a snapshot of donor " +
                                 std::to_string(d.rank) + " (it publishes too fast)");
  }

  void get_word(std::uint64_t* dst, int rank, std::size_t offset) const {
    check_mpi(MPI_Get(dst, 8, MPI_BYTE, rank, static_cast<MPI_Aint>(offset), 8, MPI_BYTE,
                      w_.rma_win()),
              "MPI_Get(header word)");
    check_mpi(MPI_Win_flush(rank, w_.rma_win()), "MPI_Win_flush");
  }

  void rma_pin_add(int rank, std::uint64_t version, std::int64_t delta) const {
    std::int64_t old = 0;
    check_mpi(MPI_Fetch_and_op(&delta, &old, MPI_INT64_T, rank,
                               static_cast<MPI_Aint>(kRmaPinsOffset + (version & 1U) * 8),
                               MPI_SUM, w_.rma_win()),
              "MPI_Fetch_and_op(pin)");
    check_mpi(MPI_Win_flush(rank, w_.rma_win()), "MPI_Win_flush");
  }

  void unpin(Donor& d) {
    if (!d.pinned) {
      return;
    }
    d.pinned = false;
    if (d.shm != nullptr) {
      d.shm->shm_pins[d.version & 1U].fetch_sub(1, std::memory_order_seq_cst);
    } else {
      rma_pin_add(d.rank, d.version, -1);
    }
  }

  void end_pins_noexcept() noexcept {
    for (Donor& d : donors_) {
      try {
        unpin(d);
      } catch (...) {  // NOLINT(bugprone-empty-catch): best effort while another error unwinds
      }
    }
  }

  [[nodiscard]] std::size_t slot_offset(const Donor& d, const Chunk& c) const {
    const SlotLayout::Entry& e = w_.slots().entries[c.layer];
    return kPage + (d.version & 1U) * w_.slots().stride + e.offset +
           c.first * dtype_size(e.wire);
  }

  void issue(std::size_t c, RmaBatch& batch) {
    const Chunk& chunk = chunks_[c];
    const std::size_t bytes = chunk.count * dtype_size(w_.slots().entries[chunk.layer].wire);
    for (Donor& d : donors_) {
      if (!d.skipped && d.shm == nullptr) {
        batch.get(d.buffers[c & 1U], bytes, d.rank, slot_offset(d, chunk));
      }
    }
  }

  void pass() {
    const bool check = options_.non_finite != NonFinitePolicy::allow;
    const bool any_rma = !rma_buffers_.empty();
    RmaBatch batches[2] = {RmaBatch(w_.rma_win()), RmaBatch(w_.rma_win())};
    if (any_rma && !chunks_.empty()) {
      issue(0, batches[0]);
    }
    const Layout& layout = w_.layout();
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      if (any_rma) {
        if (c + 1 < chunks_.size()) {
          issue(c + 1, batches[(c + 1) & 1U]);
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
        const std::byte* src = d.shm != nullptr ? w_.shm_segment(d.rank) + slot_offset(d, chunk)
                                                : d.buffers[c & 1U];
        const bool finite = accumulate(acc, layer_dtype, src, wire, chunk.count, d.weight, first,
                                       check);
        first = false;
        if (!finite && !d.non_finite) {
          d.non_finite = true;
          d.bad_layer = chunk.layer;
        }
        if (d.shm != nullptr && !d.pinned) {
          std::atomic_thread_fence(std::memory_order_acquire);
          if (d.shm->begun.load(std::memory_order_relaxed) > d.version + 1) {
            d.torn = true;  // its slot is being overwritten: no use finishing this round
            return;         // ~RmaBatch completes reads still in flight
          }
        }
      }
    }
  }

  void end_reads() {
    std::vector<std::uint64_t> begun(donors_.size());
    {
      RmaBatch batch(w_.rma_win());
      for (std::size_t i = 0; i < donors_.size(); ++i) {
        const Donor& d = donors_[i];
        if (!d.skipped && !d.pinned && d.shm == nullptr) {
          batch.get(&begun[i], 8, d.rank, kBegunOffset);
        }
      }
      try {
        batch.wait();
      } catch (...) {
        end_pins_noexcept();
        throw;
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      Donor& d = donors_[i];
      if (d.skipped) {
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
    bool again = false;
    for (Donor& d : donors_) {
      if (d.skipped) {
        continue;
      }
      if (d.torn) {
        again = true;
        continue;
      }
      if (d.non_finite) {
        const std::string what =
            "paramwin: pull: donor " + std::to_string(d.rank) + " (version " +
            std::to_string(d.version) + ") holds NaN or infinity in layer " +
            w_.layout()[d.bad_layer].describe();
        if (options_.non_finite == NonFinitePolicy::fail) {
          throw DonorError(d.rank, what);
        }
        d.skipped = true;
        again = true;
      }
    }
    return !again;
  }

  [[nodiscard]] int first_torn_rank() const {
    for (const Donor& d : donors_) {
      if (d.torn) {
        return d.rank;
      }
    }
    return donors_.front().rank;
  }

  void commit() {
    const Layout& layout = w_.layout();
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const LayerRef& ref = out_[order_[l]];
      detail::commit(ref.data(), ref.dtype(), acc_ + acc_offset_[l], layout[l].count,
                     options_.momentum);
    }
  }

  PullResult result(double seconds) const {
    PullResult r;
    r.seconds = seconds;
    for (const Donor& d : donors_) {
      DonorRead read;
      read.rank = d.rank;
      read.version = d.version;
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
  std::byte* acc_ = nullptr;
  std::vector<std::byte> rma_buffers_;
};

}  // namespace

PullResult WindowImpl::pull(std::span<const int> donors, std::span<const LayerRef> out,
                            const PullOptions& options) {
  return PullEngine(*this, donors, out, options).run();
}

}  // namespace paramwin::detail
