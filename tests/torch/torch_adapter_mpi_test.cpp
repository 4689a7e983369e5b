// The LibTorch adapter under MPI: layouts from modules (0-dim parameters, buffers, dtypes),
// bit-exact publish/adopt round trips (direct, adapter-staged, core-staged, live), donor
// averages landing in the right tensors, optimizer reset and rebuild on rebirth, and clear
// errors (unsupported dtypes, non-contiguous and reshaped parameters, layouts that differ
// across ranks), and the staging unit (device_staging.hpp) on CPU tensors.
#include <mpi.h>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/module.hpp"
#include "torch/device_staging.hpp"
#include "torch_test_util.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using pw::test::world_rank;
using pw::test::world_size;
using torch_test::message_of;
using torch_test::Tiny;

namespace {

/// A module with every supported dtype, a 0-dim parameter and batch-norm buffers.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(std::int64_t hidden = 4) {
    scale = register_parameter("scale", torch::ones({}));  // 0-dim
    wide = register_parameter("wide", torch::zeros({2, 3}, torch::kDouble));
    half = register_parameter("half", torch::zeros({5}, torch::kHalf));
    brain = register_parameter("brain", torch::zeros({3}, torch::kBFloat16));
    fc1 = register_module("fc1", torch::nn::Linear(3, hidden));
    bn = register_module("bn", torch::nn::BatchNorm1d(hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return scale * fc2(torch::tanh(bn(fc1(x)))); }
  torch::Tensor scale, wide, half, brain;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

/// Fills every exchanged tensor with values drawn from @p seed (the same on every rank).
void fill_random(torch::nn::Module& m, std::uint64_t seed, const pwt::ModuleOptions& o = {}) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (torch::Tensor& t : pwt::collect(m, o).tensors) {
    t.copy_(torch::randn(t.sizes(), torch::kDouble).to(t.scalar_type()));
  }
}

/// Exact small values: rank * 4 + layer offset + i (exact in every supported dtype).
void fill_exact(torch::nn::Module& m, int rank, const pwt::ModuleOptions& o = {}) {
  torch::NoGradGuard no_grad;
  const pwt::ModuleTensors mt = pwt::collect(m, o);
  for (std::size_t l = 0; l < mt.tensors.size(); ++l) {
    torch::Tensor t = mt.tensors[l];
    const auto base = static_cast<double>(rank * 4 + static_cast<int>(l) * 16);
    t.copy_(
        (torch::arange(t.numel(), torch::kDouble) + base).reshape(t.sizes()).to(t.scalar_type()));
  }
}

/// Byte-wise equality of every exchanged tensor of two modules.
void expect_bit_equal(torch::nn::Module& a, torch::nn::Module& b,
                      const pwt::ModuleOptions& o = {}) {
  const pwt::ModuleTensors ta = pwt::collect(a, o);
  const pwt::ModuleTensors tb = pwt::collect(b, o);
  ASSERT_EQ(ta.tensors.size(), tb.tensors.size());
  for (std::size_t i = 0; i < ta.tensors.size(); ++i) {
    const torch::Tensor x = ta.tensors[i].contiguous();
    const torch::Tensor y = tb.tensors[i].contiguous();
    ASSERT_EQ(x.nbytes(), y.nbytes()) << ta.names[i];
    EXPECT_EQ(std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()), 0)
        << "rank " << world_rank() << ": " << ta.names[i] << " differs";
  }
}

/// One optimizer step with every gradient one (the parameters and Adam's state change).
void ones_step(torch::nn::Module& m, torch::optim::Optimizer& opt) {
  for (torch::Tensor& p : m.parameters()) p.mutable_grad() = torch::ones_like(p);
  opt.step();
}

/// Adam's state of @p param (a failure, and a crash, when it has none).
torch::optim::AdamParamState& adam_state(torch::optim::Optimizer& adam,
                                         const torch::Tensor& param) {
  torch::optim::OptimizerParamState* s = pwt::optimizer_state(adam, param);
  EXPECT_NE(s, nullptr);
  return static_cast<torch::optim::AdamParamState&>(*s);
}

// --- layouts ------------------------------------------------------------------------------

TEST(TorchLayout, EveryParameterIncludingZeroDimWithDtypes) {
  Net net;
  const pwt::ModuleTensors mt = pwt::collect(*net);
  const pw::Layout& l = mt.layout;
  ASSERT_EQ(l.size(), 10U);  // scale wide half brain fc1.{w,b} bn.{w,b} fc2.{w,b}
  const pw::LayerSpec& scale = l[l.index_of("scale")];
  EXPECT_TRUE(scale.shape.empty());
  EXPECT_EQ(scale.count, 1U);
  EXPECT_EQ(scale.dtype, pw::DType::float32);
  EXPECT_EQ(l[l.index_of("wide")].dtype, pw::DType::float64);
  EXPECT_EQ(l[l.index_of("half")].dtype, pw::DType::float16);
  EXPECT_EQ(l[l.index_of("brain")].dtype, pw::DType::bfloat16);
  EXPECT_EQ(l[l.index_of("fc1.weight")].shape, (std::vector<std::size_t>{4, 3}));
  EXPECT_FALSE(l.find("bn.running_mean").has_value());  // buffers only on request
  EXPECT_TRUE(mt.skipped.empty());
}

TEST(TorchLayout, BuffersOnRequestIntegerBuffersSkippedWithNote) {
  Net net;
  const pwt::ModuleTensors mt = pwt::collect(*net, {.buffers = true});
  EXPECT_EQ(mt.layout.size(), 12U);
  EXPECT_TRUE(mt.layout.find("bn.running_mean").has_value());
  EXPECT_TRUE(mt.layout.find("bn.running_var").has_value());
  EXPECT_FALSE(mt.layout.find("bn.num_batches_tracked").has_value());
  ASSERT_EQ(mt.skipped.size(), 1U);
  EXPECT_NE(mt.skipped[0].find("bn.num_batches_tracked"), std::string::npos) << mt.skipped[0];
  EXPECT_NE(mt.skipped[0].find("Long"), std::string::npos) << mt.skipped[0];
}

TEST(TorchLayout, UnsupportedDtypeNamesParameterAndType) {
  torch::nn::Module m;
  m.register_parameter("ok", torch::zeros({2}));
  m.register_parameter("index", torch::zeros({2}, torch::kLong), /*requires_grad=*/false);
  const std::string msg = message_of<pw::InvalidArgument>([&] { (void)pwt::layout_of(m); });
  EXPECT_NE(msg.find("'index'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Long"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32, float64, bfloat16, float16"), std::string::npos) << msg;

  torch::nn::Module c;
  c.register_parameter("z", torch::zeros({2}, torch::kComplexFloat));
  const std::string cmsg = message_of<pw::InvalidArgument>([&] { (void)pwt::layout_of(c); });
  EXPECT_NE(cmsg.find("'z'"), std::string::npos) << cmsg;
}

// --- round trips --------------------------------------------------------------------------

struct RoundTripCase {
  const char* name;
  pwt::ModuleOptions module;
  pw::WindowOptions window;
};

/// Each rank publishes random values (its own seed); rank r adopts rank r+1's: bit-exact.
void round_trip(const RoundTripCase& c) {
  const int n = world_size();
  const int rank = world_rank();
  Net mine;
  fill_random(*mine, 100 + static_cast<std::uint64_t>(rank), c.module);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*mine, c.module), c.window);
  const pw::PublishResult pr = pwt::publish(win, *mine, c.module);
  EXPECT_TRUE(pr.published);
  MPI_Barrier(MPI_COMM_WORLD);

  const int donor = (rank + 1) % n;
  Net adopted;
  fill_random(*adopted, 999, c.module);
  const std::vector<int> donors{donor};
  const pw::PullResult res = pwt::adopt(win, donors, *adopted, {}, c.module);
  ASSERT_EQ(res.donors.size(), 1U);
  EXPECT_EQ(res.donors[0].version, 1U);

  Net expected;
  fill_random(*expected, 100 + static_cast<std::uint64_t>(donor), c.module);
  expect_bit_equal(*adopted, *expected, c.module);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchRoundTrip, SnapshotBitExact) {
  PARAMWIN_REQUIRE_RANKS(2);
  round_trip({"direct", {}, {}});
}

