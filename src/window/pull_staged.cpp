// The staged pull path: accumulate into the window's scratch chunk by chunk, the next chunk
// of every fetched donor in flight (the reader's second lane, double buffers) while this one
// is added; validate every copy with the seqlock (per chunk where the reader can tell, else
// once at the end), retry torn donors, pin those that keep tearing, and commit only once
// every copy is accepted.
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
    // A reader that reads every donor may accumulate them all with its own kernels.
    Reader* sole = readers_.size() == 1 ? readers_.front() : nullptr;
    acc_ = sole != nullptr ? sole->accumulate_all(donors_, acc_offset_, scratch_bytes_) : nullptr;
    acc_own_ = acc_ != nullptr;
    if (!acc_own_) pass();
    end_reads();
    if (settle()) {
      break;
    }
  }
  commit_out();
}

void PullEngine::commit_out() {
  output_->commit(out_, order_, acc_, acc_offset_, acc_own_, options_.momentum);
}

void PullEngine::begin_reads(unsigned optimistic) {
  HeadWords* line1 = arena_->make<HeadWords>(donors_.size());
  {
    const InFlight in_flight(*this);
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      Donor& d = donors_[i];
      d.torn = false;
      d.non_finite = false;
      if (d.skipped || d.attempts >= optimistic || d.live) {
        continue;
      }
      d.reader->start_line1(d, line1[i]);
    }
    wait_lane(0);
  }
  for (std::size_t i = 0; i < donors_.size(); ++i) {
    Donor& d = donors_[i];
    if (d.skipped) {
      continue;
    }
    if (d.live) {
      d.reader->refresh_live(d);
    } else if (d.attempts >= optimistic) {
      d.reader->pin(d);
    } else {
      d.version = line1[i].version;
      d.bad_layer = line1[i].bad_layer[d.version & 1U];
      d.stamp = line1[i].stamp[d.version & 1U];
    }
    ++d.attempts;
    note_record(d);
  }
}

void PullEngine::unpin_all_noexcept() noexcept {
  for (Donor& d : donors_) {
    if (d.pinned) d.reader->release_noexcept(d);
  }
}

/// True when @p d's values of chunk @p c are the mix itself and can land straight in the
/// accumulation scratch instead of a chunk buffer (saving a pass over the model): the only
/// donor left (weight 1), fetched, a snapshot (live donors are checked for non-finite values
/// while accumulated), and a wire type that is the accumulation type.
bool PullEngine::lands_in_acc(const Donor& d, const Chunk& c) const {
  if (d.skipped || !d.reader->fetches() || d.live || d.weight != 1.0 ||
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

/// Starts the reads of chunk @p c from every fetched donor (lane c & 1); true if one lands in
/// the scratch.
bool PullEngine::issue(std::size_t c) {
  const Chunk& chunk = chunks_[c];
  bool into_acc = false;
  for (Donor& d : donors_) {
    if (!d.skipped && d.reader->fetches()) {
      const bool direct = lands_in_acc(d, chunk);
      d.reader->start_chunk(d, chunk, direct ? acc_at(chunk) : nullptr, c & 1U);
      into_acc = into_acc || direct;
    }
  }
  return into_acc;
}

void PullEngine::pass() {
  const bool check_live = options_.non_finite != NonFinitePolicy::allow;
  const bool any_fetch = any_fetch_;
  acc_ = port_.scratch.get(scratch_bytes_);
  const InFlight in_flight(*this);
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
  if (any_fetch && !chunks_.empty()) {
    issue_hyper(0);  // with the first chunk: the same flush, no extra round trip
    guard.armed = issue(0);
  } else if (any_fetch) {
    // No layer data at all: the hyperparameters are the whole snapshot.
    issue_hyper(0);
    wait_lane(0);
  }
  const Layout& layout = w_.layout();
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const auto lane = static_cast<unsigned>(c & 1U);
    if (any_fetch) {
      if (c + 1 < chunks_.size()) {
        guard.armed = issue(c + 1) || guard.armed;
      }
      wait_lane(lane);
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
      const bool finite = accumulate(acc, layer_dtype, d.reader->at(d, chunk, lane), wire,
                                     chunk.count, d.weight, first, check_live && d.live);
      first = false;
      if (!finite && !d.non_finite) {
        d.non_finite = true;
        d.bad_index = chunk.layer;
      }
      if (!d.pinned && !d.live && d.reader->overtaken(d)) {
        d.torn = true;  // its slot is being overwritten: no use finishing this round
        return;         // reads still in flight complete in the background (graveyard)
      }
    }
  }
  guard.done = true;
}

void PullEngine::end_reads() {
  // Hyperparameters read in place are copied last, before the seqlock check below (or the
  // unpin) that validates them with the layers.
  for (Donor& d : donors_) d.reader->copy_hyper(d);
  std::uint64_t* begun = arena_->make<std::uint64_t>(donors_.size());
  {
    const InFlight in_flight(*this);
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      const Donor& d = donors_[i];
      if (!d.skipped && !d.pinned && !d.live) {
        d.reader->start_begun(d, begun[i]);
      }
    }
    wait_lane(0);
  }
  for (std::size_t i = 0; i < donors_.size(); ++i) {
    Donor& d = donors_[i];
    if (d.skipped || d.live) {
      continue;
    }
    if (d.pinned) {
      unpin(d);
      continue;
    }
    d.torn = d.torn || begun[i] > d.version + 1;
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
