// WindowOptions::abort_on_unwind / PARAMWIN_ABORT_ON_UNWIND: rank 0 throws past its window
// while the other ranks go on into the next collective (a barrier that rank 0 never
// reaches). Without the option every rank would wait forever: rank 0 in the window's
// collective free, the others in the barrier. With it, rank 0 prints its diagnostic and
// aborts the job (MPI_Abort), so mpiexec exits non-zero at once. Run by
// abort_on_unwind_test.cmake, which checks the exit status, the time and the message.
//   abort_on_unwind          the option is set in WindowOptions
//   abort_on_unwind --env    the option is left false; PARAMWIN_ABORT_ON_UNWIND=1 sets it
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool from_env = argc > 1 && std::string(argv[1]) == "--env";
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    pw::Layout layout;
    layout.add("w", std::size_t{16});
    try {
      pw::ParameterWindow<> win(MPI_COMM_WORLD, layout,
                                {.name = "doomed", .abort_on_unwind = !from_env});
      if (rank == 0) {
        throw std::runtime_error("rank 0 fails in the middle of training");
      }
      MPI_Barrier(MPI_COMM_WORLD);  // rank 0 never comes
    } catch (const std::runtime_error& e) {
      std::printf("rank %d caught: %s\n", rank, e.what());
    }
  }
  // Reached only if nothing aborted (the test then fails on this line).
  std::printf("rank %d: the job was not aborted\n", rank);
  MPI_Finalize();
  return 0;
}