TEST(TorchRoundTrip, SnapshotWithBuffersOverRma) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::WindowOptions w;
  w.transport = pw::Transport::rma;
  round_trip({"buffers+rma", {.buffers = true}, w});
}

TEST(TorchRoundTrip, AdapterStagingThroughHost) {
  PARAMWIN_REQUIRE_RANKS(2);
  round_trip({"adapter staging", {.stage_through_host = true}, {}});
}

TEST(TorchRoundTrip, CoreStagingThroughHost) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::WindowOptions w;
  w.stage_through_host = true;
  round_trip({"core staging", {}, w});
}

TEST(TorchRoundTrip, LiveModuleInWindowMemory) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = world_size();
  const int rank = world_rank();
  Net mine;
  fill_random(*mine, 100 + static_cast<std::uint64_t>(rank));
  pw::WindowOptions w;
  w.exposure = pw::Exposure::live;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*mine), w);
  torch::Tensor weight = mine->fc1->weight;  // the same tensor object before and after
  pwt::bind_live(win, *mine);
  EXPECT_TRUE(pwt::is_bound_live(win, *mine));
  EXPECT_EQ(mine->fc1->weight.data_ptr(),
            static_cast<void*>(win.live_span<float>("fc1.weight").data()));
  EXPECT_TRUE(weight.is_same(mine->fc1->weight));
  {
    // Training updates the window directly: an in-place optimizer-style update.
    torch::NoGradGuard no_grad;
    mine->fc1->weight.add_(1.0);
  }
  EXPECT_EQ(win.live_span<float>("fc1.weight")[0], mine->fc1->weight.view(-1)[0].item<float>());
  (void)pwt::publish(win, *mine);  // only advances the version
  MPI_Barrier(MPI_COMM_WORLD);

  const int donor = (rank + 1) % n;
  Net adopted;
  const std::vector<int> donors{donor};
  (void)pwt::adopt(win, donors, *adopted);
  Net expected;
  fill_random(*expected, 100 + static_cast<std::uint64_t>(donor));
  {
    torch::NoGradGuard no_grad;
    expected->fc1->weight.add_(1.0);
  }
  expect_bit_equal(*adopted, *expected);
  MPI_Barrier(MPI_COMM_WORLD);  // nobody reads this window any more

  // A parameter replaced after binding is refused; unbinding gives the module its own memory.
  Net other;
  EXPECT_THROW((void)pwt::publish(win, *other), pw::InvalidArgument);
  pwt::unbind_live(*mine);
  EXPECT_FALSE(pwt::is_bound_live(win, *mine));
  EXPECT_NE(mine->fc1->weight.data_ptr(),
            static_cast<void*>(win.live_span<float>("fc1.weight").data()));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchRoundTrip, FailedAdoptLeavesModuleUnchanged) {
  PARAMWIN_REQUIRE_RANKS(2);
  Tiny mine;
  fill_random(*mine, 5);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*mine));
  Tiny before;
  fill_random(*before, 5);
  // Nobody published: the pull fails after the adapter built its references.
  const std::vector<int> donors{(world_rank() + 1) % world_size()};
  EXPECT_THROW((void)pwt::adopt(win, donors, *mine), pw::Error);
  EXPECT_THROW((void)pwt::adopt(win, donors, *mine, {}, {.stage_through_host = true}), pw::Error);
  expect_bit_equal(*mine, *before);
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- donor averages -----------------------------------------------------------------------

TEST(TorchAverage, MeanOfDonorsLandsInTheRightTensors) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = world_size();
  const int rank = world_rank();
  const pwt::ModuleOptions mo{.buffers = true};
  Net net;
  fill_exact(*net, rank, mo);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*net, mo));
  (void)pwt::publish(win, *net, mo);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::vector<int> donors;
    double mean_rank = 0.0;
    for (int r = 1; r < n; ++r) {
      donors.push_back(r);
      mean_rank += r;
    }
    mean_rank /= static_cast<double>(n - 1);  // 1 (2 ranks) or 2 (4 ranks): exact
    (void)pwt::adopt(win, donors, *net, {}, mo);
    const pwt::ModuleTensors mt = pwt::collect(*net, mo);
    for (std::size_t l = 0; l < mt.tensors.size(); ++l) {
      const torch::Tensor got = mt.tensors[l].to(torch::kDouble).reshape({-1});
      for (std::int64_t i = 0; i < got.numel(); ++i) {
        const double want = mean_rank * 4 + static_cast<double>(l) * 16 + static_cast<double>(i);
        // A mean of 3 donors is (x1 + x2 + x3) * (1/3): within rounding, and far (>= 4)
        // from any other rank's or layer's values.
        EXPECT_NEAR(got[i].item<double>(), want, 1e-5 * std::max(1.0, want))
            << mt.names[l] << "[" << i << "]";
      }
    }
    // The 0-dim parameter, explicitly: layer index of "scale" is 0.
    EXPECT_EQ(net->scale.dim(), 0);
    EXPECT_NEAR(net->scale.item<float>(), mean_rank * 4, 1e-5 * std::max(1.0, mean_rank * 4));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- optimizer on rebirth ------------------------------------------------------------------

