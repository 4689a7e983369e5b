// Population checkpoints in one process (docs/checkpoints.md): a save/load round trip, saves
// from step() with keep-last-N and resume_newest, fewer and more agents than the file holds,
// the options, and every bad checkpoint of docs/reliability.md's table (missing, truncated,
// bit-flipped, other layout, other library version, fewer agent groups than agents): a
// CheckpointError on every rank, parameters and agent unchanged. The resume across processes
// is tests/checkpoint/checkpoint_resume_test.cmake.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint_test_util.hpp"
#include "formula_params.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  return pw::test::fresh_checkpoint_dir("checkpoint_mpi_test", name);
}

using pw::test::ageing_options;

using Params = pw::test::FormulaParams<12, 3>;

// Steps @p n times, one agent at a time (deterministic), parameters changing every step.
void run(pw::Agent<>& agent, Params& p, int n) {
  const int rank = pw::test::world_rank();
  for (int i = 0; i < n; ++i) {
    for (float& x : p.w) x = x * 0.5F + static_cast<float>(rank + 1);
    const std::int64_t it = agent.steps();
    for (int turn = 0; turn < pw::test::world_size(); ++turn) {
      if (turn == rank) (void)agent.step(it, static_cast<double>(p.w[0]), p.refs());
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

using pw::test::on_rank0;

// Opens @p path serially (rank 0) and applies fn to the file.
template <class F>
void edit_h5(const std::string& path, F fn) {
  on_rank0([&] {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    fn(f);
    H5Fclose(f);
  });
}

struct Saved {
  std::string path;
  Params before;
  std::int64_t steps = 0;
  std::uint64_t generation = 0;
};

}  // namespace

TEST(Checkpoint, RoundTripRestoresParametersAndAgentStateBitForBit) {
  const std::string dir = fresh_dir("roundtrip");
  const int rank = pw::test::world_rank();
  Params p;
  p.fill(rank, 1);
  pw::Agent<> a(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "a"});
  (void)a.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  run(a, p, 9);
  const std::string path = dir + "/pop.h5";
  a.save_checkpoint(path, p.crefs());
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  Params q;  // a new population of the same shape, loaded from the file
  pw::Agent<> b(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "b"});
  const pw::CheckpointLoad l = b.load_checkpoint(path, q.refs());
  EXPECT_EQ(l.agents, pw::test::world_size());
  EXPECT_EQ(l.source, rank);
  EXPECT_FALSE(l.reborn);
  EXPECT_EQ(q.w, p.w);
  EXPECT_EQ(q.b, p.b);
  EXPECT_EQ(b.steps(), a.steps());
  EXPECT_EQ(b.age(), a.age());
  EXPECT_EQ(b.max_age(), a.max_age());
  EXPECT_EQ(b.generation(), a.generation());
  EXPECT_EQ(b.window().version(), a.window().version());
  EXPECT_EQ(b.stats().deaths(), a.stats().deaths());
  EXPECT_EQ(b.policy().state().streams, a.policy().state().streams);
  // Both populations go on identically.
  run(a, p, 7);
  run(b, q, 7);
  EXPECT_EQ(q.w, p.w);
  EXPECT_EQ(b.generation(), a.generation());
  EXPECT_EQ(b.max_age(), a.max_age());
}

