// The VMM mapping experiment of paramwin_device_bench (see vmm_copy.hpp).
#include "vmm_copy.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "size_args.hpp"

namespace paramwin::bench {
namespace {

/// The driver calls the experiment needs, through the runtime's entry points.
struct Driver {
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
};

template <class F>
bool entry(const char* name, F& fn, std::string& why) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == nullptr) {
    why = std::string("no driver entry point ") + name;
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

bool load(Driver& d, std::string& why) {
  return entry("cuMemGetAllocationGranularity", d.granularity, why) &&
         entry("cuMemCreate", d.create, why) &&
         entry("cuMemExportToShareableHandle", d.export_handle, why) &&
         entry("cuMemImportFromShareableHandle", d.import_handle, why) &&
         entry("cuMemAddressReserve", d.reserve, why) && entry("cuMemMap", d.map, why) &&
         entry("cuMemSetAccess", d.set_access, why) && entry("cuMemUnmap", d.unmap, why) &&
         entry("cuMemAddressFree", d.address_free, why) && entry("cuMemRelease", d.release, why);
}

bool ok(CUresult r, const char* what, std::string& why) {
  if (r == CUDA_SUCCESS) return true;
  why = std::string(what) + " failed (CUresult " + std::to_string(static_cast<int>(r)) + ")";
  return false;
}

CUmemAllocationProp properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

/// What the exporter tells rank 0: its pid, the descriptor, the allocation's size, ok.
struct Offer {
  long long pid = 0;
  long long fd = -1;
  long long size = 0;
  long long ok = 0;
};

}  // namespace

double vmm_copy_seconds(MPI_Comm comm, int exporter, void* out, std::size_t bytes, int reps,
                        std::string& why) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int device = 0;
  (void)cudaGetDevice(&device);
  Driver d;
  const bool loaded = load(d, why);
  double seconds = -1.0;
  Offer offer;
  CUmemGenericAllocationHandle own = 0;
  if (rank == exporter) {
    const CUmemAllocationProp prop = properties(device);
    std::size_t g = 0;
    int fd = -1;
    if (loaded &&
        ok(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "granularity", why) &&
        ok(d.create(&own, (bytes + g - 1) / g * g, &prop, 0), "cuMemCreate", why) &&
        ok(d.export_handle(&fd, own, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
           "cuMemExportToShareableHandle", why)) {
      offer = {static_cast<long long>(getpid()), fd,
               static_cast<long long>((bytes + g - 1) / g * g), 1};
    }
    MPI_Send(&offer, 4, MPI_LONG_LONG, 0, 7, comm);
  }
  if (rank == 0) {
    MPI_Recv(&offer, 4, MPI_LONG_LONG, exporter, 7, comm, MPI_STATUS_IGNORE);
    if (offer.ok == 0) why = "the exporter could not make or export the allocation";
    const auto size = static_cast<std::size_t>(offer.size);
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr ptr = 0;
    bool mapped = false;
    bool reserved = false;
    bool imported = false;
    int fd = -1;
    if (loaded && offer.ok != 0) {
      const long pidfd = syscall(SYS_pidfd_open, static_cast<pid_t>(offer.pid), 0);
      fd = pidfd < 0 ? -1
                     : static_cast<int>(syscall(SYS_pidfd_getfd, static_cast<int>(pidfd),
                                                static_cast<int>(offer.fd), 0));
      if (pidfd >= 0) close(static_cast<int>(pidfd));
      if (fd < 0) why = "pidfd_open/pidfd_getfd refused the descriptor";
    }
    if (fd >= 0 && ok(d.import_handle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                      "cuMemImportFromShareableHandle", why)) {
      imported = true;
      reserved = ok(d.reserve(&ptr, size, 0, 0, 0), "cuMemAddressReserve", why);
      mapped = reserved && ok(d.map(ptr, size, 0, h, 0), "cuMemMap", why);
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      if (mapped && ok(d.set_access(ptr, size, &access, 1), "cuMemSetAccess", why)) {
        std::vector<double> t;
        for (int r = 0; r < reps + 1; ++r) {
          const double t0 = MPI_Wtime();
          (void)cudaMemcpyAsync(out, reinterpret_cast<const void*>(ptr), bytes,
                                cudaMemcpyDeviceToDevice, cudaStreamLegacy);
          if (cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) {
            why = "the copy failed";
            t.clear();
            break;
          }
          if (r > 0) t.push_back(MPI_Wtime() - t0);
        }
        if (!t.empty()) seconds = median(t);
      }
    }
    if (mapped) (void)d.unmap(ptr, size);
    if (reserved) (void)d.address_free(ptr, size);
    if (imported) (void)d.release(h);
    if (fd >= 0) close(fd);
  }
  // The exporter frees its allocation only after rank 0 unmapped it.
  MPI_Barrier(comm);
  if (rank == exporter && offer.ok != 0) {
    (void)d.release(own);
    close(static_cast<int>(offer.fd));
  }
  MPI_Bcast(&seconds, 1, MPI_DOUBLE, 0, comm);
  return seconds;
}

}  // namespace paramwin::bench
