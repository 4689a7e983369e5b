// The LibTorch adapter under MPI, device tensors (a CUDA build of LibTorch and a GPU; skipped
// otherwise): round trips staged through host, copies only when data moves, rebirths,
// device windows for solo and grouped agents, checkpoints through a device window.
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
using torch_adapter_test::expect_neighbour_reads;
using torch_adapter_test::fill_exact;
using torch_adapter_test::fill_random;
using torch_adapter_test::flat;
using torch_adapter_test::Net;
using torch_adapter_test::ones_step;
using torch_adapter_test::rank0_dies_at;
using torch_test::Tiny;

namespace {

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

}  // namespace
