// The LibTorch adapter under MPI, modules and windows: layouts from modules (0-dim
// parameters, buffers, dtypes), bit-exact publish/adopt round trips (direct, adapter-staged,
// core-staged, live), and donor averages landing in the right tensors.
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
using torch_adapter_test::expect_bit_equal;
using torch_adapter_test::fill_exact;
using torch_adapter_test::fill_random;
using torch_adapter_test::Net;
using torch_test::message_of;
using torch_test::Tiny;

namespace {

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

}  // namespace