// Checkpoints copy a device window's layers through the host (docs/gpu.md, tested on a GPU in
// tests/cuda/device_window_mpi_test.cpp); a layer tagged device_memory that CUDA does not know
// as device memory (here: host memory on rank 0) is refused on every rank, nothing written
// or loaded.
TEST(Checkpoint, ALayerThatIsNeitherHostNorDeviceMemoryIsRefusedOnEveryRank) {
  const std::string dir = fresh_dir("not_device");
  const int rank = pw::test::world_rank();
  Params p;
  p.fill(rank, 1);
  pw::Agent<> a(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options());
  (void)a.publish(p.crefs());
  std::vector<pw::ConstLayerRef> crefs = p.crefs();
  std::vector<pw::LayerRef> refs = p.refs();
  if (rank == 0) {
    crefs[0] = pw::ConstLayerRef("", p.w.data(), p.w.size(), pw::DType::float32, pw::device_memory);
    refs[0] = pw::LayerRef("", p.w.data(), p.w.size(), pw::DType::float32, pw::device_memory);
  }
  const std::string path = dir + "/pop.h5";
  try {
    a.save_checkpoint(path, crefs);
    ADD_FAILURE() << "saved a layer that is neither host nor device memory";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'w' is neither host memory nor device memory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  a.save_checkpoint(path, p.crefs());
  const std::vector<float> before = p.w;
  try {
    (void)a.load_checkpoint(path, refs);
    ADD_FAILURE() << "loaded into a layer that is neither host nor device memory";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("neither host memory nor device memory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(p.w, before);
}

// Synchronous and asynchronous (the writer thread; wait_checkpoint() before looking) alike.
TEST(Checkpoint, StepSavesEveryNStepsKeepsTheNewestAndResumeNewestLoadsIt) {
  const int rank = pw::test::world_rank();
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    pw::test::check_step_saves(fresh_dir(async ? "every_async" : "every"), async, rank,
                               // Named: the saver and the resumer are alive at once.
                               [made = 0](const pw::AgentOptions& o) mutable {
                                 return pw::Agent<>(MPI_COMM_WORLD, pw::test::formula_layout(12, 3),
                                                    o, {.name = "agent " + std::to_string(made++)});
                               });
  }
  EXPECT_EQ(pw::checkpoint_path("x-{step}.h5", 42), "x-000000000042.h5");
}

// A callback that throws after its step was counted (on_rebirth keeps the rebirth) on a step
// where a save is due: the throwing rank still joins the collective save before the exception
// leaves step(), so the other ranks do not hang in it, and the file holds every agent.
TEST(Checkpoint, ARebirthCallbackThrowingOnASavingStepStillJoinsTheSave) {
  const std::string dir = fresh_dir("throwing_on_rebirth");
  const int rank = pw::test::world_rank();
  const int size = pw::test::world_size();
  if (size < 2) GTEST_SKIP() << "needs a donor";
  const bool thrower = rank == size - 1;
  pw::AgentOptions o;
  o.seed = 5;
  o.triggers.age.enabled = false;
  o.triggers.custom = [thrower](const pw::TriggerContext& t) { return thrower && t.step == 3; };
  o.selection.k = 1;
  o.selection.shortfall = pw::Shortfall::clamp;
  o.on_rebirth = [](const pw::StepEvent&, std::span<const pw::LayerRef>) {
    throw std::runtime_error("on_rebirth failed");
  };
  o.checkpoint.every = 3;
  o.checkpoint.path = dir + "/pop-{step}.h5";
  Params p;
  p.fill(rank, 1);
  pw::Agent<> a(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), o, {.name = "a"});
  (void)a.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 2; ++i) (void)a.step(i, 1.0, p.refs());
  if (thrower) {
    EXPECT_THROW((void)a.step(2, 1.0, p.refs()), std::runtime_error);
  } else {
    EXPECT_FALSE(a.step(2, 1.0, p.refs()).died);
  }
  EXPECT_EQ(a.steps(), 3);
  EXPECT_EQ(a.generation(), thrower ? 1U : 0U);  // the rebirth stands
  const std::string path = pw::checkpoint_path(o.checkpoint.path, 3);
  EXPECT_TRUE(fs::is_regular_file(path));
  // Every agent is in the file, the reborn one as reborn, and the population steps on.
  Params q;
  pw::Agent<> b(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "b"});
  const pw::CheckpointLoad l = b.load_checkpoint(path, q.refs());
  EXPECT_EQ(l.agents, size);
  EXPECT_EQ(b.steps(), 3);
  EXPECT_EQ(b.generation(), thrower ? 1U : 0U);
  EXPECT_EQ(q.w, p.w);
  (void)a.step(3, 1.0, p.refs());
  EXPECT_EQ(a.steps(), 4);
}

// --- asynchronous saves (CheckpointOptions::async) ------------------------------------------

