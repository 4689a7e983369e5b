// What a Replacement::new_window epoch costs every member (docs/elastic.md, "Epochs and
// spares"): a communicator over the epoch's processes (MPI_Comm_create_group) and a named
// ParameterWindow over it, then a barrier, as ElasticAgent builds them; the windows are
// abandoned, as an epoch's are. Prints rank 0's median and range of each part over the
// repetitions.
//   mpiexec -disable-auto-cleanup -n N paramwin_epoch_cost [float32 parameters (10000)]
//           [repetitions (7)]   (MPICH: the ranks end with std::_Exit, not MPI_Finalize)
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "paramwin/window.hpp"

namespace {

void report(const char* what, std::vector<double> t) {
  std::sort(t.begin(), t.end());
  std::printf("  %-28s median %8.2f ms (min %8.2f, max %8.2f)\n", what, t[t.size() / 2] * 1e3,
              t.front() * 1e3, t.back() * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  paramwin::Layout layout;
  layout.add("w", n);
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<double> comm_s;
  std::vector<double> window_s;
  std::vector<double> barrier_s;
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_create_group(MPI_COMM_WORLD, world, 1000 + i, &c);
    const double t1 = MPI_Wtime();
    paramwin::WindowOptions o;
    o.name = "epoch_cost#" + std::to_string(i);
    paramwin::ParameterWindow<> w(c, layout, o);
    const double t2 = MPI_Wtime();
    MPI_Barrier(c);
    const double t3 = MPI_Wtime();
    comm_s.push_back(t1 - t0);
    window_s.push_back(t2 - t1);
    barrier_s.push_back(t3 - t2);
    w.abandon();  // as an epoch's window: never freed
  }
  if (rank == 0) {
    std::printf("epoch cost, %d ranks, %zu float32, %d repetitions:\n", size, n, reps);
    report("MPI_Comm_create_group", comm_s);
    report("ParameterWindow creation", window_s);
    report("barrier", barrier_s);
  }
  std::fflush(stdout);
  MPI_Group_free(&world);
  // The abandoned windows are left to the process's end, as ElasticAgent leaves them
  // (MPI_Finalize would abort on their memory registrations): every rank ends together.
  MPI_Barrier(MPI_COMM_WORLD);
  std::_Exit(0);
}
