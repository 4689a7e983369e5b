// paramwin::torch::AveragingAgent (the core's AveragingAgent over a torch module): every mix of
// the module's tensors equals the exact weighted mix of the peer versions it recorded (every
// rank records what it published, gathered at the end), in place and staged through host
// buffers; consensus with training off; background corrections keep the local progress; the
// optimizer's state is mixed with the same weights when asked and kept otherwise; modules of
// another layout, unsupported or non-contiguous parameters and a module that no longer fits
// are refused on every rank (and by the elastic agent before it creates anything); a
// checkpoint resumes the module and Adam exactly. The CUDA case skips without a GPU.
#include <mpi.h>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/error.hpp"
#include "paramwin/torch/averaging.hpp"
#include "paramwin/torch/elastic_averaging.hpp"
#include "paramwin/torch/module.hpp"
#include "torch_test_util.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using pw::test::world_rank;
using pw::test::world_size;
using torch_test::message_of;

namespace {

/// A module with float32 and float64 parameters: fc.weight [2, 3], fc.bias [2] (float32),
/// offset [4] (float64).
struct MixNetImpl : torch::nn::Module {
  MixNetImpl() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    offset = register_parameter("offset", torch::zeros({4}, torch::kDouble));
  }
  torch::nn::Linear fc{nullptr};
  torch::Tensor offset;
};
TORCH_MODULE(MixNet);

