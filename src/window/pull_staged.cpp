// The staged pull path: accumulate into the window's scratch chunk by chunk, the next chunk
// of every RMA donor in flight (MPI_Rget, double buffers) while this one is added; validate
// every copy with the seqlock (per chunk on shared memory, once at the end over RMA), retry
// torn donors, pin those that keep tearing, and commit only once every copy is accepted.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/pull_engine.hpp"

namespace paramwin::detail {

void PullEngine::run_staged() {
  const unsigned optimistic =
      options_.read_mode == ReadMode::pinned ? 0U : options_.optimistic_attempts;
  const unsigned max_rounds = optimistic + 64;
  for (unsigned round = 0;; ++round) {
    if (round >= max_rounds) {
      throw DonorError(first_torn_rank(), "paramwin: pull could not read a consistent "
                                          "snapshot after " +
                                              std::to_string(round) + " rounds");
    }
    normalise_weights();
    begin_reads(optimistic);
    if (device_read_) {
      pass_device();
    } else {
      pass();
    }
    end_reads();
    if (settle()) {
      break;
    }
  }
  commit_out();
}

void PullEngine::begin_reads(unsigned optimistic) {
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
      d.stamp =
          d.shm != nullptr ? d.shm->stamp[d.version & 1U].load(std::memory_order_relaxed) : d.stamp;
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

void PullEngine::pin(Donor& d) {
  if (d.shm != nullptr) {
    pin_shm(d);
  } else {
    pin_rma(d);
  }
}

void PullEngine::pin_rma(Donor& d) {
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
}

/// Adds @p delta to the RMA pins of both slots at @p rank; waits (deadline) or, when
/// @p wait is false, leaves the operations to complete in the background.
void PullEngine::rma_pin_add(int rank, std::int64_t delta, bool wait) {
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

void PullEngine::unpin(Donor& d) {
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

void PullEngine::unpin_all_noexcept() noexcept {
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

/// True when @p d's values of chunk @p c are the mix itself and can land straight in the
/// accumulation scratch instead of a chunk buffer (saving a pass over the model): the only
/// donor left (weight 1), over RMA, a snapshot (live donors are checked for non-finite values
/// while accumulated), and a wire type that is the accumulation type.
bool PullEngine::lands_in_acc(const Donor& d, const Chunk& c) const {
  if (d.skipped || d.shm != nullptr || d.live || d.weight != 1.0 ||
      std::count_if(donors_.begin(), donors_.end(), [](const Donor& o) { return !o.skipped; }) !=
          1) {
    return false;
  }
  const DType layer_dtype = w_.layout()[c.layer].dtype;
  return (layer_dtype == DType::float32 || layer_dtype == DType::float64) &&
         w_.slots().entries[c.layer].wire == layer_dtype;
}

std::byte* PullEngine::acc_at(const Chunk& c) const {
  return acc_ + acc_offset_[c.layer] + c.first * acc_size(w_.layout()[c.layer].dtype);
}

/// Starts the reads of chunk @p c from every RMA donor; true if one lands in the scratch.
bool PullEngine::issue(std::size_t c, RmaBatch& batch) {
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

void PullEngine::pass() {
  const bool check_live = options_.non_finite != NonFinitePolicy::allow;
  const bool any_rma = any_rma_;
  acc_ = port_.scratch.get(scratch_bytes_);
  RmaBatch batches[2] = {batch(), batch()};
  // Reads that land in the scratch may still be in flight if this pass ends early (deadline,
  // error, torn donor): the scratch then goes to the graveyard with them.
  struct RetireScratch {
    explicit RetireScratch(PullPort& p) : port(p) {}
    RetireScratch(const RetireScratch&) = delete;
    RetireScratch& operator=(const RetireScratch&) = delete;
    PullPort& port;
    bool armed = false;
    bool done = false;
    ~RetireScratch() {
      if (armed && !done) {
        port.scratch.retire(port.graveyard);
      }
    }
  } guard{port_};
  if (any_rma && !chunks_.empty()) {
    issue_hyper(batches[0]);  // with the first chunk: the same flush, no extra round trip
    guard.armed = issue(0, batches[0]);
  } else if (any_rma) {
    // No layer data at all: the hyperparameters are the whole snapshot.
    issue_hyper(batches[0]);
    batches[0].wait();
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
      const std::byte* src =
          d.shm != nullptr ? w_.shm_segment(d.rank) + data_offset(d, chunk) : d.buffers[c & 1U];
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

void PullEngine::end_reads() {
  // Same-node hyperparameters are copied last, before the seqlock check below (or the
  // unpin) that validates them with the layers.
  for (Donor& d : donors_) copy_shm_hyper(d);
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
    const std::uint64_t b =
        d.shm != nullptr ? d.shm->begun.load(std::memory_order_relaxed) : begun[i];
    d.torn = d.torn || b > d.version + 1;
  }
}

/// True when the round's copies are all accepted; otherwise marks what to redo.
bool PullEngine::settle() {
  const bool any_torn = std::any_of(donors_.begin(), donors_.end(),
                                    [](const Donor& d) { return !d.skipped && d.torn; });
  const bool dropped = apply_non_finite();
  return !any_torn && !dropped;
}

int PullEngine::first_torn_rank() const {
  for (const Donor& d : donors_) {
    if (d.torn) {
      return d.rank;
    }
  }
  return donors_.front().rank;
}

}  // namespace paramwin::detail
