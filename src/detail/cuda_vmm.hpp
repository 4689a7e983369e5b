#pragma once
// Device slots shared through CUDA's virtual memory management (VMM) API, for cuda.cu's
// Device: the owner creates physical memory with cuMemCreate, maps it at an address of its
// own and exports it as a POSIX file descriptor; a peer on the same node imports the
// descriptor (passed by src/mpi/fd_exchange.hpp) and maps it at an address of its own.
// Reading such a mapping runs at the speed of a local copy, where a cudaIpcOpenMemHandle
// mapping of a cudaMalloc allocation read 1.25x slower for 1 GB on an H200 (docs/gpu.md,
// row d2d_vmm against d2d_ipc).
//
// The driver's functions are reached through the runtime's entry points
// (cudaGetDriverEntryPointByVersion), so that nothing links libcuda itself. Compiled by nvcc
// (CUDA types); included only by the .cu files.

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

namespace paramwin::detail::cuda::vmm {

/// Whether device @p ordinal can make VMM allocations exportable as POSIX file descriptors
/// (the driver's entry points, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and
/// ..._HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED); why not in @p why.
[[nodiscard]] bool supported(int ordinal, std::string* why) noexcept;

/// VMM device memory mapped read-write for one device at an address of this process: either
/// made here with cuMemCreate (create(), exportable as a file descriptor) or a peer's,
/// imported from its descriptor (import_fd()). The destructor unmaps it and releases this
/// process's reference (a peer's memory lives on with its owner).
class Mapped {
 public:
  /// At least @p bytes on device @p ordinal, rounded up to its recommended granularity.
  /// Throws Error naming the driver call and its result (a GPU too small among them).
  [[nodiscard]] static std::unique_ptr<Mapped> create(int ordinal, std::size_t bytes);
  /// A peer's memory of @p size bytes from descriptor @p fd (which stays the caller's),
  /// mapped for device @p ordinal (another GPU of the node: the driver checks peer access).
  /// Throws Error naming the driver call and its result.
  [[nodiscard]] static std::unique_ptr<Mapped> import_fd(int fd, std::size_t size, int ordinal);
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  /// The mapped size (for create(): the request rounded up to the granularity).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// A new file descriptor for the memory (the caller closes it). Throws Error.
  [[nodiscard]] int export_fd() const;

 private:
  /// Maps @p handle, whose reference it takes (released here too when mapping fails).
  Mapped(CUmemGenericAllocationHandle handle, std::size_t size, int ordinal);

  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace paramwin::detail::cuda::vmm
