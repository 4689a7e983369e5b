#pragma once
// An experiment of paramwin_device_bench (docs/gpu.md, "Results"): the copy from a peer's
// allocation made with CUDA's virtual memory management API (cuMemCreate at the recommended
// granularity) and imported through a POSIX file descriptor, beside the same copy from a
// cudaIpcOpenMemHandle mapping (device windows' way), to tell whether the IPC mapping is what
// makes large reads slower. Driver entry points come through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda.

#include <mpi.h>

#include <cstddef>
#include <string>

namespace paramwin::bench {

/// Median seconds of @p reps copies of @p bytes into @p out (device memory of rank 0) from
/// rank @p exporter's VMM allocation, mapped on rank 0. Collective over @p comm (ranks other
/// than 0 and @p exporter only take part in the final agreement). Returns a negative value,
/// with the reason in @p why, where the API or the descriptor passing is unavailable.
double vmm_copy_seconds(MPI_Comm comm, int exporter, void* out, std::size_t bytes, int reps,
                        std::string& why);

}  // namespace paramwin::bench
