// The device reader (reader.hpp): the donors of a device window (Memory::cuda, docs/gpu.md)
// when all of them are on this node. The protocol is the same-node reader's (header words and
// pins are CPU atomics in host shared memory, ShmReader); the bytes are the donors' device
// slots as mapped here (VMM or CUDA IPC), read by one kernel per layer over every donor into
// the caller's device memory (direct path) or the device scratch (staged path, validated by
// the seqlock afterwards). It is also the memory kind of a device window's layers: a pull
// whose donors were read over RMA into the host scratch commits through a bounce buffer.
#include <vector>

#include "detail/cuda.hpp"
#include "detail/kernels.hpp"
#include "window/reader.hpp"

namespace paramwin::detail {
namespace {

class DeviceReader final : public ShmReader {
 public:
  DeviceReader(const PullContext& ctx, cuda::Device& dev) : ShmReader(ctx), dev_(dev) {}

  [[nodiscard]] std::string donor_limit_error(std::size_t donors) const override {
    return cuda::device_donor_limit_error(donors);
  }
  /// MPI cannot write GPU memory here: reads over RMA are staged through the host.
  [[nodiscard]] bool host_output() const noexcept override { return false; }

  void copy_hyper(Donor& d) override {
    // The words ride in the device slot (the host may hold no copy).
    const SlotLayout& slots = ctx_.w.slots();
    if (slots.hyper_count == 0 || d.skipped) return;
    dev_.copy(d.hyper, slot(d) + slots.hyper_offset, slots.hyper_count * sizeof(std::uint64_t));
    dev_.synchronize();
  }

  [[nodiscard]] const std::byte* at(const Donor& d, const Chunk& c,
                                    unsigned /*lane*/) const override {
    const SlotLayout::Entry& e = ctx_.w.slots().entries[c.layer];
    return slot(d) + e.offset + c.first * dtype_size(e.wire);
  }

  void mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
           std::size_t count, double momentum, std::size_t /*out_bytes*/) override {
    dev_.mix(out, out_dtype, device_sources(sources), wire, count, momentum);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    dev_.copy(dst, src, bytes);  // the copy engine
  }
  /// The kernels read the pinned slots: the engine unpins only after this.
  void sync() override { dev_.synchronize(); }

  std::byte* accumulate_all(std::span<const Donor> donors, std::span<const std::size_t> acc_offset,
                            std::size_t scratch_bytes) override;
  void commit(std::span<const LayerRef> out, std::span<const std::size_t> order,
              const std::byte* acc, std::span<const std::size_t> acc_offset, bool own,
              double momentum) override;

 private:
  /// Start of the slot of the version @p d is reading, in its device slots mapped here.
  [[nodiscard]] const std::byte* slot(const Donor& d) const {
    return ctx_.w.device_slots(d.rank) + device_slot_offset(d.version, ctx_.w.slots().stride);
  }
  std::span<const cuda::DeviceSource> device_sources(std::span<const MixSource> sources) {
    sources_.clear();
    for (const MixSource& s : sources) sources_.push_back({s.data, s.weight});
    return sources_;
  }

  cuda::Device& dev_;
  std::vector<cuda::DeviceSource> sources_;
};

std::byte* DeviceReader::accumulate_all(std::span<const Donor> donors,
                                        std::span<const std::size_t> acc_offset,
                                        std::size_t scratch_bytes) {
  std::byte* acc = dev_.scratch(scratch_bytes);
  const Layout& layout = ctx_.w.layout();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const SlotLayout::Entry& e = ctx_.w.slots().entries[l];
    if (e.count == 0) continue;
    sources_.clear();
    for (const Donor& d : donors) {
      if (!d.skipped) sources_.push_back({at(d, Chunk{l, 0, e.count}, 0), d.weight});
    }
    dev_.mix(acc + acc_offset[l], layout[l].dtype, sources_, e.wire, e.count, 0.0, true);
  }
  dev_.synchronize();  // the seqlock check that follows must see the copies done
  return acc;
}

void DeviceReader::commit(std::span<const LayerRef> out, std::span<const std::size_t> order,
                          const std::byte* acc, std::span<const std::size_t> acc_offset, bool own,
                          double momentum) {
  const Layout& layout = ctx_.w.layout();
  if (own) {
    for (std::size_t l = 0; l < layout.size(); ++l) {
      const LayerRef& ref = out[order[l]];
      dev_.commit(ref.data(), ref.dtype(), acc + acc_offset[l], layout[l].count, momentum);
    }
    dev_.synchronize();
    return;
  }
  // Donors read over RMA into the host scratch: commit on the host into a bounce buffer per
  // layer (holding the caller's values first when momentum blends with them), then copy it
  // to the caller's device memory.
  std::vector<std::byte> bounce;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const LayerRef& ref = out[order[l]];
    const std::size_t bytes = bytes_of(layout[l].count, layout[l].dtype);
    if (bytes == 0) continue;
    bounce.resize(bytes);
    if (momentum != 0.0) {
      dev_.copy(bounce.data(), ref.data(), bytes);
      dev_.synchronize();
    }
    detail::commit(bounce.data(), ref.dtype(), acc + acc_offset[l], layout[l].count, momentum);
    dev_.copy(ref.data(), bounce.data(), bytes);
    dev_.synchronize();
  }
}

}  // namespace

std::unique_ptr<Reader> make_memory_reader(const PullContext& ctx) {
  cuda::Device* dev = ctx.w.device();
  if (dev == nullptr) return nullptr;
  return std::make_unique<DeviceReader>(ctx, *dev);
}

}  // namespace paramwin::detail