/// Every exchanged tensor of @p m as doubles, in layout order.
std::vector<double> flat(torch::nn::Module& m) {
  std::vector<double> out;
  for (const torch::Tensor& t : pwt::collect(m).tensors) {
    const torch::Tensor d = t.detach().cpu().to(torch::kDouble).contiguous().reshape({-1});
    out.insert(out.end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  }
  return out;
}

/// Per element of flat(m): whether it is float32 (else float64).
std::vector<bool> float32_elements(torch::nn::Module& m) {
  std::vector<bool> out;
  for (const torch::Tensor& t : pwt::collect(m).tensors) {
    out.insert(out.end(), static_cast<std::size_t>(t.numel()), t.scalar_type() == torch::kFloat);
  }
  return out;
}

/// Rank-dependent start values in [0, 1).
void init(torch::nn::Module& m, int rank) {
  torch::NoGradGuard no_grad;
  std::size_t i = 0;
  for (torch::Tensor& t : pwt::collect(m).tensors) {
    std::vector<double> v(static_cast<std::size_t>(t.numel()));
    for (double& x : v) {
      x = std::fmod(0.137 * (rank + 1) + 0.071 * static_cast<double>(i++), 1.0);
    }
    t.copy_(torch::tensor(v, torch::kDouble).reshape(t.sizes()).to(t.scalar_type()));
  }
}

/// Local "training": a known, rank- and step-dependent move of every element.
void train(torch::nn::Module& m, int rank, std::int64_t step) {
  torch::NoGradGuard no_grad;
  std::size_t i = 0;
  for (torch::Tensor& t : pwt::collect(m).tensors) {
    std::vector<double> d(static_cast<std::size_t>(t.numel()));
    for (double& x : d) {
      x = 0.01 * std::sin(0.3 * static_cast<double>(step) + rank + 0.5 * static_cast<double>(i++));
    }
    t.add_(torch::tensor(d, torch::kDouble).reshape(t.sizes()).to(t.device(), t.scalar_type()));
  }
}

bool has_text(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool close(double got, double want, bool float32) {
  const double tol = float32 ? 2e-6 * std::max(1.0, std::abs(want)) : 1e-12;
  return std::abs(got - want) <= tol;
}

/// Every rank's published values by (rank, version), with the stamp, gathered everywhere.
struct Published {
  std::size_t n = 0;  // values per snapshot
  std::map<std::pair<int, std::uint64_t>, std::pair<std::uint64_t, std::vector<double>>> table;

  void add(int rank, std::uint64_t version, std::uint64_t stamp, std::vector<double> values) {
    n = values.size();
    table[{rank, version}] = {stamp, std::move(values)};
  }
  void gather() {
    std::vector<double> mine;
    for (const auto& [key, value] : table) {
      mine.push_back(key.first);
      mine.push_back(static_cast<double>(key.second));
      mine.push_back(static_cast<double>(value.first));
      mine.insert(mine.end(), value.second.begin(), value.second.end());
    }
    const std::vector<double> all = pw::test::allgather_doubles(mine);
    for (std::size_t at = 0; at + 3 + n <= all.size(); at += 3 + n) {
      std::vector<double> v(all.begin() + static_cast<std::ptrdiff_t>(at + 3),
                            all.begin() + static_cast<std::ptrdiff_t>(at + 3 + n));
      table[{static_cast<int>(all[at]), static_cast<std::uint64_t>(all[at + 1])}] =
          {static_cast<std::uint64_t>(all[at + 2]), v};
    }
  }
};

/// One step as the test saw it.
struct Record {
  std::vector<double> before;  // after training, before step()
  std::vector<double> after;
  pw::AveragingRound round;
};

/// What the agent publishes besides the module: nothing, or the optimizer's state.
using Snapshot = std::vector<double> (*)(torch::nn::Module&, torch::optim::Optimizer*);

std::vector<double> module_only(torch::nn::Module& m, torch::optim::Optimizer* /*unused*/) {
  return flat(m);
}

/// The expected mix of @p rec: self * before + sum weight_i * published_i (peer values looked
/// up by the version the round recorded).
std::vector<double> expected_mix(const pw::AveragingRound& round, const std::vector<double>& own,
                                 const Published& published) {
  std::vector<double> want(own.size());
  for (std::size_t i = 0; i < own.size(); ++i) want[i] = round.self_weight * own[i];
  double total = round.self_weight;
  for (const pw::AveragingPeer& peer : round.peers) {
    if (peer.skipped != pw::SkipReason::none) {
      EXPECT_EQ(peer.weight, 0.0);
      continue;
    }
    const auto it = published.table.find({peer.rank, peer.version});
    EXPECT_NE(it, published.table.end()) << "rank " << peer.rank << " v" << peer.version;
    if (it == published.table.end()) return {};
    EXPECT_EQ(peer.stamp, it->second.first) << "stamp of rank " << peer.rank;
    for (std::size_t i = 0; i < own.size(); ++i) want[i] += peer.weight * it->second.second[i];
    total += peer.weight;
  }
  EXPECT_NEAR(total, 1.0, 1e-12) << "weights of step " << round.step;
  return want;
}

/// Trains and steps @p steps times (no barrier: the ranks interleave freely), recording every
/// step and every publish; then gathers the publishes.
std::vector<Record> run(pwt::AveragingAgent& agent, torch::nn::Module& m, Published& published,
                        int steps, torch::optim::Optimizer* opt = nullptr,
                        Snapshot snapshot = module_only) {
  const int rank = agent.rank();
  const pw::PublishResult first = agent.publish();
  published.add(rank, first.version, 0, snapshot(m, opt));
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<Record> records;
  for (int t = 1; t <= steps; ++t) {
    if (opt != nullptr) {
      for (torch::Tensor& p : m.parameters()) p.mutable_grad() = torch::full_like(p, 0.1 * t);
      opt->step();
    } else {
      train(m, rank, t);
    }
    Record rec{.before = snapshot(m, opt), .after = {}, .round = {}};
    rec.round = agent.step();
    rec.after = snapshot(m, opt);
    if (rec.round.published) {
      published.add(rank, rec.round.version, static_cast<std::uint64_t>(t), rec.after);
    }
    records.push_back(std::move(rec));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every publish done before the table is gathered
  published.gather();
  return records;
}

/// Runs @p options for 30 steps with training on; checks every step of the module @p m
/// against the table; returns the number of steps that mixed peers in.
int exact_mixes(torch::nn::Module& m, const pw::AveragingOptions& options,
                const pwt::TorchAveragingOptions& torch_options = {}) {
  const int rank = world_rank();
  init(m, rank);
  const std::vector<bool> f32 = float32_elements(m);
  Published published;
  int mixed = 0;
  pwt::AveragingAgent agent(MPI_COMM_WORLD, m, options, torch_options);
  const std::vector<Record> records = run(agent, m, published, 30);
  for (const Record& rec : records) {
    if (rec.round.kind == pw::RoundKind::gossip && rec.round.applied) {
      const std::vector<double> want = expected_mix(rec.round, rec.before, published);
      if (want.empty()) continue;
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_TRUE(close(rec.after[i], want[i], f32[i]))
            << "rank " << rank << " step " << rec.round.step << " element " << i << ": "
            << rec.after[i] << " != " << want[i];
      }
      ++mixed;
    } else if (rec.round.kind == pw::RoundKind::none) {
      EXPECT_EQ(rec.after, rec.before) << "step " << rec.round.step << " changed without a round";
    }
  }
  return mixed;
}

}  // namespace

TEST(TorchAveragingExact, EveryMixOfTheModuleEqualsTheWeightedMixOfTheRecordedPeerVersions) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = world_size();
  std::vector<pw::AveragingOptions> cases(3);
  cases[1].topology = pw::Topology::ring_peers();  // weights given: self 0.4, peers 0.6
  cases[1].self_weight = 0.4;
  cases[1].peer_weights = n == 2 ? std::vector<double>{0.6} : std::vector<double>{0.2, 0.4};
  cases[2].topology = pw::Topology::random_peers(1, 5);
  cases[2].interval = 2;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    MixNet m;
    const int mixed = exact_mixes(*m, cases[c]);
    EXPECT_GT(mixed, 0) << "case " << c << " never mixed a peer in";
  }
}

