// The agreement helpers (see agree.hpp).
#include "mpi/agree.hpp"

#include <climits>

#include "detail/mpi_check.hpp"
#include "paramwin/agreement.hpp"

namespace paramwin::detail {

int first_failing_rank(MPI_Comm comm, bool ok) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  const int mine = ok ? INT_MAX : rank;
  int first = INT_MAX;
  check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce(agree)");
  return first == INT_MAX ? -1 : first;
}

std::string failure_text(MPI_Comm comm, int failing, const std::string& local_error) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  std::string text = rank == failing ? local_error : std::string();
  int len = rank == failing ? checked_int(text.size(), "error text bytes") : 0;
  check_mpi(MPI_Bcast(&len, 1, MPI_INT, failing, comm), "MPI_Bcast(agree)");
  text.resize(static_cast<std::size_t>(len));
  check_mpi(MPI_Bcast(text.data(), len, MPI_CHAR, failing, comm), "MPI_Bcast(agree)");
  return "paramwin: rank " + std::to_string(failing) + " failed: " + text;
}

bool same_on_all_ranks(MPI_Comm comm, std::uint64_t value) {
  std::uint64_t in[2] = {value, ~value};
  std::uint64_t out[2] = {0, 0};
  // One allreduce: max of value and max of ~value (= ~min of value).
  check_mpi(MPI_Allreduce(in, out, 2, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce(agree)");
  return out[0] == ~out[1];
}

}  // namespace paramwin::detail

namespace paramwin {

std::string agreed_error(MPI_Comm comm, const std::string& local_error) {
  const int failing = detail::first_failing_rank(comm, local_error.empty());
  if (failing < 0) return {};
  std::string text = detail::failure_text(comm, failing, local_error);
  return local_error.empty() ? text : local_error;
}

}  // namespace paramwin
