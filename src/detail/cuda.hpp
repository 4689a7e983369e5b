#pragma once
// The CUDA side of device windows (Memory::cuda, docs/gpu.md), behind a header without CUDA
// types so that the window's C++ sources compile with or without the toolkit. cuda.cu
// implements it with the CUDA runtime (PARAMWIN_WITH_CUDA); cuda_none.cpp, in a build without
// CUDA, reports no device and refuses every device window with a clear Error.
//
// What lives here is only the byte movement: allocation, IPC or VMM export and mapping, pointer
// checks, the publish copy (with narrowing and the finiteness record) and the pull kernels.
// The protocol (seqlock, pins, roster) stays in host shared memory, in src/window/.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace paramwin {
// The layers' element type (paramwin/dtype.hpp), declared opaquely: cuda.cu is compiled by
// nvcc, whose front end does not take all of the C++20 headers (enum_names.hpp); it names
// the values itself (checked against dtype.hpp in device_placement.cpp).
enum class DType : std::uint8_t;
}  // namespace paramwin

namespace paramwin::detail::cuda {

/// Whether this library was built with CUDA (PARAMWIN_WITH_CUDA).
[[nodiscard]] bool built() noexcept;

/// Number of CUDA devices this process sees; 0 when there is none, no driver, or no CUDA in
/// this build, with CUDA's reason in @p why (when given).
[[nodiscard]] int device_count(std::string* why = nullptr) noexcept;

/// The device current on the calling thread (Error when CUDA fails).
[[nodiscard]] int current_device();

/// What a pointer is, as cudaPointerGetAttributes says.
struct PointerInfo {
  bool device = false;  ///< device or managed memory
  int ordinal = -1;     ///< its device (device memory only)
};
/// Classifies @p p (host memory, including memory CUDA does not know, is device == false).
[[nodiscard]] PointerInfo classify(const void* p);

/// @p bytes of device memory on device @p ordinal (Error naming CUDA's message when it cannot
/// be had), freed by release().
[[nodiscard]] void* allocate(std::size_t bytes, int ordinal);
/// Frees what allocate() returned (nullptr: nothing).
void release(void* p) noexcept;

/// Copies @p bytes between device and host memory (either way, any device) and returns once
/// the copy is complete; ordered after the work of every blocking stream (the legacy default
/// stream). For checkpoints, which read and write layers on the host.
void copy_blocking(void* dst, const void* src, std::size_t bytes);

/// One layer of a publish: @p count elements of @p from at @p src (device memory) written as
/// @p to at @p dst (a device slot).
struct CopyItem {
  void* dst = nullptr;
  DType to{};
  const void* src = nullptr;
  DType from{};
  std::size_t count = 0;
};

/// One donor of a device mix: its slot's values (device memory, mapped) and weight.
struct DeviceSource {
  const void* data = nullptr;
  double weight = 0.0;
};

/// Most donors one device mix reads in one kernel (a pull with more is refused).
inline constexpr std::size_t kMaxDeviceSources = 32;

/// "" when a pull of a device window may mix @p donors donors, else why it may not.
[[nodiscard]] inline std::string device_donor_limit_error(std::size_t donors) {
  if (donors <= kMaxDeviceSources) return {};
  return "a device window mixes at most " + std::to_string(kMaxDeviceSources) +
         " donors in one pull (one kernel reads them all), got " + std::to_string(donors);
}

/// Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t).
inline constexpr std::size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<unsigned char, kIpcHandleBytes>;

/// Whether device @p ordinal can share memory through CUDA's VMM API (cuMemCreate memory
/// exported as POSIX file descriptors); why not in @p why. False in a build without CUDA.
[[nodiscard]] bool vmm_supported(int ordinal, std::string* why = nullptr) noexcept;

/// One rank's device slots and everything a device window does on its GPU: created on one
/// device with one stream (the caller's, or the legacy default stream). Every call that
/// enqueues work returns once the work completed (synchronize()) unless it says otherwise.
/// Not thread-safe (one thread per window, as the window).
class Device {
 public:
  /// Allocates @p slot_bytes of device memory on @p ordinal (kCurrentDevice: the current
  /// device) and a small record for the publish checks. With @p vmm the slots are VMM memory
  /// (shared by export_slots_fd() and map_peer(int, ...)), else cudaMalloc memory (shared by
  /// export_slots() and map_peer(const IpcHandle&)). Throws Error naming the device, the bytes
  /// and CUDA's message (a GPU too small, no device, a build without CUDA).
  Device(int ordinal, void* stream, std::size_t slot_bytes, bool vmm = false);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  Device(Device&&) = delete;
  Device& operator=(Device&&) = delete;
  /// Closes the peers' mappings and frees the slots (never throws).
  ~Device();

  [[nodiscard]] int ordinal() const noexcept;
  /// This rank's slots (device memory).
  [[nodiscard]] std::byte* slots() const noexcept;
  /// Whether the slots are VMM memory.
  [[nodiscard]] bool vmm() const noexcept;
  /// The bytes a peer maps: the slots' allocation (VMM: rounded up to the granularity).
  [[nodiscard]] std::size_t slots_size() const noexcept;
  /// The IPC handle of slots() (cudaMalloc slots; Error when CUDA refuses the export).
  [[nodiscard]] IpcHandle export_slots() const;
  /// A new file descriptor for slots() (VMM slots; the caller closes it; Error when the
  /// driver refuses the export).
  [[nodiscard]] int export_slots_fd() const;
  /// Maps a peer's slots from its handle; returns the mapped address (Error when CUDA cannot
  /// map it, e.g. IPC unavailable in a container, or peer access between two GPUs refused).
  std::byte* map_peer(const IpcHandle& handle);
  /// Maps a peer's VMM slots of @p size bytes from a descriptor (@p fd stays the caller's).
  std::byte* map_peer(int fd, std::size_t size);
  /// Unmaps every mapped peer (never throws). The peers may free their slots afterwards.
  void unmap_peers() noexcept;

  /// Enqueues every item (copy, or narrowing to bfloat16 / float16) with a check for NaN
  /// and infinity in what is written, waits, and returns 0 when every value is finite, else
  /// 1 + the index of the first item holding one.
  [[nodiscard]] std::uint64_t publish(std::span<const CopyItem> items);
  /// out = momentum * out + (1 - momentum) * sum_d weight_d * widen(src_d) over @p count
  /// elements, narrowed to @p out_dtype, in one kernel over every donor (at most
  /// kMaxDeviceSources); the same arithmetic, order and rounding as the host's mix(). With
  /// @p acc_out, @p out is an accumulation buffer (float, double for float64 layers) that
  /// receives the weighted sum itself (momentum ignored). Enqueued only.
  void mix(void* out, DType out_dtype, std::span<const DeviceSource> sources, DType wire,
           std::size_t count, double momentum, bool acc_out = false);
  /// out = narrow(momentum * out + (1 - momentum) * acc), as the host's commit(). Enqueued only.
  void commit(void* out, DType out_dtype, const void* acc, std::size_t count, double momentum);
  /// Copies @p bytes between any two of: device memory, mapped peer memory, host memory.
  /// Enqueued only.
  void copy(void* dst, const void* src, std::size_t bytes);
  /// A device buffer of at least @p bytes owned by this object (kept for the next call).
  [[nodiscard]] std::byte* scratch(std::size_t bytes);
  /// Waits for everything enqueued (Error naming CUDA's message).
  void synchronize();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace paramwin::detail::cuda
