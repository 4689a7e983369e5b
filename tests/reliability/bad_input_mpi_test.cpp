// Every bad input to the core gets a clear exception on the ranks concerned, and nothing
// changes: the caller's output stays as it was, the window stays usable.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

template <class E>
void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing '" << fragment << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message was: " << e.what() << "\nexpected to contain: " << fragment;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type, message: " << e.what();
  }
}

class BadInput : public ::testing::TestWithParam<pw::Transport> {
 protected:
  void SetUp() override { layout_.add("w", std::size_t{64}).add("b", {4}, pw::DType::float64); }
  pw::Layout layout_;
};

TEST_P(BadInput, PullRejectsBadArgumentsAndLeavesOutputUntouched) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout_, {.transport = GetParam()});
  const int rank = win.rank();
  const int n = win.size();
  const int donor = (rank + 1) % n;
  std::vector<float> w(64, 7.0F);
  std::vector<double> b(4, 9.0);
  const std::vector<float> w0 = w;
  const std::vector<double> b0 = b;
  auto unchanged = [&] {
    EXPECT_EQ(w, w0);
    EXPECT_EQ(b, b0);
  };

  // Before anyone published: "never published", named with the rank.
  expect_error<pw::DonorError>(
      [&] {
        (void)win.pull({donor}, {w, b});
      },
      "donor " + std::to_string(donor) + " has never published");
  unchanged();
  MPI_Barrier(MPI_COMM_WORLD);
  (void)win.publish({w, b});
  MPI_Barrier(MPI_COMM_WORLD);

  std::vector<float> short_w(63);
  std::vector<float> b_as_float(4);
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {short_w, b});
      },
      "expects 64 elements, got 63");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b_as_float});
      },
      "expects dtype float64, got float32");
  expect_error<pw::InvalidArgument>([&] { (void)win.pull({donor}, {w}); },
                                    "got 1 layers, the layout has 2");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {pw::LayerRef("w", w), pw::LayerRef("bias", b)});
      },
      "unknown layer 'bias' (layers: 'w', 'b')");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {pw::LayerRef("w", w), pw::LayerRef("w", w)});
      },
      "layer 'w' given twice");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {pw::LayerRef("w", w), b});
      },
      "either name every layer or none");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({n}, {w, b});
      },
      "rank " + std::to_string(n) + " is out of range");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({-1}, {w, b});
      },
      "rank -1 is out of range");
  expect_error<pw::InvalidArgument>([&] { (void)win.pull({rank}, {w, b}); }, "is this rank itself");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor, donor}, {w, b});
      },
      "is listed twice");
  const std::vector<int> none;
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull(std::span<const int>(none), {w, b});
      },
      "donor list is empty");

  pw::PullOptions weighted{.reduction = pw::Reduction::weighted, .weights = {1.0, 2.0}};
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, weighted);
      },
      "got 2 weights for 1 donors");
  weighted.weights = {std::numeric_limits<double>::quiet_NaN()};
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, weighted);
      },
      "weights must be finite and >= 0");
  weighted.weights = {-1.0};
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, weighted);
      },
      "weights must be finite and >= 0");
  weighted.weights = {0.0};
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, weighted);
      },
      "weights sum to 0");
  pw::PullOptions mean_with_weights{.weights = {1.0}};
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, mean_with_weights);
      },
      "use Reduction::weighted");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, {.momentum = 1.0});
      },
      "outside [0, 1)");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, {.chunk_bytes = 8});
      },
      "chunk_bytes 8");
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.pull({donor}, {w, b}, {.timeout_seconds = -1.0});
      },
      "timeout_seconds");
  unchanged();

  // Publish with bad input: rejected, version unchanged.
  expect_error<pw::InvalidArgument>(
      [&] {
        (void)win.publish({short_w, b});
      },
      "expects 64 elements, got 63");
  EXPECT_EQ(win.version(), 1U);

  // The window still works after all of that.
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> ow(64);
  std::vector<double> ob(4);
  (void)win.pull({donor}, {ow, ob});
  EXPECT_EQ(ow, std::vector<float>(64, 7.0F));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_P(BadInput, NonFiniteDonorFailsOrIsSkipped) {
  PARAMWIN_REQUIRE_RANKS(3);
  pw::Layout layout;
  layout.add("w", std::size_t{5000});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.transport = GetParam()});
  const int rank = win.rank();
  // Rank 1 publishes a NaN deep inside its layer (in a later chunk), everyone else finite.
  std::vector<float> w(5000, static_cast<float>(rank));
  if (rank == 1) {
    w[4321] = std::numeric_limits<float>::quiet_NaN();
  }
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::vector<float> out(5000, -1.0F);
    expect_error<pw::DonorError>(
        [&] {
          (void)win.pull({1, 2}, {out});
        },
        "donor 1 (version 1) holds NaN or infinity in layer 'w'");
    EXPECT_EQ(out, std::vector<float>(5000, -1.0F));
    pw::PullResult r = win.pull({1, 2}, {out}, {.non_finite = pw::NonFinitePolicy::skip_donor});
    EXPECT_TRUE(r.donors[0].skipped);
    EXPECT_FALSE(r.donors[1].skipped);
    EXPECT_DOUBLE_EQ(r.donors[1].weight, 1.0);
    EXPECT_EQ(out, std::vector<float>(5000, 2.0F));
    expect_error<pw::DonorError>(
        [&] { (void)win.pull({1}, {out}, {.non_finite = pw::NonFinitePolicy::skip_donor}); },
        "every donor was left out");
    EXPECT_EQ(out, std::vector<float>(5000, 2.0F));
    (void)win.pull({1}, {out}, {.non_finite = pw::NonFinitePolicy::allow});
    EXPECT_TRUE(std::isnan(out[4321]));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(Transports, BadInput,
                         ::testing::Values(pw::Transport::shm, pw::Transport::rma),
                         [](const auto& param_info) {
                           return std::string(pw::transport_name(param_info.param));
                         });

