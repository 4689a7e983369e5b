// Whether Open MPI's MPI_Comm_spawn hangs once processes of an earlier spawn have ended
// (docs/elastic.md, "What the MPIs allow"): run by `scripts/elastic_facts.sh --spawn`
// under `mpirun --enable-recovery`. The world spawns 3 processes argv[2] times in a row (the
// default 5), merges with them and meets them in a barrier; each spawned process then does
// what argv[1] says: "stay" (every one waits for the end), "one" (its rank 0 ends at once with
// std::_Exit(0), the others wait), "all" (every one ends at once); with "one" and "all" the
// next spawn follows their end at once. Rank 0 prints "spawned <i>" after each spawn and "done"
// at the end, when it releases the waiting ones. A job that prints no "done" hung in a spawn.
// "fail" (`scripts/elastic_facts.sh --spawn-fail`): whether a job outlives a spawn that fails;
// the world spawns 1 process on a host that does not exist (the "host" info key), with
// MPI_ERRORS_RETURN; rank 0 prints "failed <error class>" (or "spawned"), then every rank
// sleeps argv[2] seconds (the default 6) and rank 0 prints "alive" after it; then the world
// spawns 1 process where the job runs, and rank 0 prints "spawned again" or "failed again"
// (if the job still lives).
// Plain MPI, nothing of paramwin.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

// Mode "fail": a spawn on a host that does not exist, then whether the job lives on.
int spawn_fails(char* program, int rank, int seconds) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "host", "paramwin-no-such-host");
  char* args[] = {const_cast<char*>("stay"), nullptr};
  MPI_Comm inter = MPI_COMM_NULL;
  int errcode = MPI_SUCCESS;
  const int rc = MPI_Comm_spawn(program, args, 1, info, 0, MPI_COMM_WORLD, &inter, &errcode);
  MPI_Info_free(&info);
  if (rank == 0) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (rc == MPI_SUCCESS) {
      std::printf("spawned\n");
    } else {
      std::printf("failed %d\n", cls);
    }
    std::fflush(stdout);
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  if (rank == 0) {
    std::printf("alive\n");
    std::fflush(stdout);
  }
  // A second spawn, where the job runs.
  char* quit[] = {const_cast<char*>("all"), nullptr};
  const int again =
      MPI_Comm_spawn(program, quit, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, &errcode);
  if (again == MPI_SUCCESS) {
    MPI_Comm merged = MPI_COMM_NULL;
    MPI_Intercomm_merge(inter, 0, &merged);
    MPI_Barrier(merged);
  }
  if (rank == 0) {
    std::printf(again == MPI_SUCCESS ? "spawned again\n" : "failed again\n");
    std::fflush(stdout);
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const char* mode = argc > 1 ? argv[1] : "all";
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) {  // a spawned process
    MPI_Comm merged = MPI_COMM_NULL;
    MPI_Intercomm_merge(parent, 1, &merged);
    MPI_Barrier(merged);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const bool ends = std::strcmp(mode, "all") == 0 || (std::strcmp(mode, "one") == 0 && rank == 0);
    if (!ends) {  // asleep between looks, as a spare: 2 cores hold them all
      int arrived = 0;
      while (arrived == 0) {
        MPI_Iprobe(0, 1, merged, &arrived, MPI_STATUS_IGNORE);
        if (arrived == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      int quit = 0;
      MPI_Recv(&quit, 1, MPI_INT, 0, 1, merged, MPI_STATUS_IGNORE);
    }
    std::_Exit(0);
  }
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (std::strcmp(mode, "fail") == 0)
    return spawn_fails(argv[0], rank, argc > 2 ? std::atoi(argv[2]) : 6);
  const int spawns = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<MPI_Comm> all;
  char* args[] = {const_cast<char*>(mode), nullptr};
  for (int i = 0; i < spawns; ++i) {
    MPI_Comm inter = MPI_COMM_NULL;
    int errcodes[3] = {0, 0, 0};
    MPI_Comm_spawn(argv[0], args, 3, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errcodes);
    MPI_Comm merged = MPI_COMM_NULL;
    MPI_Intercomm_merge(inter, 0, &merged);
    MPI_Barrier(merged);
    all.push_back(merged);
    if (rank == 0) {
      std::printf("spawned %d\n", i);
      std::fflush(stdout);
    }
  }
  if (rank == 0) {  // release the ones that wait
    for (MPI_Comm merged : all) {
      for (int c = 0; c < 3; ++c) {
        if (std::strcmp(mode, "stay") == 0 || (std::strcmp(mode, "one") == 0 && c > 0)) {
          int quit = 1;
          MPI_Send(&quit, 1, MPI_INT, size + c, 1, merged);
        }
      }
    }
    std::printf("done\n");
    std::fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::_Exit(0);
}
