#pragma once
// An experiment of paramwin_device_bench (docs/gpu.md, "Results"): the copy from a peer's
// allocation made with CUDA's virtual memory management API (cuMemCreate at the recommended
// granularity) and imported through a POSIX file descriptor, beside the same copy from a
// cudaIpcOpenMemHandle mapping (device windows' way), to tell whether the IPC mapping is what
// makes large reads slower. It uses the device windows' VMM slots' code (cuMemCreate memory,
// its descriptor passed over a Unix socket), so the row measures what device windows do.

#include <mpi.h>

#include <cstddef>
#include <string>

namespace paramwin::bench {

/// Median seconds of @p reps copies of @p bytes into @p out (device memory of rank 0) from
/// rank @p exporter's VMM allocation, mapped on rank 0. Collective over @p comm (ranks other
/// than 0 and @p exporter pass no descriptor; every rank on one node). Returns a negative
/// value, with the reason in @p why, where the API or the descriptor passing is unavailable.
double vmm_copy_seconds(MPI_Comm comm, int exporter, void* out, std::size_t bytes, int reps,
                        std::string& why);

}  // namespace paramwin::bench