TEST(LayoutMismatch, ReportedOnEveryRankNamingTheLayer) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  pw::Layout layout;
  layout.add("w", std::size_t{10});
  // The last rank's "b" has one element more.
  layout.add("b", std::size_t{rank == pw::test::world_size() - 1 ? 5U : 4U});
  const std::string last = std::to_string(pw::test::world_size() - 1);
  expect_error<pw::LayoutMismatch>([&] { pw::ParameterWindow<> win(MPI_COMM_WORLD, layout); },
                                   "rank 0 vs rank " + last +
                                       " differ at layer 1: 'b' [4 float32] vs 'b' [5 float32]");
  // Wire formats must agree too.
  pw::Layout same;
  same.add("w", std::size_t{10});
  expect_error<pw::LayoutMismatch>(
      [&] {
        pw::ParameterWindow<> win(MPI_COMM_WORLD, same,
                                  {.wire = rank == 0 ? pw::WireFormat::native
                                                     : pw::WireFormat::bfloat16});
      },
      "wire format native vs bfloat16");
  // A rank whose window creation failed can create windows again.
  pw::ParameterWindow<> ok(MPI_COMM_WORLD, same);
  EXPECT_EQ(ok.size(), pw::test::world_size());
}

TEST(LayoutMismatch, PerDonorModeRejectsOnlyIncompatibleDonors) {
  PARAMWIN_REQUIRE_RANKS(3);
  const int rank = pw::test::world_rank();
  pw::Layout layout;
  layout.add("w", std::size_t{rank == 2 ? 11U : 10U});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.layout_check = pw::LayoutCheck::per_donor});
  std::vector<float> w(layout[0].count, static_cast<float>(rank));
  (void)win.publish({w});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::vector<float> out(10, -1.0F);
    expect_error<pw::DonorError>([&] { (void)win.pull({2}, {out}); },
                                 "donor 2 has an incompatible layout");
    EXPECT_EQ(out, std::vector<float>(10, -1.0F));
    (void)win.pull({1}, {out});
    EXPECT_EQ(out, std::vector<float>(10, 1.0F));
    EXPECT_NE(win.roster(2).fingerprint, win.roster(1).fingerprint);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(WindowCreation, RejectsNullCommunicatorAndBadOptions) {
  pw::Layout layout;
  layout.add("w", std::size_t{1});
  expect_error<pw::InvalidArgument>([&] { pw::ParameterWindow<> win(MPI_COMM_NULL, layout); },
                                    "MPI_COMM_NULL");
  pw::WindowOptions bad;
  bad.transport = static_cast<pw::Transport>(9);
  expect_error<pw::InvalidArgument>([&] { pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, bad); },
                                    "out-of-range enumerator");
}

/// The message of the E that @p f throws ("" and a failure if it throws none or another).
template <class E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type, message: " << e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

