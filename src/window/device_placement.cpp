// The GPU placement of device windows (Memory::cuda, docs/gpu.md; placement.hpp): the options
// a device window refuses, which memory it takes (and the check host windows make once this
// process has a device window), its device slots and how the ranks of a node share them, and
// the device part of publish. The protocol around it is publish.cpp's; the pull side is the
// pull engine's device reader (device_reader.cpp); the bytes move in src/detail/cuda.cu.
//
// Each rank allocates its slots on its GPU and maps every other rank's of the node:
//   - VMM (the default where every rank's GPU and driver support it): cuMemCreate memory,
//     exported as a file descriptor, the descriptors passed over Unix sockets
//     (mpi/fd_exchange.hpp), imported and mapped. Read at the speed of a local copy.
//   - CUDA IPC (otherwise, or when VMM sharing fails: logged): cudaMalloc memory,
//     cudaIpcGetMemHandle / cudaIpcOpenMemHandle. Read 1.25x slower for 1 GB on an H200.
// PARAMWIN_DEVICE_SHARING=ipc|vmm forces one (vmm: no fallback, its failure is the error).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "mpi/fd_exchange.hpp"
#include "paramwin/error.hpp"
#include "window/placement.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {
namespace {

// cuda.cu names DType's values itself (nvcc does not compile dtype.hpp).
static_assert(static_cast<int>(DType::float32) == 1 && static_cast<int>(DType::float64) == 2 &&
              static_cast<int>(DType::bfloat16) == 3 && static_cast<int>(DType::float16) == 4);

/// Set once this process created a device window: from then on host windows check that the
/// layers they are given as host memory are not device memory.
std::atomic<bool> g_device_windows{false};

enum class Sharing : std::uint8_t { automatic, ipc, vmm };

/// PARAMWIN_DEVICE_SHARING; @p error says why when its value is not one of the names.
Sharing sharing_asked(std::string& error) {
  const char* value = std::getenv("PARAMWIN_DEVICE_SHARING");
  const std::string_view v = value == nullptr ? std::string_view{} : std::string_view(value);
  if (v.empty() || v == "auto") return Sharing::automatic;
  if (v == "ipc") return Sharing::ipc;
  if (v == "vmm") return Sharing::vmm;
  error = "paramwin: PARAMWIN_DEVICE_SHARING=" + std::string(v) +
          " is not one of auto, ipc, vmm (how device windows share their slots in a node)";
  return Sharing::automatic;
}

/// A host window's layers declared as host memory must not be GPU memory.
template <class Ref>
void check_host_memory(const Layout& layout, std::span<const Ref> refs,
                       std::span<const std::size_t> order, const char* operation) {
  if (!g_device_windows.load(std::memory_order_relaxed)) {
    return;  // no device window in this process: host windows take what they are given
  }
  for (std::size_t l = 0; l < order.size(); ++l) {
    const Ref& r = refs[order[l]];
    if (r.count() == 0) continue;
    if (r.host_accessible() && cuda::classify(r.data()).device) {
      throw InvalidArgument(std::string("paramwin: ") + operation + ": layer " +
                            layout[l].describe() +
                            " is device (GPU) memory, but the window holds host memory: "
                            "create a device window (WindowOptions::memory = Memory::cuda), or "
                            "copy the layer to host memory first");
    }
  }
}

/// A device window's layers must be device memory on its GPU.
template <class Ref>
void check_device_memory(const cuda::Device& device, const Layout& layout,
                         std::span<const Ref> refs, std::span<const std::size_t> order,
                         const char* operation) {
  const std::string where = std::string("paramwin: ") + operation + ": layer ";
  for (std::size_t l = 0; l < order.size(); ++l) {
    const Ref& r = refs[order[l]];
    if (r.count() == 0) continue;
    const LayerSpec& spec = layout[l];
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
    if (info.ordinal != device.ordinal()) {
      throw InvalidArgument(where + spec.describe() + " is on GPU " + std::to_string(info.ordinal) +
                            ", but this rank's device window is on GPU " +
                            std::to_string(device.ordinal()) + " (WindowOptions::cuda_device)");
    }
  }
}

/// The placement of a device window: the slots live on this rank's GPU; the host segment
/// keeps the header page (the protocol) and a host copy of the slots only for RMA readers.
class DevicePlacement final : public Placement {
 public:
  void check_options(const WindowOptions& o) const override;
  [[nodiscard]] std::size_t host_slots(Exposure exposure, bool rma_readers) const override {
    return host_slot_count(exposure, Memory::cuda, rma_readers);
  }
  [[nodiscard]] const char* slots_elsewhere() const noexcept override {
    return "on the GPU (a device window without RMA readers)";
  }
  void create(const PlacementSetup& setup) override;
  MpiStatus free() noexcept override;
  void abandon() noexcept override {
    if (device_) device_->unmap_peers();
    device_.reset();
  }
  void check_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                    std::span<const std::size_t> order, const char* operation) const override {
    check_device_memory(*device_, layout, refs, order, operation);
  }
  void check_layers(const Layout& layout, std::span<const LayerRef> refs,
                    std::span<const std::size_t> order, const char* operation) const override {
    check_device_memory(*device_, layout, refs, order, operation);
  }
  std::uint64_t write_slot(const SlotWrite& w) override;

