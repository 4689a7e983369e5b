// The step core (through the solo executor, as Agent drives it) over a fake window (a class
// with the members of paramwin::Window that the executor calls): what the core does with a
// window's answers, deterministically — here, a publish that a reader's pin skips. Needs MPI only
// for MPI_Wtime (the planner's clock), so it runs on one rank.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_core.hpp"
#include "agent/solo_executor.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::uint64_t kFp = 42;

/// The step core as AgentBase drives it (a solo executor over the window of each call), over
/// any window with Window's members.
class SoloCore {
 public:
  SoloCore(pw::AgentOptions options, int rank, int population, const pw::Layout& layout)
      : core_(std::move(options), rank, population, layout) {}
  template <class W>
  pw::StepEvent step(W& w, std::int64_t iteration, double metric,
                     std::span<const pw::LayerRef> params) {
    pw::detail::SoloExecutor<W> ex(w, fingerprint_);
    return core_.step(ex, pw::detail::solo_comms(w), iteration, metric, params);
  }
  template <class W>
  pw::PublishResult publish(W& w, std::span<const pw::ConstLayerRef> params) {
    pw::detail::SoloExecutor<W> ex(w, fingerprint_);
    return core_.publish(ex, params);
  }
  template <class W>
  void pause(W& w) {
    pw::detail::SoloExecutor<W> ex(w, fingerprint_);
    core_.pause(ex);
  }
  template <class W>
  void resume(W& w) {
    pw::detail::SoloExecutor<W> ex(w, fingerprint_);
    core_.resume(ex);
  }

 private:
  pw::detail::AgentCore core_;
  std::optional<std::uint64_t> fingerprint_;
};

/// One agent (rank 0) and one donor (rank 1) that always answers; publish is skipped (as if a
/// reader pinned the slot) while skips() > 0.
class PinnedWindow final {
 public:
  explicit PinnedWindow(pw::Layout layout) : layout_(std::move(layout)), entries_(2) {
    for (std::size_t r = 0; r < entries_.size(); ++r) {
      entries_[r].rank = static_cast<int>(r);
      entries_[r].fingerprint = kFp;
      entries_[r].version = 1;
      entries_[r].status.state = pw::AgentState::active;
    }
  }
  [[nodiscard]] int rank() const { return 0; }
  [[nodiscard]] int size() const { return static_cast<int>(entries_.size()); }
  // Checkpoints are not exercised here (no communicator behind this window).
  [[nodiscard]] MPI_Comm comm() const { return MPI_COMM_SELF; }
  void continue_versions(std::uint64_t /*next*/) {}
  [[nodiscard]] const pw::Layout& layout() const { return layout_; }
  [[nodiscard]] std::uint64_t version() const { return version_; }
  [[nodiscard]] pw::RosterEntry roster(int rank) const {
    return entries_.at(static_cast<std::size_t>(rank));
  }
  [[nodiscard]] std::vector<pw::RosterEntry> roster_all(double /*timeout_seconds*/) const {
    std::vector<pw::RosterEntry> out = entries_;
    out[1].publish_time = MPI_Wtime();  // the donor is fresh
    return out;
  }
  void set_status(const pw::AgentStatus& status) { entries_[0].status = status; }
  pw::PublishResult publish(const pw::BoundLayers<pw::ConstLayerRef>& /*layers*/,
                            const pw::Hyperparameters& /*hyper*/) {
    ++publish_calls;
    if (skips > 0) {
      --skips;
      return {.published = false, .version = version_};
    }
    ++version_;
    return {.published = true, .version = version_};
  }
  pw::PullResult pull(std::span<const int> donors, const pw::BoundLayers<pw::LayerRef>& out,
                      const pw::PullOptions& /*options*/) {
    for (const pw::LayerRef& ref : out.refs()) {
      std::fill_n(static_cast<float*>(ref.data()), ref.count(), 1.0F);
    }
    pw::PullResult r;
    r.donors.push_back({.rank = donors[0], .version = 1, .weight = 1.0});
    return r;
  }
  void progress() { ++progress_calls; }
  [[nodiscard]] bool has_rma_readers() const { return rma_readers; }
  [[nodiscard]] const pw::WindowOptions& options() const { return options_; }  // a host window