TEST(WindowIdentity, OppositeOrdersFailOnEveryRankThenTheSameOrderWorks) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  // A communicator of its own, so that the creation counts below start at #1.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  pw::Layout layout;
  layout.add("w", std::size_t{16});  // the same layout: the layout check cannot tell them apart
  const std::string msg = message_of<pw::InvalidArgument>([&] {
    pw::ParameterWindow<> a(comm, layout, {.name = rank == 0 ? "A" : "B"});
    pw::ParameterWindow<> b(comm, layout, {.name = rank == 0 ? "B" : "A"});
  });
  EXPECT_TRUE(contains(msg, "rank 0 creates window 'A' (#1 created on this communicator), "
                            "rank 1 creates window 'B' (#1 created on this communicator)"))
      << msg;
  EXPECT_TRUE(contains(msg, "windows must be created in the same order on every rank")) << msg;

  // The failed creation counted on every rank (#1), so the counts are still in step.
  pw::ParameterWindow<> a(comm, layout, {.name = "A"});
  pw::ParameterWindow<> b(comm, layout, {.name = "B"});
  EXPECT_EQ(a.name(), "A");
  EXPECT_EQ(b.name(), "B");
  std::vector<float> wa(16, static_cast<float>(100 + rank));
  std::vector<float> wb(16, static_cast<float>(200 + rank));
  (void)a.publish({wa});
  (void)b.publish({wb});
  MPI_Barrier(comm);
  const int donor = (rank + 1) % n;
  std::vector<float> out(16, -1.0F);
  (void)a.pull({donor}, {out});
  EXPECT_EQ(out, std::vector<float>(16, static_cast<float>(100 + donor)));
  (void)b.pull({donor}, {out});
  EXPECT_EQ(out, std::vector<float>(16, static_cast<float>(200 + donor)));
  MPI_Barrier(comm);

  // Names alike, an unnamed window on one rank: still refused, naming the count (#4).
  const std::string unnamed = message_of<pw::InvalidArgument>(
      [&] { pw::ParameterWindow<> c(comm, layout, {.name = rank == 0 ? "" : "C"}); });
  EXPECT_TRUE(contains(unnamed, "rank 0 creates an unnamed window created at "));
  EXPECT_TRUE(contains(unnamed, "bad_input_mpi_test.cpp:"));
  EXPECT_TRUE(contains(unnamed, " (#4 created on this communicator), rank 1 creates window 'C' "
                                "(#4"))
      << unnamed;
  a.close();
  b.close();
  MPI_Comm_free(&comm);
}

/// Publishes rank-specific values (@p base + rank) on @p win and checks that a pull from the
/// next rank returns that rank's values: the window is paired with itself on every rank.
void expect_paired(pw::ParameterWindow<>& win, float base) {
  const int rank = pw::test::world_rank();
  const int donor = (rank + 1) % pw::test::world_size();
  std::vector<float> mine(16, base + static_cast<float>(rank));
  (void)win.publish({mine});
  MPI_Barrier(win.comm());
  std::vector<float> out(16, -1.0F);
  (void)win.pull({donor}, {out});
  EXPECT_EQ(out, std::vector<float>(16, base + static_cast<float>(donor)));
  MPI_Barrier(win.comm());
}

TEST(WindowIdentity, UnnamedWindowsInOppositeOrdersFailOnEveryRankNamingBothSites) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  pw::Layout layout;
  layout.add("w", std::size_t{16});  // one layout: the layout check cannot tell them apart
  // Two places in the program that each create an unnamed window.
  auto create_a = [&] { return pw::ParameterWindow<>(comm, layout); };
  auto create_b = [&] { return pw::ParameterWindow<>(comm, layout); };

  // The same order on every rank (two sites, #1 and #2): each window pairs with itself.
  // (One after the other: two unnamed windows of one layout are never alive at once, see
  // WindowIdentity.ASecondLiveUnnamedWindow...)
  std::string site_a;
  std::string site_b;
  {
    pw::ParameterWindow<> a = create_a();
    site_a = a.site();
    EXPECT_TRUE(contains(site_a, "bad_input_mpi_test.cpp:")) << site_a;
    expect_paired(a, 100.0F);
  }
  {
    pw::ParameterWindow<> b = create_b();
    site_b = b.site();
    EXPECT_NE(site_a, site_b);
    expect_paired(b, 200.0F);
  }

  // Opposite orders: they used to pair crosswise (a pull from A returned B's data) and hang
  // when freed. Now the first creation (#3) throws on every rank, naming both sites.
  const std::string msg = message_of<pw::InvalidArgument>([&] {
    if (rank == 0) {
      pw::ParameterWindow<> a = create_a();
      pw::ParameterWindow<> b = create_b();
    } else {
      pw::ParameterWindow<> b = create_b();
      pw::ParameterWindow<> a = create_a();
    }
  });
  EXPECT_TRUE(contains(msg, "ranks are creating different windows: rank 0 creates an unnamed "
                            "window created at " +
                                site_a +
                                " (#3 created on this communicator), rank 1 creates an "
                                "unnamed window created at " +
                                site_b + " (#3 created on this communicator)"))
      << msg;
  EXPECT_TRUE(contains(msg, "windows must be created in the same order on every rank")) << msg;

  // Nothing was left behind: the next window (#4) is created, pairs and is freed as usual.
  pw::ParameterWindow<> again = create_a();
  expect_paired(again, 300.0F);
  again.close();
  MPI_Comm_free(&comm);
}