/// Trains @p model on a fixed batch for one step with @p opt; returns the loss.
double train_step(Tiny& model, torch::optim::Optimizer& opt) {
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({8, 3});
  const torch::Tensor y = torch::randn({8, 2});
  opt.zero_grad();
  torch::Tensor loss = torch::mse_loss(model->forward(x), y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

pw::AgentOptions rank0_dies_at(std::int64_t age) {
  pw::AgentOptions o;
  const bool dies = world_rank() == 0;
  o.triggers.age = {.enabled = true, .lo = dies ? age : 100000, .hi = dies ? age : 100000};
  o.selection.k = 1;
  return o;
}

TEST(TorchAgent, RebirthResetsBorrowedAdamState) {
  PARAMWIN_REQUIRE_RANKS(2);
  Tiny model;
  fill_random(*model, 40 + static_cast<std::uint64_t>(world_rank()));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  int callbacks = 0;
  pw::AgentOptions ao = rank0_dies_at(3);
  ao.on_rebirth = [&](const pw::StepEvent&, std::span<const pw::LayerRef>) {
    ++callbacks;
    EXPECT_TRUE(adam.state().empty());  // reset before the user's callback
  };
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, adam, std::move(ao));
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  bool died = false;
  for (int step = 0; step < 5; ++step) {
    const double loss = train_step(model, adam);
    EXPECT_EQ(adam.state().size(), 3U);  // fc.weight, fc.bias, scale
    const pw::StepEvent ev = agent.step(step, loss);
    if (ev.died) {
      died = true;
      EXPECT_TRUE(adam.state().empty()) << "Adam moments of the replaced parameters remain";
      EXPECT_FALSE(model->fc->weight.grad().defined());
      EXPECT_EQ(agent.optimizer_states_reset(), 3U);
    }
  }
  EXPECT_EQ(died, world_rank() == 0);
  EXPECT_EQ(callbacks, world_rank() == 0 ? 1 : 0);
  if (world_rank() == 0) {
    // Adam restarted from step 0 for every parameter after the rebirth (steps 3 and 4).
    // optimizer_state finds each parameter's entry whatever key type this LibTorch uses.
    for (const torch::Tensor& p : model->parameters()) {
      torch::optim::OptimizerParamState* st = pwt::optimizer_state(adam, p);
      ASSERT_NE(st, nullptr);
      EXPECT_EQ(static_cast<torch::optim::AdamParamState&>(*st).step(), 2);
    }
    EXPECT_EQ(pwt::optimizer_state(adam, torch::zeros({1})), nullptr);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchAgent, RebirthRebuildsOwnedOptimizerWithBuilder) {
  PARAMWIN_REQUIRE_RANKS(2);
  Tiny model;
  fill_random(*model, 50 + static_cast<std::uint64_t>(world_rank()));
  pwt::OptimizerBuilder build =
      [](torch::nn::Module& m) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(0.01));
  };
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, build, rank0_dies_at(2));
  EXPECT_EQ(agent.optimizers_built(), 1U);
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  std::uint64_t deaths = 0;
  for (int step = 0; step < 4; ++step) {
    torch::optim::Optimizer* before = &agent.optimizer();
    const double loss = train_step(model, agent.optimizer());
    const pw::StepEvent ev = agent.step(step, loss);
    if (ev.died) {
      ++deaths;
      EXPECT_NE(&agent.optimizer(), before);
      EXPECT_TRUE(agent.optimizer().state().empty());
      // The new optimizer holds the module's (same) parameter tensors.
      EXPECT_TRUE(agent.optimizer().param_groups()[0].params()[0].is_same(model->parameters()[0]));
    }
  }
  EXPECT_EQ(deaths, world_rank() == 0 ? 2U : 0U);  // ages 2 and 4
  EXPECT_EQ(agent.optimizers_built(), 1U + deaths);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchAgent, MovedFromAgentThrowsAndTheMovedToOneTrainsOn) {
  PARAMWIN_REQUIRE_RANKS(2);
  Tiny model;
  fill_exact(*model, world_rank());
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  pwt::TorchAgent first(MPI_COMM_WORLD, *model, sgd, rank0_dies_at(1));
  pwt::TorchAgent agent(std::move(first));
  // NOLINTBEGIN(bugprone-use-after-move): using the moved-from agent is the point
  const auto expect_moved_error = [](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " on a moved-from TorchAgent did not throw";
    } catch (const pw::Error& e) {
      EXPECT_NE(std::string(e.what()).find("TorchAgent that was moved from"), std::string::npos)
          << what << ": " << e.what();
    }
  };
  expect_moved_error([&] { (void)first.step(0, 1.0); }, "step");
  expect_moved_error([&] { (void)first.publish(); }, "publish");
  expect_moved_error([&] { first.pause(); }, "pause");
  expect_moved_error([&] { first.resume(); }, "resume");
  expect_moved_error([&] { (void)first.is_paused(); }, "is_paused");
  expect_moved_error([&] { (void)first.stats(); }, "stats");
  expect_moved_error([&] { (void)first.optimizer(); }, "optimizer");
  expect_moved_error([&] { (void)first.module(); }, "module");
  expect_moved_error([&] { (void)first.grouped(); }, "grouped");
  expect_moved_error([&] { first.wait_checkpoint(); }, "wait_checkpoint");
  EXPECT_NO_THROW(first.close());  // nothing to close: the agent moved on
  // NOLINTEND(bugprone-use-after-move)
  // The agent it moved to is whole: it publishes, dies on schedule and adopts its donor.
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  const pw::StepEvent ev = agent.step(0, 1.0);
  if (world_rank() == 0) {
    ASSERT_TRUE(ev.died) << ev.note;
    ASSERT_EQ(ev.donors.size(), 1U);
    Tiny expected;
    fill_exact(*expected, ev.donors[0].rank);
    expect_bit_equal(*model, *expected);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchAgent, RebirthAdoptsDonorMixIntoModule) {
  PARAMWIN_REQUIRE_RANKS(2);
  // Live and staged variants: rank 0 (dies at age 1, before any training) ends up with
  // exactly the parameters its donor published.
  for (int variant = 0; variant < 2; ++variant) {
    Tiny model;
    fill_exact(*model, world_rank());
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
    pw::WindowOptions w;
    pwt::TorchAgentOptions to;
    if (variant == 0) w.exposure = pw::Exposure::live;
    if (variant == 1) to.module.stage_through_host = true;
    pw::AgentOptions ao = rank0_dies_at(1);
    ao.publish.every = 1;
    {
      pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, std::move(ao), to, w);
      (void)agent.publish();
      MPI_Barrier(MPI_COMM_WORLD);
      const pw::StepEvent ev = agent.step(0, 1.0);
      if (world_rank() == 0) {
        ASSERT_TRUE(ev.died) << "variant " << variant << ": " << ev.note;
        ASSERT_EQ(ev.donors.size(), 1U);
        Tiny expected;
        fill_exact(*expected, ev.donors[0].rank);
        expect_bit_equal(*model, *expected);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    // After the agent is gone the (formerly live) module still owns valid memory.
    EXPECT_EQ(model->scale.dim(), 0);
    EXPECT_TRUE(std::isfinite(model->scale.item<float>()));
  }
}

TEST(TorchAgent, PauseGuardHoldsTheRepublishOfADeathHonouredWhilePaused) {
  PARAMWIN_REQUIRE_RANKS(2);
  Tiny model;
  fill_exact(*model, world_rank());
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  pw::AgentOptions ao = rank0_dies_at(2);
  ao.paused_deaths = pw::PausedDeaths::honour;
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, std::move(ao));
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const std::uint64_t version = agent.agent().window().version();
    {
      pw::PauseGuard guard(agent);  // e.g. an evaluation phase
      EXPECT_TRUE(agent.is_paused());
      EXPECT_EQ(agent.agent().window().roster(0).status.state, pw::AgentState::paused);
      EXPECT_FALSE(agent.step(0, 1.0).published);
      const pw::StepEvent death = agent.step(1, 1.0);  // age 2: reborn while paused
      EXPECT_TRUE(death.paused);
      ASSERT_TRUE(death.died) << death.note;
      ASSERT_EQ(death.donors.size(), 1U);
      EXPECT_FALSE(death.published);
      Tiny expected;
      fill_exact(*expected, death.donors[0].rank);
      expect_bit_equal(*model, *expected);  // the module holds the mix already
      EXPECT_EQ(agent.agent().window().version(), version);
    }
    EXPECT_FALSE(agent.is_paused());
    EXPECT_EQ(agent.member().is_paused(), false);
    EXPECT_EQ(agent.agent().window().roster(0).status.state, pw::AgentState::active);
    const pw::StepEvent after = agent.step(2, 1.0);
    EXPECT_TRUE(after.published) << "the held republish";
    EXPECT_EQ(agent.agent().window().version(), version + 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchAgent, GroupedAgentsExchangeShardsIntoEveryReplica) {
  if (world_size() < 4 || world_size() % 2 != 0) GTEST_SKIP() << "needs 2 agents of 2 ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  // In place and through host staging buffers (the path of device tensors).
  for (const bool staged : {false, true}) {
    // Every dtype, a 0-dim parameter and batch-norm buffers, cut in two shards.
    const pwt::ModuleOptions mo{.buffers = true, .stage_through_host = staged};
    Net model;
    fill_exact(*model, groups.agent(), mo);  // replicas of one agent are identical
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    pw::AgentOptions ao;
    ao.triggers.age.enabled = false;
    ao.triggers.custom = [](const pw::TriggerContext& c) { return c.rank == 0 && c.step == 2; };
    ao.selection.k = 1;
    ao.publish.every = 2;
    pwt::TorchAgentOptions to;
    to.module = mo;
    pwt::TorchAgent agent(groups, *model, sgd, std::move(ao), to);
    EXPECT_TRUE(agent.grouped());
    EXPECT_THROW((void)agent.agent(), pw::InvalidArgument);
    EXPECT_EQ(agent.group_agent().ranks_per_agent(), 2);
    (void)agent.publish();
    MPI_Barrier(MPI_COMM_WORLD);
    // One step of SGD with momentum so that the optimizer has state to reset (no update: the
    // gradients are zero, the parameters stay exact).
    for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
    sgd.step();
    EXPECT_FALSE(sgd.state().empty());
    const std::uint64_t n = agent.staging_stats().staged_tensors;
    EXPECT_EQ(n, staged ? pwt::collect(*model, mo).tensors.size() : 0U);
    for (int step = 1; step <= 3; ++step) {
      const std::uint64_t before = agent.staging_stats().device_to_host;
      const pw::StepEvent ev = agent.step(step, 1.0);
      // Step 1 neither publishes (every = 2) nor dies: no copy on either rank of the agent;
      // step 2 publishes (and agent 0 dies); step 3 publishes only if step 2's was skipped.
      const bool moved = ev.published || ev.publish_skipped || ev.died;
      if (step <= 2) {
        EXPECT_EQ(moved, step == 2) << "step " << step;
      }
      EXPECT_EQ(agent.staging_stats().device_to_host - before, moved ? n : 0U) << "step " << step;
      if (groups.agent() == 0 && step == 2) {
        ASSERT_TRUE(ev.died) << ev.note;
        ASSERT_EQ(ev.donors.size(), 1U);
        EXPECT_EQ(ev.donors[0].rank, 1);
        Net expected;
        fill_exact(*expected, 1, mo);
        expect_bit_equal(*model, *expected, mo);  // on both ranks of agent 0
        EXPECT_TRUE(sgd.state().empty()) << "momentum buffers of the replaced parameters remain";
        EXPECT_GT(agent.optimizer_states_reset(), 0U);
        EXPECT_EQ(agent.staging_stats().host_to_device, n);
      } else {
        EXPECT_FALSE(ev.died);
      }
    }
    EXPECT_EQ(agent.stats().deaths(), groups.agent() == 0 ? 1 : 0);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(TorchAgent, GroupedModuleThatNoLongerFitsOnOneRankFailsTheStepOnEveryRankOfTheAgent) {
  if (world_size() < 2 || world_size() % 2 != 0) GTEST_SKIP() << "needs agents of 2 ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  Tiny model;
  fill_exact(*model, groups.agent());
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  pw::AgentOptions ao;
  ao.triggers.age.enabled = false;
  ao.selection.k = 1;
  ao.selection.shortfall = pw::Shortfall::clamp;
  pwt::TorchAgent agent(groups, *model, sgd, std::move(ao));
  (void)agent.publish();
  (void)agent.step(0, 1.0);
  // The second rank of each agent gives its module's weight another shape: its step is an
  // InvalidArgument naming the weight, its partner's an InvalidArgument too (not a wait).
  const bool changed = groups.rank_in_agent() == 1;
  const torch::Tensor weight = model->fc->weight.detach().clone();
  if (changed) {
    torch::NoGradGuard no_grad;
    model->fc->weight.set_data(torch::zeros({4, 3}));
  }
  const std::string error = message_of<pw::InvalidArgument>([&] { (void)agent.step(1, 1.0); });
  if (changed) {
    EXPECT_NE(error.find("fc.weight"), std::string::npos) << error;
  } else {
    EXPECT_NE(error.find("another rank of agent"), std::string::npos) << error;
  }
  // Put back, the agent steps on, on every rank.
  if (changed) {
    torch::NoGradGuard no_grad;
    model->fc->weight.set_data(weight);
  }
  EXPECT_NO_THROW((void)agent.step(2, 1.0));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchAgent, GroupedAgentRefusesLiveExposure) {
  if (world_size() < 4 || world_size() % 2 != 0) GTEST_SKIP() << "needs 2 agents of 2 ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  Tiny model;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  pw::AgentOptions ao;
  ao.selection.k = 1;
  const std::string what = message_of<pw::InvalidArgument>([&] {
    pwt::TorchAgent agent(groups, *model, sgd, ao, {}, {.exposure = pw::Exposure::live});
  });
  EXPECT_NE(what.find("Exposure::live"), std::string::npos) << what;
}

// --- staging: host copies only on steps that move data --------------------------------------

/// Every exchanged tensor of @p m, as doubles, concatenated in layout order.
std::vector<double> flat(torch::nn::Module& m) {
  std::vector<double> out;
  for (const torch::Tensor& t : pwt::collect(m).tensors) {
    const torch::Tensor d = t.detach().cpu().to(torch::kDouble).contiguous().reshape({-1});
    out.insert(out.end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  }
  return out;
}

/// Checks that what @p agent's window holds as this rank's latest snapshot is what its module
/// held at its latest publish (@p published): its neighbour reads it and compares.
void expect_neighbour_reads(pwt::TorchAgent& agent, const std::vector<double>& published,
                            const std::string& what) {
  const int n = world_size();
  const int rank = world_rank();
  std::vector<double> all(published.size() * static_cast<std::size_t>(n));
  MPI_Allgather(published.data(), static_cast<int>(published.size()), MPI_DOUBLE, all.data(),
                static_cast<int>(published.size()), MPI_DOUBLE, MPI_COMM_WORLD);
  const int donor = (rank + 1) % n;
  Tiny probe;
  const std::vector<int> donors{donor};
  (void)pwt::adopt(agent.agent().window(), donors, *probe);
  const std::vector<double> got = flat(*probe);
  ASSERT_EQ(got.size(), published.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], all[static_cast<std::size_t>(donor) * published.size() + i])
        << what << ": rank " << rank << " read element " << i << " of rank " << donor;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchStaging, HostCopiesOnlyOnStepsThatPublishOrRebirth) {
  PARAMWIN_REQUIRE_RANKS(2);
  // Tiny: 3 tensors (fc.weight, fc.bias, scale), all staged through host buffers by
  // stage_through_host, the path device tensors take. Without a user on_rebirth a rebirth
  // costs one host->device copy per tensor; with one, also a device->host copy per tensor
  // to republish what the callback left in the module.
  constexpr std::uint64_t kTensors = 3;
  for (const bool user_callback : {false, true}) {
    Tiny model;
    fill_random(*model, 300 + static_cast<std::uint64_t>(world_rank()));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
    pw::AgentOptions ao;
    ao.seed = 11;
    ao.triggers.age = {.enabled = true, .lo = 7, .hi = 13};
    ao.selection.k = 1;
    ao.publish.every = 5;
    int callbacks = 0;
    if (user_callback) {
      ao.on_rebirth = [&](const pw::StepEvent&, std::span<const pw::LayerRef>) { ++callbacks; };
    }
    pwt::TorchAgentOptions to;
    to.module.stage_through_host = true;
    pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, std::move(ao), to);
    EXPECT_EQ(agent.staging_stats().device_to_host, 0U);
    EXPECT_EQ(agent.staging_stats().binds, 0U);
    (void)agent.publish();
    EXPECT_EQ(agent.staging_stats().device_to_host, kTensors);
    EXPECT_EQ(agent.staging_stats().staged_tensors, kTensors);
    EXPECT_EQ(agent.staging_stats().pinned_tensors, 0U);  // CPU tensors: pageable buffers
    MPI_Barrier(MPI_COMM_WORLD);

    std::uint64_t data_steps = 0;  // steps that read or wrote the parameters
    std::uint64_t publishes = 0;
    std::uint64_t rebirths = 0;
    for (int step = 0; step < 100; ++step) {
      const double loss = train_step(model, sgd);
      const std::uint64_t before = agent.staging_stats().device_to_host;
      const pw::StepEvent ev = agent.step(step, loss);
      const bool published = ev.published || ev.publish_skipped;  // both read the parameters
      // A death deferred after a failed pull read them too (none expected here).
      const bool pulled = ev.deferred && ev.seconds.pull > 0.0;
      publishes += published ? 1U : 0U;
      rebirths += ev.died ? 1U : 0U;
      const bool moved = published || ev.died || pulled;
      data_steps += moved ? 1U : 0U;
      EXPECT_EQ(agent.staging_stats().device_to_host - before,
                (moved ? kTensors : 0) + (ev.died && user_callback ? kTensors : 0))
          << "step " << step << (ev.died ? " (rebirth)" : "") << (published ? " (publish)" : "");
      if (step % 10 == 0) agent.agent().window().progress();
    }
    const pwt::TorchStagingStats& s = agent.staging_stats();
    const std::uint64_t callback_copies = user_callback ? kTensors * rebirths : 0;
    std::printf("[rank %d] staging over 100 steps (user on_rebirth: %s): %llu publishes, %llu "
                "rebirths, %llu steps that moved data; device->host %llu, host->device %llu, "
                "binds %llu\n",
                world_rank(), user_callback ? "yes" : "no",
                static_cast<unsigned long long>(publishes),
                static_cast<unsigned long long>(rebirths),
                static_cast<unsigned long long>(data_steps),
                static_cast<unsigned long long>(s.device_to_host),
                static_cast<unsigned long long>(s.host_to_device),
                static_cast<unsigned long long>(s.binds));
    EXPECT_GT(rebirths, 3U);     // ages 7..13 over 100 steps
    EXPECT_LT(data_steps, 60U);  // publish.every = 5: most steps copy nothing
    // + the explicit publish; + a pass after each user callback
    EXPECT_EQ(s.stage_passes, 1 + data_steps + (user_callback ? rebirths : 0U));
    EXPECT_EQ(s.device_to_host, kTensors * (1 + data_steps) + callback_copies);
    EXPECT_EQ(s.host_to_device, kTensors * rebirths);
    EXPECT_EQ(s.binds, 1U);  // the module never changed: collected once
    EXPECT_EQ(callbacks, user_callback ? static_cast<int>(rebirths) : 0);

    // What the window holds is what the module held at the latest publish, not a stale copy:
    // train once more (the module now differs from the window), publish, read it back.
    (void)train_step(model, sgd);
    (void)agent.publish();
    MPI_Barrier(MPI_COMM_WORLD);
    expect_neighbour_reads(agent, flat(*model), "after 100 steps");
  }
}

TEST(TorchStaging, ReplacedParameterIsBoundOnTheNextStep) {
  PARAMWIN_REQUIRE_RANKS(2);
  for (const bool staged : {false, true}) {
    const std::string variant = staged ? "staged" : "in place";
    Tiny model;
    fill_random(*model, 400 + static_cast<std::uint64_t>(world_rank()));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
    pw::AgentOptions ao;
    ao.triggers.age.enabled = false;
    ao.selection.k = 1;
    ao.publish.every = 1;
    pwt::TorchAgentOptions to;
    to.module.stage_through_host = staged;
    pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, std::move(ao), to);
    (void)agent.publish();
    (void)agent.step(0, 1.0);
    EXPECT_EQ(agent.staging_stats().binds, 1U) << variant;
    EXPECT_EQ(agent.staging_stats().staged_tensors, staged ? 3U : 0U) << variant;

    // Replace fc.weight's tensor data (new memory, as Module::to does): the next step binds
    // the new memory and publishes its values; the old memory is freed (an in-place ref to
    // it would read freed memory).
    {
      torch::NoGradGuard no_grad;
      model->fc->weight.set_data(torch::full({2, 3}, 42.0F + static_cast<float>(world_rank())));
    }
    const pw::StepEvent ev = agent.step(1, 1.0);
    EXPECT_TRUE(ev.published) << variant;
    EXPECT_EQ(agent.staging_stats().binds, 2U) << variant;
    MPI_Barrier(MPI_COMM_WORLD);
    expect_neighbour_reads(agent, flat(*model), variant + ": replaced fc.weight");
    (void)agent.step(2, 1.0);
    EXPECT_EQ(agent.staging_stats().binds, 2U) << variant << ": no change, no new binding";

    // A changed shape, a changed dtype and an added parameter are refused by name, before the
    // step changes anything; restoring a fitting tensor makes the next step work again.
    const torch::Tensor good = model->fc->weight.detach().clone();
    const std::int64_t steps = agent.agent().steps();
    {
      torch::NoGradGuard no_grad;
      model->fc->weight.set_data(torch::zeros({5, 3}));
    }
    std::string msg = message_of<pw::InvalidArgument>([&] { (void)agent.step(3, 1.0); });
    EXPECT_NE(msg.find("'fc.weight' has shape [5, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    {
      torch::NoGradGuard no_grad;
      model->fc->weight.set_data(torch::zeros({2, 3}, torch::kDouble));
    }
    msg = message_of<pw::InvalidArgument>([&] { (void)agent.step(3, 1.0); });
    EXPECT_NE(msg.find("'fc.weight' has dtype float64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
    EXPECT_EQ(agent.agent().steps(), steps) << "a refused step counted";
    EXPECT_EQ(agent.staging_stats().binds, 2U) << variant << ": refused bindings kept the old";
    {
      torch::NoGradGuard no_grad;
      model->fc->weight.set_data(good);
    }
    EXPECT_NO_THROW((void)agent.step(3, 1.0)) << variant;
    EXPECT_EQ(agent.agent().steps(), steps + 1);
    EXPECT_EQ(agent.staging_stats().binds, 3U) << variant;
    model->register_parameter("extra", torch::zeros({2}));
    msg = message_of<pw::InvalidArgument>([&] { (void)agent.publish(); });
    EXPECT_NE(msg.find("'extra'"), std::string::npos) << msg;
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// --- the staging unit (detail::DeviceStaging, the TorchAgent's LayerSource) ----------------

/// Whether layer @p ref holds exactly the bytes of @p t.
bool same_bytes(const pw::LayerRef& ref, const torch::Tensor& t) {
  return std::memcmp(ref.data(), t.data_ptr(), t.nbytes()) == 0;
}

TEST(TorchDeviceStaging, CpuTensorsAreLayersInPlaceAndNeverCopied) {
  Net model;
  const pwt::ModuleOptions o{.buffers = true};
  fill_exact(*model, world_rank(), o);
  const pwt::ModuleTensors mt = pwt::collect(*model, o);
  pwt::detail::DeviceStaging staging(o);
  staging.bind(pwt::collect(*model, o));
  ASSERT_EQ(staging.refs().size(), mt.tensors.size());
  EXPECT_FALSE(staging.copies());
  for (std::size_t i = 0; i < mt.tensors.size(); ++i) {
    EXPECT_FALSE(pwt::detail::needs_staging(mt.tensors[i], o)) << mt.names[i];
    EXPECT_EQ(staging.refs()[i].data(), mt.tensors[i].data_ptr()) << mt.names[i] << ": a copy";
    EXPECT_EQ(staging.refs()[i].name(), mt.names[i]);
    EXPECT_EQ(staging.refs()[i].count(), static_cast<std::size_t>(mt.tensors[i].numel()));
  }
  staging.to_layers();
  staging.from_layers();
  const pwt::TorchStagingStats& s = staging.stats();
  EXPECT_EQ(s.device_to_host, 0U);
  EXPECT_EQ(s.host_to_device, 0U);
  EXPECT_EQ(s.stage_passes, 0U);
  EXPECT_EQ(s.staged_tensors, 0U);
  EXPECT_EQ(s.pinned_tensors, 0U);
  EXPECT_EQ(s.binds, 1U);
}

TEST(TorchDeviceStaging, ForcedStagingCopiesIntoLayersAndBackOnlyWhenAsked) {
  Net model;
  const pwt::ModuleOptions o{.buffers = true, .stage_through_host = true};
  fill_exact(*model, world_rank(), o);
  const pwt::ModuleTensors mt = pwt::collect(*model, o);
  const std::size_t n = mt.tensors.size();
  pwt::detail::DeviceStaging staging(o);
  staging.bind(pwt::collect(*model, o));
  EXPECT_TRUE(staging.copies());
  EXPECT_EQ(staging.stats().staged_tensors, n);
  EXPECT_EQ(staging.stats().pinned_tensors, 0U);  // CPU tensors: pageable buffers
  std::vector<void*> buffers;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(pwt::detail::needs_staging(mt.tensors[i], o)) << mt.names[i];
    EXPECT_NE(staging.refs()[i].data(), mt.tensors[i].data_ptr()) << mt.names[i] << ": aliased";
    buffers.push_back(staging.refs()[i].data());
  }
  staging.to_layers();
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same_bytes(staging.refs()[i], mt.tensors[i])) << mt.names[i] << ": not staged";
  }
  // What the window writes into the layers (a pull) reaches the module only by from_layers().
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < n; ++i) {
    const torch::Tensor& t = mt.tensors[i];
    torch::from_blob(staging.refs()[i].data(), t.sizes(),
                     torch::TensorOptions().dtype(t.scalar_type()))
        .fill_(static_cast<double>(world_rank() + 7));
    EXPECT_FALSE(same_bytes(staging.refs()[i], t)) << mt.names[i] << ": written through";
  }
  staging.from_layers();
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same_bytes(staging.refs()[i], mt.tensors[i])) << mt.names[i] << ": not copied";
    EXPECT_EQ(mt.tensors[i].detach().to(torch::kDouble).min().item<double>(), world_rank() + 7.0);
  }
  EXPECT_EQ(staging.stats().device_to_host, n);
  EXPECT_EQ(staging.stats().host_to_device, n);
  EXPECT_EQ(staging.stats().stage_passes, 1U);

  // A new binding (a parameter given new memory) keeps the buffers: the layout fixes them.
  model->wide.set_data(torch::full({2, 3}, 0.5, torch::kDouble));
  staging.bind(pwt::collect(*model, o));
  EXPECT_EQ(staging.stats().binds, 2U);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(staging.refs()[i].data(), buffers[i]);
  staging.to_layers();
  EXPECT_TRUE(same_bytes(staging.refs()[1], model->wide)) << "the new memory is staged";
  EXPECT_EQ(staging.stats().device_to_host, 2 * n);
}