  [[nodiscard]] cuda::Device* device() const noexcept { return device_.get(); }
  [[nodiscard]] const std::byte* slots_of(int rank) const noexcept {
    return base_.empty() ? nullptr : base_[static_cast<std::size_t>(rank)];
  }

 private:
  /// This rank's Device with VMM or cudaMalloc slots (collective: Error on every rank).
  void allocate(bool vmm);
  /// Exports this rank's slots, passes the handles within the node and maps the peers'
  /// (collective: Error on every rank, the mappings made so far kept for free()).
  void map(bool vmm);

  PlacementSetup setup_;
  std::vector<int> node_to_comm_;
  std::unique_ptr<cuda::Device> device_;  // this rank's GPU side
  std::vector<std::byte*> base_;          // per comm rank: device slots if on this node
  bool begun_ = false;                    // create() began (on every rank alike)
};

void DevicePlacement::check_options(const WindowOptions& o) const {
  if (o.exposure == Exposure::live) {
    throw InvalidArgument("paramwin: Exposure::live exposes the trainer's own host memory; a "
                          "device window (Memory::cuda) publishes snapshots only");
  }
  if (o.stage_through_host) {
    throw InvalidArgument("paramwin: stage_through_host stages device memory through a host "
                          "window; a device window (Memory::cuda) takes device memory as it "
                          "is: use one or the other");
  }
  if (o.cuda_device < kCurrentDevice) {
    throw InvalidArgument("paramwin: WindowOptions::cuda_device " + std::to_string(o.cuda_device) +
                          " is not a device ordinal (>= 0, or kCurrentDevice)");
  }
}

void DevicePlacement::create(const PlacementSetup& setup) {
  // Reached by every rank together (the agreements before it throw on all ranks alike), so
  // the collective free() runs on every rank or on none.
  setup_ = setup;
  node_to_comm_.assign(setup.node_to_comm.begin(), setup.node_to_comm.end());
  setup_.node_to_comm = node_to_comm_;
  begun_ = true;
  int node_size = 0;
  check_mpi(MPI_Comm_size(setup_.node_comm, &node_size), "MPI_Comm_size(node)");
  const WindowOptions& options = *setup_.options;
  std::string error;
  const Sharing asked = sharing_asked(error);
  // VMM only where every rank of the window can use it (a rank alone on its node shares
  // nothing: it allocates with cudaMalloc and does not object).
  std::string why_not_vmm;
  const bool can_vmm = node_size == 1 || (asked != Sharing::ipc &&
                                          cuda::vmm_supported(options.cuda_device, &why_not_vmm));
  if (error.empty() && asked == Sharing::vmm && !can_vmm) {
    error = "paramwin: PARAMWIN_DEVICE_SHARING=vmm, but this rank's GPU cannot share VMM memory (" +
            why_not_vmm + ")";
  }
  agree_or_throw<InvalidArgument>(setup_.comm, error);
  const bool vmm = first_failing_rank(setup_.comm, can_vmm) < 0 && asked != Sharing::ipc;
  allocate(vmm);  // no fallback when the memory itself cannot be had
  if (vmm) {
    try {
      map(true);
      return;
    } catch (const std::exception& e) {
      // Thrown on every rank alike (map() agrees; the failing rank keeps its exception's
      // type, so any std::exception): undone alike, then IPC.
      if (asked == Sharing::vmm) throw;
      if (setup_.rank == 0) {
        std::fprintf(stderr,
                     "paramwin: %s created at %s: sharing its device slots as VMM memory "
                     "failed (%s); using CUDA IPC instead\n",
                     options.name.empty() ? "an unnamed window"
                                          : ("window '" + options.name + "'").c_str(),
                     setup_.site->c_str(), e.what());
      }
      (void)free();
      begun_ = true;
      allocate(false);
    }
  }
  map(false);
}

void DevicePlacement::allocate(bool vmm) {
  base_.assign(static_cast<std::size_t>(setup_.size), nullptr);
  const WindowOptions& options = *setup_.options;
  std::exception_ptr error;
  try {
    device_ = std::make_unique<cuda::Device>(options.cuda_device, options.cuda_stream,
                                             slot_count(options.exposure) * setup_.slots->stride,
                                             vmm && node_to_comm_.size() > 1);
  } catch (...) {
    error = std::current_exception();
  }
  agree_or_rethrow<Error>(setup_.comm, error);
  g_device_windows.store(true, std::memory_order_relaxed);
}

