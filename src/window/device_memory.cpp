// Device windows (Memory::cuda, docs/gpu.md): which memory a window takes (the layers' checks)
// and the device part of publish. The protocol around it is publish.cpp's; the bytes move in
// src/detail/cuda.cu.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "paramwin/error.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {
namespace {

// cuda.cu names DType's values itself (nvcc does not compile dtype.hpp).
static_assert(static_cast<int>(DType::float32) == 1 && static_cast<int>(DType::float64) == 2 &&
              static_cast<int>(DType::bfloat16) == 3 && static_cast<int>(DType::float16) == 4);

std::atomic<bool> g_device_windows{false};

template <class Ref>
void check_memory_of(const WindowImpl& w, std::span<const Ref> refs,
                     std::span<const std::size_t> order, const char* operation) {
  const cuda::Device* device = w.device();
  if (device == nullptr && !g_device_windows.load(std::memory_order_relaxed)) {
    return;  // no device window in this process: host windows take what they are given
  }
  const std::string where = std::string("paramwin: ") + operation + ": layer ";
  for (std::size_t l = 0; l < order.size(); ++l) {
    const Ref& r = refs[order[l]];
    if (r.count() == 0) continue;
    const LayerSpec& spec = w.layout()[l];
    if (device == nullptr) {
      // A host window, given memory declared as host memory: it must not be the GPU's.
      if (r.host_accessible() && cuda::classify(r.data()).device) {
        throw InvalidArgument(where + spec.describe() +
                              " is device (GPU) memory, but the window holds host memory: "
                              "create a device window (WindowOptions::memory = Memory::cuda), or "
                              "copy the layer to host memory first");
      }
      continue;
    }
    if (r.host_accessible()) {
      throw InvalidArgument(where + spec.describe() +
                            " is host memory, but the window is a device window (Memory::cuda) "
                            "and takes GPU memory: pass device memory (LayerRef(..., "
                            "paramwin::device_memory) or a Kokkos view of a CUDA space), or "
                            "create a host window");
    }
    const cuda::PointerInfo info = cuda::classify(r.data());
    if (!info.device) {
      throw InvalidArgument(where + spec.describe() +
                            " was passed as device memory, but CUDA does not know it as GPU "
                            "memory (host memory?): a device window takes memory allocated on "
                            "its GPU");
    }
    if (info.ordinal != device->ordinal()) {
      throw InvalidArgument(where + spec.describe() + " is on GPU " + std::to_string(info.ordinal) +
                            ", but this rank's device window is on GPU " +
                            std::to_string(device->ordinal()) + " (WindowOptions::cuda_device)");
    }
  }
}

}  // namespace

void note_device_window() noexcept { g_device_windows.store(true, std::memory_order_relaxed); }

void WindowImpl::check_layer_memory(std::span<const ConstLayerRef> refs,
                                    std::span<const std::size_t> order,
                                    const char* operation) const {
  check_memory_of(*this, refs, order, operation);
}

void WindowImpl::check_layer_memory(std::span<const LayerRef> refs,
                                    std::span<const std::size_t> order,
                                    const char* operation) const {
  check_memory_of(*this, refs, order, operation);
}

std::uint64_t WindowImpl::publish_device(std::span<const ConstLayerRef> layers,
                                         std::span<const std::size_t> order, std::uint64_t p) {
  cuda::Device& dev = *device_;
  std::byte* slot = dev.slots() + device_slot_offset(p, slots_.stride);
  // The hyperparameters ride in the slot after the layers (same seqlock), enqueued first:
  // publish() below waits for everything on the stream.
  if (slots_.hyper_count != 0) {
    dev.copy(slot + slots_.hyper_offset, hyper_.words().data(),
             slots_.hyper_count * sizeof(std::uint64_t));
  }
  std::vector<cuda::CopyItem> items;
  items.reserve(order.size());
  for (std::size_t layer = 0; layer < order.size(); ++layer) {
    const ConstLayerRef& ref = layers[order[layer]];
    const SlotLayout::Entry& e = slots_.entries[layer];
    items.push_back({slot + e.offset, e.wire, ref.data(), ref.dtype(), e.count});
  }
  const std::uint64_t bad_layer = dev.publish(items);
  if (host_slots_ != 0) {
    // Readers over RMA (other nodes, Transport::rma) read the host copy: written before the
    // version that announces it, like the device slot.
    dev.copy(segment_.data() + slot_offset(p, slots_.stride, false), slot, slots_.payload_bytes);
    dev.synchronize();
  }
  return bad_layer;
}

}  // namespace paramwin::detail