// --- errors -------------------------------------------------------------------------------

TEST(TorchErrors, ReshapedParameterAfterWindowCreation) {
  Tiny model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*model));
  {
    torch::NoGradGuard no_grad;
    model->fc->weight.set_data(torch::zeros({5, 3}));
  }
  const std::string msg = message_of<pw::InvalidArgument>([&] { (void)pwt::publish(win, *model); });
  EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  const std::vector<int> donors{(world_rank() + 1) % world_size()};
  EXPECT_THROW((void)pwt::adopt(win, donors, *model), pw::InvalidArgument);

  // An added parameter is named too.
  Tiny grown;
  grown->register_parameter("extra", torch::zeros({2}));
  const std::string gmsg =
      message_of<pw::InvalidArgument>([&] { (void)pwt::publish(win, *grown); });
  EXPECT_NE(gmsg.find("'extra'"), std::string::npos) << gmsg;
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchErrors, NonContiguousParameter) {
  Tiny model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*model));
  {
    torch::NoGradGuard no_grad;
    model->fc->weight.set_data(torch::zeros({3, 2}).t());  // shape [2, 3], strides [1, 2]
  }
  const std::string msg = message_of<pw::InvalidArgument>([&] { (void)pwt::publish(win, *model); });
  EXPECT_NE(msg.find("'fc.weight' is not contiguous"), std::string::npos) << msg;
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchErrors, LayoutMismatchAcrossRanksThrowsOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  Net net(world_rank() == 1 ? 5 : 4);  // rank 1's hidden layer is wider
  EXPECT_THROW(pw::ParameterWindow<>(MPI_COMM_WORLD, pwt::layout_of(*net)), pw::LayoutMismatch);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  pw::AgentOptions ao;
  ao.selection.k = 1;
  EXPECT_THROW(pwt::TorchAgent(MPI_COMM_WORLD, *net, sgd, ao), pw::LayoutMismatch);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchErrors, LiveNeedsLiveWindow) {
  Tiny model;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*model));
  EXPECT_THROW(pwt::bind_live(win, *model), pw::InvalidArgument);
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- device tensors (needs a CUDA build of LibTorch and a GPU) -----------------------------