TEST(TorchAveragingExact, CpuTensorsAreMixedInPlaceAndStagedOnesThroughHostBuffers) {
  PARAMWIN_REQUIRE_RANKS(2);
  {
    MixNet m;
    const void* weight = m->fc->weight.data_ptr();
    pwt::AveragingAgent agent(MPI_COMM_WORLD, *m);
    (void)agent.publish();
    MPI_Barrier(MPI_COMM_WORLD);
    for (int t = 0; t < 5; ++t) (void)agent.step();
    EXPECT_EQ(m->fc->weight.data_ptr(), weight);  // the core wrote the tensor's own memory
    EXPECT_EQ(agent.staging_stats().staged_tensors, 0U);
    EXPECT_EQ(agent.staging_stats().device_to_host, 0U);
    EXPECT_EQ(agent.staging_stats().host_to_device, 0U);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // ModuleOptions::stage_through_host: the path CUDA tensors take, on CPU tensors.
  pw::AveragingOptions o;
  o.topology = pw::Topology::ring_peers();
  pwt::TorchAveragingOptions to;
  to.module.stage_through_host = true;
  MixNet m;
  const int mixed = exact_mixes(*m, o, to);
  EXPECT_GT(mixed, 0);
}

TEST(TorchAveragingExact, StagedCopiesAreOnePerTensorAndStepAndBackOnlyWhenMixed) {
  PARAMWIN_REQUIRE_RANKS(2);
  pwt::TorchAveragingOptions to;
  to.module.stage_through_host = true;
  MixNet m;
  init(*m, world_rank());
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, {}, to);
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  std::uint64_t applied = 0;
  for (int t = 0; t < 10; ++t) applied += agent.step().applied ? 1U : 0U;
  const pwt::TorchStagingStats& s = agent.staging_stats();
  EXPECT_EQ(s.staged_tensors, 3U);
  EXPECT_EQ(s.pinned_tensors, 0U);
  EXPECT_EQ(s.binds, 1U);
  EXPECT_EQ(s.device_to_host, 3U * 11U);  // the publish and every step
  EXPECT_EQ(s.host_to_device, 3U * applied);
  EXPECT_GT(applied, 0U);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(TorchAveragingConsensus, TrainingOffTheRanksReachOneValueWithin1e6) {
  PARAMWIN_REQUIRE_RANKS(2);
  for (const pw::Topology& topology : {pw::Topology::all_peers(), pw::Topology::ring_peers()}) {
    pw::AveragingOptions o;
    o.topology = topology;
    MixNet m;
    init(*m, world_rank());
    pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, o);
    (void)agent.publish();
    MPI_Barrier(MPI_COMM_WORLD);
    int rounds = -1;
    for (int r = 1; r <= 400 && rounds < 0; ++r) {
      (void)agent.step();
      MPI_Barrier(MPI_COMM_WORLD);
      std::vector<double> v = flat(*m);
      std::vector<double> lo(v.size());
      std::vector<double> hi(v.size());
      MPI_Allreduce(v.data(), lo.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MIN,
                    MPI_COMM_WORLD);
      MPI_Allreduce(v.data(), hi.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX,
                    MPI_COMM_WORLD);
      double spread = 0.0;
      for (std::size_t i = 0; i < v.size(); ++i) spread = std::max(spread, hi[i] - lo[i]);
      if (spread <= 1e-6) rounds = r;
    }
    EXPECT_GT(rounds, 0) << "topology " << pw::enum_name(topology.kind)
                         << " did not reach consensus in 400 rounds";
    if (world_rank() == 0) {
      std::printf("torch consensus np%d %-4s %3d rounds\n", world_size(),
                  std::string(pw::enum_name(topology.kind)).c_str(), rounds);
    }
  }
}