  int skips = 0;             ///< publishes still to skip
  int publish_calls = 0;     ///< tries of publish
  int progress_calls = 0;    ///< progress() calls
  bool rma_readers = false;  ///< what has_rma_readers() says

 private:
  pw::Layout layout_;
  pw::WindowOptions options_;
  std::vector<pw::RosterEntry> entries_;
  std::uint64_t version_ = 0;
};

pw::AgentOptions dies_at_age_2(double rebirth_wait_ms) {
  pw::AgentOptions o;
  o.triggers.age = {.enabled = true, .lo = 2, .hi = 2};
  o.selection.k = 1;
  o.publish.rebirth_wait_ms = rebirth_wait_ms;
  return o;
}

struct TwoSteps {
  pw::StepEvent first;
  pw::StepEvent death;
};

/// Step 1 publishes (first step), step 2 dies; @p skips publishes are skipped from step 2 on.
TwoSteps run(PinnedWindow& win, SoloCore& core, int skips) {
  std::vector<float> w(8, 0.0F);
  const pw::LayerRef params[] = {pw::LayerRef(w)};
  TwoSteps r;
  r.first = core.step(win, 1, 0.5, params);
  win.skips = skips;
  win.publish_calls = 0;
  r.death = core.step(win, 2, 0.5, params);
  return r;
}

pw::Layout layout() {
  pw::Layout l;
  l.add("w", std::size_t{8});
  return l;
}

TEST(RebirthPublish, APinnedSlotIsRetriedUntilTheReaderLetsGo) {
  PinnedWindow win(layout());
  SoloCore core(dies_at_age_2(5000.0), 0, 2, win.layout());
  const TwoSteps r = run(win, core, 5);
  ASSERT_TRUE(r.first.published);
  EXPECT_EQ(r.first.publish_attempts, 1U);
  ASSERT_TRUE(r.death.died);
  EXPECT_TRUE(r.death.published);
  EXPECT_FALSE(r.death.publish_skipped);
  EXPECT_EQ(r.death.publish_attempts, 6U);
  EXPECT_EQ(win.publish_calls, 6);
  EXPECT_EQ(win.progress_calls, 5) << "MPI progress between tries serves RMA pin releases";
  EXPECT_EQ(r.death.version, 2U);
}

TEST(RebirthPublish, ZeroWaitTriesOnceAndLeavesThePublishPending) {
  PinnedWindow win(layout());
  SoloCore core(dies_at_age_2(0.0), 0, 2, win.layout());
  const TwoSteps r = run(win, core, 1);
  ASSERT_TRUE(r.death.died);
  EXPECT_FALSE(r.death.published);
  EXPECT_TRUE(r.death.publish_skipped);
  EXPECT_EQ(r.death.publish_attempts, 1U);
  EXPECT_EQ(win.progress_calls, 0);
  // Pending: the next step publishes although the cadence (every 1) would anyway; check with
  // a cadence that would not.
  std::vector<float> w(8, 0.0F);
  const pw::LayerRef params[] = {pw::LayerRef(w)};
  const pw::StepEvent next = core.step(win, 3, 0.5, params);
  EXPECT_TRUE(next.published);
  EXPECT_EQ(next.version, 2U);
}

pw::AgentOptions deferring(std::int64_t every) {
  pw::AgentOptions o = dies_at_age_2(50.0);
  o.publish.defer_rebirth = true;
  o.publish.every = every;
  return o;
}