TEST(TorchDevice, CudaRoundTripStagesThroughHost) {
  PARAMWIN_REQUIRE_RANKS(2);
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device (this LibTorch build: CPU only); the staging path is "
                    "tested on CPU tensors with ModuleOptions::stage_through_host";
  }
  const int rank = world_rank();
  Net mine;
  fill_random(*mine, 100 + static_cast<std::uint64_t>(rank));
  mine->to(torch::kCUDA);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, pwt::layout_of(*mine));
  (void)pwt::publish(win, *mine);
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (rank + 1) % world_size();
  Net adopted;
  adopted->to(torch::kCUDA);
  const std::vector<int> donors{donor};
  (void)pwt::adopt(win, donors, *adopted);
  adopted->to(torch::kCPU);
  Net expected;
  fill_random(*expected, 100 + static_cast<std::uint64_t>(donor));
  expect_bit_equal(*adopted, *expected);
  MPI_Barrier(MPI_COMM_WORLD);
}

// read.timeout_seconds bounds a TorchAgent's step as an Agent's (tests/bounded_step_mpi_test
// for Agent and GroupAgent): the best donor computes 3 s without MPI, the bound is 0.3 s;
// the dying agent's step returns while the donor still computes, and its module is either
// reborn or unchanged (a deferred death).
TEST(TorchAgent, StepNeverWaitsLongerThanReadTimeout) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = world_rank();
  const int busy = world_size() - 1;
  for (pw::Transport t : {pw::Transport::shm, pw::Transport::rma}) {
    Tiny model;
    fill_random(*model, 70 + static_cast<std::uint64_t>(rank));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
    pw::AgentOptions ao;
    ao.triggers.age = {.enabled = true, .lo = 2, .hi = 2};
    ao.selection = {.kind = pw::SelectionKind::fittest, .k = 1};
    ao.read.timeout_seconds = 0.3;
    pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, ao, {}, {.transport = t});
    const double metric = rank == busy ? 0.0 : 1.0 + rank;
    (void)agent.step(0, metric);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (rank == busy) {
      while (MPI_Wtime() - t0 < 3.0) {
      }  // MPI_Wtime is a clock read, not an MPI call that progresses
    } else if (rank == 0) {
      std::vector<torch::Tensor> before;
      for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
      const pw::StepEvent ev = agent.step(1, metric);
      EXPECT_LT(MPI_Wtime() - t0, 3.0) << "TorchAgent::step waited for the busy donor";
      EXPECT_NE(ev.reason, pw::DeathReason::none);
      const auto params = model->parameters();
      bool same = true;
      for (std::size_t i = 0; i < params.size(); ++i) same = same && params[i].equal(before[i]);
      if (ev.died) {
        EXPECT_FALSE(same) << "reborn, yet the module kept its parameters";
      } else {
        EXPECT_TRUE(ev.deferred);
        EXPECT_TRUE(same) << "a deferred death changed the module";
        EXPECT_EQ(t, pw::Transport::rma) << "a shm read never waits: " << ev.note;
      }
    }
    if (rank != busy) {
      while (MPI_Wtime() - t0 < 3.2) agent.member().progress();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST(TorchDevice, CudaAgentCopiesOnlyWhenDataMoves) {
  PARAMWIN_REQUIRE_RANKS(2);
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device (this LibTorch build: CPU only); the same staging code is "
                    "tested on CPU tensors by TorchStaging.*";
  }
  Tiny model;
  fill_random(*model, 500 + static_cast<std::uint64_t>(world_rank()));
  model->to(torch::kCUDA);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  pw::AgentOptions ao;
  ao.triggers.age.enabled = false;
  ao.selection.k = 1;
  ao.publish.every = 4;
  // Host staging asked for: without it a CUDA module gets a device window (below).
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, std::move(ao),
                        {.device_windows = pwt::DeviceWindows::never});
  (void)agent.publish();
  EXPECT_EQ(agent.staging_stats().pinned_tensors, 3U);
  std::uint64_t publishes = 0;
  for (int step = 0; step < 20; ++step) {
    publishes += agent.step(step, 1.0).published ? 1U : 0U;
  }
  EXPECT_EQ(agent.staging_stats().device_to_host, 3 * (1 + publishes));
  EXPECT_EQ(agent.staging_stats().binds, 1U);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<double> mine = flat(*model);  // copies to the CPU
  expect_neighbour_reads(agent, mine, "cuda");
}