TEST(TorchAveragingBackground, TheCorrectionIsAppliedAtTheNextStepKeepingTheLocalProgress) {
  PARAMWIN_REQUIRE_RANKS(2);
  pw::AveragingOptions o;
  o.background = true;
  // The read inside the step, so that its correction lands at the very next step (the
  // worker's asynchronous landing is checked by the core's averaging_mpi_test).
  o.background_worker = false;
  o.topology = pw::Topology::random_peers(1, 11);
  MixNet m;
  init(*m, world_rank());
  const std::vector<bool> f32 = float32_elements(*m);
  Published published;
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, o);
  const std::vector<Record> records = run(agent, *m, published, 20);
  int kept = 0;
  for (std::size_t t = 1; t < records.size(); ++t) {
    const Record& read = records[t - 1];  // the round that read
    const Record& rec = records[t];       // the step that applied it
    EXPECT_EQ(rec.round.background_applied,
              read.round.kind == pw::RoundKind::gossip && read.round.note.empty());
    if (!rec.round.background_applied) continue;
    // own_now + (mix - own_at_read), mix = self * own_at_read + sum w_i peer_i.
    const std::vector<double> mix = expected_mix(read.round, read.after, published);
    if (mix.empty()) continue;
    for (std::size_t i = 0; i < mix.size(); ++i) {
      const double want = rec.before[i] + (mix[i] - read.after[i]);
      EXPECT_TRUE(close(rec.after[i], want, f32[i])) << "step " << t + 1 << " element " << i;
    }
    ++kept;
  }
  EXPECT_GT(kept, 10);
}

TEST(TorchAveragingSync, WarmupAndFinishAreTheExactMeanAndPauseIsForwarded) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int n = world_size();
  pw::AveragingOptions o;
  o.warmup_steps = 2;
  MixNet m;
  init(*m, world_rank());
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, o);
  for (int t = 1; t <= 2; ++t) {
    train(*m, world_rank(), t);
    std::vector<double> v = flat(*m);
    std::vector<double> sum(v.size());
    MPI_Allreduce(v.data(), sum.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    const pw::AveragingRound r = agent.step();
    EXPECT_EQ(r.kind, pw::RoundKind::synchronous);
    const std::vector<double> after = flat(*m);
    const std::vector<bool> f32 = float32_elements(*m);
    for (std::size_t i = 0; i < v.size(); ++i) {
      EXPECT_TRUE(close(after[i], sum[i] / n, f32[i])) << "warm-up step " << t << " element " << i;
    }
  }
  if (world_rank() == 0) {
    agent.pause();
    EXPECT_TRUE(agent.is_paused());
    const pw::AveragingRound r = agent.step();
    EXPECT_TRUE(r.paused);
    EXPECT_FALSE(r.published);
    agent.resume();
    EXPECT_FALSE(agent.is_paused());
  }
  train(*m, world_rank(), 3);
  (void)agent.finish();
  const std::vector<double> mine = flat(*m);
  std::vector<double> rank0 = mine;
  MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(mine, rank0) << "finish() left the ranks different";
}

