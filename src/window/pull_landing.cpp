// Direct landing (PullOptions::landing = Landing::direct): pinned RMA reads that land in the
// caller's memory. Why it cannot tear, and the round trips it costs (same node, one donor,
// 1 MiB: a get costs ~80 µs, a round trip a few µs):
//
//  1. One batch per pull pins both slots of every RMA donor (MPI_Rget_accumulate) and reads
//     its header. The header get may be served before the pin is applied (MPI orders
//     accumulates to one word, nothing else), so the version it names is speculative: a
//     publish that had passed its pin check before the pin landed may still be writing.
//  2. The first data batch re-reads the seqlock words (version, begun, records) next to the
//     first chunks: issued after the pins completed, it sees every publish that can still
//     write. If begun <= version + 1 there, no publish overwrote the speculative slot before
//     the pin and none can after it (the owner skips every publish into a pinned slot), so
//     the bytes read are that version's. Otherwise the reads restart from the version the
//     re-read names (read under the pin: at most publish version + 1 is in progress, and it
//     writes the other slot), with no further check.
//  3. The pins are released with MPI_Raccumulate (no fetch, completed locally): no round trip
//     after the data; MPI applies the release after the pin (same origin, same word).
//
// Where the bytes land: one donor whose wire type is the layer type, no momentum and no
// deadline: every layer is one MPI_Get (split below 1 GiB, one MPI_Win_flush) straight into the
// caller's memory. Otherwise chunk buffers (two per RMA donor, PullOptions::chunk_bytes), the next
// chunk in flight while mix() widens and adds this one into the caller's memory (one pass
// over all donors; same-node donors are read from their pinned slots). With a deadline no
// read ever targets the caller's memory: reads abandoned at the deadline land later, in
// buffers the window keeps (the graveyard), never in memory the caller owns again.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/pull_engine.hpp"

namespace paramwin::detail {
namespace {

std::string partial_text(const std::string& cause) {
  return "paramwin: pull (Landing::direct) failed after writing into the caller's memory, "
         "which now holds partly written parameters (retry the pull or re-initialise them; "
         "never train on them as they are). Cause: " +
         cause;
}

}  // namespace

bool PullEngine::can_land() const {
  return std::none_of(donors_.begin(), donors_.end(), [](const Donor& d) { return d.live; });
}

bool PullEngine::lands_straight() const {
  if (options_.momentum != 0.0 || deadline_ > 0.0) {
    return false;
  }
  const Donor* only = nullptr;
  for (const Donor& d : donors_) {
    if (d.skipped) continue;
    if (only != nullptr) return false;
    only = &d;
  }
  if (only == nullptr || !only->reader->fetches()) {
    return false;
  }
  const Layout& layout = w_.layout();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    if (w_.slots().entries[l].wire != layout[l].dtype) return false;
  }
  return true;
}

void PullEngine::issue_line1(HeadWords* line1) {
  for (std::size_t i = 0; i < donors_.size(); ++i) {
    const Donor& d = donors_[i];
    if (!d.skipped && d.reader->fetches()) {
      d.reader->start_line1(d, line1[i]);  // lane 0
    }
  }
}

bool PullEngine::check_line1(const HeadWords* line1) {
  bool held = true;
  for (std::size_t i = 0; i < donors_.size(); ++i) {
    Donor& d = donors_[i];
    if (d.skipped || !d.reader->fetches()) continue;
    const HeadWords& h = line1[i];
    if (h.begun > d.version + 1) {
      // A publish overtook the header read before the pin landed: read what the pin holds.
      d.version = h.version;
      d.bad_layer = h.bad_layer[h.version & 1U];
      d.stamp = h.stamp[h.version & 1U];
      ++d.attempts;
      d.non_finite = false;
      note_record(d);
      held = false;
    }
  }
  return held;
}