// A rebirth of a CUDA module: the donor's values land in the CUDA tensors (N host->device
// copies), the borrowed Adam forgets the replaced parameters; then the module moves to the
// CPU and back between steps and is rebound each time, and what it publishes is read back.
TEST(TorchDevice, CudaRebirthResetsAdamAndRebindsAfterMoves) {
  PARAMWIN_REQUIRE_RANKS(2);
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device (this LibTorch build: CPU only); rebirth and rebinding "
                    "are tested on CPU tensors by TorchAgent.* and TorchStaging.*";
  }
  const int rank = world_rank();
  Tiny model;
  fill_exact(*model, rank);
  model->to(torch::kCUDA);
  // Learning rate 0: Adam keeps moments for every parameter but the values stay exact, so
  // the reborn module must equal its donor's fill_exact bit for bit.
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.0));
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, adam, rank0_dies_at(3),
                        {.device_windows = pwt::DeviceWindows::never});
  (void)agent.publish();
  EXPECT_EQ(agent.staging_stats().pinned_tensors, 3U);
  MPI_Barrier(MPI_COMM_WORLD);
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({8, 3}).to(torch::kCUDA);
  const torch::Tensor y = torch::randn({8, 2}).to(torch::kCUDA);
  int rebirths = 0;
  for (int step = 0; step < 5; ++step) {
    adam.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    adam.step();
    EXPECT_EQ(adam.state().size(), 3U);
    const pw::StepEvent ev = agent.step(step, 1.0);
    if (!ev.died) continue;
    ++rebirths;
    EXPECT_TRUE(adam.state().empty()) << "Adam moments of the replaced parameters remain";
    ASSERT_EQ(ev.donors.size(), 1U);
    for (const torch::Tensor& p : model->parameters()) EXPECT_TRUE(p.is_cuda());
    Tiny expected;
    fill_exact(*expected, ev.donors[0].rank);
    EXPECT_EQ(flat(*model), flat(*expected)) << "the donor's values did not land on the GPU";
  }
  EXPECT_EQ(rebirths, rank == 0 ? 1 : 0);
  EXPECT_EQ(agent.staging_stats().host_to_device, 3U * static_cast<std::uint64_t>(rebirths));
  EXPECT_EQ(agent.staging_stats().binds, 1U);
  MPI_Barrier(MPI_COMM_WORLD);

  // Moved to the CPU: rebound, exchanged in place (nothing staged); back: staged and pinned.
  model->to(torch::kCPU);
  (void)agent.publish();
  EXPECT_EQ(agent.staging_stats().binds, 2U);
  EXPECT_EQ(agent.staging_stats().staged_tensors, 0U);
  model->to(torch::kCUDA);
  {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model->parameters()) p.add_(1.0);  // on the GPU
  }
  (void)agent.publish();
  EXPECT_EQ(agent.staging_stats().binds, 3U);
  EXPECT_EQ(agent.staging_stats().pinned_tensors, 3U);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_neighbour_reads(agent, flat(*model), "cuda after moves");
}

