// Descriptors passed between the ranks of a node (src/mpi/fd_exchange.hpp), the way device
// windows share their VMM slots: every rank offers a memfd holding its rank and reads every
// peer's through the received duplicate; a rank may offer none; exchanges repeat without
// meeting; a rank that cannot receive a descriptor (out of descriptors) makes the exchange
// fail on every rank with a message, and the next exchange works again; a descriptor that a
// process of another user plants on a rank's socket is dropped.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "mpi/fd_exchange.hpp"
#include "mpi/handles.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/error.hpp"

namespace pd = paramwin::detail;

namespace {

/// The node communicator of COMM_WORLD (every test rank runs on this host).
MPI_Comm node_comm() {
  static MPI_Comm node = [] {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c);
    return c;
  }();
  return node;
}

/// A memory file holding @p value.
pd::UniqueFd file_holding(std::int64_t value) {
  pd::UniqueFd fd(memfd_create("paramwin-fd-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd);
  EXPECT_EQ(pwrite(fd.get(), &value, sizeof(value), 0), static_cast<ssize_t>(sizeof(value)));
  return fd;
}

std::int64_t value_in(const pd::UniqueFd& fd) {
  std::int64_t v = -1;
  EXPECT_EQ(pread(fd.get(), &v, sizeof(v), 0), static_cast<ssize_t>(sizeof(v)));
  return v;
}

int node_rank() {
  int r = 0;
  MPI_Comm_rank(node_comm(), &r);
  return r;
}

int node_size() {
  int n = 0;
  MPI_Comm_size(node_comm(), &n);
  return n;
}

}  // namespace

TEST(FdExchange, EveryRankReadsEveryPeersFile) {
  const int me = node_rank();
  const int n = node_size();
  const pd::UniqueFd mine = file_holding(1000 + me);
  const std::vector<pd::UniqueFd> peers = pd::exchange_fds(node_comm(), mine.get());
  ASSERT_EQ(peers.size(), static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r == me) {
      EXPECT_FALSE(peers[static_cast<std::size_t>(r)]) << "no entry for this rank itself";
      continue;
    }
    ASSERT_TRUE(peers[static_cast<std::size_t>(r)]) << "rank " << r;
    EXPECT_EQ(value_in(peers[static_cast<std::size_t>(r)]), 1000 + r) << "rank " << r;
    // A duplicate of the peer's file, not of this rank's own.
    struct stat a {};
    struct stat b {};
    ASSERT_EQ(fstat(peers[static_cast<std::size_t>(r)].get(), &a), 0);
    ASSERT_EQ(fstat(mine.get(), &b), 0);
    EXPECT_NE(a.st_ino, b.st_ino);
  }
  // A write through the duplicate is seen by the owner: the same open file.
  if (n > 1) {
    const int next = (me + 1) % n;
    const std::int64_t mark = 5000 + next;
    ASSERT_EQ(pwrite(peers[static_cast<std::size_t>(next)].get(), &mark, sizeof(mark), 8), 8);
    MPI_Barrier(node_comm());
    std::int64_t seen = 0;
    ASSERT_EQ(pread(mine.get(), &seen, sizeof(seen), 8), 8);
    EXPECT_EQ(seen, 5000 + me);
  }
}

TEST(FdExchange, ARankMayOfferNone) {
  const int me = node_rank();
  const pd::UniqueFd mine = me == 0 ? pd::UniqueFd() : file_holding(me);
  const std::vector<pd::UniqueFd> peers = pd::exchange_fds(node_comm(), mine.get());
  for (int r = 0; r < node_size(); ++r) {
    if (r == me) continue;
    EXPECT_EQ(static_cast<bool>(peers[static_cast<std::size_t>(r)]), r != 0) << "rank " << r;
    if (r != 0) {
      EXPECT_EQ(value_in(peers[static_cast<std::size_t>(r)]), r);
    }
  }
}

TEST(FdExchange, RepeatedExchangesDoNotMeet) {
  for (int round = 0; round < 20; ++round) {
    const pd::UniqueFd mine = file_holding(round * 100 + node_rank());
    const std::vector<pd::UniqueFd> peers = pd::exchange_fds(node_comm(), mine.get());
    for (int r = 0; r < node_size(); ++r) {
      if (r == node_rank()) continue;
      ASSERT_EQ(value_in(peers[static_cast<std::size_t>(r)]), round * 100 + r)
          << "round " << round << ", rank " << r;
    }
  }
}

TEST(FdExchange, ARankOutOfDescriptorsFailsTheExchangeOnEveryRank) {
  if (node_size() < 2) GTEST_SKIP() << "needs 2 ranks on the node";
  const pd::UniqueFd mine = file_holding(node_rank());
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  std::vector<pd::UniqueFd> filler;
  if (node_rank() == 1) {
    // Room for the exchange's socket only: every other descriptor number is taken, so no
    // received descriptor fits.
    int highest = 0;
    for (int fd = 0; fd < 4096; ++fd) {
      if (fcntl(fd, F_GETFD) != -1) highest = fd;
    }
    // Three numbers above the highest open one, whatever the gaps below it: the fillers take
    // all but one, and free at least two again before the message is read (below).
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(highest + 4);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int fd = dup(0); fd >= 0; fd = dup(0)) filler.emplace_back(fd);
    ASSERT_FALSE(filler.empty());
    filler.pop_back();  // the one free number
  }
  std::string what;
  try {
    (void)pd::exchange_fds(node_comm(), mine.get(), 10.0);
  } catch (const paramwin::Error& e) {
    // Descriptors and the limit first: UBSan's vptr check of e.what() probes memory through a
    // pipe, which takes two descriptor numbers. With one free number (the exchange's socket's,
    // where the rank's open descriptors leave no gaps below the limit) it reported a false
    // "invalid vptr" (CI at df51345).
    filler.clear();
    if (node_rank() == 1) setrlimit(RLIMIT_NOFILE, &saved);
    what = e.what();
  }
  filler.clear();
  if (node_rank() == 1) {
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  }
  EXPECT_NE(what.find("node rank"), std::string::npos) << what;
  if (node_rank() == 1) {
    EXPECT_NE(what.find("did not arrive"), std::string::npos) << what;
  } else {
    EXPECT_NE(what.find("rank 1 failed"), std::string::npos) << what;
  }
  // Nothing is left behind: the next exchange works.
  const std::vector<pd::UniqueFd> peers = pd::exchange_fds(node_comm(), mine.get());
  for (int r = 0; r < node_size(); ++r) {
    if (r != node_rank()) {
      EXPECT_EQ(value_in(peers[static_cast<std::size_t>(r)]), r);
    }
  }
}

