#pragma once
/// @file error.hpp
/// Exception types thrown by paramwin. Every error names what was wrong (layer, rank, sizes).

#include <stdexcept>
#include <string>

namespace paramwin {

/// Base of every exception paramwin throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller passed something invalid: wrong sizes, names, dtypes, ranks, options.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Layouts differ between ranks (at window creation) or between an agent and a donor.
class LayoutMismatch : public Error {
 public:
  using Error::Error;
};

/// This process was judged dead while it lived (a long stall) and a new membership epoch
/// went on without it (docs/elastic.md): it has dropped its agent and is a spare now.
class EvictedError : public Error {
 public:
  using Error::Error;
};

/// A donor cannot serve a pull: never published, incompatible, non-finite data, left, stale.
class DonorError : public Error {
 public:
  /// @p rank: the donor concerned (-1: none in particular); @p what: the message.
  DonorError(int rank, const std::string& what) : Error(what), rank_(rank) {}
  /// Rank (in the window's communicator) of the donor concerned.
  [[nodiscard]] int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// An RMA read did not complete within PullOptions::timeout_seconds (typically: the donor
/// computes without entering MPI and has no progress thread). The caller's output is
/// unchanged and the window stays usable.
class TimeoutError : public DonorError {
 public:
  using DonorError::DonorError;  ///< (rank, message), as DonorError
};

/// A pull with Landing::direct failed after it had written into the caller's memory (a
/// deadline, an MPI error, a donor gone): unlike every other pull error, the caller's
/// parameters are now **partly written** (some chunks of the new mix, the rest as before).
/// Retry the pull (without momentum: it rewrites every element) or re-initialise the
/// parameters; never train on them as they are. rank(): the donor whose read failed;
/// what() names the cause.
class PartialPullError : public DonorError {
 public:
  /// (rank, message), as DonorError; @p timed_out: the cause was the pull's deadline.
  PartialPullError(int rank, const std::string& what, bool timed_out)
      : DonorError(rank, what), timed_out_(timed_out) {}
  /// True when the pull's deadline (PullOptions::timeout_seconds) ran out midway.
  [[nodiscard]] bool timed_out() const noexcept { return timed_out_; }

 private:
  bool timed_out_;
};

/// A window failed its self-check: remote reads did not return the bytes the owner wrote.
class VerificationError : public Error {
 public:
  using Error::Error;
};

/// An MPI call returned an error code. Keeps the code, the call and MPI's own message.
class MpiError : public Error {
 public:
  /// @p code returned by @p call; @p mpi_message is MPI_Error_string of the code.
  MpiError(int code, std::string call, const std::string& mpi_message)
      : Error(call + " failed: " + mpi_message + " (MPI error code " + std::to_string(code) + ")"),
        code_(code),
        call_(std::move(call)) {}
  /// The MPI error code returned by the call.
  [[nodiscard]] int code() const noexcept { return code_; }
  /// The MPI function (and context) that failed.
  [[nodiscard]] const std::string& call() const noexcept { return call_; }

 private:
  int code_;
  std::string call_;
};

}  // namespace paramwin
