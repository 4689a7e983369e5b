#pragma once
// "Do all ranks agree?": the one way a collective check turns a local failure into an
// exception on every rank of a communicator, so that no rank is left waiting in the next
// collective while another one throws.
//
//   std::string error;                       // or a std::exception_ptr
//   try { local_part(); } catch (const Error& e) { error = e.what(); }
//   agree_or_throw<InvalidArgument>(comm, error);
//
// The failing rank with the lowest rank throws its own message; every other rank throws the
// same exception type with "paramwin: rank N failed: <rank N's message>" (the message is
// broadcast from rank N only when something failed: the agreeing path costs one allreduce).

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <string>

namespace paramwin::detail {

/// Lowest rank of @p comm whose @p ok is false, or -1 when every rank is ok.
/// @note Collective over @p comm. Throws MpiError.
[[nodiscard]] int first_failing_rank(MPI_Comm comm, bool ok);

/// What other ranks are told when @p failing failed with @p message: the message of rank
/// @p failing, broadcast from it (this rank's @p local_error when it is that rank).
/// @note Collective over @p comm (every rank, once first_failing_rank() returned >= 0).
[[nodiscard]] std::string failure_text(MPI_Comm comm, int failing, const std::string& local_error);

/// Returns when @p local_error is empty on every rank of @p comm. Otherwise throws E on every
/// rank: a failing rank its own @p local_error, the others "paramwin: rank N failed: ..."
/// with the message of the lowest failing rank N. @note Collective over @p comm.
template <class E>
void agree_or_throw(MPI_Comm comm, const std::string& local_error) {
  const int failing = first_failing_rank(comm, local_error.empty());
  if (failing < 0) {
    return;
  }
  std::string text = failure_text(comm, failing, local_error);
  if (!local_error.empty()) {
    throw E(local_error);
  }
  throw E(std::move(text));
}

/// As agree_or_throw, for a captured exception: a failing rank rethrows its own exception
/// (type kept), the other ranks throw E naming the lowest failing rank's message.
/// @note Collective over @p comm.
template <class E>
void agree_or_rethrow(MPI_Comm comm, const std::exception_ptr& local_error) {
  std::string what;
  if (local_error) {
    try {
      std::rethrow_exception(local_error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "paramwin: unknown exception";
    }
  }
  const int failing = first_failing_rank(comm, !local_error);
  if (failing < 0) {
    return;
  }
  std::string text = failure_text(comm, failing, what);
  if (local_error) {
    std::rethrow_exception(local_error);
  }
  throw E(std::move(text));
}

/// True when @p value is the same on every rank of @p comm (MPI_MIN and MPI_MAX agree).
/// @note Collective over @p comm. Throws MpiError.
[[nodiscard]] bool same_on_all_ranks(MPI_Comm comm, std::uint64_t value);

}  // namespace paramwin::detail
