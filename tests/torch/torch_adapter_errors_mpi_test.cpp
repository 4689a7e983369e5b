// The LibTorch adapter under MPI, errors: unsupported dtypes are in the layout tests; here
// reshaped and non-contiguous parameters, layouts that differ across ranks, live exposure
// without a live window.
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
using torch_adapter_test::Net;
using torch_test::message_of;
using torch_test::Tiny;

namespace {

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

}  // namespace