TEST(TorchAveragingSync, AMovedFromAgentThrowsAndTheMovedToOneAverages) {
  PARAMWIN_REQUIRE_RANKS(2);
  MixNet m;
  init(*m, world_rank());
  pwt::AveragingAgent a(MPI_COMM_WORLD, *m);
  pwt::AveragingAgent b(std::move(a));
  EXPECT_TRUE(has_text(message_of<pw::Error>([&] { (void)a.step(); }), "moved from"));  // NOLINT
  (void)b.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(b.step().applied);
  EXPECT_EQ(&b.module(), m.get());
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- the optimizer's state ---------------------------------------------------------------------

namespace {

/// The module, then per parameter Adam's exp_avg, exp_avg_sq and step (the agent's layers with
/// mix_optimizer_state, in their order); a parameter without state gives zeros.
std::vector<double> with_adam_state(torch::nn::Module& m, torch::optim::Optimizer* opt) {
  std::vector<double> out = flat(m);
  for (const torch::Tensor& p : m.parameters()) {
    torch::optim::OptimizerParamState* s = pwt::optimizer_state(*opt, p);
    const auto* adam = static_cast<torch::optim::AdamParamState*>(s);
    for (int field = 0; field < 2; ++field) {
      torch::Tensor t = adam == nullptr ? torch::zeros_like(p)
                                        : (field == 0 ? adam->exp_avg() : adam->exp_avg_sq());
      t = t.detach().to(torch::kDouble).contiguous().reshape({-1});
      out.insert(out.end(), t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    }
    out.push_back(adam == nullptr ? 0.0 : static_cast<double>(adam->step()));
  }
  return out;
}

/// Per element of with_adam_state(): 0 float64, 1 float32, 2 a step count (each rank's own).
std::vector<int> adam_kinds(torch::nn::Module& m) {
  std::vector<int> out;
  for (const torch::Tensor& t : pwt::collect(m).tensors) {
    out.insert(out.end(), static_cast<std::size_t>(t.numel()), t.scalar_type() == torch::kFloat);
  }
  for (const torch::Tensor& p : m.parameters()) {
    out.insert(out.end(), 2 * static_cast<std::size_t>(p.numel()),
               p.scalar_type() == torch::kFloat);
    out.push_back(2);
  }
  return out;
}

}  // namespace

TEST(TorchAveragingOptimizer, AdamStateIsMixedWithTheParametersWeightsWhenAsked) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = world_rank();
  MixNet m;
  init(*m, rank);
  // Different learning rates: the ranks' moments and parameters differ.
  torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-2 * (rank + 1)));
  // Rank 0 starts two optimizer steps ahead (its step count differs from the others').
  for (int t = 0; t < (rank == 0 ? 2 : 0); ++t) {
    for (torch::Tensor& p : m->parameters()) p.mutable_grad() = torch::ones_like(p);
    adam.step();
  }
  pw::AveragingOptions o;
  o.topology = pw::Topology::all_peers();
  pwt::TorchAveragingOptions to;
  to.mix_optimizer_state = true;
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, adam, o, to);
  EXPECT_EQ(agent.averaging().window().layout().size(), 3U + 3U * 3U);
  Published published;
  const std::vector<Record> records = run(agent, *m, published, 12, &adam, with_adam_state);
  const std::vector<int> kinds = adam_kinds(*m);
  int mixed = 0;
  for (const Record& rec : records) {
    if (rec.round.kind != pw::RoundKind::gossip || !rec.round.applied) continue;
    const std::vector<double> want = expected_mix(rec.round, rec.before, published);
    if (want.empty()) continue;
    ASSERT_EQ(want.size(), kinds.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (kinds[i] == 2) {
        // Adam's step count is each rank's own: the mix of the moments never changes it.
        EXPECT_EQ(rec.after[i], rec.before[i])
            << "rank " << rank << " step " << rec.round.step << ": Adam's step, element " << i;
      } else {
        EXPECT_TRUE(close(rec.after[i], want[i], kinds[i] == 1))
            << "rank " << rank << " step " << rec.round.step << " element " << i << ": "
            << rec.after[i] << " != " << want[i];
      }
    }
    ++mixed;
  }
  EXPECT_GT(mixed, 0);
  EXPECT_EQ(agent.optimizer_states_mixed(), 3U * static_cast<std::uint64_t>(mixed));
  // Adam has made its moments on every rank by now: the rounds mix them in place (the 6
  // moment layers are Adam's own tensors) and a further round copies nothing for them.
  EXPECT_EQ(agent.staging_stats().state_layers_in_place, 6U);
  const std::uint64_t copies = agent.staging_stats().state_copies;
  (void)agent.step();
  EXPECT_EQ(agent.staging_stats().state_copies, copies);
}

namespace {

/// The module, then per parameter SGD's momentum buffer and its presence (1 or 0).
std::vector<double> with_sgd_state(torch::nn::Module& m, torch::optim::Optimizer* opt) {
  std::vector<double> out = flat(m);
  for (const torch::Tensor& p : m.parameters()) {
    const auto* sgd = static_cast<torch::optim::SGDParamState*>(pwt::optimizer_state(*opt, p));
    const bool present = sgd != nullptr && sgd->momentum_buffer().defined();
    const torch::Tensor t = (present ? sgd->momentum_buffer() : torch::zeros_like(p))
                                .detach()
                                .to(torch::kDouble)
                                .contiguous()
                                .reshape({-1});
    out.insert(out.end(), t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    out.push_back(present ? 1.0 : 0.0);
  }
  return out;
}

}  // namespace

TEST(TorchAveragingOptimizer, SgdMomentumBuffersAreMixedWithTheParametersWeights) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = world_rank();
  MixNet m;
  init(*m, rank);
  torch::optim::SGD sgd(m->parameters(),
                        torch::optim::SGDOptions(1e-2 * (rank + 1)).momentum(0.5 + 0.1 * rank));
  pw::AveragingOptions o;
  o.topology = pw::Topology::ring_peers();
  pwt::TorchAveragingOptions to;
  to.mix_optimizer_state = true;
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, sgd, o, to);
  Published published;
  const std::vector<Record> records = run(agent, *m, published, 12, &sgd, with_sgd_state);
  // Per element: 1 float32, 0 float64, 2 the presence flag (each rank's own).
  std::vector<int> kinds;
  for (const torch::Tensor& t : pwt::collect(*m).tensors) {
    kinds.insert(kinds.end(), static_cast<std::size_t>(t.numel()),
                 t.scalar_type() == torch::kFloat);
  }
  for (const torch::Tensor& p : m->parameters()) {
    kinds.insert(kinds.end(), static_cast<std::size_t>(p.numel()),
                 p.scalar_type() == torch::kFloat);
    kinds.push_back(2);
  }
  int mixed = 0;
  for (const Record& rec : records) {
    if (rec.round.kind != pw::RoundKind::gossip || !rec.round.applied) continue;
    const std::vector<double> want = expected_mix(rec.round, rec.before, published);
    if (want.empty()) continue;
    ASSERT_EQ(want.size(), kinds.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (kinds[i] == 2) {
        EXPECT_EQ(rec.after[i], 1.0) << "a mixed momentum buffer is always written";
      } else {
        EXPECT_TRUE(close(rec.after[i], want[i], kinds[i] == 1))
            << "rank " << rank << " step " << rec.round.step << " element " << i << ": "
            << rec.after[i] << " != " << want[i];
      }
    }
    ++mixed;
  }
  EXPECT_GT(mixed, 0);
  EXPECT_EQ(agent.optimizer_states_mixed(), 3U * static_cast<std::uint64_t>(mixed));
}

