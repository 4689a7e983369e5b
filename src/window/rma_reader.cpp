// The RMA reader (reader.hpp): a donor's header, seqlock words and pins are read and changed
// with request-based MPI RMA (RmaBatch), its bytes fetched with MPI_Rget into chunk buffers
// (or the memory the engine names), in two lanes so that the next chunk is in flight while
// this one is accumulated. Every batch honours the pull's deadline and leaves what it
// abandons to the window's graveyard.
#include <optional>

#include "window/pins.hpp"
#include "window/reader.hpp"

namespace paramwin::detail {
namespace {

class RmaReader final : public Reader {
 public:
  using Reader::Reader;
  RmaReader(const RmaReader&) = delete;
  RmaReader& operator=(const RmaReader&) = delete;
  RmaReader(RmaReader&&) = delete;
  RmaReader& operator=(RmaReader&&) = delete;
  ~RmaReader() override { close(); }

  [[nodiscard]] bool fetches() const noexcept override { return true; }
  [[nodiscard]] std::size_t chunk_bytes() const noexcept override { return kRmaChunkBytes; }

  void start_head(Donor& d, HeadWords& head, std::uint64_t& metric, bool pin) override {
    RmaBatch& batch = lane(0);
    if (pin) {
      // Marked first: if the batch is abandoned (deadline), the release is issued too.
      d.pinned = d.ever_pinned = true;
      set_pin_bits(batch, d.rank, true);
    }
    batch.get(&head, sizeof(HeadWords), d.rank, 0);
    batch.get(&metric, 8, d.rank, offsetof(SegmentHeader, metric));
  }

  void start_line1(const Donor& d, HeadWords& line1) override {
    if (d.attempts > 0) {
      lane(0).get(&line1.version, kLine1Bytes, d.rank, kLine1);
    } else {  // the first attempt uses what the header read saw
      line1.version = d.version;
      line1.bad_layer[d.version & 1U] = d.bad_layer;
      line1.stamp[d.version & 1U] = d.stamp;
    }
  }

  void start_begun(const Donor& d, std::uint64_t& begun) override {
    lane(0).get(&begun, 8, d.rank, kBegunOffset);
  }

  void pin(Donor& d) override;

  void unpin(Donor& d) override {
    if (!d.pinned) {
      return;
    }
    d.pinned = false;
    pin_change(d.rank, false, true);
  }

  void release(Donor& d) override {
    if (!d.pinned) {
      return;
    }
    d.pinned = false;
    RmaBatch batch = make_batch();
    set_pin_bits(batch, d.rank, false);
    batch.abandon();  // completes locally at the next reap (next pull, progress(), free)
  }

  void release_noexcept(Donor& d) noexcept override {
    if (!d.pinned) {
      return;
    }
    d.pinned = false;
    // Unwinding (possibly from a deadline): release the pin without waiting for it; the
    // request completes in the background (MPI orders accumulates to one location, so it
    // applies after the pin's increment).
    try {
      pin_change(d.rank, false, false);
    } catch (...) {  // NOLINT(bugprone-empty-catch): best effort while an error unwinds
    }
  }

  void start_hyper(Donor& d, unsigned lane_index) override {
    const SlotLayout& slots = ctx_.w.slots();
    if (slots.hyper_count == 0 || d.skipped) return;
    lane(lane_index)
        .get(d.hyper, slots.hyper_count * sizeof(std::uint64_t), d.rank,
             slot_offset(d.version, slots.stride, d.live) + slots.hyper_offset);
  }

  void start_chunk(Donor& d, const Chunk& c, void* into, unsigned lane_index) override {
    const SlotLayout& slots = ctx_.w.slots();
    lane(lane_index)
        .get(into != nullptr ? into : d.buffers[lane_index],
             c.count * dtype_size(slots.entries[c.layer].wire), d.rank, data_offset(slots, d, c));
  }

  void flush_gets(unsigned lane_index) override { lane(lane_index).flush_gets(); }

