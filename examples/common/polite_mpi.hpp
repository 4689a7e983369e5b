#pragma once
// MPI without spinning, for the examples: MPICH busy-polls inside blocking calls, and with
// more ranks than cores a rank spinning in MPI_Barrier steals the core a training rank needs.
// Every wait here is a nonblocking call completed by MPI_Test plus a short sleep.
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "paramwin/error.hpp"

namespace paramwin_examples {

/// Throws paramwin::MpiError for a failed MPI call.
inline void check_mpi(int code, const char* call) {
  if (code != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    throw paramwin::MpiError(code, call, std::string(msg, static_cast<std::size_t>(len)));
  }
}

/// Completes @p request by polling with 200 µs sleeps.
inline void wait_politely(MPI_Request& request) {
  int done = 0;
  for (;;) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done != 0) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// A barrier that sleeps while it waits. @note Collective over @p comm.
inline void barrier_politely(MPI_Comm comm) {
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
  wait_politely(r);
}

/// Gathers @p mine (the same count on every rank) to rank 0, rank-major there (empty
/// elsewhere). @note Collective over @p comm.
inline std::vector<double> gather_doubles(MPI_Comm comm, const std::vector<double>& mine) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<double> all(rank == 0 ? mine.size() * static_cast<std::size_t>(size) : 0);
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Igather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                        static_cast<int>(mine.size()), MPI_DOUBLE, 0, comm, &r),
            "MPI_Igather");
  wait_politely(r);
  return all;
}

}  // namespace paramwin_examples
