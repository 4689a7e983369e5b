#pragma once
// File descriptors passed between the ranks of one node: each rank offers one descriptor and
// receives a duplicate of every other rank's, over Unix datagram sockets (SCM_RIGHTS), the
// way NCCL shares its cuMem allocations. Device windows share their VMM slots this way
// (src/detail/cuda.cu); MPI itself moves only bytes. Unlike pidfd_getfd(), a descriptor
// sent over a socket needs no ptrace permission over the sender (Ubuntu's Yama ptrace_scope = 1
// refuses that between sibling processes of an unprivileged user).
//
//   std::vector<UniqueFd> peers = exchange_fds(node_comm, my_fd);  // peers[r]: rank r's
//
// The sockets live in Linux's abstract namespace (no file to clean up), named from a token
// that node rank 0 draws and broadcasts, so concurrent windows and jobs never meet. Every
// process of the host can read those names (/proc/net/unix) and send to them: a datagram
// whose kernel-attached credentials (SCM_CREDENTIALS) name another user is dropped, with its
// descriptor. A process of the same user is trusted, as it could ptrace the ranks anyway.

#include <mpi.h>

#include <string>
#include <vector>

namespace paramwin::detail {

/// An owned file descriptor (closed by the destructor); -1 when empty.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  ~UniqueFd();

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives up ownership; returns the descriptor.
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

/// Every rank of @p node (ranks of one host) offers @p fd (-1: this rank offers none) and
/// receives every other rank's: the result has one entry per rank of @p node, empty for this
/// rank and for a rank that offered none. Throws Error on every rank when any rank could not
/// create its socket, send or receive (naming the rank and the system's message); a receive
/// waits at most @p timeout_seconds for its message.
/// @note Collective over @p node.
[[nodiscard]] std::vector<UniqueFd> exchange_fds(MPI_Comm node, int fd,
                                                 double timeout_seconds = 60.0);

/// Tests only: the next exchange_fds() of this process over more than one rank fails on this
/// rank (every rank throws, as when a rank's descriptors did not arrive), so that a GPU test
/// can make device windows fall back from VMM to IPC slots
/// (tests/cuda/device_window_mpi_test.cpp), a path that no natural failure reaches reliably.
void fail_next_exchange_for_testing() noexcept;

}  // namespace paramwin::detail
