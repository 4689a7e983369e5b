// Exact results of publish / pull on both transports, rosters, moves and split communicators.
#include <mpi.h>

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
using pw::test::value;

namespace {

pw::Layout test_layout() {
  pw::Layout layout;
  layout.add("w1", {16, 33});                       // 528 float32
  layout.add("b1", {5}, pw::DType::float64);        // float64
  layout.add("scale", std::vector<std::size_t>{});  // 0-dim scalar
  layout.add("w2", {7, 3}, pw::DType::bfloat16);
  layout.add("empty", std::size_t{0});
  layout.add("w3", std::size_t{70000});  // several chunks
  return layout;
}

/// Parameters of @p rank, stored per dtype, filled with exact small integers.
struct Params {
  std::vector<float> w1, scale, empty, w3;
  std::vector<double> b1;
  std::vector<pw::bfloat16> w2;

  Params(const pw::Layout& l, int rank, std::uint64_t version = 0)
      : w1(l[0].count), scale(1), empty(0), w3(l[5].count), b1(l[1].count), w2(l[3].count) {
    fill(rank, version);
  }
  void fill(int rank, std::uint64_t version) {
    for (std::size_t i = 0; i < w1.size(); ++i) w1[i] = value(rank, 0, i, version);
    for (std::size_t i = 0; i < b1.size(); ++i) b1[i] = value(rank, 1, i, version) + 0.25;
    scale[0] = value(rank, 2, 0, version);
    // bfloat16 holds integers exactly up to 256: keep these small.
    for (std::size_t i = 0; i < w2.size(); ++i)
      w2[i] = pw::to_bfloat16(static_cast<float>(rank * 8 + static_cast<int>(i % 5)));
    for (std::size_t i = 0; i < w3.size(); ++i) w3[i] = value(rank, 5, i, version);
  }
  std::vector<pw::ConstLayerRef> crefs() const { return {w1, b1, scale, w2, empty, w3}; }
  std::vector<pw::LayerRef> refs() { return {w1, b1, scale, w2, empty, w3}; }
};

/// Layers "a" (10 floats) and "b" (20): rank r publishes a = r, b = r + 100.
pw::Layout ab_layout() {
  pw::Layout layout;
  layout.add("a", std::size_t{10}).add("b", std::size_t{20});
  return layout;
}

/// @p oa and @p ob hold what rank @p donor published on an ab_layout() window.
void expect_ab_of(int donor, const std::vector<float>& oa, const std::vector<float>& ob) {
  EXPECT_EQ(oa, std::vector<float>(10, static_cast<float>(donor)));
  EXPECT_EQ(ob, std::vector<float>(20, static_cast<float>(donor + 100)));
}

class WindowTest : public ::testing::TestWithParam<pw::Transport> {};

TEST_P(WindowTest, MeanOfDonorsIsExact) {
  PARAMWIN_REQUIRE_RANKS(2);
  const pw::Layout layout = test_layout();
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  const int n = win.size();
  Params mine(layout, rank);
  auto published = win.publish(mine.crefs());
  EXPECT_TRUE(published.published);
  EXPECT_EQ(published.version, 1U);
  MPI_Barrier(MPI_COMM_WORLD);

  for (int k = 1; k <= std::min(3, n - 1); ++k) {
    std::vector<int> donors;
    for (int j = 1; j <= k; ++j) donors.push_back((rank + j) % n);
    Params out(layout, rank);
    auto refs = out.refs();
    pw::PullResult r = win.pull(donors, refs);
    ASSERT_EQ(r.donors.size(), donors.size());
    for (std::size_t d = 0; d < donors.size(); ++d) {
      EXPECT_EQ(r.donors[d].rank, donors[d]);
      EXPECT_EQ(r.donors[d].version, 1U);
      EXPECT_EQ(r.donors[d].transport,
                GetParam() == pw::Transport::rma ? pw::Transport::rma : pw::Transport::shm);
      EXPECT_DOUBLE_EQ(r.donors[d].weight, 1.0 / k);
    }
    EXPECT_EQ(r.bytes, win.wire_bytes() * donors.size());
    for (std::size_t i = 0; i < out.w1.size(); ++i) {
      float want = 0;
      for (int d : donors) want += value(d, 0, i);
      ASSERT_FLOAT_EQ(out.w1[i], want / static_cast<float>(k)) << "w1[" << i << "] k=" << k;
    }
    for (std::size_t i = 0; i < out.b1.size(); ++i) {
      double want = 0;
      for (int d : donors) want += value(d, 1, i) + 0.25;
      ASSERT_DOUBLE_EQ(out.b1[i], want / k);
    }
    float want_scale = 0;
    for (int d : donors) want_scale += value(d, 2, 0);
    EXPECT_FLOAT_EQ(out.scale[0], want_scale / static_cast<float>(k));
    for (std::size_t i = 0; i < out.w2.size(); ++i) {
      float want = 0;
      for (int d : donors) want += static_cast<float>(d * 8 + static_cast<int>(i % 5));
      ASSERT_EQ(out.w2[i], pw::to_bfloat16(want / static_cast<float>(k)));
    }
    for (std::size_t i = 0; i < out.w3.size(); ++i) {
      float want = 0;
      for (int d : donors) want += value(d, 5, i);
      ASSERT_FLOAT_EQ(out.w3[i], want / static_cast<float>(k)) << "w3[" << i << "]";
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(WindowTest, WeightsAndMomentumAreExact) {
  PARAMWIN_REQUIRE_RANKS(3);
  pw::Layout layout;
  layout.add("w", std::size_t{1000});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  const int n = win.size();
  std::vector<float> w(1000);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = value(rank, 0, i);
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);

  const std::vector<int> donors{(rank + 1) % n, (rank + 2) % n};
  std::vector<float> out(w);
  pw::PullOptions opt;
  opt.reduction = pw::Reduction::weighted;
  opt.weights = {3.0, 1.0};
  opt.momentum = 0.5;
  pw::PullResult r = win.pull(donors, {out}, opt);
  EXPECT_DOUBLE_EQ(r.donors[0].weight, 0.75);
  EXPECT_DOUBLE_EQ(r.donors[1].weight, 0.25);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float mix = 0.75F * value(donors[0], 0, i) + 0.25F * value(donors[1], 0, i);
    ASSERT_FLOAT_EQ(out[i], 0.5F * w[i] + 0.5F * mix) << i;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(WindowTest, NamedLayersBindInAnyOrder) {
  PARAMWIN_REQUIRE_RANKS(2);
  const pw::Layout layout = ab_layout();
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  std::vector<float> a(10, static_cast<float>(win.rank())),
      b(20, static_cast<float>(win.rank() + 100));
  (void)win.publish({pw::ConstLayerRef("b", b), pw::ConstLayerRef("a", a)});
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (win.rank() + 1) % win.size();
  std::vector<float> oa(10), ob(20);
  (void)win.pull({donor}, {pw::LayerRef("b", ob), pw::LayerRef("a", oa)});
  expect_ab_of(donor, oa, ob);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(WindowTest, LayersBoundOnceArePublishedAndPulledWithoutRebinding) {
  PARAMWIN_REQUIRE_RANKS(2);
  const pw::Layout layout = ab_layout();
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  std::vector<float> a(10, static_cast<float>(win.rank())),
      b(20, static_cast<float>(win.rank() + 100));
  const pw::ConstLayerRef in[] = {pw::ConstLayerRef("b", b), pw::ConstLayerRef("a", a)};
  const pw::BoundLayers<pw::ConstLayerRef> bound = pw::bind(win.layout(), in, "test");
  ASSERT_EQ(bound.size(), 2U);
  EXPECT_EQ(bound[0].data(), a.data()) << "bound layers are in the layout's order";
  EXPECT_EQ(bound.layout_fingerprint(), layout.fingerprint());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(win.publish(bound).published);
  EXPECT_EQ(win.version(), 3U);
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (win.rank() + 1) % win.size();
  std::vector<float> oa(10), ob(20);
  const pw::LayerRef out[] = {pw::LayerRef("b", ob), pw::LayerRef("a", oa)};
  const pw::BoundLayers<pw::LayerRef> bout = pw::bind(win.layout(), out, "test");
  const pw::PullResult r = win.pull(std::vector<int>{donor}, bout);
  EXPECT_EQ(r.donors.at(0).version, 3U);
  expect_ab_of(donor, oa, ob);

  // Bad refs are refused by bind(), naming the caller; layers bound to another layout are
  // refused by the window, with nothing published or written.
  std::vector<float> short_a(9);
  const pw::ConstLayerRef bad[] = {pw::ConstLayerRef(short_a), pw::ConstLayerRef(b)};
  try {
    (void)pw::bind(win.layout(), bad, "my loop");
    ADD_FAILURE() << "a 9-element layer bound to a 10-element one";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("my loop"), std::string::npos) << e.what();
  }
  pw::Layout other;
  other.add("a", std::size_t{10}).add("c", std::size_t{20});
  const pw::ConstLayerRef plain[] = {pw::ConstLayerRef(a), pw::ConstLayerRef(b)};
  const pw::BoundLayers<pw::ConstLayerRef> elsewhere = pw::bind(other, plain, "test");
  EXPECT_THROW((void)win.publish(elsewhere), pw::InvalidArgument);
  EXPECT_EQ(win.version(), 3U);
  std::vector<float> before = oa;
  const pw::LayerRef out_other[] = {pw::LayerRef(oa), pw::LayerRef(ob)};
  EXPECT_THROW((void)win.pull(std::vector<int>{donor}, pw::bind(other, out_other, "test")),
               pw::InvalidArgument);
  EXPECT_EQ(oa, before);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(WindowTest, RosterIsReadableByEveryone) {
  pw::Layout layout;
  layout.add("w", std::size_t{8});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  EXPECT_EQ(win.roster(rank).status.state, pw::AgentState::fresh);
  win.set_status({.iteration = 10 + rank,
                  .age = rank,
                  .metric = 0.5 * rank,
                  .generation = 2,
                  .state = pw::AgentState::active});
  std::vector<float> w(8, 1.0F);
  for (int p = 0; p < rank + 1; ++p) (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto all = win.roster_all();
  ASSERT_EQ(all.size(), static_cast<std::size_t>(win.size()));
  for (int r = 0; r < win.size(); ++r) {
    const pw::RosterEntry& e = all[static_cast<std::size_t>(r)];
    EXPECT_EQ(e.rank, r);
    EXPECT_EQ(e.version, static_cast<std::uint64_t>(r + 1));
    EXPECT_EQ(e.status.iteration, 10 + r);
    EXPECT_EQ(e.status.age, r);
    EXPECT_DOUBLE_EQ(e.status.metric, 0.5 * r);
    EXPECT_EQ(e.status.generation, 2U);
    EXPECT_EQ(e.status.state, pw::AgentState::active);
    EXPECT_EQ(e.fingerprint, win.fingerprint());
    EXPECT_GT(e.publish_time, 0.0);
    const pw::RosterEntry one = win.roster(r);
    EXPECT_EQ(one.version, e.version);
    EXPECT_EQ(one.status.iteration, e.status.iteration);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The roster keeps each agent's report before its latest iteration: none until the second
// iteration (a fresh status is no report), the latest status of the outgoing iteration (its
// last metric), unchanged by new statuses at the same iteration (a pause, a rebirth).
TEST_P(WindowTest, RosterKeepsThePreviousIterationsReport) {
  pw::Layout layout;
  layout.add("w", std::size_t{8});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  const auto status = [&](std::int64_t iteration, double metric, pw::AgentState state) {
    win.set_status({.iteration = iteration, .metric = metric, .state = state});
  };
  const auto previous_of = [&](int r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto all = win.roster_all();
    MPI_Barrier(MPI_COMM_WORLD);
    return all[static_cast<std::size_t>(r)].previous;
  };
  const int peer = (rank + 1) % win.size();
  EXPECT_FALSE(previous_of(peer).has_value());
  status(100 + rank, 0.1, pw::AgentState::active);  // iteration changed from the fresh 0
  EXPECT_FALSE(previous_of(peer).has_value());
  status(100 + rank, 0.2, pw::AgentState::active);  // same iteration, new metric
  status(200 + rank, 0.3, pw::AgentState::active);
  std::optional<pw::MetricReport> p = previous_of(peer);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->iteration, 100 + peer);
  EXPECT_DOUBLE_EQ(p->metric, 0.2);
  status(200 + rank, 0.3, pw::AgentState::paused);
  status(200 + rank, 0.35, pw::AgentState::rebirth);
  p = previous_of(peer);
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->metric, 0.2);
  status(300 + rank, 0.4, pw::AgentState::active);
  p = previous_of(peer);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->iteration, 200 + peer);
  EXPECT_DOUBLE_EQ(p->metric, 0.35);
  EXPECT_EQ(win.roster(rank).previous->iteration, 200 + rank);  // its own, read locally
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(WindowTest, ARenewedIncarnationIsWhatEveryReaderSees) {
  pw::Layout layout;
  layout.add("w", std::size_t{8});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const auto before = win.roster_all();
  MPI_Barrier(MPI_COMM_WORLD);
  if (win.rank() % 2 == 1) win.renew_incarnation();  // odd ranks: a new life in their slots
  MPI_Barrier(MPI_COMM_WORLD);
  const auto after = win.roster_all();
  for (int r = 0; r < win.size(); ++r) {
    const pw::Liveness& b = before[static_cast<std::size_t>(r)].liveness;
    const pw::Liveness& a = after[static_cast<std::size_t>(r)].liveness;
    EXPECT_NE(a.incarnation, 0U);
    if (r % 2 == 1) {
      EXPECT_NE(a.incarnation, b.incarnation) << "rank " << r << " renewed its incarnation";
    } else {
      EXPECT_EQ(a.incarnation, b.incarnation) << "rank " << r << " did not renew";
    }
    EXPECT_EQ(a.pid, b.pid);  // the same process
    EXPECT_EQ(a.host, b.host);
    EXPECT_EQ(a.heartbeat, b.heartbeat);  // renewing is no heartbeat
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(WindowTest, StampTravelsWithItsSnapshot) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{1000});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  std::vector<float> w(1000);
  // Three publishes: both slots are written, the latest (stamp 3) sits in slot 1.
  for (std::uint64_t v = 1; v <= 3; ++v) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = value(rank, 0, i, v);
    const pw::PublishResult r = win.publish({w}, 1000U * static_cast<std::uint64_t>(rank) + v);
    ASSERT_TRUE(r.published);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (rank + 1) % win.size();
  for (pw::ReadMode mode : {pw::ReadMode::optimistic, pw::ReadMode::pinned}) {
    std::vector<float> out(1000, -1.0F);
    const pw::PullResult r = win.pull({donor}, {out}, {.read_mode = mode});
    ASSERT_EQ(r.donors.size(), 1U);
    EXPECT_EQ(r.donors[0].version, 3U);
    EXPECT_EQ(r.donors[0].stamp, 1000U * static_cast<std::uint64_t>(donor) + 3U);
    EXPECT_EQ(out[7], value(donor, 0, 7, 3));
  }
  // Stamps of two donors in one fused pull stay apart.
  if (win.size() >= 3) {
    std::vector<float> out(1000);
    const int other = (rank + 2) % win.size();
    const pw::PullResult r = win.pull({donor, other}, {out});
    EXPECT_EQ(r.donors[0].stamp, 1000U * static_cast<std::uint64_t>(donor) + 3U);
    EXPECT_EQ(r.donors[1].stamp, 1000U * static_cast<std::uint64_t>(other) + 3U);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, WindowTest,
                         ::testing::Values(pw::Transport::shm, pw::Transport::rma,
                                           pw::Transport::automatic),
                         [](const auto& param_info) {
                           const auto name = pw::transport_name(param_info.param);
                           return name == "auto" ? std::string("automatic") : std::string(name);
                         });

TEST(WindowSplit, WorksOnASplitCommunicator) {
  PARAMWIN_REQUIRE_RANKS(2);
  // Even and odd world ranks form two populations that must not see each other.
  const int world = pw::test::world_rank();
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world % 2, world, &half);
  {
    pw::Layout layout;
    layout.add("w", std::size_t{100});
    for (pw::Transport t : {pw::Transport::shm, pw::Transport::rma}) {
      pw::ParameterWindow<> win(half, layout, {.transport = t});
      std::vector<float> w(100, static_cast<float>(world));
      (void)win.publish({w});
      MPI_Barrier(half);
      if (win.size() >= 2) {
        const int donor = (win.rank() + 1) % win.size();
        std::vector<float> out(100);
        (void)win.pull({donor}, {out});
        // The donor's world rank: same parity, next in the split.
        int donor_world = -1;
        MPI_Group g_half = MPI_GROUP_NULL, g_world = MPI_GROUP_NULL;
        MPI_Comm_group(half, &g_half);
        MPI_Comm_group(MPI_COMM_WORLD, &g_world);
        MPI_Group_translate_ranks(g_half, 1, &donor, g_world, &donor_world);
        MPI_Group_free(&g_half);
        MPI_Group_free(&g_world);
        EXPECT_EQ(donor_world % 2, world % 2);
        EXPECT_EQ(out, std::vector<float>(100, static_cast<float>(donor_world)));
      }
      MPI_Barrier(half);
    }
  }
  MPI_Comm_free(&half);
}

TEST(WindowMove, MoveConstructAssignAndSelfMove) {
  pw::Layout layout;
  layout.add("w", std::size_t{4});
  // Named: two unnamed windows of one layout must not be alive at once (live_windows.hpp).
  pw::ParameterWindow<> a(MPI_COMM_WORLD, layout, {.name = "moved"});
  std::vector<float> w{1, 2, 3, 4};
  (void)a.publish({w});
  pw::ParameterWindow<> b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_THROW((void)a.rank(), pw::Error);
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.version(), 1U);
  // Move-assign over a live window: the old one is freed (collectively), none leaks.
  pw::ParameterWindow<> c(MPI_COMM_WORLD, layout, {.name = "assigned over"});
  c = std::move(b);
  EXPECT_EQ(c.version(), 1U);
  auto& alias = c;
  c = std::move(alias);  // self-move keeps the window
  EXPECT_TRUE(c.valid());
  EXPECT_EQ(c.version(), 1U);
  c.close();
  EXPECT_FALSE(c.valid());
}

}  // namespace

namespace {

TEST(WindowViews, KokkosViewsAndTheHostStagingPath) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", {8, 5}).add("b", {5}, pw::DType::float64);
  // stage_through_host forces the copy-through-host path a device memory space takes.
  for (bool staged : {false, true}) {
    pw::ParameterWindow<Kokkos::HostSpace> win(MPI_COMM_WORLD, layout,
                                               {.transport = pw::Transport::rma,
                                                .stage_through_host = staged});
    const int rank = win.rank();
    Kokkos::View<float**, Kokkos::HostSpace> w("w", 8, 5);
    Kokkos::View<double*, Kokkos::HostSpace> b("b", 5);
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 5; ++j) w(i, j) = value(rank, 0, i * 5 + j);
    for (std::size_t j = 0; j < 5; ++j) b(j) = rank + 0.5;
    (void)win.publish({pw::ConstLayerRef("w", w), pw::ConstLayerRef("b", b)});
    MPI_Barrier(MPI_COMM_WORLD);
    const int donor = (rank + 1) % win.size();
    Kokkos::View<float**, Kokkos::HostSpace> ow("ow", 8, 5);
    Kokkos::View<double*, Kokkos::HostSpace> ob("ob", 5);
    Kokkos::deep_copy(ow, 3.0F);
    (void)win.pull({donor}, {pw::LayerRef("w", ow), pw::LayerRef("b", ob)}, {.momentum = 0.5});
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 5; ++j)
        ASSERT_FLOAT_EQ(ow(i, j), 0.5F * 3.0F + 0.5F * value(donor, 0, i * 5 + j)) << staged;
    EXPECT_DOUBLE_EQ(ob(0), 0.5 * (donor + 0.5));
    // A strided (non-contiguous) view is refused with the layer named.
    auto column = Kokkos::subview(ow, Kokkos::ALL(), 0);
    try {
      pw::Layout one;
      one.add("c", std::size_t{8});
      pw::ParameterWindow<> w1(MPI_COMM_WORLD, one);
      (void)w1.publish({pw::ConstLayerRef("c", column)});
      ADD_FAILURE() << "non-contiguous view accepted";
    } catch (const pw::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("not contiguous"), std::string::npos) << e.what();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace

namespace {

// The rule for multi-dimensional views: layers are row-major; a view of rank 2 or more binds
// only to a layer of its exact shape, in row-major order (LayoutRight); flat references
// (spans, containers, rank-1 views) bind to any shape by element count.
TEST(WindowViews, RowMajorViewsRoundTripAndFlatRefsBindToAnyShape) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("g", {8, 8});
  using Right = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  for (bool staged : {false, true}) {
    pw::ParameterWindow<Kokkos::HostSpace> win(MPI_COMM_WORLD, layout,
                                               {.stage_through_host = staged});
    const int rank = win.rank();
    const int donor = (rank + 1) % win.size();
    Right g("g", 8, 8);
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 8; ++j) g(i, j) = value(rank, 0, i * 8 + j);
    (void)win.publish({pw::ConstLayerRef("g", g)});
    MPI_Barrier(MPI_COMM_WORLD);

    // A LayoutRight 8x8 view: element (i, j) comes back as the donor's (i, j).
    Right out("out", 8, 8);
    (void)win.pull({donor}, {pw::LayerRef(out)});
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 8; ++j)
        ASSERT_EQ(out(i, j), value(donor, 0, i * 8 + j)) << staged << " " << i << "," << j;
    // Flat references get the layer in row-major order.
    Kokkos::View<float*, Kokkos::HostSpace> flat("flat", 64);
    (void)win.pull({donor}, {pw::LayerRef("g", flat)});
    std::vector<float> vec(64);
    (void)win.pull({donor}, {vec});
    for (std::size_t k = 0; k < 64; ++k) {
      ASSERT_EQ(flat(k), value(donor, 0, k)) << staged << " " << k;
      ASSERT_EQ(vec[k], value(donor, 0, k)) << staged << " " << k;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every exact read done before the snapshots change
    // A rank-1 view and a vector publish too.
    (void)win.publish({pw::ConstLayerRef(flat)});
    (void)win.publish({vec});

    // A LayoutLeft 8x8 view (the transpose) is refused on publish and pull, also when the
    // window stages through the host, and the output is left as it was.
    Kokkos::View<float**, Kokkos::LayoutLeft, Kokkos::HostSpace> left("left", 8, 8);
    Kokkos::deep_copy(left, -1.0F);
    const std::uint64_t version = win.version();
    for (int op = 0; op < 2; ++op) {
      try {
        if (op == 0) {
          (void)win.publish({pw::ConstLayerRef(left)});
        } else {
          (void)win.pull({donor}, {pw::LayerRef(left)});
        }
        ADD_FAILURE() << "LayoutLeft 8x8 view accepted (staged " << staged << ", op " << op << ")";
      } catch (const pw::InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("not in row-major (C) order"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("LayoutRight"), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(win.version(), version);
    for (std::size_t k = 0; k < 64; ++k) ASSERT_EQ(left.data()[k], -1.0F) << k;
    // The copy the message suggests works: deep_copy into a LayoutRight view.
    Kokkos::deep_copy(left, g);  // element-wise: left(i, j) == g(i, j)
    Right copy("copy", 8, 8);
    Kokkos::deep_copy(copy, left);
    (void)win.publish({pw::ConstLayerRef(copy)});
    // A view of the right count but another shape is refused, naming both shapes.
    Kokkos::View<float**, Kokkos::HostSpace> wide("wide", 4, 16);
    try {
      (void)win.pull({donor}, {pw::LayerRef(wide)});
      ADD_FAILURE() << "4x16 view accepted for an 8x8 layer";
    } catch (const pw::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'g' [8x8 float32] got a view of shape 4x16"),
                std::string::npos)
          << e.what();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace
