// Across hosts (run by scripts/multihost.sh on two emulated hosts, 2 ranks each): the node
// split follows the hosts, pulls are exact, and every pull reports the transport that served
// each donor — shared memory for donors on the reader's host, RMA for the others.
// On a single host every test skips (on every rank alike).
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
using pw::test::value;

namespace {

/// Where every world rank runs: node id (lowest world rank of its MPI_COMM_TYPE_SHARED
/// group) and processor name (the emulated host's hostname).
struct Topology {
  std::vector<int> node;
  std::vector<std::string> host;
  int nodes = 0;

  Topology() {
    const int n = pw::test::world_size();
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    int leader = pw::test::world_rank();
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);
    node.resize(static_cast<std::size_t>(n));
    MPI_Allgather(&leader, 1, MPI_INT, node.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::array<char, MPI_MAX_PROCESSOR_NAME> name{};
    int len = 0;
    MPI_Get_processor_name(name.data(), &len);
    std::vector<char> all(static_cast<std::size_t>(n) * MPI_MAX_PROCESSOR_NAME);
    MPI_Allgather(name.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                  MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < n; ++r) {
      host.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    }
    std::vector<int> leaders = node;
    std::sort(leaders.begin(), leaders.end());
    nodes = static_cast<int>(std::unique(leaders.begin(), leaders.end()) - leaders.begin());
  }
  [[nodiscard]] bool same_node(int a, int b) const {
    return node[static_cast<std::size_t>(a)] == node[static_cast<std::size_t>(b)];
  }
};

const Topology& topology() {
  static const Topology t;  // collective on first use; every test calls it on every rank
  return t;
}

#define PARAMWIN_REQUIRE_HOSTS(n)                                                    \
  do {                                                                               \
    if (topology().nodes < (n)) {                                                    \
      GTEST_SKIP() << "needs ranks on at least " << (n) << " hosts (run it through " \
                   << "scripts/multihost.sh), have " << topology().nodes;            \
    }                                                                                \
  } while (0)

pw::Layout test_layout() {
  pw::Layout layout;
  layout.add("w1", {16, 33});                       // float32
  layout.add("b1", {5}, pw::DType::float64);        // float64
  layout.add("scale", std::vector<std::size_t>{});  // 0-dim scalar
  layout.add("w3", std::size_t{300000});            // several RMA chunks (512 KiB each)
  return layout;
}

struct Params {
  std::vector<float> w1, scale, w3;
  std::vector<double> b1;
  Params(const pw::Layout& l, int rank) : w1(l[0].count), scale(1), w3(l[3].count), b1(l[1].count) {
    for (std::size_t i = 0; i < w1.size(); ++i) w1[i] = value(rank, 0, i);
    for (std::size_t i = 0; i < b1.size(); ++i) b1[i] = value(rank, 1, i) + 0.25;
    scale[0] = value(rank, 2, 0);
    for (std::size_t i = 0; i < w3.size(); ++i) w3[i] = value(rank, 3, i);
  }
  std::vector<pw::ConstLayerRef> crefs() const { return {w1, b1, scale, w3}; }
  std::vector<pw::LayerRef> refs() { return {w1, b1, scale, w3}; }
};

TEST(Multihost, NodeSplitFollowsTheEmulatedHosts) {
  PARAMWIN_REQUIRE_HOSTS(2);
  const Topology& t = topology();
  const int n = pw::test::world_size();
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      EXPECT_EQ(t.same_node(a, b),
                t.host[static_cast<std::size_t>(a)] == t.host[static_cast<std::size_t>(b)])
          << "ranks " << a << " (" << t.host[static_cast<std::size_t>(a)] << ") and " << b << " ("
          << t.host[static_cast<std::size_t>(b)] << ")";
    }
  }
  if (pw::test::world_rank() == 0) {
    for (int r = 0; r < n; ++r) {
      std::printf("[multihost] rank %d on %s (node of rank %d)\n", r,
                  t.host[static_cast<std::size_t>(r)].c_str(), t.node[static_cast<std::size_t>(r)]);
    }
  }
}

class MultihostPull : public ::testing::TestWithParam<pw::Transport> {};

