#pragma once
// What the death tests (member_death, reader_death, donor_death; docs/elastic.md) share: MPI
// programs in which one rank ends its process and the others, the survivors, check what
// they saw. The survivors cannot use a collective over MPI_COMM_WORLD, free a window that
// holds the dead rank or call MPI_Finalize (each would wait for the dead rank forever), so
// they meet over a communicator of their own and end with std::_Exit.

#include <mpi.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "paramwin/paramwin.hpp"

namespace paramwin::test {

/// MPI_Init_thread (MPI_THREAD_MULTIPLE); this rank and the world's size.
struct DeathRun {
  int rank = 0;
  int size = 0;
  bool rma = false;  ///< the first argument is --rma
  DeathRun(int& argc, char**& argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rma = argc > 1 && std::string(argv[1]) == "--rma";
  }
};

/// The window of the read tests (collective): one float32 layer "w" of @p n elements, named
/// @p name, whose readers judge a silence of 1 s a suspect; this rank reads over RMA when
/// @p rma (Transport::rma), else as the window chooses.
inline ParameterWindow<> death_window(const std::string& name, std::size_t n, bool rma) {
  Layout layout;
  layout.add("w", n);
  WindowOptions options;
  options.name = name;
  options.liveness.suspect_seconds = 1.0;
  if (rma) options.transport = Transport::rma;
  return ParameterWindow<>(MPI_COMM_WORLD, layout, options);
}

/// Ends this process now: SIGKILL (@p kill), else std::_Exit(3).
[[noreturn]] inline void die(bool kill) {
  std::fflush(nullptr);
  if (kill) std::raise(SIGKILL);
  std::_Exit(3);
}

/// Stops this process (SIGSTOP) for @p seconds: a forked child (which calls only
/// async-signal-safe functions) sends it SIGCONT and is then reaped. A stall the others can
/// judge only by its silence (its pid stays alive).
inline void stop_self_for(double seconds) {
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("stop_self_for: fork failed");
  if (child == 0) {
    timespec t{};
    t.tv_sec = static_cast<time_t>(seconds);
    t.tv_nsec = static_cast<long>((seconds - static_cast<double>(t.tv_sec)) * 1e9);
    while (nanosleep(&t, &t) != 0) {
    }
    kill(parent, SIGCONT);
    _exit(0);
  }
  kill(parent, SIGSTOP);
  waitpid(child, nullptr, 0);
}

/// A thread that ends this process (std::_Exit(3)) after a random 200-400 ms, whatever the
/// rest of the process is doing then.
inline void die_soon() {
  std::mt19937 gen(static_cast<unsigned>(std::random_device{}()));
  const int ms = std::uniform_int_distribution<int>(200, 400)(gen);
  std::thread([ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    die(false);
  }).detach();
}

/// How the survivors will meet, prepared while every rank is alive (collective over
/// MPI_COMM_WORLD): on one node, files in a directory every rank knows; across nodes, a
/// communicator of every rank but @p dead (MPI_COMM_NULL on @p dead).
struct SurvivorMeeting {
  std::string dir;
  MPI_Comm comm = MPI_COMM_NULL;
};

inline SurvivorMeeting meet_later(int dead) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  int one_node = local == size ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &one_node, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  SurvivorMeeting m;
  if (one_node == 1) {
    char path[64] = "/tmp/paramwin_survivors_XXXXXX";
    if (rank == 0 && mkdtemp(path) == nullptr) path[0] = '\0';
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    m.dir = path;
  }
  if (m.dir.empty()) {
    MPI_Comm_split(MPI_COMM_WORLD, rank == dead ? MPI_UNDEFINED : 0, rank, &m.comm);
  }
  return m;
}

/// Survivors only: the lowest surviving rank learns whether any survivor's @p failed (each
/// survivor has printed its own "FAILED:" line) and prints @p passed when none did; every
/// survivor ends its process with std::_Exit(0). With @p meeting's directory (one node) each
/// verdict is a file and the lowest rank waits for them up to 30 s, without MPI: under MPICH
/// 4.0.2 (ch4:ucx) the survivors' own messages stopped arriving, in about 1 run in 5 under CPU
/// load, after a donor died while serving their RMA reads (gdb: one survivor in MPI_Recv, the
/// other in the matching MPI_Ssend, both alive; docs/elastic.md). Else over @p meeting's
/// communicator, or one MPI_Comm_create_group makes over the survivors now.
[[noreturn]] inline void end_survivor(int dead, bool failed, const std::string& passed,
                                      const SurvivorMeeting& meeting = {}) {
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const int lowest = dead == 0 ? 1 : 0;
  std::fflush(stdout);
  if (!meeting.dir.empty()) {
    const std::string mine = meeting.dir + "/" + std::to_string(world_rank);
    if (FILE* f = std::fopen((mine + ".tmp").c_str(), "w")) {
      std::fputs(failed ? "1" : "0", f);
      std::fclose(f);
      std::rename((mine + ".tmp").c_str(), mine.c_str());
    }
    if (world_rank == lowest) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      bool bad = failed;
      for (int r = 0; r < world_size; ++r) {
        if (r == dead) continue;
        const std::string theirs = meeting.dir + "/" + std::to_string(r);
        FILE* f = nullptr;
        while ((f = std::fopen(theirs.c_str(), "r")) == nullptr &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (f == nullptr) {
          std::printf("FAILED: no verdict from rank %d in 30 s\n", r);
          bad = true;
          continue;
        }
        bad = bad || std::fgetc(f) != '0';
        std::fclose(f);
        std::remove(theirs.c_str());
      }
      std::remove(meeting.dir.c_str());
      if (!bad) std::printf("%s\n", passed.c_str());
    }
    std::fflush(stdout);
    std::_Exit(0);
  }
  MPI_Comm survivors = meeting.comm;
  if (survivors == MPI_COMM_NULL) {
    MPI_Group world = MPI_GROUP_NULL;
    MPI_Group alive = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_excl(world, 1, &dead, &alive);
    MPI_Comm_create_group(MPI_COMM_WORLD, alive, 17, &survivors);
  }
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(survivors, &rank);
  MPI_Comm_size(survivors, &size);
  // Each verdict goes to rank 0 by a synchronous send, which returns only once rank 0 has
  // received it: a survivor ends with std::_Exit (MPI_Finalize would wait for the dead rank).
  int bad = failed ? 1 : 0;
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      int theirs = 0;
      MPI_Recv(&theirs, 1, MPI_INT, r, 18, survivors, MPI_STATUS_IGNORE);
      bad |= theirs;
    }
    if (bad == 0) std::printf("%s\n", passed.c_str());
  } else {
    MPI_Ssend(&bad, 1, MPI_INT, 0, 18, survivors);
  }
  std::fflush(stdout);
  std::_Exit(0);
}

}  // namespace paramwin::test