// A CUDA module gets a device window by default (docs/gpu.md): nothing is staged, a rebirth
// lands the donor's values in the CUDA tensors bit for bit, and the neighbour reads back what
// the module published (with a CUDA probe: a device window takes device memory only). Moving
// the module off its GPU is refused with a message naming the tensor.
TEST(TorchDevice, CudaAgentUsesADeviceWindow) {
  PARAMWIN_REQUIRE_RANKS(2);
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device (this LibTorch build: CPU only); device windows are "
                    "tested on a GPU (tests/cuda/device_window_mpi_test.cpp)";
  }
  const int rank = world_rank();
  Tiny model;
  fill_exact(*model, rank);
  model->to(torch::kCUDA);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, sgd, rank0_dies_at(3));
  EXPECT_EQ(agent.agent().window().options().memory, pw::Memory::cuda);
  (void)agent.publish();
  EXPECT_TRUE(agent.staging_stats().device_window);
  EXPECT_EQ(agent.staging_stats().staged_tensors, 0U);
  MPI_Barrier(MPI_COMM_WORLD);
  int rebirths = 0;
  for (int step = 0; step < 5; ++step) {
    const pw::StepEvent ev = agent.step(step, 1.0);
    if (!ev.died) continue;
    ++rebirths;
    ASSERT_EQ(ev.donors.size(), 1U);
    for (const torch::Tensor& p : model->parameters()) EXPECT_TRUE(p.is_cuda());
    Tiny expected;
    fill_exact(*expected, ev.donors[0].rank);
    EXPECT_EQ(flat(*model), flat(*expected)) << "the donor's values did not land on the GPU";
  }
  EXPECT_EQ(rebirths, rank == 0 ? 1 : 0);
  EXPECT_EQ(agent.staging_stats().device_to_host, 0U);
  EXPECT_EQ(agent.staging_stats().host_to_device, 0U);
  MPI_Barrier(MPI_COMM_WORLD);
  // The neighbour reads what this module holds (published by the last step or publish).
  (void)agent.publish();
  const std::vector<double> mine = flat(*model);
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world_size()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                static_cast<int>(mine.size()), MPI_DOUBLE, MPI_COMM_WORLD);
  const int donor = (rank + 1) % world_size();
  Tiny probe;
  probe->to(torch::kCUDA);
  (void)pwt::adopt(agent.agent().window(), std::vector<int>{donor}, *probe);
  const std::vector<double> got = flat(*probe);
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], all[static_cast<std::size_t>(donor) * mine.size() + i]) << "element " << i;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // Off the GPU: refused, naming the tensor.
  model->to(torch::kCPU);
  try {
    (void)agent.publish();
    ADD_FAILURE() << "a CPU module was published through a device window";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("device window on cuda:"), std::string::npos) << e.what();
  }
  model->to(torch::kCUDA);
  MPI_Barrier(MPI_COMM_WORLD);
}