TEST_P(MultihostPull, ExactMeansAndTheRightTransportPerDonor) {
  PARAMWIN_REQUIRE_HOSTS(2);
  const pw::Layout layout = test_layout();
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  const int n = win.size();
  const Params mine(layout, rank);
  ASSERT_TRUE(win.publish(mine.crefs()).published);
  MPI_Barrier(MPI_COMM_WORLD);

  auto expected = [&](int r) {
    if (GetParam() == pw::Transport::rma) return pw::Transport::rma;
    return topology().same_node(rank, r) ? pw::Transport::shm : pw::Transport::rma;
  };
  // Every donor set of size 1..n-1 made of consecutive ranks: same-host only, other-host
  // only and mixed sets all occur.
  for (int k = 1; k < n; ++k) {
    for (int first = 1; first + k <= n; ++first) {
      std::vector<int> donors;
      for (int j = 0; j < k; ++j) donors.push_back((rank + first + j) % n);
      Params out(layout, -1);
      auto refs = out.refs();
      const pw::PullResult r = win.pull(donors, refs);
      ASSERT_EQ(r.donors.size(), donors.size());
      for (std::size_t d = 0; d < donors.size(); ++d) {
        EXPECT_EQ(r.donors[d].rank, donors[d]);
        EXPECT_EQ(r.donors[d].version, 1U);
        EXPECT_EQ(win.transport_for(donors[d]), expected(donors[d])) << "donor " << donors[d];
        EXPECT_EQ(r.donors[d].transport, expected(donors[d]))
            << "rank " << rank << " read donor " << donors[d] << " through "
            << pw::transport_name(r.donors[d].transport);
      }
      EXPECT_EQ(r.bytes, win.wire_bytes() * donors.size());
      // The library accumulates w_d * x_d in float (double for float64 layers): equal to the
      // exact mean up to rounding. No ASSERT here: every rank must reach the barrier.
      auto mean = [&](int layer, std::size_t i, double offset) {
        double s = 0.0;
        for (int d : donors) s += value(d, layer, i) + offset;
        return s / k;
      };
      auto near = [](double got, double want, double rel) {
        return std::abs(got - want) <= rel * std::max(1.0, std::abs(want));
      };
      long bad = 0;
      for (std::size_t i = 0; i < out.w1.size(); ++i)
        bad += near(out.w1[i], mean(0, i, 0.0), 1e-6) ? 0 : 1;
      for (std::size_t i = 0; i < out.b1.size(); ++i)
        bad += near(out.b1[i], mean(1, i, 0.25), 1e-12) ? 0 : 1;
      bad += near(out.scale[0], mean(2, 0, 0.0), 1e-6) ? 0 : 1;
      for (std::size_t i = 0; i < out.w3.size(); ++i)
        bad += near(out.w3[i], mean(3, i, 0.0), 1e-6) ? 0 : 1;
      EXPECT_EQ(bad, 0) << "rank " << rank << ", k=" << k << ", first donor " << donors[0];
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, MultihostPull,
                         ::testing::Values(pw::Transport::automatic, pw::Transport::rma),
                         [](const auto& param_info) {
                           return std::string(pw::transport_name(param_info.param));
                         });

TEST(Multihost, ShmTransportRefusesAnOtherHostDonorAndLeavesTheOutput) {
  PARAMWIN_REQUIRE_HOSTS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{1000});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = pw::Transport::shm});
  const int rank = win.rank();
  const int n = win.size();
  std::vector<float> w(1000, static_cast<float>(rank));
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  int other = -1;
  for (int r = 0; r < n; ++r) {
    if (!topology().same_node(rank, r)) other = r;
  }
  ASSERT_GE(other, 0);
  std::vector<float> out(1000, -1.0F);
  EXPECT_ANY_THROW((void)win.pull({other}, {out}));
  EXPECT_EQ(out, std::vector<float>(1000, -1.0F));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Multihost, WireBfloat16AcrossHostsIsExactForSmallIntegers) {
  PARAMWIN_REQUIRE_HOSTS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{100000});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.wire = pw::WireFormat::bfloat16});
  const int rank = win.rank();
  const int n = win.size();
  std::vector<float> w(100000);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>(rank * 16 + static_cast<int>(i % 16));
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  // One same-host and one other-host donor: the mean of two integers is exact in float.
  std::vector<int> donors(2, -1);
  for (int r = n - 1; r >= 0; --r) {
    if (r != rank) donors[topology().same_node(rank, r) ? 0 : 1] = r;
  }
  ASSERT_GE(donors[0], 0);
  ASSERT_GE(donors[1], 0);
  std::vector<float> out(w.size());
  const pw::PullResult res = win.pull(donors, {out});
  EXPECT_EQ(res.bytes, w.size() * 2 * donors.size());
  long bad = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    double s = 0.0;
    for (int d : donors) s += d * 16 + static_cast<int>(i % 16);
    bad += out[i] == static_cast<float>(s / 2.0) ? 0 : 1;
  }
  EXPECT_EQ(bad, 0);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Multihost, RostersAreReadableAcrossHosts) {
  PARAMWIN_REQUIRE_HOSTS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{16});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout);
  const int rank = win.rank();
  win.set_status({.iteration = 100 + rank,
                  .age = rank,
                  .metric = 0.5 * rank,
                  .generation = static_cast<std::uint64_t>(rank),
                  .state = pw::AgentState::active});
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<pw::RosterEntry> all = win.roster_all();
  ASSERT_EQ(static_cast<int>(all.size()), win.size());
  for (int r = 0; r < win.size(); ++r) {
    const pw::RosterEntry& e = all[static_cast<std::size_t>(r)];
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.status.iteration, 100 + r);
    EXPECT_EQ(e.status.age, r);
    EXPECT_EQ(e.status.metric, 0.5 * r);
    EXPECT_EQ(e.status.generation, static_cast<std::uint64_t>(r));
    EXPECT_EQ(e.status.state, pw::AgentState::active);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
