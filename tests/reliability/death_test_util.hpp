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

/// Survivors only: agrees over a communicator without @p dead whether any survivor's @p failed
/// (each survivor has printed its own "FAILED:" line), prints @p passed on rank 0 when none
/// did, and ends the process with std::_Exit(0).
[[noreturn]] inline void end_survivor(int dead, bool failed, const std::string& passed) {
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_excl(world, 1, &dead, &alive);
  MPI_Comm survivors = MPI_COMM_NULL;
  MPI_Comm_create_group(MPI_COMM_WORLD, alive, 17, &survivors);
  std::fflush(stdout);
  int bad = failed ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, survivors);
  int rank = 0;
  MPI_Comm_rank(survivors, &rank);
  if (rank == 0 && any == 0) std::printf("%s\n", passed.c_str());
  std::fflush(stdout);
  std::_Exit(0);
}

}  // namespace paramwin::test