TEST(AsyncCheckpoint, SavesWhatTheCallSawWhileTheTrainerOverwritesItsParameters) {
  const std::string dir = fresh_dir("async");
  const int rank = pw::test::world_rank();
  pw::AgentOptions o = ageing_options();
  o.checkpoint.async = true;
  Params p;
  p.fill(rank, 1);
  pw::Agent<> a(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), o, {.name = "a"});
  (void)a.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  run(a, p, 5);
  const Params at_save = p;
  const std::int64_t steps = a.steps();
  const std::string path = dir + "/pop.h5";
  a.save_checkpoint(path, p.crefs());
  // The call returned after the copy: the trainer may change everything at once, and train on.
  p.fill(rank, 99);
  run(a, p, 3);
  a.wait_checkpoint();
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  a.wait_checkpoint();  // nothing in flight: returns at once

  Params q;
  pw::Agent<> b(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "b"});
  const pw::CheckpointLoad l = b.load_checkpoint(path, q.refs());
  EXPECT_FALSE(l.reborn);
  EXPECT_EQ(l.steps, steps);
  EXPECT_EQ(q.w, at_save.w);
  EXPECT_EQ(q.b, at_save.b);

  // The same agent state written synchronously gives the same datasets.
  Params r;
  pw::Agent<> c(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "c"});
  (void)c.load_checkpoint(path, r.refs());
  c.save_checkpoint(dir + "/sync.h5", r.crefs());
  Params s1;
  Params s2;
  pw::Agent<> d1(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "d1"});
  pw::Agent<> d2(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "d2"});
  (void)d1.load_checkpoint(path, s1.refs());
  (void)d2.load_checkpoint(dir + "/sync.h5", s2.refs());
  EXPECT_EQ(s1.w, s2.w);
  EXPECT_EQ(d1.policy().state().streams, d2.policy().state().streams);
  EXPECT_EQ(d1.generation(), d2.generation());
}

TEST(AsyncCheckpoint, AFailedWriteIsThrownOnEveryRankByTheNextCollectiveCall) {
  const std::string dir = fresh_dir("async_fail");
  const int rank = pw::test::world_rank();
  pw::AgentOptions o = pw::test::quiet_options();
  o.checkpoint.async = true;
  Params p;
  p.fill(rank, 1);
  pw::Agent<> a(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), o);
  (void)a.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  // The directory is checked by the writer: the call itself succeeds.
  a.save_checkpoint(dir + "/missing/pop.h5", p.crefs());
  try {
    a.wait_checkpoint();
    ADD_FAILURE() << "a save into a missing directory succeeded";
  } catch (const pw::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  a.wait_checkpoint();  // collected once: nothing left
  // The error of an uncollected save surfaces in the next save, which then does not run.
  a.save_checkpoint(dir + "/missing/pop.h5", p.crefs());
  EXPECT_THROW(a.save_checkpoint(dir + "/pop.h5", p.crefs()), pw::CheckpointError);
  EXPECT_FALSE(fs::exists(dir + "/pop.h5"));
  // And the agent saves again afterwards.
  a.save_checkpoint(dir + "/pop.h5", p.crefs());
  a.wait_checkpoint();
  EXPECT_TRUE(fs::is_regular_file(dir + "/pop.h5"));
  EXPECT_TRUE(p.is(rank, 1));
}

