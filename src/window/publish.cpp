// Publish: the owner's side of the versioned double buffer (seqlock).
//
// Publish p writes slot p % 2, never the slot of the latest complete version p - 1 that
// readers are told to read. Order: begun = p, full fence, check pins, write the slot (and its
// finiteness record), release fence, version = p. A reader of version v accepts its copy only
// if begun <= v + 1 afterwards, i.e. publish v + 2 (the next one to write slot v % 2) had not
// started. In live mode there is one slot, the trainer's own memory: publish only advances
// the version. The bytes of the slot are the placement's to write (placement.hpp): the host
// slot by default, a GPU placement its own slots.
#include <algorithm>
#include <atomic>
#include <bit>
#include <string>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

PublishResult WindowImpl::publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp,
                                  bool bound) {
  const double t0 = MPI_Wtime();
  const bool live = options_.exposure == Exposure::live;
  if (layers.empty() && !live && !layout_.empty()) {
    throw InvalidArgument("paramwin: publish() without layers is only for Exposure::live "
                          "windows; pass the parameters to publish");
  }
  const std::vector<std::size_t> order = layers.empty() ? std::vector<std::size_t>{}
                                         : bound        ? identity_order(layers.size())
                                                        : bind_layers(layout_, layers, "publish");
  check_layer_memory(layers, order, "publish");
  SegmentHeader& h = header();
  const std::uint64_t p = version_ + 1;
  const std::size_t slot = live ? 0 : (p & 1U);

  if (!live) {
    h.begun.store(p, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A reader that could not get a clean copy optimistically pins the slot it reads. Pinned
    // means: this publish would overwrite it, so skip it (never wait). The Dekker pair (begun
    // store, fence, pin load) vs (pin increment, begun load) makes one side see the other.
    if (slot_pinned(h, slot, size_) && !release_dead_readers_pins(slot)) {
      h.begun.store(version_, std::memory_order_relaxed);
      return PublishResult{false, version_, MPI_Wtime() - t0};
    }
    pinned_since_ = 0.0;
  }

  // The layers, then the hyperparameters (same seqlock, same copy). A failure (a GPU's)
  // leaves the version where it was (begun restored: the slot was never announced).
  std::uint64_t bad_layer = 0;
  try {
    bad_layer = placement_->write_slot(
        SlotWrite{.layers = layers,
                  .order = order,
                  .slots = &slots_,
                  .hyper = hyper_.words(),
                  .version = p,
                  .live = live,
                  .host_slot = host_slots_ == 0
                                   ? nullptr
                                   : segment_.data() + slot_offset(p, slots_.stride, live)});
  } catch (...) {
    if (!live) h.begun.store(version_, std::memory_order_relaxed);
    throw;
  }
  h.bad_layer[slot].store(bad_layer, std::memory_order_relaxed);
  h.stamp[p & 1U].store(stamp, std::memory_order_relaxed);  // by version: live has one slot
  h.publish_time.store(std::bit_cast<std::uint64_t>(MPI_Wtime()), std::memory_order_relaxed);
  if (live) {
    h.begun.store(p, std::memory_order_relaxed);
  }
  h.version.store(p, std::memory_order_release);
  version_ = p;
  heartbeat_.beat(h);
  publish_roster_hyper();
  if (status_.state == AgentState::fresh) {
    AgentStatus s = status_;
    s.state = AgentState::active;
    set_status(s);
  }
  return PublishResult{true, p, MPI_Wtime() - t0};
}

bool WindowImpl::release_dead_readers_pins(std::size_t slot) {
  const double now = MPI_Wtime();
  if (pinned_since_ == 0.0) pinned_since_ = now;
  if (now - pinned_since_ < 0.1) return false;  // live readers release theirs in time
  pinned_since_ = now;                          // the next look in 0.1 s
  SegmentHeader& h = header();
  const std::uint64_t here = load_liveness(h).host;  // this process's, written at creation
  bool released = false;
  for (const PinKind kind : {PinKind::shm, PinKind::rma}) {
    for (const int reader : pinning_readers(h, kind, slot, size_)) {
      const SegmentHeader* theirs = shm_header(reader);
      if (theirs == nullptr) continue;  // another node: its pid says nothing here
      const LivenessWords live = load_liveness(*theirs);
      if (live.host != here || process_alive(static_cast<std::int64_t>(live.pid))) continue;
      const std::size_t offset = pin_word_offset(kind, slot, reader, size_);
      const std::uint64_t keep = ~pin_bit(reader);
      if (kind == PinKind::shm) {
        pin_word(h, offset).fetch_and(keep, std::memory_order_seq_cst);
      } else if (rma_win_) {  // MPI atomics on its word, as the readers' (not CPU atomics)
        check_mpi(MPI_Accumulate(&keep, 1, MPI_UINT64_T, rank_, static_cast<MPI_Aint>(offset), 1,
                                 MPI_UINT64_T, MPI_BAND, rma_win_.get()),
                  "MPI_Accumulate(pin of a dead reader)");
        check_mpi(MPI_Win_flush(rank_, rma_win_.get()), "MPI_Win_flush");
      }
      released = true;
    }
  }
  if (!released) return false;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return !slot_pinned(h, slot, size_);
}

void WindowImpl::set_hyperparameters(const Hyperparameters& hyper) {
  const std::span<const HyperSpec> mine = hyper_.specs();
  const std::span<const HyperSpec> theirs = hyper.specs();
  if (!std::equal(mine.begin(), mine.end(), theirs.begin(), theirs.end())) {
    std::string want;
    for (const HyperSpec& sp : mine) want += (want.empty() ? "" : ", ") + sp.describe();
    std::string got;
    for (const HyperSpec& sp : theirs) got += (got.empty() ? "" : ", ") + sp.describe();
    throw InvalidArgument("paramwin: set_hyperparameters: the values declare [" + got +
                          "] but the layout declares [" + want + "]");
  }
  std::copy(hyper.words().begin(), hyper.words().end(), hyper_.words().begin());
}

void WindowImpl::publish_roster_hyper() {
  const std::span<const std::uint64_t> words = hyper_.words();
  if (std::equal(words.begin(), words.end(), roster_hyper_.begin())) return;
  SegmentHeader& h = header();
  const std::uint64_t seq = h.status_seq.load(std::memory_order_relaxed);
  h.status_seq.store(seq + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = 0; i < words.size(); ++i) {
    h.roster_hyper[i].store(words[i], std::memory_order_relaxed);
  }
  h.status_seq.store(seq + 2, std::memory_order_release);
  std::copy(words.begin(), words.end(), roster_hyper_.begin());
}

std::byte* WindowImpl::live_layer(std::size_t layer) const {
  if (options_.exposure != Exposure::live) {
    throw InvalidArgument("paramwin: live_span needs a window created with Exposure::live");
  }
  return segment_.data() + kPage + slots_.entries.at(layer).offset;
}

}  // namespace paramwin::detail
