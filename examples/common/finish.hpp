#pragma once
// The last word of an example: a line that says every rank reached the end.
//
// MPICH's hydra exits with the status of a rank that died, and that status is 0 when the rank
// called exit(0) (or returned from main) without MPI_Finalize: the job was cut short, yet
// mpiexec exits 0 without a word (docs/reliability.md). A script cannot trust the exit status
// alone; it checks for this line (scripts/demo.sh, scripts/torch_demo.sh, the smoke tests).
#include <mpi.h>

#include <cstdio>

namespace paramwin_examples {

/// Call on every rank of MPI_COMM_WORLD right before MPI_Finalize (collective). Rank 0 prints
/// "<program>: all N ranks finished" once every rank got here; nothing is printed otherwise.
inline void report_finished(const char* program) {
  int size = 1;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int here = 1;
  int all = 0;
  if (MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS && rank == 0 &&
      all == size) {
    std::printf("%s: all %d ranks finished\n", program, size);
    std::fflush(stdout);
  }
}

}  // namespace paramwin_examples