TEST(DeferredRebirth, TheRebirthOnlyPullsAndTheNextStepPublishes) {
  for (const std::int64_t every : {1, 0}) {  // 0: the rebirth's publish is still owed
    PinnedWindow win(layout());
    SoloCore core(deferring(every), 0, 2, win.layout());
    std::vector<float> w(8, 0.0F);
    const pw::LayerRef params[] = {pw::LayerRef(w)};
    const pw::StepEvent first = core.step(win, 1, 0.5, params);
    EXPECT_EQ(first.published, every == 1);
    if (every == 0) {
      const pw::ConstLayerRef out[] = {pw::ConstLayerRef(std::span<const float>(w))};
      ASSERT_TRUE(core.publish(win, out).published);
    }
    win.publish_calls = 0;
    const pw::StepEvent death = core.step(win, 2, 0.5, params);
    ASSERT_TRUE(death.died) << death.note;
    EXPECT_EQ(w, std::vector<float>(8, 1.0F)) << "the pull wrote the caller's parameters";
    EXPECT_FALSE(death.published);
    EXPECT_FALSE(death.publish_skipped) << "not tried, not skipped";
    EXPECT_EQ(win.publish_calls, 0) << "every = " << every;
    EXPECT_EQ(death.version, 1U);
    EXPECT_NE(death.note.find("defer_rebirth"), std::string::npos) << death.note;
    EXPECT_EQ(win.roster(0).status.state, pw::AgentState::rebirth)
        << "its slot holds the dead parameters: no donor";
    const pw::StepEvent next = core.step(win, 3, 0.4, params);
    EXPECT_FALSE(next.died);
    EXPECT_TRUE(next.published) << "every = " << every;
    EXPECT_EQ(next.version, 2U);
    EXPECT_EQ(win.publish_calls, 1);
    EXPECT_EQ(win.roster(0).status.state, pw::AgentState::active);
    EXPECT_EQ(win.roster(0).status.metric, 0.4);
  }
}

TEST(DeferredRebirth, APauseOrAPinnedSlotKeepsTheAgentMidRebirthUntilItsPublish) {
  PinnedWindow win(layout());
  SoloCore core(deferring(1), 0, 2, win.layout());
  std::vector<float> w(8, 0.0F);
  const pw::LayerRef params[] = {pw::LayerRef(w)};
  (void)core.step(win, 1, 0.5, params);
  ASSERT_TRUE(core.step(win, 2, 0.5, params).died);
  core.pause(win);
  EXPECT_EQ(win.roster(0).status.state, pw::AgentState::paused);
  core.resume(win);
  EXPECT_EQ(win.roster(0).status.state, pw::AgentState::rebirth)
      << "resumed with the rebirth's parameters still unpublished";
  win.skips = 1 << 30;  // a reader that never lets go: the owed publish waits, then stays owed
  const pw::StepEvent pinned = core.step(win, 3, 0.5, params);
  EXPECT_TRUE(pinned.publish_skipped);
  EXPECT_GT(pinned.publish_attempts, 1U) << "the deferred republish waits for pins as any";
  EXPECT_EQ(win.roster(0).status.state, pw::AgentState::rebirth);
  win.skips = 0;
  const pw::ConstLayerRef out[] = {pw::ConstLayerRef(std::span<const float>(w))};
  ASSERT_TRUE(core.publish(win, out).published);
  EXPECT_EQ(win.roster(0).status.state, pw::AgentState::active)
      << "an explicit publish puts the parameters out too";
}

TEST(RebirthPublish, TheWaitIsBoundedAndOrdinaryPublishesNeverWait) {
  PinnedWindow win(layout());
  SoloCore core(dies_at_age_2(30.0), 0, 2, win.layout());
  const auto t0 = std::chrono::steady_clock::now();
  const TwoSteps r = run(win, core, 1 << 30);  // a reader that never lets go
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.death.died);
  EXPECT_FALSE(r.death.published);
  EXPECT_TRUE(r.death.publish_skipped);
  EXPECT_GT(r.death.publish_attempts, 1U);
  EXPECT_GE(r.death.seconds.publish, 0.030);
  EXPECT_LT(waited, 10.0) << "the post-rebirth publish waited without bound";
  // A step without a death tries once, pending or not.
  std::vector<float> w(8, 0.0F);
  const pw::LayerRef params[] = {pw::LayerRef(w)};
  win.publish_calls = 0;
  const pw::StepEvent next = core.step(win, 3, 0.5, params);
  EXPECT_FALSE(next.died);
  EXPECT_EQ(next.publish_attempts, 1U);
  EXPECT_EQ(win.publish_calls, 1);
}

