#include "window/segment.hpp"

#include <cstddef>

namespace paramwin::detail {

static_assert(offsetof(SegmentHeader, version) == kVersionOffset);
static_assert(offsetof(SegmentHeader, begun) == kBegunOffset);
static_assert(offsetof(SegmentHeader, publish_time) == kPublishTimeOffset);
static_assert(offsetof(SegmentHeader, heartbeat) == kLivenessOffset);
static_assert(offsetof(SegmentHeader, pins) == kPinsOffset);
static_assert(offsetof(SegmentHeader, status_seq) == kStatusOffset);
static_assert(offsetof(SegmentHeader, previous_metric) + 8 == kStatusOffset + kStatusBytes);
static_assert(offsetof(SegmentHeader, verify) == kVerifyOffset);
static_assert(offsetof(SegmentHeader, bad_layer) == kBadLayerOffset);
static_assert(offsetof(SegmentHeader, roster_hyper) == kRosterHyperOffset);
static_assert(offsetof(SegmentHeader, exposure) == offsetof(HeadWords, exposure));
static_assert(offsetof(SegmentHeader, version) == offsetof(HeadWords, version));
static_assert(offsetof(SegmentHeader, bad_layer) == offsetof(HeadWords, bad_layer));
static_assert(offsetof(SegmentHeader, stamp) == offsetof(HeadWords, stamp));

DType wire_dtype(DType dtype, WireFormat wire) noexcept {
  if (dtype != DType::float32) {
    return dtype;  // float64 keeps its precision; 16-bit layers are already narrow
  }
  switch (wire) {
    case WireFormat::bfloat16: return DType::bfloat16;
    case WireFormat::float16: return DType::float16;
    case WireFormat::native: break;
  }
  return dtype;
}

SlotLayout make_slot_layout(const Layout& layout, WireFormat wire) {
  SlotLayout slots;
  slots.entries.reserve(layout.size());
  std::size_t offset = 0;
  for (const LayerSpec& layer : layout.layers()) {
    const DType w = wire_dtype(layer.dtype, wire);
    slots.entries.push_back({offset, layer.count, w});
    offset = round_up(offset + bytes_of(layer.count, w), kLayerAlign);
  }
  // The hyperparameters after the last layer, inside the slot: the same copy (shared
  // memory) or the same flush (RMA) as the layers, validated by the same seqlock.
  slots.hyper_offset = offset;
  slots.hyper_count = layout.hyperparameters().size();
  if (slots.hyper_count != 0) {
    offset = round_up(offset + slots.hyper_count * sizeof(std::uint64_t), kLayerAlign);
  }
  slots.payload_bytes = offset;
  slots.stride = round_up(offset == 0 ? 1 : offset, kPage);
  // Mix the wire format into the layout fingerprint: same layout, other wire = other bytes.
  slots.fingerprint =
      layout.fingerprint() ^ (0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(wire) + 1));
  return slots;
}

}  // namespace paramwin::detail