void PullEngine::run_landing() {
  landing_ = Landing::direct;
  for (Donor& d : donors_) {
    if (!d.pinned) {  // fetched donors were pinned with their header (read_heads)
      d.reader->pin(d);
      d.reader->copy_hyper(d);  // pinned: this slot cannot be rewritten until the unpin
    }
    d.attempts = 1;
    note_record(d);
  }
  (void)apply_non_finite();
  normalise_weights();
  const Layout& layout = w_.layout();
  std::size_t out_bytes = 0;  // the whole pull's output, for the kernels' choice of stores
  for (std::size_t l = 0; l < layout.size(); ++l) {
    out_bytes += bytes_of(layout[l].count, layout[l].dtype);
  }
  HeadWords* line1 = arena_->make<HeadWords>(donors_.size());
  try {
    bool validate = true;
    for (;;) {
      const bool held = lands_straight() ? land_straight(validate, line1)
                                         : land_chunks(validate, line1, out_bytes);
      if (held) break;
      // Versions moved (read under the pin now): their records decide before any write.
      if (apply_non_finite()) normalise_weights();
      validate = false;
    }
  } catch (const PartialPullError&) {
    throw;
  } catch (const TimeoutError& e) {
    if (!written_) throw;
    throw PartialPullError(e.rank(), partial_text(e.what()), true);
  } catch (const DonorError& e) {
    if (!written_) throw;
    throw PartialPullError(e.rank(), partial_text(e.what()), false);
  } catch (const Error& e) {
    if (!written_) throw;
    int rank = donors_.front().rank;
    for (const Donor& d : donors_) {
      if (!d.skipped && d.reader->fetches()) {
        rank = d.rank;
        break;
      }
    }
    throw PartialPullError(rank, partial_text(e.what()), false);
  }
  for (Donor& d : donors_) {
    d.reader->release(d);
  }
}

bool PullEngine::land_straight(bool validate, HeadWords* line1) {
  const Layout& layout = w_.layout();
  Donor* only = nullptr;
  for (Donor& d : donors_) {
    if (!d.skipped) only = &d;
  }
  const InFlight in_flight(*this);
  only->reader->flush_gets(0);  // no deadline here: plain gets and one flush, as a raw MPI_Get
  if (validate) issue_line1(line1);
  issue_hyper(0);
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const SlotLayout::Entry& e = w_.slots().entries[l];
    if (e.count == 0) continue;
    written_ = true;  // from the first get on, the caller's bytes may change
    only->reader->start_chunk(*only, Chunk{l, 0, e.count}, out_[order_[l]].data(), 0);
  }
  wait_lane(0);
  return !validate || check_line1(line1);
}

bool PullEngine::land_chunks(bool validate, HeadWords* line1, std::size_t out_bytes) {
  const InFlight in_flight(*this);
  auto issue_chunk = [&](std::size_t c) {
    for (Donor& d : donors_) {
      if (!d.skipped && d.reader->fetches()) {
        d.reader->start_chunk(d, chunks_[c], nullptr, c & 1U);
      }
    }
  };
  if (validate) issue_line1(line1);
  issue_hyper(0);
  if (!chunks_.empty()) issue_chunk(0);
  std::vector<MixSource> sources;
  for (std::size_t c = 0; c <= chunks_.size(); ++c) {
    const auto lane = static_cast<unsigned>(c & 1U);
    if (c + 1 < chunks_.size()) issue_chunk(c + 1);
    wait_lane(lane);
    if (c == 0 && validate && !check_line1(line1)) {
      wait_lane(1);  // chunk 1 of the overtaken version lands in a buffer: let it
      return false;
    }
    if (c == chunks_.size()) break;  // only the validation batch (no layer data)
    const Chunk& chunk = chunks_[c];
    const SlotLayout::Entry& e = w_.slots().entries[chunk.layer];
    const LayerRef& ref = out_[order_[chunk.layer]];
    sources.clear();
    for (const Donor& d : donors_) {
      if (d.skipped) continue;
      sources.push_back({d.reader->at(d, chunk, lane), d.weight});
    }
    written_ = true;
    mix(static_cast<std::byte*>(ref.data()) + bytes_of(chunk.first, ref.dtype()), ref.dtype(),
        sources, e.wire, chunk.count, options_.momentum, out_bytes);
  }
  return true;
}

}  // namespace paramwin::detail