TEST(StepProgress, OneProgressCallPerStepOnlyWhenSomeoneReadsOverRma) {
  PinnedWindow win(layout());
  pw::AgentOptions o;  // no trigger: nobody dies, every step publishes once
  o.selection.k = 1;
  SoloCore core(o, 0, 2, win.layout());
  std::vector<float> w(8, 0.0F);
  const pw::LayerRef params[] = {pw::LayerRef(w)};
  for (int i = 0; i < 10; ++i) (void)core.step(win, i, 0.5, params);
  EXPECT_EQ(win.progress_calls, 0) << "no RMA reader: no progress call";
  win.rma_readers = true;
  for (int i = 10; i < 20; ++i) (void)core.step(win, i, 0.5, params);
  EXPECT_EQ(win.progress_calls, 10);
  o.serve.progress_in_step = false;
  SoloCore off(o, 0, 2, win.layout());
  for (int i = 0; i < 10; ++i) (void)off.step(win, i, 0.5, params);
  EXPECT_EQ(win.progress_calls, 10) << "serve.progress_in_step = false: none";
}

TEST(RebirthPublish, WaitIsValidatedAndParsed) {
  pw::AgentOptions o;
  EXPECT_EQ(o.publish.rebirth_wait_ms, 50.0);
  o.publish.rebirth_wait_ms = -1.0;
  EXPECT_THROW(pw::validate(o, 2), pw::InvalidArgument);
  EXPECT_EQ(pw::parse_agent_options("publish_rebirth_wait_ms=7.5").publish.rebirth_wait_ms, 7.5);
  EXPECT_FALSE(o.publish.defer_rebirth);
  EXPECT_TRUE(pw::parse_agent_options("publish_defer_rebirth=true").publish.defer_rebirth);
  EXPECT_THROW((void)pw::parse_agent_options("publish_defer_rebirth=later"), pw::InvalidArgument);
}

// --- Direct landing: a pull that fails midway (PartialPullError) -------------------------

constexpr float kPulled = 1.0F;   // what a whole pull writes
constexpr float kPartial = 7.0F;  // what a failed direct pull leaves in the first half
constexpr float kReset = 3.0F;    // what the reset callback writes

