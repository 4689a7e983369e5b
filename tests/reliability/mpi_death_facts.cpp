// What an MPI library and its launcher do when one rank's process ends (docs/elastic.md):
// run by scripts/elastic_facts.sh under each MPI and launcher flag. The last rank ends its
// process after a barrier (argv[1]: "kill" = SIGKILL, "exit" = std::_Exit(3), "exit0" =
// std::_Exit(0)); the others wait 2 s and report what still works among them: point to point,
// MPI_Comm_create_group over the survivors and a collective on it, a load from the dead rank's
// MPI_Win_allocate_shared segment, and (argv[2] == "finalize") whether MPI_Finalize returns.
// Plain MPI, nothing of paramwin.
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* how = argc > 1 ? argv[1] : "exit";
  const bool finalize = argc > 2 && std::strcmp(argv[2], "finalize") == 0;
  double* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  MPI_Win_allocate_shared(8 * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                          &win);
  for (int i = 0; i < 8; ++i) base[i] = rank * 100 + i;
  MPI_Barrier(MPI_COMM_WORLD);
  const int dead = size - 1;
  if (rank == dead) {
    std::fflush(nullptr);
    if (std::strcmp(how, "kill") == 0) std::raise(SIGKILL);
    std::_Exit(std::strcmp(how, "exit0") == 0 ? 0 : 3);
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int n = size - 1;
  int v = rank;
  int got = -1;
  int rc = MPI_Sendrecv(&v, 1, MPI_INT, (rank + 1) % n, 0, &got, 1, MPI_INT, (rank + n - 1) % n, 0,
                        MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  std::printf("fact rank %d: alive 2 s after the death; point to point %s\n", rank,
              rc == MPI_SUCCESS && got == (rank + n - 1) % n ? "works" : "fails");
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_excl(world, 1, &dead, &alive);
  MPI_Comm survivors = MPI_COMM_NULL;
  const double t0 = MPI_Wtime();
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, alive, 7, &survivors);
  const double ms = (MPI_Wtime() - t0) * 1e3;
  int sum = 0;
  if (rc == MPI_SUCCESS) MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, survivors);
  std::printf("fact rank %d: MPI_Comm_create_group over the survivors %s in %.1f ms, "
              "allreduce %s\n",
              rank, rc == MPI_SUCCESS ? "works" : "fails", ms,
              sum == n * (n - 1) / 2 ? "works" : "fails");
  MPI_Aint bytes = 0;
  int unit = 0;
  double* theirs = nullptr;
  MPI_Win_shared_query(win, dead, &bytes, &unit, &theirs);
  std::printf("fact rank %d: the dead rank's shared segment %s\n", rank,
              theirs != nullptr && theirs[7] == dead * 100 + 7 ? "is readable" : "is not readable");
  std::fflush(stdout);
  if (finalize) {
    MPI_Finalize();
    std::printf("fact rank %d: MPI_Finalize returned\n", rank);
    std::fflush(stdout);
    return 0;
  }
  std::_Exit(0);
}