TEST(TorchAveragingOptimizer, WithoutTheOptionEveryRankKeepsItsOwnState) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = world_rank();
  MixNet m;
  init(*m, rank);
  torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-2 * (rank + 1)));
  for (torch::Tensor& p : m->parameters()) p.mutable_grad() = torch::ones_like(p);
  adam.step();
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, adam);
  EXPECT_EQ(agent.averaging().window().layout().size(), 3U);
  (void)agent.publish();
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<double> before = with_adam_state(*m, &adam);
  const std::size_t params = flat(*m).size();
  bool applied = false;
  for (int t = 0; t < 5; ++t) applied = agent.step().applied || applied;
  EXPECT_TRUE(applied);
  const std::vector<double> after = with_adam_state(*m, &adam);
  EXPECT_NE(std::vector<double>(after.begin(), after.begin() + static_cast<std::ptrdiff_t>(params)),
            std::vector<double>(before.begin(),
                                before.begin() + static_cast<std::ptrdiff_t>(params)))
      << "the parameters were not mixed";
  EXPECT_EQ(std::vector<double>(after.begin() + static_cast<std::ptrdiff_t>(params), after.end()),
            std::vector<double>(before.begin() + static_cast<std::ptrdiff_t>(params), before.end()))
      << "the optimizer's state changed";
  EXPECT_EQ(agent.optimizer_states_mixed(), 0U);
  MPI_Barrier(MPI_COMM_WORLD);
}

// --- bad input: every rank throws -------------------------------------------------------------

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// @p make throws E on every rank: the last rank's message holds @p text, the others' name
/// the last rank as the failing one (when @p named).
template <class E, class F>
void refused_on_every_rank(F&& make, const std::string& text, bool named = true) {
  const int last = world_size() - 1;
  const std::string what = message_of<E>(make);
  if (world_rank() == last || !named) {
    EXPECT_TRUE(has(what, text)) << "rank " << world_rank() << ": " << what;
  } else {
    EXPECT_TRUE(has(what, "rank " + std::to_string(last) + " failed")) << what;
    EXPECT_TRUE(has(what, text)) << what;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST(TorchAveragingBadInput, ModulesThatCannotBeAveragedAreRefusedOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  const bool last = world_rank() == world_size() - 1;
  // Another layout on one rank: the core's LayoutMismatch, on every rank.
  refused_on_every_rank<pw::LayoutMismatch>(
      [&] {
        torch::nn::Linear lin(3, last ? 3 : 2);
        pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin);
      },
      "every rank needs the same layout", /*named=*/false);
  // A parameter of an unsupported dtype on one rank.
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        if (last) lin->register_parameter("index", torch::zeros({2}, torch::kLong), false);
        pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin);
      },
      "which paramwin cannot exchange");
  // A non-contiguous parameter on one rank.
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 3);
        if (last) {
          torch::NoGradGuard no_grad;
          lin->weight.set_data(lin->weight.t().contiguous().t());
        }
        pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin);
      },
      "is not contiguous");
  // Optimizer state of an optimizer that has none we know, and without an optimizer.
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        pwt::TorchAveragingOptions to;
        to.mix_optimizer_state = true;
        if (last) {
          torch::optim::RMSprop rms(lin->parameters());
          pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin, rms, {}, to);
        } else {
          torch::optim::Adam adam(lin->parameters());
          pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin, adam, {}, to);
        }
      },
      "RMSprop");
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        pwt::TorchAveragingOptions to;
        to.mix_optimizer_state = last;
        pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin, {}, to);
      },
      "mix_optimizer_state needs an optimizer");
  // The core's option checks apply (here: bfloat16 with a warm-up).
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        if (last) lin->to(torch::kBFloat16);
        pw::AveragingOptions o;
        o.warmup_steps = last ? 1 : 0;
        pwt::AveragingAgent agent(MPI_COMM_WORLD, *lin, o);
      },
      "float32 or float64");
}

