// Data-parallel training of a LibTorch MLP with asynchronous model averaging
// (paramwin::torch::AveragingAgent, docs/averaging.md and docs/torch.md): every rank trains the
// same network with Adam on its own shard of a synthetic regression, y = sin(3 x0) cos(2 x1)
// + noise (the shards differ: each rank draws its inputs from its own part of the square), and
// after each optimizer step mixes one-sidedly with the peers its topology names. A held-out set
// (the same on every rank, from the whole square) measures progress; finish() ends with one
// synchronous mean, after which every rank holds the same network.
//
//   mpiexec -n 4 ./torch_averaging --steps 400 --topology ring [--interval 2] [--warmup 5]
//                                  [--background] [--mix-optimizer-state] [--step-ms 1]
//                                  [--slow-rank 3 --slow-ms 1] [--lr 0.02] [--hidden 32]
#include <mpi.h>

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <paramwin/paramwin.hpp>
#include <paramwin/torch/averaging.hpp>

#include "../common/cli.hpp"
#include "../common/finish.hpp"

namespace {

namespace ex = paramwin_examples;

constexpr std::int64_t kShard = 512;    // training points per rank
constexpr std::int64_t kHeldOut = 512;  // held-out points, the same on every rank
constexpr std::int64_t kBatch = 32;

struct Config {
  int steps = 400;
  std::string topology = "ring";
  std::int64_t interval = 1;
  std::int64_t warmup = 0;
  bool background = false;
  bool mix_state = false;
  int step_ms = 0;     // every rank sleeps this long per step (a GPU's compute, host idle)
  int slow_rank = -1;  // and this rank sleeps slow_ms more (a straggler)
  int slow_ms = 0;
  double lr = 0.02;
  std::int64_t hidden = 32;
  int report = 100;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--steps") {
      c.steps = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--topology") {
      c.topology = ex::flag_value(argc, argv, i);
    } else if (flag == "--interval") {
      c.interval = ex::parse_number<std::int64_t>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--warmup") {
      c.warmup = ex::parse_number<std::int64_t>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--background") {
      c.background = true;
    } else if (flag == "--mix-optimizer-state") {
      c.mix_state = true;
    } else if (flag == "--step-ms") {
      c.step_ms = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--slow-rank") {
      c.slow_rank = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--slow-ms") {
      c.slow_ms = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--lr") {
      c.lr = ex::parse_number<double>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--hidden") {
      c.hidden = ex::parse_number<std::int64_t>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--report") {
      c.report = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else {
      throw ex::UsageError("unknown flag " + flag);
    }
  }
  return c;
}

torch::Tensor target(const torch::Tensor& x) {
  return (torch::sin(3 * x.select(1, 0)) * torch::cos(2 * x.select(1, 1))).unsqueeze(1);
}

/// Rank @p rank's shard of @p n ranks: inputs from its own vertical strip of [-1, 1]^2.
struct Shard {
  torch::Tensor x, y;
  Shard(int rank, int n) {
    torch::manual_seed(static_cast<std::uint64_t>(100 + rank));
    const double width = 2.0 / n;
    x = torch::rand({kShard, 2}) * 2 - 1;
    x.select(1, 0).copy_(torch::rand({kShard}) * width - 1 + width * rank);
    y = target(x) + 0.05 * torch::randn({kShard, 1});
  }
};

/// Mean over ranks of @p value. @note Collective.
double mean_over_ranks(double value, int n) {
  double sum = 0.0;
  MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / n;
}