/// Agent rank 0 and donors 1..3; a pull from a donor in partial_donors writes half of the
/// parameters and throws PartialPullError, as a direct pull past its deadline does.
class PartialWindow final {
 public:
  explicit PartialWindow(pw::Layout layout) : layout_(std::move(layout)), entries_(4) {
    for (std::size_t r = 0; r < entries_.size(); ++r) {
      entries_[r].rank = static_cast<int>(r);
      entries_[r].fingerprint = kFp;
      entries_[r].version = 1;
      entries_[r].status.state = pw::AgentState::active;
      entries_[r].status.metric = 0.1 * static_cast<double>(r);
    }
  }
  [[nodiscard]] int rank() const { return 0; }
  [[nodiscard]] int size() const { return static_cast<int>(entries_.size()); }
  // Checkpoints are not exercised here (no communicator behind this window).
  [[nodiscard]] MPI_Comm comm() const { return MPI_COMM_SELF; }
  void continue_versions(std::uint64_t /*next*/) {}
  [[nodiscard]] const pw::Layout& layout() const { return layout_; }
  [[nodiscard]] std::uint64_t version() const { return version_; }
  [[nodiscard]] pw::RosterEntry roster(int rank) const {
    return entries_.at(static_cast<std::size_t>(rank));
  }
  [[nodiscard]] std::vector<pw::RosterEntry> roster_all(double /*timeout_seconds*/) const {
    std::vector<pw::RosterEntry> out = entries_;
    for (std::size_t r = 1; r < out.size(); ++r) out[r].publish_time = MPI_Wtime();
    return out;
  }
  void set_status(const pw::AgentStatus& status) { entries_[0].status = status; }
  pw::PublishResult publish(const pw::BoundLayers<pw::ConstLayerRef>& /*layers*/,
                            const pw::Hyperparameters& /*hyper*/) {
    ++version_;
    return {.published = true, .version = version_};
  }
  pw::PullResult pull(std::span<const int> donors, const pw::BoundLayers<pw::LayerRef>& out,
                      const pw::PullOptions& options) {
    landings.push_back(options.landing);
    pulled_from.push_back(donors[0]);
    if (partial_donors.count(donors[0]) != 0) {
      auto* w = static_cast<float*>(out[0].data());
      std::fill_n(w, out[0].count() / 2, kPartial);
      throw pw::PartialPullError(donors[0], "test: deadline midway", true);
    }
    for (const pw::LayerRef& ref : out.refs()) {
      auto* w = static_cast<float*>(ref.data());
      for (std::size_t i = 0; i < ref.count(); ++i) {
        w[i] = static_cast<float>(options.momentum) * w[i] +
               static_cast<float>(1.0 - options.momentum) * kPulled;
      }
    }
    pw::PullResult r;
    r.landing = options.landing;
    r.donors.push_back({.rank = donors[0], .version = 1, .weight = 1.0});
    return r;
  }
  void progress() {}
  [[nodiscard]] bool has_rma_readers() const { return false; }
  [[nodiscard]] const pw::WindowOptions& options() const { return options_; }  // a host window

  std::set<int> partial_donors;
  std::vector<pw::Landing> landings;  ///< PullOptions::landing of every pull
  std::vector<int> pulled_from;

 private:
  pw::Layout layout_;
  pw::WindowOptions options_;
  std::vector<pw::RosterEntry> entries_;
  std::uint64_t version_ = 0;
};

pw::AgentOptions partial_options(bool with_reset, double momentum) {
  pw::AgentOptions o = dies_at_age_2(0.0);
  o.selection.k = 1;
  o.mixing.momentum = momentum;
  if (with_reset) {
    o.reset = [](std::span<const pw::LayerRef> params, std::uint64_t /*seed*/) {
      for (const pw::LayerRef& ref : params) {
        std::fill_n(static_cast<float*>(ref.data()), ref.count(), kReset);
      }
    };
  }
  return o;
}

/// Two steps (the second dies); returns the death's event and leaves the parameters in @p w.
pw::StepEvent die_once(PartialWindow& win, const pw::AgentOptions& o, std::vector<float>& w) {
  SoloCore core(o, 0, 4, win.layout());
  const pw::LayerRef params[] = {pw::LayerRef(w)};
  (void)core.step(win, 1, 0.5, params);
  return core.step(win, 2, 0.5, params);
}

TEST(DirectLanding, AutomaticLandingIsDirectOnlyWithNoMomentumAndAResetCallback) {
  struct Case {
    bool reset;
    double momentum;
    pw::Landing asked;
    pw::Landing expected;
  };
  const Case cases[] = {
      {true, 0.0, pw::Landing::automatic, pw::Landing::direct},
      {false, 0.0, pw::Landing::automatic, pw::Landing::transactional},
      {true, 0.5, pw::Landing::automatic, pw::Landing::transactional},
      {true, 0.0, pw::Landing::transactional, pw::Landing::transactional},
      {true, 0.5, pw::Landing::direct, pw::Landing::direct},
  };
  for (const Case& c : cases) {
    PartialWindow win(layout());
    pw::AgentOptions o = partial_options(c.reset, c.momentum);
    o.read.landing = c.asked;
    EXPECT_EQ(pw::rebirth_landing(o), c.expected);
    std::vector<float> w(8, 0.0F);
    const pw::StepEvent e = die_once(win, o, w);
    ASSERT_TRUE(e.died);
    ASSERT_EQ(win.landings.size(), 1U);
    EXPECT_EQ(win.landings[0], c.expected) << "reset " << c.reset << ", momentum " << c.momentum
                                           << ", asked " << pw::landing_name(c.asked);
  }
}

