// The LibTorch adapter under MPI, staging: host copies only on steps that move data, a
// replaced parameter bound on the next step, and the staging unit (device_staging.hpp) on CPU
// tensors.
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
#include "torch_adapter_test_util.hpp"
#include "torch_test_util.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using pw::test::world_rank;
using torch_adapter_test::expect_neighbour_reads;
using torch_adapter_test::fill_exact;
using torch_adapter_test::fill_random;
using torch_adapter_test::flat;
using torch_adapter_test::Net;
using torch_adapter_test::train_step;
using torch_test::message_of;
using torch_test::Tiny;

namespace {

// --- staging: host copies only on steps that move data --------------------------------------

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

    std::uint64_t data_steps = 0;  // steps that staged the module (read the parameters)
    std::uint64_t publishes = 0;
    std::uint64_t rebirths = 0;
    for (int step = 0; step < 100; ++step) {
      const double loss = train_step(model, sgd);
      const std::uint64_t before = agent.staging_stats().device_to_host;
      const pw::StepEvent ev = agent.step(step, loss);
      const bool published = ev.published || ev.publish_skipped;  // both read the parameters
      publishes += published ? 1U : 0U;
      rebirths += ev.died ? 1U : 0U;
      // A rebirth (no momentum) overwrites the parameters whole: the module is not staged for
      // its pull, nor for the republish of the mix it was given (only after a user callback,
      // which may have changed it). A failed pull stages nothing either: the publish does.
      const bool moved = published && !ev.died;
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

}  // namespace