void DevicePlacement::map(bool vmm) {
  const std::size_t node_size = node_to_comm_.size();
  base_[static_cast<std::size_t>(setup_.rank)] = device_->slots();
  if (node_size == 1) return;
  std::exception_ptr error;
  cuda::IpcHandle mine{};
  int my_fd = -1;
  try {
    if (vmm) {
      my_fd = device_->export_slots_fd();
    } else {
      mine = device_->export_slots();
    }
  } catch (...) {
    error = std::current_exception();
  }
  const UniqueFd own_fd(my_fd);
  agree_or_rethrow<Error>(setup_.comm, error);
  // What a peer needs besides the descriptor: the size to map (VMM), or the IPC handle.
  std::vector<cuda::IpcHandle> handles(node_size);
  std::vector<std::uint64_t> sizes(node_size);
  std::vector<UniqueFd> fds;
  if (vmm) {
    const std::uint64_t size = device_->slots_size();
    check_mpi(MPI_Allgather(&size, 1, MPI_UINT64_T, sizes.data(), 1, MPI_UINT64_T,
                            setup_.node_comm),
              "MPI_Allgather(device slot sizes)");
    try {
      fds = exchange_fds(setup_.node_comm, own_fd.get());
    } catch (...) {
      error = std::current_exception();
    }
    agree_or_rethrow<Error>(setup_.comm, error);  // the other nodes learn of it too
  } else {
    check_mpi(MPI_Allgather(mine.data(), static_cast<int>(cuda::kIpcHandleBytes), MPI_BYTE,
                            handles.data(), static_cast<int>(cuda::kIpcHandleBytes), MPI_BYTE,
                            setup_.node_comm),
              "MPI_Allgather(device slot handles)");
  }
  try {
    for (std::size_t n = 0; n < node_size; ++n) {
      const int r = node_to_comm_[n];
      if (r == setup_.rank) continue;
      base_[static_cast<std::size_t>(r)] =
          vmm ? device_->map_peer(fds[n].get(), sizes[n]) : device_->map_peer(handles[n]);
    }
  } catch (...) {
    error = std::current_exception();
  }
  agree_or_rethrow<Error>(setup_.comm, error);
}

MpiStatus DevicePlacement::free() noexcept {
  MpiStatus status;
  if (device_) {
    device_->unmap_peers();
  }
  // A rank frees its slots only once no peer maps them any more.
  if (begun_ && setup_.node_comm != MPI_COMM_NULL) {
    status.note(MPI_Barrier(setup_.node_comm), "MPI_Barrier(device slots)");
  }
  begun_ = false;
  device_.reset();
  std::fill(base_.begin(), base_.end(), nullptr);
  return status;
}

std::uint64_t DevicePlacement::write_slot(const SlotWrite& w) {
  const SlotLayout& slots = *w.slots;
  cuda::Device& dev = *device_;
  std::byte* slot = dev.slots() + device_slot_offset(w.version, slots.stride);
  // The hyperparameters ride in the slot after the layers (same seqlock), enqueued first:
  // publish() below waits for everything on the stream.
  if (slots.hyper_count != 0) {
    dev.copy(slot + slots.hyper_offset, w.hyper.data(), slots.hyper_count * sizeof(std::uint64_t));
  }
  std::vector<cuda::CopyItem> items;
  items.reserve(w.order.size());
  for (std::size_t layer = 0; layer < w.order.size(); ++layer) {
    const ConstLayerRef& ref = w.layers[w.order[layer]];
    const SlotLayout::Entry& e = slots.entries[layer];
    items.push_back({slot + e.offset, e.wire, ref.data(), ref.dtype(), e.count});
  }
  const std::uint64_t bad_layer = dev.publish(items);
  if (w.host_slot != nullptr) {
    // Readers over RMA (other nodes, Transport::rma) read the host copy: written before the
    // version that announces it, like the device slot.
    dev.copy(w.host_slot, slot, slots.payload_bytes);
    dev.synchronize();
  }
  return bad_layer;
}

}  // namespace

std::unique_ptr<Placement> make_gpu_placement() { return std::make_unique<DevicePlacement>(); }

void check_host_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                       std::span<const std::size_t> order, const char* operation) {
  check_host_memory(layout, refs, order, operation);
}

void check_host_layers(const Layout& layout, std::span<const LayerRef> refs,
                       std::span<const std::size_t> order, const char* operation) {
  check_host_memory(layout, refs, order, operation);
}

// --- the accessors of the pull engine's device reader (window_impl.hpp) ----------------------

cuda::Device* WindowImpl::device() const noexcept {
  return gpu_ == nullptr ? nullptr : static_cast<const DevicePlacement*>(gpu_)->device();
}

const std::byte* WindowImpl::device_slots(int rank) const noexcept {
  return gpu_ == nullptr ? nullptr : static_cast<const DevicePlacement*>(gpu_)->slots_of(rank);
}

}  // namespace paramwin::detail
