#include "detail/mpi_check.hpp"

#include <climits>

#include "paramwin/error.hpp"

namespace paramwin::detail {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    return "unknown MPI error";
  }
  return std::string(text, static_cast<std::size_t>(len));
}

void check_mpi(int code, const char* call) {
  if (code != MPI_SUCCESS) {
    throw MpiError(code, call, mpi_error_string(code));
  }
}

std::vector<std::string> allgather_text(MPI_Comm comm, const std::string& mine) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  int my_len = checked_int(mine.size(), "text bytes");
  std::vector<int> lens(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm), "MPI_Allgather");
  std::vector<int> displs(static_cast<std::size_t>(size), 0);
  for (std::size_t i = 1; i < displs.size(); ++i) displs[i] = displs[i - 1] + lens[i - 1];
  std::string text(static_cast<std::size_t>(displs.back() + lens.back()), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), my_len, MPI_CHAR, text.data(), lens.data(), displs.data(),
                           MPI_CHAR, comm),
            "MPI_Allgatherv");
  std::vector<std::string> all;
  all.reserve(lens.size());
  for (std::size_t r = 0; r < lens.size(); ++r) {
    all.push_back(
        text.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(lens[r])));
  }
  return all;
}

int checked_int(std::size_t value, const char* what) {
  if (value > static_cast<std::size_t>(INT_MAX)) {
    throw InvalidArgument(std::string(what) + " = " + std::to_string(value) +
                          " does not fit in an MPI int count (max " + std::to_string(INT_MAX) +
                          ")");
  }
  return static_cast<int>(value);
}

}  // namespace paramwin::detail