// A disk that fails on one rank only, in the middle of the file's collective life: the last
// rank may write at most kLimit bytes into any file (RLIMIT_FSIZE; SIGXFSZ ignored, so the
// write fails with EFBIG), below the offset of its own datasets. Its write fails after every
// rank created the file together; the save must end with CheckpointError on every rank (no
// rank left waiting in HDF5's collective calls), and the previous checkpoint stays whole.
TEST(Checkpoint, AWriteThatFailsOnOneRankIsACheckpointErrorOnEveryRank) {
  const int size = pw::test::world_size();
  const int rank = pw::test::world_rank();
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string dir = fresh_dir("one_rank_disk_error");
  const std::string path = dir + "/pop.h5";
  constexpr std::size_t kWide = 1 << 18;  // 1 MiB of float32 per agent
  pw::Layout layout;
  layout.add("w", kWide);
  std::vector<float> w(kWide, static_cast<float>(rank) + 0.25F);
  const std::vector<pw::ConstLayerRef> crefs = {w};
  pw::Agent<> a(MPI_COMM_WORLD, layout, pw::test::quiet_options());
  (void)a.publish(crefs);
  MPI_Barrier(MPI_COMM_WORLD);
  a.save_checkpoint(path, crefs);  // the previous checkpoint, whole
  const auto before = fs::file_size(path);

  constexpr rlim_t kLimit = 64 * 1024;
  const bool failing = rank == size - 1;
  struct rlimit old_limit {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  void (*old_handler)(int) = SIG_DFL;
  if (failing) {
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit low = old_limit;
    low.rlim_cur = kLimit;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &low), 0);
  }
  std::fill(w.begin(), w.end(), static_cast<float>(rank) + 0.75F);
  std::string error;
  try {
    a.save_checkpoint(path, crefs);
  } catch (const pw::CheckpointError& e) {
    error = e.what();
  }
  if (failing) {
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
    std::signal(SIGXFSZ, old_handler);
  }
  EXPECT_FALSE(error.empty()) << "rank " << rank << ": the save succeeded";
  if (failing) {
    EXPECT_NE(error.find("writing agents/" + std::to_string(rank) + "/params/w"), std::string::npos)
        << error;
  } else {
    EXPECT_NE(error.find("rank " + std::to_string(size - 1) + " failed"), std::string::npos)
        << error;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // The previous checkpoint is whole and loads; no temporary file is left behind.
  EXPECT_EQ(fs::file_size(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::vector<float> got(kWide, -1.0F);
  const std::vector<pw::LayerRef> refs = {got};
  (void)a.load_checkpoint(path, refs);
  EXPECT_EQ(got.front(), static_cast<float>(rank) + 0.25F);
  EXPECT_EQ(got.back(), static_cast<float>(rank) + 0.25F);
  // And the agent saves again once the disk is healthy.
  a.save_checkpoint(path, crefs);
  (void)a.load_checkpoint(path, refs);
  EXPECT_EQ(got.back(), static_cast<float>(rank) + 0.75F);
}

TEST(Checkpoint, FewerAgentsTakeTheBestMoreAgentsAreRebornFromDonors) {
  const int size = pw::test::world_size();
  const int rank = pw::test::world_rank();
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string dir = fresh_dir("resize");
  const std::string big = dir + "/big.h5";
  const std::string small = dir + "/small.h5";
  const pw::Layout layout = pw::test::formula_layout(12, 3);
  {
    // The whole world saves: agent r has metric r (lower is better: agent 0 is the best).
    pw::Agent<> a(MPI_COMM_WORLD, layout, pw::test::quiet_options(), {.name = "a"});
    Params p;
    p.fill(rank, 1);
    (void)a.step(0, static_cast<double>(rank), p.refs());
    MPI_Barrier(MPI_COMM_WORLD);
    a.save_checkpoint(big, p.crefs());
  }
  MPI_Comm half = MPI_COMM_NULL;
  const int half_size = size / 2;
  MPI_Comm_split(MPI_COMM_WORLD, rank < half_size ? 0 : MPI_UNDEFINED, rank, &half);
  if (half != MPI_COMM_NULL) {
    // Fewer agents: the best half_size of the file, in file order (agents 0..half_size-1).
    pw::AgentOptions o = pw::test::quiet_options();
    pw::Agent<> a(half, layout, o, {.name = "a"});
    Params q;
    const pw::CheckpointLoad l = a.load_checkpoint(big, q.refs());
    EXPECT_EQ(l.agents, size);
    EXPECT_EQ(l.source, rank);
    EXPECT_TRUE(q.is(rank, 1));
    // And this half saves a smaller population for the next case.
    Params s;
    s.fill(rank + 100, 1);
    (void)a.step(1, static_cast<double>(10 - rank), s.refs());
    MPI_Barrier(half);
    a.save_checkpoint(small, s.crefs());
    MPI_Comm_free(&half);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // More agents: the file's agents continue, the extra ones are reborn from the best
  // (highest rank of the half had metric 10 - rank: lowest, the best), round-robin.
  pw::Agent<> a(MPI_COMM_WORLD, layout, pw::test::quiet_options(), {.name = "a"});
  Params q;
  const pw::CheckpointLoad l = a.load_checkpoint(small, q.refs());
  EXPECT_EQ(l.agents, half_size);
  if (rank < half_size) {
    EXPECT_FALSE(l.reborn);
    EXPECT_EQ(l.source, rank);
  } else {
    EXPECT_TRUE(l.reborn);
    // best first: half_size-1, half_size-2, ...
    const int want = half_size - 1 - (rank - half_size) % half_size;
    EXPECT_EQ(l.source, want);
    EXPECT_TRUE(q.is(want + 100, 1));
    EXPECT_EQ(a.generation(), 1U);
  }
}

// --- bad checkpoints -----------------------------------------------------------------------

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    good_ = dir_ + "/good.h5";
    pw::Agent<> a(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), ageing_options(), {.name = "a"});
    Params p;
    p.fill(pw::test::world_rank(), 1);
    (void)a.publish(p.crefs());
    MPI_Barrier(MPI_COMM_WORLD);
    run(a, p, 5);
    a.save_checkpoint(good_, p.crefs());
  }
  // Loading @p path must throw CheckpointError naming @p needle on every rank and change
  // nothing: the parameters, the agent's counters and its window's version.
  void expect_refused(const std::string& path, const std::string& needle,
                      const pw::Layout& layout = pw::test::formula_layout(12, 3)) {
    pw::Agent<> b(MPI_COMM_WORLD, layout, ageing_options(), {.name = "b"});
    Params q;
    q.fill(pw::test::world_rank(), 7);
    try {
      if (layout.size() == 2) {
        (void)b.load_checkpoint(path, q.refs());
      } else {
        std::vector<float> w(12);
        (void)b.load_checkpoint(path, {pw::LayerRef("w", w)});
      }
      ADD_FAILURE() << "no error loading " << path;
    } catch (const pw::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(q.is(pw::test::world_rank(), 7));
    EXPECT_EQ(b.steps(), 0);
    EXPECT_EQ(b.generation(), 0U);
    EXPECT_EQ(b.window().version(), 0U);
  }
  std::string dir_;
  std::string good_;
};

TEST_F(BadCheckpoint, Missing) { expect_refused(dir_ + "/nothing.h5", "does not exist"); }

TEST_F(BadCheckpoint, Truncated) {
  const std::string bad = dir_ + "/truncated.h5";
  on_rank0([&] {
    fs::copy_file(good_, bad);
    fs::resize_file(bad, fs::file_size(bad) / 2);
  });
  expect_refused(bad, "truncated or not an HDF5 file");
}

TEST_F(BadCheckpoint, BitFlippedInTheLastAgentsParameters) {
  const std::string bad = dir_ + "/flipped.h5";
  on_rank0([&] { fs::copy_file(good_, bad); });
  const std::string last = std::to_string(pw::test::world_size() - 1);
  pw::test::flip_a_bit(bad, "agents/" + last + "/params/w");
  expect_refused(bad, "checksum mismatch in agents/" + last + "/params/w");
}

TEST_F(BadCheckpoint, OtherLayout) {
  pw::Layout other;
  other.add("w", 12);
  expect_refused(good_, "written for another layout", other);
}

TEST_F(BadCheckpoint, OtherLibraryVersion) {
  const std::string bad = dir_ + "/old.h5";
  on_rank0([&] { fs::copy_file(good_, bad); });
  edit_h5(bad, [](hid_t f) {
    H5Adelete(f, "library_version");
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 5);
    const hid_t s = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(f, "library_version", t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, "0.0.9");
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
  });
  expect_refused(bad, "written by paramwin 0.0.9");
}

