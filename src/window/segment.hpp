#pragma once
// The memory format of one agent's window segment:
//   [ header page | slot 0 | slot 1 ]      every part page-aligned, sizes multiples of 4096
// The header holds the publish seqlock, the reader pins, the roster (with a copy of the
// latest publish's hyperparameters) and a verification pattern; each slot holds one complete
// snapshot of all layers in wire format followed by the hyperparameters' words, so that one
// seqlock covers both.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "paramwin/dtype.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"

namespace paramwin::detail {

inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kLayerAlign = 64;
inline constexpr std::uint64_t kMagic = 0x70617261'6d77696eULL;  // "paramwin"

[[nodiscard]] constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept {
  return (n + to - 1) / to * to;
}

/// Bytes of @p count elements of @p dtype: the one place element counts become bytes.
[[nodiscard]] constexpr std::size_t bytes_of(std::size_t count, DType dtype) noexcept {
  return count * dtype_size(dtype);
}

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

/// Header at the start of every segment. Fields are 64-bit atomics so that owner stores and
/// same-node loads are race-free; remote readers fetch them with MPI_Get.
struct alignas(64) SegmentHeader {
  // line 0: immutable after creation
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint64_t> fingerprint;  // slot fingerprint: layout and wire format
  std::atomic<std::uint64_t> slot_bytes;   // payload bytes of one slot
  std::atomic<std::uint64_t> slot_stride;  // distance between slot 0 and slot 1
  std::atomic<std::uint64_t> exposure;     // Exposure: snapshot (two slots) or live (one)
  std::atomic<std::uint64_t> host_slots;   // slots in this segment (Placement::host_slots())
  std::atomic<std::uint64_t> memory;       // Memory: where the slots readers map live

  // line 1: publish seqlock, written by the owner only
  alignas(64) std::atomic<std::uint64_t> version;  // completed publishes; latest in slot version%2
  std::atomic<std::uint64_t> begun;                // publishes begun
  std::atomic<std::uint64_t> publish_time;         // bits of MPI_Wtime() of the latest publish
  // Per slot: 0 if every value of the snapshot is finite, else 1 + the first layer holding
  // NaN or infinity (kUnknownFinite in live mode). Written with the slot, before version.
  std::atomic<std::uint64_t> bad_layer[2];
  // Per slot: the caller's stamp passed to publish (0 if none). Written with the slot, before
  // version, so a reader that validates its copy also has the stamp of that very snapshot.
  std::atomic<std::uint64_t> stamp[2];

  // lines 2-3: unused (the pins are per reader, in the bitmaps after line 10), kept so that
  // the offsets of lines 4-10 stay where readers of this format expect them.
  alignas(64) std::atomic<std::uint64_t> unused_lines_2_3[16];

  // line 4: roster, under its own seqlock (odd while the owner writes)
  alignas(64) std::atomic<std::uint64_t> status_seq;
  std::atomic<std::uint64_t> iteration;
  std::atomic<std::uint64_t> age;
  std::atomic<std::uint64_t> metric;  // bits of a double
  std::atomic<std::uint64_t> generation;
  std::atomic<std::uint64_t> state;
  // The owner's report before its latest iteration (set_status keeps it when the iteration
  // changes): kNoReport in previous_iteration until there is one.
  std::atomic<std::uint64_t> previous_iteration;
  std::atomic<std::uint64_t> previous_metric;  // bits of a double

  // line 5: verification pattern written at creation
  alignas(64) std::atomic<std::uint64_t> verify[8];

  // lines 6-9: the latest publish's hyperparameters, for the roster: written by publish under
  // the roster's seqlock (status_seq) when they changed. Readers of a snapshot take the
  // words in the slot instead (same seqlock as the layers).
  alignas(64) std::atomic<std::uint64_t> roster_hyper[kMaxHyperparameters];

  // line 10: liveness (docs/elastic.md). pid, host and incarnation are written at creation;
  // heartbeat and beat_interval_ns by every set_status (each agent step). Plain words: each
  // is read on its own, no seqlock (a reader only compares heartbeats over time).
  alignas(64) std::atomic<std::uint64_t> heartbeat;
  std::atomic<std::uint64_t> pid;
  std::atomic<std::uint64_t> host;
  std::atomic<std::uint64_t> incarnation;
  std::atomic<std::uint64_t> beat_interval_ns;  // moving average of the time between beats