TEST(WindowIdentity, UnnamedWindowsCreatedInALoopPairByTheirOrder) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::Layout layout;
  layout.add("w", std::size_t{16});
  std::vector<pw::ParameterWindow<>> windows;
  for (int i = 0; i < 3; ++i) {
    // One site for all three, alive at once: named (unnamed, the second one would be
    // refused: WindowIdentity.ASecondLiveUnnamedWindow...).
    windows.push_back(
        pw::ParameterWindow<>(MPI_COMM_WORLD, layout, {.name = "loop " + std::to_string(i)}));
  }
  for (std::size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(windows[i].site(), windows.front().site());
    expect_paired(windows[i], 1000.0F * static_cast<float>(i + 1));
  }
  // A named window's identity is its name: the ranks may create it at different sites.
  const std::string name = "anywhere";
  auto named = pw::test::world_rank() == 0
                   ? pw::ParameterWindow<>(MPI_COMM_WORLD, layout, {.name = name})
                   : pw::ParameterWindow<>(MPI_COMM_WORLD, layout, {.name = name});
  expect_paired(named, 5000.0F);
  // Agent forwards its caller's site to its window (so the caller's line is the identity).
  pw::AgentOptions options;
  options.selection.k = 1;
  // (Both alive at once over the same ranks with one layout: the group agent's is named.)
  pw::Agent<> agent(MPI_COMM_WORLD, layout, options);
  EXPECT_TRUE(contains(agent.window().site(), "bad_input_mpi_test.cpp:")) << agent.window().site();
  // So does GroupAgent to its shard window (agents of one rank: every rank is an agent).
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 1});
  pw::GroupAgent group_agent(groups, layout, options, {.name = "group agent"});
  EXPECT_TRUE(contains(group_agent.window().site(), "bad_input_mpi_test.cpp:"))
      << group_agent.window().site();
}

/// How a test holds a window: create one into @p holder (through the standard library, so
/// every window carries the library's creation site), reach it, free it.
template <class Holder>
struct Holding {
  std::function<void(Holder&)> create;
  std::function<pw::ParameterWindow<>*(Holder&)> get;
  std::function<void(Holder&)> free;
};

/// Rank 0 creates A then B, the others B then A, two unnamed windows of one layout held in
/// @p how: the second creation throws InvalidArgument on every rank, naming the live window
/// and WindowOptions::name, before it allocates anything; the windows created first (paired
/// with each other) are freed cleanly; nothing hangs.
template <class Holder>
void expect_second_live_unnamed_refused(MPI_Comm comm, const Holding<Holder>& how) {
  const int rank = pw::test::world_rank();
  Holder a{};
  Holder b{};
  Holder& first = rank == 0 ? a : b;
  Holder& second = rank == 0 ? b : a;
  how.create(first);
  ASSERT_NE(how.get(first), nullptr);
  const std::string live_site = how.get(first)->site();
  const std::string msg = message_of<pw::InvalidArgument>([&] { how.create(second); });
  EXPECT_EQ(how.get(second), nullptr);
  EXPECT_TRUE(contains(msg, "paramwin: a second unnamed window with the same layout over the "
                            "same ranks while the unnamed window created at " +
                                live_site + " is still alive"))
      << msg;
  EXPECT_TRUE(contains(msg, "name your windows (WindowOptions::name)")) << msg;
  // The windows created first were agreed on every rank: each is freed collectively with its
  // peers (here explicitly, so a hang would show in this test, not at its end).
  how.free(first);
  EXPECT_EQ(how.get(first), nullptr);
  MPI_Barrier(comm);
}