// The elastic agent's refusals come before anything is created (no membership, no window: an
// elastic window is never freed), on every process: the adapter's, then the core's.
TEST(TorchAveragingBadInput, TheElasticAgentRefusesOnEveryProcessBeforeItCreatesAnything) {
  PARAMWIN_REQUIRE_RANKS(2);
  const bool last = world_rank() == world_size() - 1;
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        pwt::TorchAveragingOptions to;
        to.mix_optimizer_state = last;
        pwt::ElasticAveragingAgent agent(MPI_COMM_WORLD, *lin, {}, to);
      },
      "mix_optimizer_state needs an optimizer");
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        pw::AveragingOptions o;
        if (last) o.window.memory = pw::Memory::cuda;
        pwt::ElasticAveragingAgent agent(MPI_COMM_WORLD, *lin, o);
      },
      "ElasticAveragingAgent stages CUDA tensors through host memory");
  refused_on_every_rank<pw::InvalidArgument>(
      [&] {
        torch::nn::Linear lin(3, 2);
        pw::AveragingOptions o;
        o.warmup_steps = last ? 5 : 0;
        pwt::ElasticAveragingAgent agent(MPI_COMM_WORLD, *lin, o);
      },
      "warm-up, cool-down and symmetric averaging are collective");
  refused_on_every_rank<pw::LayoutMismatch>(
      [&] {
        torch::nn::Linear lin(3, last ? 3 : 2);
        pwt::ElasticAveragingAgent agent(MPI_COMM_WORLD, *lin);
      },
      "every process needs the same layout", /*named=*/false);
}

TEST(TorchAveragingBadInput, AModuleThatNoLongerFitsFailsASynchronousStepOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  const bool last = world_rank() == world_size() - 1;
  pw::AveragingOptions o;
  o.warmup_steps = 3;
  MixNet m;
  init(*m, world_rank());
  pwt::AveragingAgent agent(MPI_COMM_WORLD, *m, o);
  (void)agent.step();  // synchronous
  const torch::Tensor kept = m->fc->weight.detach().clone();
  if (last) {
    torch::NoGradGuard no_grad;
    m->fc->weight.set_data(torch::zeros({5, 3}));
  }
  const std::vector<double> before = last ? std::vector<double>{} : flat(*m);
  const std::string what = message_of<pw::InvalidArgument>([&] { (void)agent.step(); });
  if (last) {
    EXPECT_TRUE(has(what, "has shape [5, 3] but the window was created with [2, 3]")) << what;
    torch::NoGradGuard no_grad;
    m->fc->weight.set_data(kept);
  } else {
    EXPECT_TRUE(has(what, "failed")) << what;
    EXPECT_EQ(flat(*m), before) << "a refused step changed the module";
  }
  EXPECT_EQ(agent.steps(), 1);
  // Once the module fits again every rank steps on (a rebind, then the next warm-up mean).
  EXPECT_EQ(agent.step().kind, pw::RoundKind::synchronous);
  EXPECT_EQ(agent.staging_stats().binds, last ? 2U : 1U);
}

// --- checkpoints -------------------------------------------------------------------------------