namespace {

/// In a child process of user nobody (65534): finds the abstract socket of node rank 0 in an
/// exchange that rank 1 has not joined yet (/proc/net/unix lists every abstract name of the
/// host) and sends it a descriptor of a file holding 666, claiming to be rank 1. Exit status
/// 0 once sent, 2 when no such socket appeared within 20 s, 3 when the user could not change.
[[noreturn]] void forge_rank_1() {
  if (setgid(65534) != 0 || setuid(65534) != 0 || getuid() != 65534) _exit(3);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream table("/proc/net/unix");
    std::vector<std::string> names;
    for (std::string line; std::getline(table, line);) {
      const std::size_t at = line.find("@paramwin-fd-");
      if (at != std::string::npos) names.push_back(line.substr(at + 1));
    }
    for (const std::string& name : names) {
      if (!name.ends_with("-0")) continue;
      const std::string token = name.substr(0, name.size() - 1);
      if (std::find(names.begin(), names.end(), token + "1") != names.end()) continue;
      const int sock = socket(AF_UNIX, SOCK_DGRAM, 0);
      sockaddr_un to{};
      to.sun_family = AF_UNIX;
      std::memcpy(to.sun_path + 1, name.data(), name.size());
      const std::int32_t header[2] = {1, 1};  // sender 1, with a descriptor
      iovec io{.iov_base = const_cast<std::int32_t*>(header), .iov_len = sizeof(header)};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr m{};
      m.msg_name = &to;
      m.msg_namelen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      m.msg_iov = &io;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      const int planted = memfd_create("paramwin-fd-forged", 0);
      const std::int64_t value = 666;
      if (planted < 0 || pwrite(planted, &value, sizeof(value), 0) != sizeof(value)) _exit(4);
      std::memcpy(CMSG_DATA(c), &planted, sizeof(int));
      _exit(sendmsg(sock, &m, 0) == static_cast<ssize_t>(sizeof(header)) ? 0 : 5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  _exit(2);
}

}  // namespace

// Every process of the host can read the sockets' abstract names from /proc/net/unix and
// send to them: a process of another user that plants a descriptor as rank 1's (before rank
// 1 sends its own) is dropped by its credentials, and rank 0 gets rank 1's file.
TEST(FdExchange, ADescriptorFromAnotherUsersProcessIsDropped) {
  if (node_size() < 2) GTEST_SKIP() << "needs 2 ranks on the node";
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run the forger as another user";
  const pd::UniqueFd mine = file_holding(node_rank());
  int forged = -1;  // the forger's exit status, on rank 1
  std::vector<pd::UniqueFd> peers;
  if (node_rank() == 1) {
    // Rank 0 has bound its socket and waits for rank 1 inside the exchange meanwhile.
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) forge_rank_1();
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    forged = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  peers = pd::exchange_fds(node_comm(), mine.get(), 30.0);
  MPI_Bcast(&forged, 1, MPI_INT, 1, node_comm());
  if (forged == 3) GTEST_SKIP() << "root cannot become user nobody here (setuid refused)";
  ASSERT_EQ(forged, 0) << "the forger did not send (2: no socket found in 20 s)";
  for (int r = 0; r < node_size(); ++r) {
    if (r != node_rank()) {
      EXPECT_EQ(value_in(peers[static_cast<std::size_t>(r)]), r) << "rank " << r;
    }
  }
}

// The test hook the GPU tests use to make device windows fall back from VMM to IPC slots: the
// next exchange fails on the rank that asked, every rank throws, and the one after works.
TEST(FdExchange, AFailureMadeForTestsFailsOneExchangeOnEveryRank) {
  if (node_size() < 2) GTEST_SKIP() << "needs 2 ranks on the node";
  const pd::UniqueFd mine = file_holding(node_rank());
  if (node_rank() == 1) pd::fail_next_exchange_for_testing();
  std::string what;
  try {
    (void)pd::exchange_fds(node_comm(), mine.get());
  } catch (const paramwin::Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("made to fail"), std::string::npos) << what;
  if (node_rank() != 1) {
    EXPECT_NE(what.find("rank 1 failed"), std::string::npos) << what;
  }
  const std::vector<pd::UniqueFd> peers = pd::exchange_fds(node_comm(), mine.get());
  for (int r = 0; r < node_size(); ++r) {
    if (r != node_rank()) {
      EXPECT_EQ(value_in(peers[static_cast<std::size_t>(r)]), r);
    }
  }
}