TEST_F(BadCheckpoint, FewerAgentGroupsThanAgents) {
  const std::string bad = dir_ + "/fewer.h5";
  on_rank0([&] { fs::copy_file(good_, bad); });
  const std::string last = std::to_string(pw::test::world_size() - 1);
  edit_h5(bad, [&](hid_t f) { H5Ldelete(f, ("agents/" + last).c_str(), H5P_DEFAULT); });
  expect_refused(bad, "agent groups");
}

TEST_F(BadCheckpoint, NotACheckpoint) {
  const std::string bad = dir_ + "/text.h5";
  on_rank0([&] { std::ofstream(bad) << "not hdf5\n"; });
  expect_refused(bad, "truncated or not an HDF5 file");
}

// --- options -------------------------------------------------------------------------------

TEST(CheckpointOptions, BadValuesAreRejectedByTheParserAndTheConstructor) {
  EXPECT_EQ(pw::parse_agent_options(
                "checkpoint_every=5 checkpoint_keep=2 checkpoint_path=a-{step}.h5")
                .checkpoint.every,
            5);
  const auto refused = [](const std::string& text, const std::string& needle) {
    try {
      pw::AgentOptions o = pw::parse_agent_options("k=1 " + text);
      pw::validate(o, 2);
      ADD_FAILURE() << text;
    } catch (const pw::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("checkpoint_every=-1", "checkpoint.every must be >= 0");
  refused("checkpoint_keep=-2", "checkpoint.keep must be >= 0");
  refused("checkpoint_every_seconds=nan", "checkpoint.every_seconds");
  refused("checkpoint_every=3 checkpoint_path=fixed.h5", "has no {step}");
  refused("checkpoint_every=x", "checkpoint_every");
  refused("checkpoint_async=maybe", "checkpoint_async");
  EXPECT_TRUE(pw::parse_agent_options("checkpoint_async=true").checkpoint.async);
}

TEST(CheckpointOptions, OptionsDifferingAcrossRanksAreRefusedOnEveryRank) {
  if (pw::test::world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  pw::AgentOptions o = pw::test::quiet_options();
  o.checkpoint.every = pw::test::world_rank() == 0 ? 5 : 10;
  EXPECT_THROW(pw::Agent<>(MPI_COMM_WORLD, pw::test::formula_layout(12, 3), o),
               pw::InvalidArgument);
}
