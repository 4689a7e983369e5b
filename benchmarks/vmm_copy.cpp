// The VMM mapping experiment of paramwin_device_bench (see vmm_copy.hpp), made with the
// device windows' own VMM code: src/detail/cuda_vmm.hpp for the memory, mpi/fd_exchange.hpp for
// the descriptor.
#include "vmm_copy.hpp"

#include <cuda_runtime.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "detail/cuda_vmm.hpp"
#include "mpi/fd_exchange.hpp"
#include "size_args.hpp"

namespace paramwin::bench {

namespace vmm = detail::cuda::vmm;

double vmm_copy_seconds(MPI_Comm comm, int exporter, void* out, std::size_t bytes, int reps,
                        std::string& why) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int device = 0;
  (void)cudaGetDevice(&device);
  std::unique_ptr<vmm::Mapped> own;
  detail::UniqueFd offer;
  unsigned long long size = 0;  // 0: the exporter has nothing to offer
  if (rank == exporter && vmm::supported(device, &why)) {
    try {
      own = vmm::Mapped::create(device, bytes);
      offer = detail::UniqueFd(own->export_fd());
      size = own->size();
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  MPI_Bcast(&size, 1, MPI_UNSIGNED_LONG_LONG, exporter, comm);
  std::vector<detail::UniqueFd> fds;
  try {
    fds = detail::exchange_fds(comm, size > 0 ? offer.get() : -1);  // every rank on one node
  } catch (const std::exception& e) {
    why = e.what();
  }
  double seconds = -1.0;
  if (rank == 0 && size == 0 && why.empty()) {
    why = "the exporter could not make or export the allocation";
  }
  if (rank == 0 && size > 0 && !fds.empty()) {
    try {
      const std::unique_ptr<vmm::Mapped> peer =
          vmm::Mapped::import_fd(fds[static_cast<std::size_t>(exporter)].get(),
                                 static_cast<std::size_t>(size), device);
      std::vector<double> t;
      for (int r = 0; r < reps + 1; ++r) {
        const double t0 = MPI_Wtime();
        (void)cudaMemcpyAsync(out, peer->data(), bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy);
        if (cudaStreamSynchronize(cudaStreamLegacy) != cudaSuccess) {
          why = "the copy failed";
          t.clear();
          break;
        }
        if (r > 0) t.push_back(MPI_Wtime() - t0);
      }
      if (!t.empty()) seconds = median(t);
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  // The exporter frees its allocation only after rank 0 unmapped it.
  MPI_Barrier(comm);
  own.reset();
  MPI_Bcast(&seconds, 1, MPI_DOUBLE, 0, comm);
  return seconds;
}

}  // namespace paramwin::bench
