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

int checked_int(std::size_t value, const char* what) {
  if (value > static_cast<std::size_t>(INT_MAX)) {
    throw InvalidArgument(std::string(what) + " = " + std::to_string(value) +
                          " does not fit in an MPI int count (max " + std::to_string(INT_MAX) +
                          ")");
  }
  return static_cast<int>(value);
}

SharedInfo::SharedInfo() {
  check_mpi(MPI_Info_create(&info_), "MPI_Info_create");
  // Per-rank segments allocated separately and page-aligned: MPICH 4.0.2 + UCX returns
  // other ranks' bytes for windows whose per-rank base is not 16-byte aligned.
  check_mpi(MPI_Info_set(info_, "alloc_shared_noncontig", "true"), "MPI_Info_set");
}

SharedInfo::~SharedInfo() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (info_ != MPI_INFO_NULL && finalized == 0) {
    MPI_Info_free(&info_);
  }
}

}  // namespace paramwin::detail
