// Misuse: MPI_Finalize while windows are still alive. MPI gives no way to free a window after
// finalisation; paramwin must not crash: close() throws paramwin::Error saying so, and the
// destructor of a window that was never closed returns quietly. Run by CTest as
// finalize_misuse.np2; prints "finalize misuse survived" only when every check held.
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  bool ok = true;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    pw::Layout layout;
    layout.add("w", std::size_t{1024});
    std::vector<float> w(1024, 1.0F);
    pw::ParameterWindow<> closed_late(MPI_COMM_WORLD, layout, {.transport = pw::Transport::rma});
    pw::ParameterWindow<> never_closed(MPI_COMM_WORLD, layout);
    (void)closed_late.publish({w});
    (void)never_closed.publish({w});
    MPI_Barrier(MPI_COMM_WORLD);

    MPI_Finalize();  // the misuse: both windows are still alive

    try {
      closed_late.close();
      std::fprintf(stderr, "[rank %d] close() after MPI_Finalize did not throw\n", rank);
      ok = false;
    } catch (const pw::Error& e) {
      const std::string what = e.what();
      if (what.find("after MPI_Finalize") == std::string::npos) {
        std::fprintf(stderr, "[rank %d] unexpected message: %s\n", rank, e.what());
        ok = false;
      } else if (rank == 0) {
        std::printf("close() after MPI_Finalize threw: %s\n", e.what());
      }
    }
    if (closed_late.valid()) {
      std::fprintf(stderr, "[rank %d] window still valid after the failed close()\n", rank);
      ok = false;
    }
    // never_closed is destroyed here, after MPI_Finalize: must not crash or throw.
  }
  if (ok) {
    std::printf("[rank %d] finalize misuse survived\n", rank);
  }
  return ok ? 0 : 1;
}