/// Named windows in the same holders: created in one order on every rank they pair by name
/// (a pull from A returns A's data).
template <class Holder>
void expect_named_pair(MPI_Comm comm, const Holding<Holder>& how,
                       const std::function<void(Holder&, const std::string&)>& create_named) {
  Holder a{};
  Holder b{};
  create_named(a, "A");
  create_named(b, "B");
  expect_paired(*how.get(a), 100.0F);
  expect_paired(*how.get(b), 200.0F);
  how.free(b);
  how.free(a);
  MPI_Barrier(comm);
}

TEST(WindowIdentity, ASecondLiveUnnamedWindowOfOneLayoutIsRefusedOnEveryRankWhateverHoldsIt) {
  PARAMWIN_REQUIRE_RANKS(2);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  pw::Layout layout;
  layout.add("w", std::size_t{16});  // one layout: the layout check cannot tell them apart
  using W = pw::ParameterWindow<>;

  // std::optional::emplace: the site is the library's, the same for A and B.
  const Holding<std::optional<W>> optional{[&](std::optional<W>& h) { h.emplace(comm, layout); },
                                           [](std::optional<W>& h) { return h ? &*h : nullptr; },
                                           [](std::optional<W>& h) { h.reset(); }};
  expect_second_live_unnamed_refused(comm, optional);
  expect_named_pair<std::optional<W>>(comm, optional,
                                      [&](std::optional<W>& h, const std::string& name) {
                                        h.emplace(comm, layout, pw::WindowOptions{.name = name});
                                      });

  // std::make_unique.
  const Holding<std::unique_ptr<W>> unique{[&](std::unique_ptr<W>& h) {
                                             h = std::make_unique<W>(comm, layout);
                                           },
                                           [](std::unique_ptr<W>& h) { return h.get(); },
                                           [](std::unique_ptr<W>& h) { h.reset(); }};
  expect_second_live_unnamed_refused(comm, unique);
  expect_named_pair<std::unique_ptr<W>>(comm, unique,
                                        [&](std::unique_ptr<W>& h, const std::string& name) {
                                          h = std::make_unique<W>(comm, layout,
                                                                  pw::WindowOptions{.name = name});
                                        });

  // std::vector::emplace_back (one vector per window).
  const Holding<std::vector<W>> vector{[&](std::vector<W>& h) { h.emplace_back(comm, layout); },
                                       [](std::vector<W>& h) {
                                         return h.empty() ? nullptr : &h.front();
                                       },
                                       [](std::vector<W>& h) { h.clear(); }};
  expect_second_live_unnamed_refused(comm, vector);
  expect_named_pair<std::vector<W>>(comm, vector, [&](std::vector<W>& h, const std::string& name) {
    h.emplace_back(comm, layout, pw::WindowOptions{.name = name});
  });

  // Named but in opposite orders: still refused by name.
  std::optional<W> a;
  std::optional<W> b;
  const bool r0 = pw::test::world_rank() == 0;
  const std::string named = message_of<pw::InvalidArgument>(
      [&] { (r0 ? a : b).emplace(comm, layout, pw::WindowOptions{.name = r0 ? "A" : "B"}); });
  EXPECT_TRUE(contains(named, "windows must be created in the same order on every rank")) << named;
  MPI_Comm_free(&comm);
}

