#pragma once
// MPI error handling: one function turns an error code into an MpiError, and checked
// narrowing to the int counts MPI takes.

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace paramwin::detail {

/// Throws MpiError naming @p call when @p code is not MPI_SUCCESS.
void check_mpi(int code, const char* call);

/// MPI's own text for @p code.
[[nodiscard]] std::string mpi_error_string(int code);

/// @p value as an int; throws InvalidArgument naming @p what when it does not fit.
[[nodiscard]] int checked_int(std::size_t value, const char* what);

/// Every rank's @p mine, indexed by rank in @p comm.
/// @note Collective over @p comm.
[[nodiscard]] std::vector<std::string> allgather_text(MPI_Comm comm, const std::string& mine);

}  // namespace paramwin::detail