TEST(DirectLanding, APartialPullIsRetriedFromAnotherDonorAndNeverKept) {
  PartialWindow win(layout());
  win.partial_donors = {1, 2};  // only donor 3 can be read whole
  std::vector<float> w(8, 0.0F);
  const pw::StepEvent e = die_once(win, partial_options(true, 0.0), w);
  ASSERT_TRUE(e.died);
  ASSERT_FALSE(win.pulled_from.empty());
  EXPECT_EQ(win.pulled_from.back(), 3) << "the last attempt is the donor that answers whole";
  for (const float x : w) EXPECT_EQ(x, kPulled) << "trained on a partly written parameter";
  EXPECT_EQ(e.note.find("re-initialised"), std::string::npos) << e.note;
}

TEST(DirectLanding, WhenEveryPullIsPartialTheParametersAreReset) {
  PartialWindow win(layout());
  win.partial_donors = {1, 2, 3};
  std::vector<float> w(8, 0.0F);
  const pw::StepEvent e = die_once(win, partial_options(true, 0.0), w);
  ASSERT_TRUE(e.died) << "a reset is a rebirth: " << e.note;
  EXPECT_GE(win.pulled_from.size(), 2U) << "other donors are tried first";
  for (const float x : w) EXPECT_EQ(x, kReset) << "trained on a partly written parameter";
  EXPECT_NE(e.note.find("partial pull"), std::string::npos) << e.note;
  EXPECT_TRUE(e.published) << "the re-initialised parameters replace the dead ones";
}

TEST(DirectLanding, WithMomentumAPartialPullIsResetAtOnce) {
  PartialWindow win(layout());
  win.partial_donors = {1, 2, 3};
  pw::AgentOptions o = partial_options(true, 0.5);
  o.read.landing = pw::Landing::direct;
  std::vector<float> w(8, 0.0F);
  const pw::StepEvent e = die_once(win, o, w);
  ASSERT_TRUE(e.died);
  EXPECT_EQ(win.pulled_from.size(), 1U) << "a retry would blend with the partial values";
  for (const float x : w) EXPECT_EQ(x, kReset);
}

TEST(DirectLanding, OptionsAreValidatedAndParsed) {
  pw::AgentOptions o;
  EXPECT_EQ(o.read.landing, pw::Landing::automatic);
  o.read.landing = pw::Landing::direct;
  EXPECT_THROW(pw::validate(o, 2), pw::InvalidArgument) << "direct needs a reset callback";
  o = partial_options(true, 0.0);
  o.read.landing = pw::Landing::direct;
  EXPECT_NO_THROW(pw::validate(o, 4));
  o.read.read_mode = pw::ReadMode::optimistic;
  EXPECT_THROW(pw::validate(o, 4), pw::InvalidArgument) << "direct reads pinned slots";
  o.read.read_mode = pw::ReadMode::automatic;
  o.read.landing = static_cast<pw::Landing>(9);
  EXPECT_THROW(pw::validate(o, 4), pw::InvalidArgument);
  EXPECT_EQ(pw::parse_agent_options("landing=direct").read.landing, pw::Landing::direct);
  EXPECT_EQ(pw::parse_agent_options("landing=transactional").read.landing,
            pw::Landing::transactional);
  EXPECT_THROW((void)pw::parse_agent_options("landing=sideways"), pw::InvalidArgument);
}

}  // namespace
