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
#include <string>

namespace paramwin::detail::cuda::vmm {

/// Whether device @p ordinal can make VMM allocations exportable as POSIX file descriptors
/// (the driver's entry points, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and
/// ..._HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED); why not in @p why.
[[nodiscard]] bool supported(int ordinal, std::string* why) noexcept;

/// Device memory of at least the requested bytes on one device, made with cuMemCreate,
/// mapped read-write for that device, exportable as a file descriptor.
class Allocation {
 public:
  /// Throws Error naming the driver call and its result (a GPU too small among them).
  Allocation(int ordinal, std::size_t bytes);
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  /// The mapped size: the request rounded up to the device's recommended granularity.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// A new file descriptor for the allocation (the caller closes it). Throws Error.
  [[nodiscard]] int export_fd() const;

 private:
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A peer's Allocation, imported from its descriptor and mapped read-write for device
/// @p ordinal (which may be another GPU of the node: the driver checks peer access).
class Mapping {
 public:
  /// @p fd stays the caller's. Throws Error naming the driver call and its result.
  Mapping(int fd, std::size_t size, int ordinal);
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  /// Unmaps and releases this process's reference (the owner's memory lives on).
  ~Mapping();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }

 private:
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace paramwin::detail::cuda::vmm