  // line 11 to the end of the page: the readers' pins (pins.hpp), one bit per reader rank in
  // four bitmaps: same-node readers of slot 0 and 1 (CPU atomics), then RMA readers of slot
  // 0 and 1 (MPI atomics; kept apart: the two are not atomic with respect to each other).
  // Per reader, so that the owner can release the pins of a reader whose process is gone.
  alignas(64) std::atomic<std::uint64_t> pins[(kPage - 704) / 8];
};
static_assert(sizeof(SegmentHeader) == kPage);

/// Word offsets of header fields, for MPI_Get / MPI_Fetch_and_op on remote headers.
inline constexpr std::size_t kVersionOffset = 64;
inline constexpr std::size_t kBegunOffset = 72;
inline constexpr std::size_t kPublishTimeOffset = 80;
inline constexpr std::size_t kBadLayerOffset = 88;
inline constexpr std::size_t kStatusOffset = 256;
inline constexpr std::size_t kStatusBytes = 64;
inline constexpr std::size_t kVerifyOffset = 320;
inline constexpr std::size_t kRosterHyperOffset = 384;
inline constexpr std::size_t kLivenessOffset = 640;
inline constexpr std::size_t kPinsOffset = 704;

/// bad_layer value of a live-mode slot: finiteness is not known without reading it.
inline constexpr std::uint64_t kUnknownFinite = ~std::uint64_t{0};

/// Header lines 0 and 1 as plain words: what remote readers fetch in one MPI_Get.
struct HeadWords {
  std::uint64_t magic, fingerprint, slot_bytes, stride, exposure, host_slots, memory, pad0[1];
  std::uint64_t version, begun, publish_time, bad_layer[2], stamp[2], pad1[1];
};
static_assert(sizeof(HeadWords) == 128);

/// The roster block (status sequence word and fields) as plain words.
struct StatusWords {
  std::uint64_t seq, iteration, age, metric, generation, state, previous_iteration, previous_metric;
};

/// previous_iteration of a roster with no previous report (INT64_MIN: no iteration is).
inline constexpr std::uint64_t kNoReport = std::uint64_t{1} << 63;
static_assert(sizeof(StatusWords) == kStatusBytes);

/// The liveness line (heartbeat, pid, host, incarnation, beat interval) as plain words.
struct LivenessWords {
  std::uint64_t heartbeat, pid, host, incarnation, beat_interval_ns;
};

/// Where each layer sits inside a slot, and in which element type.
struct SlotLayout {
  struct Entry {
    std::size_t offset;  // bytes from the start of the slot
    std::size_t count;   // elements
    DType wire;          // element type in the slot
  };
  std::vector<Entry> entries;
  std::size_t hyper_offset = 0;   // bytes from the start of the slot to the hyperparameters
  std::size_t hyper_count = 0;    // hyperparameter words (one per declared hyperparameter)
  std::size_t payload_bytes = 0;  // bytes up to the end of the hyperparameters (or last layer)
  std::size_t stride = 0;         // payload rounded up to whole pages (at least one page)
  std::uint64_t fingerprint = 0;  // layout fingerprint combined with the wire format
};

/// The element type a layer of @p dtype is stored in under @p wire.
[[nodiscard]] DType wire_dtype(DType dtype, WireFormat wire) noexcept;

/// Computes the slot format of @p layout under @p wire.
[[nodiscard]] SlotLayout make_slot_layout(const Layout& layout, WireFormat wire);

/// Number of slots of a segment: two (double buffer) for snapshots, one in live mode.
[[nodiscard]] constexpr std::size_t slot_count(Exposure exposure) noexcept {
  return exposure == Exposure::live ? 1 : 2;
}

/// Total segment bytes: header page plus @p host_slots slots.
[[nodiscard]] constexpr std::size_t segment_bytes(const SlotLayout& slots,
                                                  std::size_t host_slots) noexcept {
  return kPage + host_slots * slots.stride;
}

/// Byte offset, inside a segment, of the slot holding @p version.
[[nodiscard]] constexpr std::size_t slot_offset(std::uint64_t version, std::size_t stride,
                                                bool live) noexcept {
  return kPage + (live ? 0 : (version & 1U) * stride);
}

}  // namespace paramwin::detail
