// VMM device slots (see cuda_vmm.hpp), after benchmarks/vmm_copy.cpp, which measured them.
#include "detail/cuda_vmm.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "paramwin/error.hpp"

namespace paramwin::detail::cuda::vmm {
namespace {

/// The driver calls VMM needs, through the runtime's entry points (CUDA 12.0 signatures).
struct Driver {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 export_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 import_handle = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  std::string missing;  ///< the first entry point not found ("" when all were)
};

template <class F>
void entry(const char* name, F& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    if (missing.empty()) missing = name;
    return;
  }
  fn = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    entry("cuDeviceGet", r.device_get, r.missing);
    entry("cuDeviceGetAttribute", r.attribute, r.missing);
    entry("cuMemGetAllocationGranularity", r.granularity, r.missing);
    entry("cuMemCreate", r.create, r.missing);
    entry("cuMemExportToShareableHandle", r.export_handle, r.missing);
    entry("cuMemImportFromShareableHandle", r.import_handle, r.missing);
    entry("cuMemAddressReserve", r.reserve, r.missing);
    entry("cuMemMap", r.map, r.missing);
    entry("cuMemSetAccess", r.set_access, r.missing);
    entry("cuMemUnmap", r.unmap, r.missing);
    entry("cuMemAddressFree", r.address_free, r.missing);
    entry("cuMemRelease", r.release, r.missing);
    return r;
  }();
  return d;
}

const Driver& loaded() {
  const Driver& d = driver();
  if (!d.missing.empty()) {
    throw Error("paramwin: CUDA driver entry point " + d.missing + " not found");
  }
  return d;
}

void check(CUresult r, const char* call, const std::string& detail = {}) {
  if (r == CUDA_SUCCESS) return;
  throw Error(std::string("paramwin: CUDA ") + call + " failed (CUresult " +
              std::to_string(static_cast<int>(r)) + ")" + (detail.empty() ? "" : "; " + detail));
}

CUmemAllocationProp properties(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

/// Reserves @p size bytes of address space, maps @p handle there and lets @p ordinal read and
/// write it; undoes what it did when a step fails.
CUdeviceptr map_for(const Driver& d, CUmemGenericAllocationHandle handle, std::size_t size,
                    int ordinal) {
  CUdeviceptr address = 0;
  check(d.reserve(&address, size, 0, 0, 0), "cuMemAddressReserve");
  CUresult r = d.map(address, size, 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = ordinal;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.set_access(address, size, &access, 1);
    if (r != CUDA_SUCCESS) {
      (void)d.unmap(address, size);
      (void)d.address_free(address, size);
      check(r, "cuMemSetAccess",
            "device " + std::to_string(ordinal) +
                " may not reach the memory (ranks on two GPUs need peer access between them)");
    }
    return address;
  }
  (void)d.address_free(address, size);
  check(r, "cuMemMap");
  return 0;
}

}  // namespace

bool supported(int ordinal, std::string* why) noexcept {
  const Driver& d = driver();
  auto no = [why](std::string text) {
    if (why != nullptr) *why = std::move(text);
    return false;
  };
  if (!d.missing.empty()) return no("no driver entry point " + d.missing);
  CUdevice dev = 0;
  int vmm = 0;
  int fd = 0;
  if (d.device_get(&dev, ordinal) != CUDA_SUCCESS ||
      d.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      d.attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) !=
          CUDA_SUCCESS) {
    return no("the driver could not describe device " + std::to_string(ordinal));
  }
  if (vmm == 0) return no("device " + std::to_string(ordinal) + " has no VMM support");
  if (fd == 0) {
    return no("device " + std::to_string(ordinal) + " cannot export memory as file descriptors");
  }
  return true;
}

Mapped::Mapped(CUmemGenericAllocationHandle handle, std::size_t size, int ordinal)
    : handle_(handle), size_(size) {
  const Driver& d = driver();
  try {
    address_ = map_for(d, handle_, size_, ordinal);
  } catch (...) {
    (void)d.release(handle_);
    throw;
  }
  data_ = reinterpret_cast<std::byte*>(address_);
}

std::unique_ptr<Mapped> Mapped::create(int ordinal, std::size_t bytes) {
  const Driver& d = loaded();
  // The runtime's primary context of the device, which the driver calls below use.
  if (cudaFree(nullptr) != cudaSuccess) (void)cudaGetLastError();
  const CUmemAllocationProp prop = properties(ordinal);
  std::size_t g = 0;
  check(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity");
  if (g == 0) g = 1;
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + g - 1) / g * g;
  CUmemGenericAllocationHandle handle = 0;
  check(d.create(&handle, size, &prop, 0), "cuMemCreate",
        "a device window needs " + std::to_string(bytes) +
            " bytes of GPU memory for its snapshot slots on device " + std::to_string(ordinal));
  return std::unique_ptr<Mapped>(new Mapped(handle, size, ordinal));
}

std::unique_ptr<Mapped> Mapped::import_fd(int fd, std::size_t size, int ordinal) {
  const Driver& d = loaded();
  if (cudaFree(nullptr) != cudaSuccess) (void)cudaGetLastError();
  CUmemGenericAllocationHandle handle = 0;
  // The descriptor travels as the pointer-sized handle argument (the driver's convention).
  check(d.import_handle(&handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle");
  return std::unique_ptr<Mapped>(new Mapped(handle, size, ordinal));
}

Mapped::~Mapped() {
  const Driver& d = driver();
  (void)d.unmap(address_, size_);
  (void)d.address_free(address_, size_);
  (void)d.release(handle_);
}

int Mapped::export_fd() const {
  int fd = -1;
  check(loaded().export_handle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  return fd;
}

}  // namespace paramwin::detail::cuda::vmm
