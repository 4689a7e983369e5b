// The LibTorch adapter under MPI, TorchAgent: optimizer reset and rebuild on rebirth, moves,
// the donor mix adopted into the module, pauses, grouped agents (shards, a module too big,
// live exposure refused, checkpoints), and the bound a read timeout puts on a step.
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
#include "torch_adapter_test_util.hpp"
#include "torch_test_util.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using pw::test::world_rank;
using pw::test::world_size;
using torch_adapter_test::adam_state;
using torch_adapter_test::expect_bit_equal;
using torch_adapter_test::fill_exact;
using torch_adapter_test::fill_random;
using torch_adapter_test::flat;
using torch_adapter_test::Net;
using torch_adapter_test::ones_step;
using torch_adapter_test::rank0_dies_at;
using torch_adapter_test::train_step;
using torch_test::message_of;
using torch_test::Tiny;

namespace {

// --- optimizer on rebirth ------------------------------------------------------------------

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
      // Agent 0 dies at step 2 and reads agent 1, which publishes at step 2: let agent 1's
      // step 2 end first. Otherwise agent 0's read can pin one of agent 1's shards while it
      // is republished, that publish is skipped, the shards' stamps differ and the death is
      // rightly deferred (seen once in 7 runs on 2 cores, 2026-12-02).
      const bool reader = groups.agent() == 0;
      if (step == 2 && reader) MPI_Barrier(MPI_COMM_WORLD);
      const pw::StepEvent ev = agent.step(step, 1.0);
      if (step == 2 && !reader) MPI_Barrier(MPI_COMM_WORLD);
      // Step 1 neither publishes (every = 2) nor dies: no copy on either rank of the agent;
      // step 2 publishes (and agent 0 dies); step 3 publishes only if step 2's was skipped.
      // A rebirth's pull (no momentum) and the republish of its mix stage nothing.
      const bool published = ev.published || ev.publish_skipped;
      if (step <= 2) {
        EXPECT_EQ(published, step == 2) << "step " << step;
      }
      EXPECT_EQ(agent.staging_stats().device_to_host - before, published && !ev.died ? n : 0U)
          << "step " << step;
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