/// Largest L2 distance of a rank's parameters to the ranks' mean. @note Collective.
double consensus_distance(torch::nn::Module& model, int n) {
  std::vector<double> mine;
  for (const torch::Tensor& p : model.parameters()) {
    const torch::Tensor d = p.detach().to(torch::kDouble).contiguous().reshape({-1});
    mine.insert(mine.end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
  }
  std::vector<double> mean(mine.size());
  MPI_Allreduce(mine.data(), mean.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  double d2 = 0.0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const double diff = mine[i] - mean[i] / n;
    d2 += diff * diff;
  }
  const double d = std::sqrt(d2);
  double worst = 0.0;
  MPI_Allreduce(&d, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

paramwin::AveragingOptions averaging_options(const Config& c, int n) {
  paramwin::AveragingOptions o;
  o.topology.kind = paramwin::parse_enum<paramwin::TopologyKind>(c.topology);
  o.topology.k = 1;
  o.topology.seed = 42;
  if (o.topology.kind == paramwin::TopologyKind::random && n == 1) {
    o.topology.kind = paramwin::TopologyKind::all;
  }
  o.interval = c.interval;
  o.warmup_steps = c.warmup;
  o.background = c.background;
  return o;
}

void train(const Config& c, int rank, int n) {
  torch::manual_seed(static_cast<std::uint64_t>(rank));  // each rank its own start
  torch::nn::Sequential model(torch::nn::Linear(2, c.hidden), torch::nn::Tanh(),
                              torch::nn::Linear(c.hidden, c.hidden), torch::nn::Tanh(),
                              torch::nn::Linear(c.hidden, 1));
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(c.lr));
  paramwin::torch::TorchAveragingOptions to;
  to.mix_optimizer_state = c.mix_state;
  // Collective: every rank's module has the same layout (LayoutMismatch on every rank if not).
  paramwin::torch::AveragingAgent agent(MPI_COMM_WORLD, *model, adam, averaging_options(c, n), to);
  (void)agent.publish();

  const Shard shard(rank, n);
  torch::manual_seed(7);  // the held-out set: the same on every rank, from the whole square
  const torch::Tensor test_x = torch::rand({kHeldOut, 2}) * 2 - 1;
  const torch::Tensor test_y = target(test_x);
  auto held_out = [&] {
    torch::NoGradGuard no_grad;
    return torch::mse_loss(model->forward(test_x), test_y).item<double>();
  };
  const double start = mean_over_ranks(held_out(), n);
  torch::manual_seed(static_cast<std::uint64_t>(1000 + rank));
  std::int64_t mixed = 0;
  const double t0 = MPI_Wtime();
  for (int step = 1; step <= c.steps; ++step) {
    const torch::Tensor pick = torch::randint(kShard, {kBatch}, torch::kLong);
    adam.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(shard.x.index_select(0, pick)),
                                         shard.y.index_select(0, pick));
    loss.backward();
    adam.step();
    const int sleep_ms = c.step_ms + (rank == c.slow_rank ? c.slow_ms : 0);
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    // After the optimizer's step: mixes the peers into the module (and Adam's moments with
    // --mix-optimizer-state) when a round is due, then publishes.
    const paramwin::AveragingRound round = agent.step();
    mixed += round.applied ? 1 : 0;
    if (c.report > 0 && step % c.report == 0) {
      const double mean = mean_over_ranks(held_out(), n);
      const double distance = consensus_distance(*model, n);
      if (rank == 0) {
        std::printf("step %4d: mean held-out loss %.5f, consensus distance %.3e\n", step, mean,
                    distance);
        std::fflush(stdout);
      }
    }
  }
  const double seconds = MPI_Wtime() - t0;
  const double before = consensus_distance(*model, n);
  (void)agent.finish();  // one synchronous mean: every rank holds the same network
  const double loss = held_out();
  const double mean = mean_over_ranks(loss, n);
  const double after = consensus_distance(*model, n);
  std::printf("rank %d: %lld of %d steps changed the module (%.1f steps/s); held-out loss %.5f\n",
              rank, static_cast<long long>(mixed), c.steps, c.steps / seconds, loss);
  std::fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("torch_averaging %s on %d ranks%s: mean held-out loss %.5f -> %.5f; consensus "
                "distance %.3e before finish(), %.3e after\n",
                c.topology.c_str(), n, c.mix_state ? " (Adam's moments mixed too)" : "", start,
                mean, before, after);
    if (mean < 0.1 * start && after == 0.0) {
      std::printf("torch_averaging: trained (held-out loss below a tenth of the start) and in "
                  "consensus\n");
    }
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  torch::set_num_threads(1);  // the ranks already share the cores
  int code = 0;
  try {
    train(parse(argc, argv), rank, n);
    ex::report_finished("torch_averaging");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_averaging: rank %d: %s\n", rank, e.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