// A CUDA module whose agent checkpoints every 2 steps (asynchronously) still gets a device
// window: the save copies its layers through the host, and a load writes them back into the
// CUDA tensors, with Adam's state from the optimizer's archive.
TEST(TorchDevice, CudaAgentCheckpointsThroughItsDeviceWindow) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device (this LibTorch build: CPU only); device windows are "
                    "tested on a GPU (tests/cuda/device_window_mpi_test.cpp)";
  }
  const std::string dir = "torch_adapter_mpi_test.np" + std::to_string(world_size());
  if (world_rank() == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  Tiny model;
  fill_exact(*model, world_rank());
  model->to(torch::kCUDA);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  pw::AgentOptions ao;
  ao.triggers.age.enabled = false;
  ao.checkpoint.every = 2;
  ao.checkpoint.async = true;
  ao.checkpoint.path = dir + "/cuda_every_{step}.h5";
  pwt::TorchAgent agent(MPI_COMM_WORLD, *model, adam, ao);
  EXPECT_EQ(agent.agent().window().options().memory, pw::Memory::cuda);
  const auto train = [&] { ones_step(*model, adam); };
  for (int step = 0; step < 4; ++step) {
    train();
    (void)agent.step(step, 1.0);
  }
  agent.wait_checkpoint();
  EXPECT_TRUE(agent.staging_stats().device_window);
  EXPECT_EQ(agent.staging_stats().device_to_host, 0U);
  const std::vector<double> saved = flat(*model);
  const auto adam_of = [&]() -> torch::optim::AdamParamState& {
    return adam_state(adam, model->scale);
  };
  const auto step_saved = adam_of().step();
  const std::string path = dir + "/cuda.h5";
  agent.save_checkpoint(path);
  train();
  train();
  ASSERT_NE(flat(*model), saved) << "training did not change the parameters";
  const pw::CheckpointLoad l = agent.load_checkpoint(path);
  EXPECT_EQ(l.source, world_rank());
  EXPECT_EQ(flat(*model), saved) << "rank " << world_rank();
  for (const torch::Tensor& p : model->parameters()) EXPECT_TRUE(p.is_cuda());
  EXPECT_EQ(adam_of().step(), step_saved);
  EXPECT_TRUE(adam_of().exp_avg().is_cuda());
  MPI_Barrier(MPI_COMM_WORLD);
}

// A grouped TorchAgent of a CUDA module (2 agents of 2 ranks) gets a device window: agent 0
// is reborn from agent 1 and both of its replicas hold agent 1's values, on the GPU.
TEST(TorchDevice, CudaGroupedAgentUsesADeviceWindow) {
  if (world_size() != 4) GTEST_SKIP() << "needs 2 agents of 2 ranks";
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device (this LibTorch build: CPU only); device windows are "
                    "tested on a GPU (tests/cuda/device_window_mpi_test.cpp)";
  }
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  Tiny model;
  fill_exact(*model, groups.agent());  // replicas of one agent are identical
  model->to(torch::kCUDA);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  pw::AgentOptions ao;
  ao.triggers.age.enabled = false;
  ao.triggers.custom = [](const pw::TriggerContext& c) { return c.rank == 0 && c.step == 2; };
  ao.selection.k = 1;
  pwt::TorchAgent agent(groups, *model, sgd, std::move(ao));
  EXPECT_EQ(agent.group_agent().window().options().memory, pw::Memory::cuda);
  (void)agent.publish();
  EXPECT_TRUE(agent.staging_stats().device_window);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int step = 1; step <= 3; ++step) {
    const pw::StepEvent ev = agent.step(step, 1.0);
    EXPECT_EQ(ev.died, groups.agent() == 0 && step == 2) << ev.note;
  }
  Tiny expected;
  fill_exact(*expected, 1);  // agent 1's values, on both agents now
  EXPECT_EQ(flat(*model), flat(*expected)) << "rank " << world_rank();
  for (const torch::Tensor& p : model->parameters()) EXPECT_TRUE(p.is_cuda());
  EXPECT_EQ(agent.staging_stats().device_to_host, 0U);
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- checkpoints of a grouped agent -----------------------------------------------------------

// A grouped TorchAgent (agents of 2 ranks) saves the population and loads it back: every rank
// of every agent gets the saved parameters and the optimizer's saved state (Adam's step count
// and moments) again, after training changed both.
TEST(TorchAgent, GroupedAgentCheckpointRestoresParametersAndOptimizerOnEveryRank) {
  if (world_size() < 2 || world_size() % 2 != 0) GTEST_SKIP() << "needs agents of 2 ranks";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  const std::string dir = "torch_adapter_mpi_test.np" + std::to_string(world_size());
  if (world_rank() == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string path = dir + "/grouped.h5";
  Tiny model;
  {
    torch::NoGradGuard no_grad;
    double offset = 10.0 * groups.agent();  // replicas of one agent are identical
    for (torch::Tensor& p : model->parameters()) {
      p.copy_(torch::arange(p.numel(), torch::kDouble).reshape(p.sizes()) + offset);
      offset += 0.5;
    }
  }
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  pw::AgentOptions ao;
  ao.triggers.age.enabled = false;
  ao.selection.k = 1;
  ao.selection.shortfall = pw::Shortfall::clamp;
  pwt::TorchAgent agent(groups, *model, adam, ao);
  EXPECT_TRUE(agent.grouped());
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto train = [&] { ones_step(*model, adam); };
  train();
  train();
  (void)agent.step(1, 1.0);
  const std::vector<double> saved = flat(*model);
  const auto adam_of = [&]() -> torch::optim::AdamParamState& {
    return adam_state(adam, model->scale);
  };
  const auto step_saved = adam_of().step();
  const double avg_saved = adam_of().exp_avg().sum().item<double>();
  agent.save_checkpoint(path);
  train();
  train();
  train();
  ASSERT_NE(flat(*model), saved) << "training did not change the parameters";
  ASSERT_NE(adam_of().step(), step_saved);
  const pw::CheckpointLoad l = agent.load_checkpoint(path);
  EXPECT_EQ(l.agents, groups.agents());
  EXPECT_EQ(l.source, groups.agent());
  EXPECT_FALSE(l.reborn);
  EXPECT_EQ(flat(*model), saved) << "rank " << world_rank();
  EXPECT_EQ(adam_of().step(), step_saved);
  EXPECT_EQ(adam_of().exp_avg().sum().item<double>(), avg_saved);
  agent.wait_checkpoint();  // nothing in flight: returns at once on every rank
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
