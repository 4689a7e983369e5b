#include "mpi/fd_exchange.hpp"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {
namespace {

std::atomic<bool> fail_next{false};  // fail_next_exchange_for_testing()

std::string system_error(const std::string& what) {
  return "paramwin: " + what + ": " + std::strerror(errno);
}

/// The abstract socket address of node rank @p rank for one exchange (@p token).
sockaddr_un address_of(std::uint64_t token, int rank, socklen_t& length) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "paramwin-fd-" + std::to_string(token) + "-" + std::to_string(rank);
  a.sun_path[0] = '\0';  // the abstract namespace: no file
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

/// What a datagram carries beside the descriptor.
struct Header {
  std::int32_t sender = -1;
  std::int32_t has_fd = 0;
};

std::string send_fd(int sock, std::uint64_t token, int to, int rank, int fd) {
  Header h{.sender = rank, .has_fd = fd >= 0 ? 1 : 0};
  iovec io{.iov_base = &h, .iov_len = sizeof(h)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  socklen_t length = 0;
  sockaddr_un to_address = address_of(token, to, length);
  m.msg_name = &to_address;
  m.msg_namelen = length;
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  while (sendmsg(sock, &m, 0) < 0) {
    if (errno != EINTR) {
      return system_error("sendmsg of a descriptor to node rank " + std::to_string(to));
    }
  }
  return {};
}

/// Receives one datagram (from any rank) into @p out; returns an error text or "" (and sets
/// @p timed_out when none came in time). A datagram from a process of another user (the
/// kernel's SCM_CREDENTIALS, which a sender cannot forge without privileges) is dropped with
/// its descriptor and counted in @p foreign: the socket's abstract name is visible to every
/// process of the host (/proc/net/unix), and a descriptor planted as a rank's would be mapped
/// as that rank's device slots.
std::string receive_fd(int sock, int size, double timeout_seconds, std::vector<UniqueFd>& out,
                       std::vector<bool>& heard, bool& timed_out, int& foreign) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(std::max(0.0, timeout_seconds));
  const auto timeout = [&] {
    timed_out = true;
    return "paramwin: no descriptor arrived from a rank of this node within " +
           std::to_string(std::lround(timeout_seconds)) + " s" +
           (foreign > 0 ? " (" + std::to_string(foreign) +
                              " message(s) from another user's process were dropped)"
                        : std::string());
  };
  for (;;) {
    Header h;
    iovec io{.iov_base = &h, .iov_len = sizeof(h)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(ucred))] = {};
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    ssize_t got = 0;
    while ((got = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return timeout();
      if (errno != EINTR) return system_error("recvmsg of a descriptor");
    }
    UniqueFd fd;
    bool same_user = false;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET) continue;
      if (c->cmsg_type == SCM_RIGHTS) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(c), sizeof(int));
        fd = UniqueFd(received);
      } else if (c->cmsg_type == SCM_CREDENTIALS) {
        ucred who{};
        std::memcpy(&who, CMSG_DATA(c), sizeof(who));
        same_user = who.uid == getuid();
      }
    }
    if (!same_user) {
      ++foreign;  // dropped, its descriptor closed; wait on for the rank's own message
      if (std::chrono::steady_clock::now() < deadline) continue;
      return timeout();
    }
    if (got != static_cast<ssize_t>(sizeof(h)) || h.sender < 0 || h.sender >= size ||
        heard[static_cast<std::size_t>(h.sender)]) {
      return "paramwin: a malformed descriptor message arrived on this node's socket";
    }
    if ((m.msg_flags & MSG_CTRUNC) != 0 || (h.has_fd != 0) != static_cast<bool>(fd)) {
      return "paramwin: the descriptor of node rank " + std::to_string(h.sender) +
             " did not arrive (the process may be out of descriptors)";
    }
    heard[static_cast<std::size_t>(h.sender)] = true;
    out[static_cast<std::size_t>(h.sender)] = std::move(fd);
    return {};
  }
}

}  // namespace

void fail_next_exchange_for_testing() noexcept { fail_next = true; }

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

std::vector<UniqueFd> exchange_fds(MPI_Comm node, int fd, double timeout_seconds) {
  int rank = 0;
  int size = 1;
  check_mpi(MPI_Comm_rank(node, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(node, &size), "MPI_Comm_size");
  std::vector<UniqueFd> out(static_cast<std::size_t>(size));
  if (size == 1) return out;

  // A name no other exchange on this host uses at the same time.
  std::uint64_t token = 0;
  if (rank == 0) {
    std::random_device rd;
    token =
        (std::uint64_t{rd()} << 32) ^ rd() ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<std::uint64_t>(getpid()) << 20);
  }
  check_mpi(MPI_Bcast(&token, 1, MPI_UINT64_T, 0, node), "MPI_Bcast(descriptor token)");

  std::string error;
  UniqueFd sock(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) {
    error = system_error("socket(AF_UNIX, SOCK_DGRAM) for passing descriptors");
  } else {
    const double whole = std::floor(timeout_seconds);
    timeval tv{.tv_sec = static_cast<time_t>(whole),
               .tv_usec = static_cast<suseconds_t>((timeout_seconds - whole) * 1e6)};
    socklen_t length = 0;
    const sockaddr_un own = address_of(token, rank, length);
    const int on = 1;  // the kernel attaches every sender's credentials (receive_fd)
    if (setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(sock.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(sock.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
      error = system_error("setsockopt(SO_RCVTIMEO, SO_SNDTIMEO, SO_PASSCRED)");
    } else if (bind(sock.get(), reinterpret_cast<const sockaddr*>(&own), length) != 0) {
      error = system_error("bind of an abstract Unix socket for passing descriptors");
    }
  }
  if (fail_next.exchange(false) && error.empty()) {
    error = "paramwin: this rank's descriptor exchange was made to fail "
            "(fail_next_exchange_for_testing)";
  }
  agree_or_throw<Error>(node, error);  // every socket is bound before the first send

  // Round j: send to rank + j, then receive one message (from whichever rank sent it), so
  // no queue holds more than a few messages (Linux queues 10 datagrams per socket by
  // default). A rank that failed goes on sending (without descriptors) and receiving, so
  // that no peer waits for the timeout; a send or receive that timed out ends it.
  std::vector<bool> heard(static_cast<std::size_t>(size), false);
  heard[static_cast<std::size_t>(rank)] = true;
  bool timed_out = false;
  int foreign = 0;
  for (int j = 1; j < size && !timed_out; ++j) {
    const std::string sent =
        send_fd(sock.get(), token, (rank + j) % size, rank, error.empty() ? fd : -1);
    const std::string received =
        receive_fd(sock.get(), size, timeout_seconds, out, heard, timed_out, foreign);
    timed_out = timed_out || !sent.empty();
    if (error.empty()) error = !sent.empty() ? sent : received;
  }
  agree_or_throw<Error>(node, error);
  return out;
}

}  // namespace paramwin::detail