namespace {

/// The optimizer's Adam step count of every parameter, then the module: what a resume must
/// reproduce.
std::vector<double> adam_and_module(torch::nn::Module& m, torch::optim::Optimizer& opt) {
  std::vector<double> out = flat(m);
  for (const torch::Tensor& p : m.parameters()) {
    const auto* adam = static_cast<torch::optim::AdamParamState*>(pwt::optimizer_state(opt, p));
    out.push_back(adam == nullptr ? -1.0 : static_cast<double>(adam->step()));
    if (adam != nullptr) {
      const torch::Tensor v = adam->exp_avg_sq().detach().to(torch::kDouble).reshape({-1});
      out.insert(out.end(), v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
    }
  }
  return out;
}

/// Steps @p from..@p to in lockstep: a deterministic Adam step, the agent's step (which never
/// publishes), barrier, publish, barrier. Returns per step the round's peers and the state.
std::vector<std::pair<std::vector<int>, std::vector<double>>> torch_lockstep(
    pwt::AveragingAgent& agent, MixNet& m, torch::optim::Adam& adam, std::int64_t from,
    std::int64_t to) {
  const int rank = agent.rank();
  std::vector<std::pair<std::vector<int>, std::vector<double>>> out;
  for (std::int64_t t = from; t <= to; ++t) {
    adam.zero_grad();
    const torch::Tensor x = torch::full({1, 3}, 0.1 * static_cast<double>(t % 5) + rank);
    const torch::Tensor loss = m->fc->forward(x).pow(2).sum() + m->offset.pow(2).sum();
    loss.backward();
    adam.step();
    const pw::AveragingRound r = agent.step();
    std::vector<int> peers;
    for (const pw::AveragingPeer& p : r.peers) peers.push_back(p.rank);
    out.emplace_back(peers, adam_and_module(*m, adam));
    MPI_Barrier(MPI_COMM_WORLD);
    (void)agent.publish();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return out;
}

}  // namespace

TEST(TorchAveragingCheckpoint, AResumedRunContinuesTheModuleAndAdamBitForBit) {
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = world_rank();
  const std::string path = "torch_averaging_checkpoint.np" + std::to_string(world_size()) + ".h5";
  pw::AveragingOptions o;
  o.topology = pw::Topology::random_peers(1, 5);
  o.warmup_steps = 1;
  o.publish_every = std::int64_t{1} << 40;
  for (const bool mix_state : {false, true}) {
    pwt::TorchAveragingOptions to;
    to.mix_optimizer_state = mix_state;
    std::vector<double> at_save;
    std::vector<std::pair<std::vector<int>, std::vector<double>>> original;
    {
      MixNet m;
      init(*m, rank);
      torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-2));
      pwt::AveragingAgent a(MPI_COMM_WORLD, *m, adam, o, to);
      (void)a.publish();
      MPI_Barrier(MPI_COMM_WORLD);
      (void)torch_lockstep(a, m, adam, 1, 6);
      a.save_checkpoint(path);
      at_save = adam_and_module(*m, adam);
      original = torch_lockstep(a, m, adam, 7, 14);
    }
    MixNet m;
    init(*m, rank + 7);  // other values: everything comes from the file
    torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-2));
    pwt::AveragingAgent b(MPI_COMM_WORLD, *m, adam, o, to);
    const pw::CheckpointLoad l = b.load_checkpoint(path);
    EXPECT_EQ(l.steps, 6);
    EXPECT_EQ(b.steps(), 6);
    EXPECT_EQ(adam_and_module(*m, adam), at_save) << "mix_optimizer_state " << mix_state;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto resumed = torch_lockstep(b, m, adam, 7, 14);
    ASSERT_EQ(resumed.size(), original.size());
    bool peers_read = false;
    for (std::size_t i = 0; i < original.size(); ++i) {
      EXPECT_EQ(resumed[i].first, original[i].first) << "step " << 7 + i;
      EXPECT_EQ(resumed[i].second, original[i].second)
          << "step " << 7 + i << " mix_optimizer_state " << mix_state;
      peers_read = peers_read || !original[i].first.empty();
    }
    EXPECT_TRUE(peers_read);
  }
  // A module of another layout cannot load the file (on every rank, nothing changed).
  torch::nn::Linear lin(3, 3);
  torch::optim::Adam adam(lin->parameters());
  pwt::AveragingAgent c(MPI_COMM_WORLD, *lin, adam, o);
  const torch::Tensor before = lin->weight.detach().clone();
  const std::string what = message_of<pw::CheckpointError>([&] { (void)c.load_checkpoint(path); });
  EXPECT_TRUE(has_text(what, "another layout")) << what;
  EXPECT_TRUE(torch::equal(lin->weight, before));
  EXPECT_EQ(c.steps(), 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::remove(path.c_str());
}

// --- CUDA (skips without a GPU) ------------------------------------------------------------------

TEST(TorchAveragingDevice, CudaModuleMixesThroughPinnedHostBuffers) {
  PARAMWIN_REQUIRE_RANKS(2);
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  MixNet m;
  m->to(torch::kCUDA);
  pw::AveragingOptions o;
  o.topology = pw::Topology::ring_peers();
  const int mixed = exact_mixes(*m, o);
  EXPECT_GT(mixed, 0);
  EXPECT_TRUE(m->fc->weight.is_cuda());
}