  void wait(unsigned lane_index) override {
    if (lanes_[lane_index]) lanes_[lane_index]->wait();
  }

  void close() noexcept override {
    lanes_[0].reset();  // RmaBatch's destructor: what is in flight goes to the graveyard
    lanes_[1].reset();
  }

  [[nodiscard]] const std::byte* at(const Donor& d, const Chunk& /*c*/,
                                    unsigned lane_index) const override {
    return d.buffers[lane_index];
  }

 private:
  /// A batch whose reads land in the arena and that honours the pull's deadline.
  [[nodiscard]] RmaBatch make_batch() const {
    return RmaBatch(ctx_.port.rma_win, &ctx_.port.graveyard, ctx_.arena, ctx_.deadline);
  }
  RmaBatch& lane(unsigned i) {
    if (!lanes_[i]) {
      lanes_[i].emplace(ctx_.port.rma_win, &ctx_.port.graveyard, ctx_.arena, ctx_.deadline);
    }
    return *lanes_[i];
  }
  /// Pins (@p set) or unpins both slots of @p rank in @p batch: this rank's bit in the
  /// donor's RMA bitmaps, set by every pin, cleared by the last unpin of this process.
  void set_pin_bits(RmaBatch& batch, int rank, bool set);
  /// set_pin_bits in a batch of its own; waits (deadline) or, when @p wait is false, leaves
  /// the operations to complete in the background.
  void pin_change(int rank, bool set, bool wait);

  std::optional<RmaBatch> lanes_[2];
};

void RmaReader::pin(Donor& d) {
  // Over RMA a pin cannot be raced against the version read: every round trip waits
  // for the donor's next trip through MPI, and a donor that publishes faster than
  // that would make a version-then-pin loop fail forever. So pin both slots first
  // (the owner then skips every publish), then read the version: the slot it names
  // cannot be rewritten until the pins are released. Two round trips, no retry.
  // Marked pinned before the increment: if it is abandoned at the deadline, the release
  // is issued too, and MPI applies accumulates to one location in order.
  d.pinned = true;
  pin_change(d.rank, true, true);
  HeadWords* head = ctx_.arena->make<HeadWords>(1);
  {
    RmaBatch batch = make_batch();
    batch.get(&head->version, kLine1Bytes, d.rank, kLine1);
    batch.wait();
  }
  d.version = head->version;
  d.bad_layer = head->bad_layer[d.version & 1U];
  d.stamp = head->stamp[d.version & 1U];
  d.ever_pinned = true;
}

void RmaReader::set_pin_bits(RmaBatch& batch, int rank, bool set) {
  PinBook& book = ctx_.w.pin_book();
  const auto lock = book.lock();  // counted and issued in one order across threads
  if (set) {
    book.count_rma(rank);
  } else if (!book.uncount_rma(rank)) {
    return;  // another read of this process still holds the pin
  }
  const std::uint64_t bit = pin_bit(book.self());
  auto* in = ctx_.arena->make<std::uint64_t>(4);
  in[0] = in[2] = set ? bit : ~bit;
  for (std::size_t slot = 0; slot < 2; ++slot) {
    const std::size_t offset = pin_word_offset(PinKind::rma, slot, book.self(), book.ranks());
    if (set) {
      batch.fetch_op(&in[2 * slot], &in[2 * slot + 1], rank, offset, MPI_BOR);
    } else {
      batch.accumulate(&in[2 * slot], rank, offset, MPI_BAND);
    }
  }
}

void RmaReader::pin_change(int rank, bool set, bool wait) {
  RmaBatch batch = make_batch();
  set_pin_bits(batch, rank, set);
  if (wait) {
    batch.wait();
  } else {
    batch.abandon();
  }
}

}  // namespace

std::unique_ptr<Reader> make_rma_reader(const PullContext& ctx) {
  return std::make_unique<RmaReader>(ctx);
}

}  // namespace paramwin::detail
