// AveragingAgent made from a window, as an elastic population's slots are (docs/elastic.md,
// "Averaging populations"): what needs collectives is refused with a clear error; join()
// replaces the parameters with the exact uniform mix of the usable members (paused and
// non-members left out) and, until a member could be read, publishes nothing and shows the
// roster state rebirth; set_members maps the topology onto the given ranks; replace_window
// refuses another shape; and ElasticAveragingAgent refuses bad options on every process. What
// abandons windows (a replacement, abandon(), an elastic population) runs in
// tests/reliability/elastic_averaging.cpp, whose processes end with std::_Exit: MPI_Finalize,
// which this program calls, fails on abandoned windows (MPICH: a UCX assertion; Open MPI frees
// them in its own order and hangs when the processes hold different ones).
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
using pw::test::world_rank;
using pw::test::world_size;

namespace {

constexpr std::size_t kN = 16;

pw::Layout layout() {
  pw::Layout l;
  l.add("w", kN);
  return l;
}

pw::Window window(const char* name, const pw::Layout& l = layout()) {
  pw::WindowOptions o;
  o.name = name;
  return pw::Window(MPI_COMM_WORLD, l, o);
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const pw::InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(AveragingFromWindow, CollectiveFeaturesAreRefusedWithAClearError) {
  // Refused before the window is taken: it stays the caller's, valid (its free is collective).
  pw::Window refused = window("aw.refused");
  pw::AveragingOptions warm;
  warm.warmup_steps = 2;
  std::string m = message_of([&] { pw::AveragingAgent a(std::move(refused), warm); });
  EXPECT_TRUE(contains(m, "no communicator for collectives")) << m;
  pw::AveragingOptions symmetric;
  symmetric.symmetric = true;
  m = message_of([&] { pw::AveragingAgent a(std::move(refused), symmetric); });
  EXPECT_TRUE(contains(m, "symmetric true")) << m;
  pw::AveragingOptions lists;
  lists.topology = pw::Topology::neighbour_lists({{}, {}, {}, {}, {}});
  m = message_of([&] { pw::AveragingAgent a(std::move(refused), lists); });
  EXPECT_TRUE(contains(m, "5 lists for")) << m;
  EXPECT_TRUE(refused.valid());
  refused.close();

  pw::AveragingAgent a(window("aw.plain"), {});
  std::vector<float> w(kN, 1.0F);
  m = message_of([&] { (void)a.finish({pw::LayerRef(w)}); });
  EXPECT_TRUE(contains(m, "AveragingAgent::finish: this agent was made from a window")) << m;
  m = message_of([&] { a.save_checkpoint("/tmp/never.h5", {pw::ConstLayerRef(w)}); });
  EXPECT_TRUE(contains(m, "AveragingAgent::save_checkpoint")) << m;
  m = message_of([&] { (void)a.load_checkpoint("/tmp/never.h5", {pw::LayerRef(w)}); });
  EXPECT_TRUE(contains(m, "AveragingAgent::load_checkpoint")) << m;
  EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](float x) { return x == 1.0F; }));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingFromWindow, AJoinIsTheExactUniformMixOfTheUsableMembers) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = world_rank();
  const int size = world_size();
  pw::AveragingOptions o;
  o.interval = 1000000;  // no gossip: only the join reads
  pw::AveragingAgent a(window("aw.join"), o);
  std::vector<float> w(kN, static_cast<float>(rank + 1));
  // Rank 0 joins before anyone published: nothing usable, nothing changes or is published.
  if (rank == 0) {
    a.join();
    EXPECT_TRUE(a.joining());
    const pw::AveragingRound r = a.step({pw::LayerRef(w)});
    EXPECT_EQ(r.kind, pw::RoundKind::joined);
    EXPECT_FALSE(r.applied);
    EXPECT_TRUE(r.joining);
    EXPECT_FALSE(r.published);
    EXPECT_EQ(a.window().version(), 0U);
    EXPECT_TRUE(contains(r.note, "joining: no usable member")) << r.note;
    EXPECT_EQ(w[0], 1.0F);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {  // the others see it being reborn
    EXPECT_EQ(a.window().roster(0).status.state, pw::AgentState::rebirth);
  }
  // Every other rank publishes rank + 1; the last one (with 3 or more ranks) pauses, and
  // with 4 or more rank 1 is outside the members.
  const bool paused = size >= 3 && rank == size - 1;
  if (rank != 0) {
    (void)a.publish({pw::ConstLayerRef(w)});
    if (paused) a.pause();
  }
  std::vector<int> members;
  for (int r = 0; r < size; ++r) {
    if (!(size >= 4 && r == 1)) members.push_back(r);
  }
  a.set_members(members);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(a.window().roster(0).status.state, pw::AgentState::rebirth);
    const pw::AveragingRound r = a.step({pw::LayerRef(w)});
    double want = 0.0;
    int read = 0;
    for (int m : members) {
      if (m == 0 || (size >= 3 && m == size - 1)) continue;
      want += m + 1;
      ++read;
    }
    want /= read;
    EXPECT_EQ(r.kind, pw::RoundKind::joined);
    EXPECT_TRUE(r.applied);
    EXPECT_FALSE(r.joining);
    EXPECT_FALSE(a.joining());
    EXPECT_TRUE(r.published);
    EXPECT_EQ(r.self_weight, 0.0);
    int used = 0;
    for (const pw::AveragingPeer& p : r.peers) {
      EXPECT_NE(p.rank, 0);
      EXPECT_NE(std::find(members.begin(), members.end(), p.rank), members.end()) << p.rank;
      if (p.skipped == pw::SkipReason::none) {
        ++used;
        EXPECT_DOUBLE_EQ(p.weight, 1.0 / read);
      } else {
        EXPECT_EQ(p.rank, size - 1);
        EXPECT_EQ(p.skipped, pw::SkipReason::paused);
      }
    }
    EXPECT_EQ(used, read);
    for (float x : w) EXPECT_NEAR(x, want, 1e-5);
    EXPECT_EQ(a.window().roster(0).status.state, pw::AgentState::active);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingFromWindow, SetMembersMapsTheTopologyOntoTheGivenRanks) {
  PARAMWIN_REQUIRE_RANKS(4);
  const int rank = world_rank();
  pw::AveragingOptions o;
  o.topology = pw::Topology::ring_peers();
  pw::AveragingAgent a(window("aw.members"), o);
  std::vector<float> w(kN, static_cast<float>(rank));
  // Bad populations change nothing.
  std::string m = message_of([&] { a.set_members({1, 1}); });
  EXPECT_TRUE(contains(m, "rank 1 is named twice")) << m;
  m = message_of([&] { a.set_members({world_size()}); });
  EXPECT_TRUE(contains(m, "is outside the window")) << m;
  EXPECT_TRUE(a.members().empty());
  pw::AveragingOptions lists;
  lists.topology = pw::Topology::neighbour_lists({{1}, {0}, {0}, {0}});
  pw::AveragingAgent b(window("aw.lists"), lists);
  if (rank == 3) {  // four lists for a population of three
    m = message_of([&] { b.set_members({3, 1, 2}); });
    EXPECT_TRUE(contains(m, "over 3 members: topology neighbours: 4 lists for 3 ranks")) << m;
  }
  // The population 3, 1, 2 in slot order: the ring of slot 0 (rank 3) is slots 2 and 1, i.e.
  // ranks 2 and 1; rank 0 is outside and runs no round.
  a.set_members({3, 1, 2});
  (void)a.publish({pw::ConstLayerRef(w)});
  MPI_Barrier(MPI_COMM_WORLD);
  const pw::AveragingRound r = a.step({pw::LayerRef(w)});
  std::vector<int> peers;
  for (const pw::AveragingPeer& p : r.peers) peers.push_back(p.rank);
  if (rank == 0) {
    EXPECT_TRUE(peers.empty());
    EXPECT_TRUE(contains(r.note, "not among the population's members")) << r.note;
  } else if (rank == 3) {
    EXPECT_EQ(peers, (std::vector<int>{2, 1}));
  } else if (rank == 1) {
    EXPECT_EQ(peers, (std::vector<int>{3, 2}));
  } else if (rank == 2) {
    EXPECT_EQ(peers, (std::vector<int>{1, 3}));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AveragingFromWindow, ReplaceWindowRefusesAnotherShapeAndChangesNothing) {
  // (A replacement that succeeds abandons the old window, and MPI_Finalize, which this program
  // calls, fails on abandoned windows; elastic_averaging's new-window runs replace them.)
  pw::AveragingAgent a(window("aw.replace"), {});
  std::vector<float> w(kN, 2.0F);
  (void)a.publish({pw::ConstLayerRef(w)});
  (void)a.step({pw::LayerRef(w)});
  const std::uint64_t version = a.window().version();
  pw::Layout other;
  other.add("w", kN + 1);
  pw::Window wrong = window("aw.replace.wrong", other);
  const std::string m = message_of([&] { a.replace_window(std::move(wrong)); });
  EXPECT_TRUE(contains(m, "AveragingAgent::replace_window: the new window has rank")) << m;
  EXPECT_TRUE(wrong.valid());  // not taken
  EXPECT_EQ(a.window().version(), version);
  EXPECT_EQ(a.window().name(), "aw.replace");
  (void)a.step({pw::LayerRef(w)});
  EXPECT_EQ(a.window().version(), version + 1);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(ElasticAveraging, BadOptionsAreRefusedOnEveryProcess) {
  pw::AveragingOptions o;
  if (world_rank() == world_size() - 1) o.cooldown_steps = 3;
  o.total_steps = 10;
  std::string m = message_of([&] { pw::ElasticAveragingAgent a(MPI_COMM_WORLD, layout(), o); });
  EXPECT_TRUE(world_rank() == world_size() - 1
                  ? contains(m, "warm-up, cool-down and symmetric averaging are collective")
                  : contains(m, "failed: paramwin: ElasticAveragingAgent"))
      << m;
  if (world_size() > 1) {  // (on one rank it is valid, and the population would be made)
    pw::AveragingOptions lists;
    lists.topology = pw::Topology::neighbour_lists({{}});
    m = message_of([&] { pw::ElasticAveragingAgent a(MPI_COMM_WORLD, layout(), lists); });
    EXPECT_TRUE(contains(m, "1 lists for")) << m;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