TEST(WindowIdentity, UnnamedWindowsThatCannotPairCrosswiseAreAllowed) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  using W = pw::ParameterWindow<>;
  pw::Layout layout;
  layout.add("w", std::size_t{16});
  pw::Layout other;
  other.add("w", std::size_t{16}).add("b", std::size_t{2});

  // One after the other (create, free, create again): allowed, and each pairs.
  std::optional<W> win;
  for (int i = 0; i < 2; ++i) {
    win.emplace(MPI_COMM_WORLD, layout);
    expect_paired(*win, 100.0F * static_cast<float>(i + 1));
    win.reset();
  }
  // Moving a window keeps it listed once: freeing the moved-to one frees its entry.
  {
    std::optional<W> moved;
    moved.emplace(W(MPI_COMM_WORLD, layout));
    expect_paired(*moved, 300.0F);
  }
  win.emplace(MPI_COMM_WORLD, layout);
  // Closed: a closed window is no longer alive.
  win->close();
  std::optional<W> after_close;
  after_close.emplace(MPI_COMM_WORLD, layout);
  expect_paired(*after_close, 400.0F);
  after_close.reset();
  win.reset();

  // Different layouts alive at once: allowed (crosswise they would fail the layout check).
  auto x = std::make_unique<W>(MPI_COMM_WORLD, layout);
  auto y = std::make_unique<W>(MPI_COMM_WORLD, other);
  expect_paired(*x, 500.0F);
  x.reset();
  y.reset();
  // ... but under LayoutCheck::per_donor layouts may differ across ranks: refused.
  x = std::make_unique<W>(MPI_COMM_WORLD, layout,
                          pw::WindowOptions{.layout_check = pw::LayoutCheck::per_donor});
  const std::string per_donor = message_of<pw::InvalidArgument>([&] {
    y = std::make_unique<W>(MPI_COMM_WORLD, other,
                            pw::WindowOptions{.layout_check = pw::LayoutCheck::per_donor});
  });
  EXPECT_TRUE(contains(per_donor, "a second unnamed window under LayoutCheck::per_donor"))
      << per_donor;
  x.reset();

  // The same processes through another communicator (another handle, reversed rank order):
  // the same group, refused.
  MPI_Comm reversed = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, 0, n - rank, &reversed);
  x = std::make_unique<W>(MPI_COMM_WORLD, layout);
  const std::string similar =
      message_of<pw::InvalidArgument>([&] { y = std::make_unique<W>(reversed, layout); });
  EXPECT_TRUE(contains(similar, "name your windows (WindowOptions::name)")) << similar;
  x.reset();
  MPI_Comm_free(&reversed);

  // Other groups of ranks: allowed (windows over different processes never pair).
  x = std::make_unique<W>(MPI_COMM_WORLD, layout);
  // A communicator of one process has nobody to pair with: allowed.
  {
    W self_a(MPI_COMM_SELF, layout);
    W self_b(MPI_COMM_SELF, layout);
    EXPECT_EQ(self_b.size(), 1);
  }
  if (n >= 4) {
    MPI_Comm half = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n / 2 ? 0 : 1, rank, &half);
    {
      W in_half(half, layout);
      EXPECT_EQ(in_half.size(), n / 2);
      std::vector<float> mine(16, static_cast<float>(rank));
      (void)in_half.publish({mine});
      MPI_Barrier(half);
      std::vector<float> out(16, -1.0F);
      (void)in_half.pull({(in_half.rank() + 1) % in_half.size()}, {out});
      const int donor_world = (rank < n / 2 ? 0 : n / 2) + (in_half.rank() + 1) % in_half.size();
      EXPECT_EQ(out, std::vector<float>(16, static_cast<float>(donor_world)));
      MPI_Barrier(half);
    }
    MPI_Comm_free(&half);
  }
  expect_paired(*x, 600.0F);
  x.reset();
}

TEST(WindowLifetime, AnExceptionUnwindingPastAWindowIsReportedBeforeTheCollectiveFree) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  pw::Layout layout;
  layout.add("w", std::size_t{16});
  // Every rank throws past its window, so every rank reaches the free and nothing hangs;
  // each must say so on stderr before it waits there.
  std::string site;
  ::testing::internal::CaptureStderr();
  try {
    pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.name = "unwound"});
    site = win.site();
    throw std::runtime_error("training failed");
  } catch (const std::runtime_error&) {
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(
      contains(err,
               "paramwin: rank " + std::to_string(rank) + " of " + std::to_string(n) +
                   " (world rank " + std::to_string(rank) +
                   ") leaves window 'unwound' created at " + site +
                   " with an exception in flight (its destructor runs during stack unwinding); "
                   "freeing a window is collective, so this rank now waits until "
                   "the other " +
                   std::to_string(n - 1) + " rank(s) of its communicator free it too"))
      << err;
  EXPECT_TRUE(contains(err, "PARAMWIN_ABORT_ON_UNWIND=1")) << err;

  // An unnamed window is named by its creation site.
  ::testing::internal::CaptureStderr();
  try {
    pw::ParameterWindow<> win(MPI_COMM_WORLD, layout);
    site = win.site();
    throw std::runtime_error("training failed");
  } catch (const std::runtime_error&) {
  }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(
      contains(err, "leaves an unnamed window created at " + site + " with an exception in flight"))
      << err;

  // No exception in flight (a window freed at the end of its scope, or one created and
  // freed inside a handler): nothing is printed.
  ::testing::internal::CaptureStderr();
  try {
    throw std::runtime_error("handled");
  } catch (const std::runtime_error&) {
    pw::ParameterWindow<> in_handler(MPI_COMM_WORLD, layout);
  }
  { pw::ParameterWindow<> plain(MPI_COMM_WORLD, layout); }
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(contains(err, "paramwin:")) << err;
}

