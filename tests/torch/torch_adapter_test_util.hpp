#pragma once
// Shared by the LibTorch adapter's tests (torch_adapter_*_mpi_test.cpp, one binary): a module
// with every supported dtype, exact and random fills, bit-wise comparison, one optimizer
// step, the age trigger that kills rank 0 only, and a neighbour's read of a published module.
#include <mpi.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/torch/agent.hpp"
#include "paramwin/torch/module.hpp"
#include "torch_test_util.hpp"

// Outside namespace paramwin: there `torch::` (in TORCH_MODULE) would name paramwin::torch.
namespace torch_adapter_test {

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using pw::test::world_rank;
using pw::test::world_size;
using torch_test::Tiny;

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
inline void fill_random(torch::nn::Module& m, std::uint64_t seed,
                        const pwt::ModuleOptions& o = {}) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (torch::Tensor& t : pwt::collect(m, o).tensors) {
    t.copy_(torch::randn(t.sizes(), torch::kDouble).to(t.scalar_type()));
  }
}

/// Exact small values: rank * 4 + layer offset + i (exact in every supported dtype).
inline void fill_exact(torch::nn::Module& m, int rank, const pwt::ModuleOptions& o = {}) {
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
inline void expect_bit_equal(torch::nn::Module& a, torch::nn::Module& b,
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
inline void ones_step(torch::nn::Module& m, torch::optim::Optimizer& opt) {
  for (torch::Tensor& p : m.parameters()) p.mutable_grad() = torch::ones_like(p);
  opt.step();
}

/// Adam's state of @p param (a failure, and a crash, when it has none).
inline torch::optim::AdamParamState& adam_state(torch::optim::Optimizer& adam,
                                                const torch::Tensor& param) {
  torch::optim::OptimizerParamState* s = pwt::optimizer_state(adam, param);
  EXPECT_NE(s, nullptr);
  return static_cast<torch::optim::AdamParamState&>(*s);
}

/// Trains @p model on a fixed batch for one step with @p opt; returns the loss.
inline double train_step(Tiny& model, torch::optim::Optimizer& opt) {
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({8, 3});
  const torch::Tensor y = torch::randn({8, 2});
  opt.zero_grad();
  torch::Tensor loss = torch::mse_loss(model->forward(x), y);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

inline pw::AgentOptions rank0_dies_at(std::int64_t age) {
  pw::AgentOptions o;
  const bool dies = world_rank() == 0;
  o.triggers.age = {.enabled = true, .lo = dies ? age : 100000, .hi = dies ? age : 100000};
  o.selection.k = 1;
  return o;
}

/// Every exchanged tensor of @p m, as doubles, concatenated in layout order.
inline std::vector<double> flat(torch::nn::Module& m) {
  std::vector<double> out;
  for (const torch::Tensor& t : pwt::collect(m).tensors) {
    const torch::Tensor d = t.detach().cpu().to(torch::kDouble).contiguous().reshape({-1});
    out.insert(out.end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  }
  return out;
}

/// Checks that what @p agent's window holds as this rank's latest snapshot is what its module
/// held at its latest publish (@p published): its neighbour reads it and compares.
inline void expect_neighbour_reads(pwt::TorchAgent& agent, const std::vector<double>& published,
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

}  // namespace torch_adapter_test
