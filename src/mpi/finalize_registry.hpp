#pragma once
// The finalize registry: every live Win (handles.hpp), and every owner that must quiesce
// before its windows go (a progress thread, abandoned requests), so that MPI_Finalize frees
// what the program left alive instead of aborting in MPICH 4.0.2 + UCX 1.13 (their memory
// registrations still in use). The first registration hangs an attribute on MPI_COMM_SELF
// whose delete callback runs at the start of MPI_Finalize, while MPI still works.
//
// At MPI_Finalize the callback (1) stops every client's threads, (2) lets every client free
// itself, newest first, (3) frees every Win still live, newest first, through
// Win::free_noexcept()'s code. MPI_Win_free is collective: windows are created collectively,
// so freeing in reverse creation order matches across ranks (assumption: windows whose
// communicators overlap were created in the same relative order on the ranks they share;
// docs/reliability.md).

#include <string>

namespace paramwin::detail {

class Win;

/// An owner that must act before its windows are freed at MPI_Finalize.
class FinalizeClient {
 public:
  /// Stops threads that call MPI: MPICH's finalize turns its thread locking off before it
  /// deletes MPI_COMM_SELF's attributes, so no other thread may stay in MPI. Never throws.
  virtual void stop_threads_at_finalize() noexcept = 0;
  /// Frees the client's MPI resources while MPI still works; records, never throws, errors.
  virtual void free_at_finalize() noexcept = 0;
  /// What failed in free_at_finalize(), empty if nothing did.
  [[nodiscard]] virtual const std::string& finalize_error() const noexcept = 0;

 protected:
  FinalizeClient() = default;
  FinalizeClient(const FinalizeClient&) = default;
  FinalizeClient& operator=(const FinalizeClient&) = default;
  FinalizeClient(FinalizeClient&&) = default;
  FinalizeClient& operator=(FinalizeClient&&) = default;
  ~FinalizeClient() = default;
};

/// Lists @p client (installing the MPI_Finalize hook on first use; throws MpiError).
void remember_client(FinalizeClient* client);
/// Unlists @p client; no-op if absent.
void forget_client(FinalizeClient* client) noexcept;

/// Lists @p win (installing the hook on first use; throws MpiError).
void remember_win(Win* win);
/// @p to takes @p from's place (a move), keeping its position in creation order.
void replace_win(const Win* from, Win* to) noexcept;
/// Unlists @p win; no-op if absent.
void forget_win(const Win* win) noexcept;

}  // namespace paramwin::detail