TEST(WindowCreation, OptionsThatMustAgreeAreCheckedOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  const int n = pw::test::world_size();
  pw::Layout layout;
  layout.add("w", std::size_t{16});
  expect_error<pw::InvalidArgument>(
      [&] { pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.verify = rank != 0}); },
      "WindowOptions differ across ranks: verify is false on rank 0, true on rank 1 (verify "
      "and layout_check must be the same on every rank)");
  const pw::LayoutCheck last_per_donor =
      rank == n - 1 ? pw::LayoutCheck::per_donor : pw::LayoutCheck::strict;
  expect_error<pw::InvalidArgument>(
      [&] {
        pw::ParameterWindow<> win(MPI_COMM_WORLD, layout,
                                  {.layout_check = last_per_donor, .verify = rank == 0});
      },
      "verify is true on rank 0, false on rank 1; layout_check is strict on rank 0, per_donor "
      "on rank " +
          std::to_string(n - 1));
  // A bad option on one rank only: every rank throws (this used to hang the others).
  const std::string bad = message_of<pw::InvalidArgument>([&] {
    pw::ParameterWindow<> win(MPI_COMM_WORLD, layout,
                              {.transport = rank == 1 ? static_cast<pw::Transport>(9)
                                                      : pw::Transport::automatic});
  });
  EXPECT_TRUE(contains(bad, rank == 1 ? "paramwin: WindowOptions holds an out-of-range"
                                      : "paramwin: rank 1 failed: paramwin: WindowOptions"))
      << bad;

  // The options that are each rank's own may differ: transport, exposure, staging, progress.
  pw::WindowOptions own;
  own.transport = rank == 0 ? pw::Transport::rma : pw::Transport::automatic;
  own.exposure = rank == 0 ? pw::Exposure::live : pw::Exposure::snapshot;
  own.stage_through_host = rank == 1;
  own.progress_thread = rank == 1;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, own);
  std::vector<float> w(16, static_cast<float>(rank + 1));
  if (rank == 0) {
    std::span<float> live = win.live_span<float>("w");
    std::fill(live.begin(), live.end(), 1.0F);
    (void)win.publish();
  } else {
    (void)win.publish({w});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (rank + 1) % n;
  std::vector<float> out(16, -1.0F);
  (void)win.pull({donor}, {out});
  EXPECT_EQ(out, std::vector<float>(16, static_cast<float>(donor + 1)));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(WindowCreation, AWindowTheNodeCannotHoldFailsOnEveryRankBeforeAllocating) {
  const int n = pw::test::world_size();
  pw::Layout huge;
  huge.add("x", std::size_t{1} << 40);  // 4 TiB of float32
  const std::string msg = message_of<pw::Error>([&] {
    try {
      pw::ParameterWindow<> win(MPI_COMM_WORLD, huge, {.name = "huge"});
    } catch (const pw::InvalidArgument& e) {
      ADD_FAILURE() << "InvalidArgument: " << e.what();
    } catch (const pw::MpiError& e) {
      ADD_FAILURE() << "MpiError (MPI was asked): " << e.what();
    }
  });
  EXPECT_TRUE(contains(msg, "paramwin: window 'huge' cannot be allocated: this rank's segment "
                            "needs 8.0 TiB (8796093030400 bytes: the layers take 4.0 TiB in "
                            "wire format, held twice for the two snapshot slots, plus a header "
                            "page)"))
      << msg;
  EXPECT_TRUE(contains(msg, " of memory and swap")) << msg;
  if (n > 1) {  // every test rank is on this node
    EXPECT_TRUE(contains(msg, "the " + std::to_string(n) + " ranks on this node need")) << msg;
  }
  // Nothing was allocated; a window that fits is created as usual.
  pw::Layout small;
  small.add("x", std::size_t{8});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, small);
  std::vector<float> x(8, 1.0F);
  EXPECT_EQ(win.publish({x}).version, 1U);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
