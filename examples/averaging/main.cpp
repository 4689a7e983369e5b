// Data-parallel training with asynchronous model averaging (AveragingAgent, docs/averaging.md):
// every rank trains the same linear model on its own shard of a synthetic regression (the
// shards differ: each rank's inputs have their own scale), and every step averages one-sidedly with
// the peers its topology names. Prints each rank's loss on its shard and the consensus
// distance (largest distance of a rank's parameters to the ranks' mean) as training goes, and
// ends with one synchronous mean (finish()).
//
//   mpiexec -n 4 ./averaging --steps 400 --topology ring [--interval 2] [--warmup 10]
//                            [--background] [--step-ms 1] [--slow-rank 3 --slow-ms 1]
//                            [--stale-steps 4] [--lr 0.05]
//                            [--log events.{rank}.jsonl]
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <paramwin/paramwin.hpp>

#include "../common/cli.hpp"
#include "../common/finish.hpp"

namespace {

namespace ex = paramwin_examples;

constexpr std::size_t kFeatures = 16;
constexpr std::size_t kSamples = 512;  // per rank
constexpr std::size_t kBatch = 16;

struct Config {
  int steps = 400;
  std::string topology = "ring";
  std::int64_t interval = 1;
  std::int64_t warmup = 0;
  std::int64_t stale = 0;
  bool background = false;
  int step_ms = 0;     // every rank sleeps this long per step (a GPU's compute, host idle)
  int slow_rank = -1;  // and this rank sleeps slow_ms more (a straggler)
  int slow_ms = 0;
  double lr = 0.05;
  int report = 100;
  std::string log;
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
    } else if (flag == "--stale-steps") {
      c.stale = ex::parse_number<std::int64_t>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--background") {
      c.background = true;
    } else if (flag == "--step-ms") {
      c.step_ms = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--slow-rank") {
      c.slow_rank = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--slow-ms") {
      c.slow_ms = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--lr") {
      c.lr = ex::parse_number<double>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--report") {
      c.report = ex::parse_number<int>(flag, ex::flag_value(argc, argv, i));
    } else if (flag == "--log") {
      c.log = ex::flag_value(argc, argv, i);
    } else {
      throw ex::UsageError("unknown flag " + flag);
    }
  }
  return c;
}

/// One rank's shard: y = x . w_true + 0.5 + noise, x ~ N(0, scale^2) with a rank-dependent
/// scale (the shards' gradients differ).
struct Shard {
  std::vector<float> x = std::vector<float>(kSamples * kFeatures);
  std::vector<float> y = std::vector<float>(kSamples);

  explicit Shard(int rank) {
    std::mt19937 truth(1);
    std::normal_distribution<float> unit(0.0F, 1.0F);
    std::vector<float> w_true(kFeatures);
    for (float& w : w_true) {
      w = unit(truth);
    }
    std::mt19937 gen(static_cast<unsigned>(100 + rank));
    const float scale = 0.6F + 0.2F * static_cast<float>(rank % 4);
    for (std::size_t s = 0; s < kSamples; ++s) {
      float dot = 0.5F;
      for (std::size_t f = 0; f < kFeatures; ++f) {
        const float v = scale * unit(gen);
        x[s * kFeatures + f] = v;
        dot += v * w_true[f];
      }
      y[s] = dot + 0.1F * unit(gen);
    }
  }

  /// Mean squared error of (w, b) over the shard.
  [[nodiscard]] double loss(const std::vector<float>& w, const std::vector<float>& b) const {
    double sum = 0.0;
    for (std::size_t s = 0; s < kSamples; ++s) {
      double pred = b[0];
      for (std::size_t f = 0; f < kFeatures; ++f) {
        pred += static_cast<double>(x[s * kFeatures + f]) * w[f];
      }
      sum += (pred - y[s]) * (pred - y[s]);
    }
    return sum / kSamples;
  }

  /// One SGD step on a random batch.
  void sgd(std::vector<float>& w, std::vector<float>& b, double lr, std::mt19937& gen) const {
    std::uniform_int_distribution<std::size_t> pick(0, kSamples - 1);
    std::vector<double> gw(kFeatures, 0.0);
    double gb = 0.0;
    for (std::size_t k = 0; k < kBatch; ++k) {
      const std::size_t s = pick(gen);
      double pred = b[0];
      for (std::size_t f = 0; f < kFeatures; ++f) {
        pred += static_cast<double>(x[s * kFeatures + f]) * w[f];
      }
      const double err = 2.0 * (pred - y[s]) / kBatch;
      for (std::size_t f = 0; f < kFeatures; ++f) {
        gw[f] += err * x[s * kFeatures + f];
      }
      gb += err;
    }
    for (std::size_t f = 0; f < kFeatures; ++f) {
      w[f] = static_cast<float>(w[f] - lr * gw[f]);
    }
    b[0] = static_cast<float>(b[0] - lr * gb);
  }
};

/// Largest L2 distance of a rank's parameters to the ranks' mean. @note Collective.
double consensus_distance(const std::vector<float>& w, const std::vector<float>& b, int n) {
  std::vector<double> mine(w.begin(), w.end());
  mine.push_back(b[0]);
  std::vector<double> mean(mine.size());
  MPI_Allreduce(mine.data(), mean.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  double d2 = 0.0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const double diff = mine[i] - mean[i] / n;
    d2 += diff * diff;
  }
  double worst = 0.0;
  const double d = std::sqrt(d2);
  MPI_Allreduce(&d, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

/// Mean over ranks of each rank's loss on its shard. @note Collective.
double mean_loss(double loss, int n) {
  double sum = 0.0;
  MPI_Allreduce(&loss, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / n;
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
  o.stale_steps = c.stale;
  o.background = c.background;
  o.event_log = c.log;
  return o;
}

void train(const Config& c, int rank, int n) {
  paramwin::Layout layout;
  layout.add("w", kFeatures).add("b", 1);
  paramwin::AveragingAgent agent(MPI_COMM_WORLD, layout, averaging_options(c, n));
  if (c.background && rank == 0) {
    const std::string& why = agent.background_inline_reason();
    std::printf("background reads %s%s\n",
                why.empty() ? "on the worker thread" : "inline: ", why.c_str());
  }
  const Shard shard(rank);
  std::mt19937 gen(static_cast<unsigned>(7 + rank));
  std::vector<float> w(kFeatures, 0.0F);
  std::vector<float> b(1, 0.0F);
  (void)agent.publish({w, b});
  const double start = mean_loss(shard.loss(w, b), n);
  std::int64_t mixed = 0;
  for (int step = 1; step <= c.steps; ++step) {
    shard.sgd(w, b, c.lr, gen);
    const int sleep_ms = c.step_ms + (rank == c.slow_rank ? c.slow_ms : 0);
    if (sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    const paramwin::AveragingRound round = agent.step({w, b});
    mixed += round.applied ? 1 : 0;
    if (c.report > 0 && step % c.report == 0) {
      const double loss = shard.loss(w, b);
      const double distance = consensus_distance(w, b, n);
      const double mean = mean_loss(loss, n);
      std::
          printf("rank %d step %d: loss %.5f; all ranks: mean loss %.5f, consensus distance %.3e\n",
                 rank, step, loss, mean, distance);
      std::fflush(stdout);
    }
  }
  const double before = consensus_distance(w, b, n);
  (void)agent.finish({w, b});
  const double loss = shard.loss(w, b);
  const double mean = mean_loss(loss, n);
  const double after = consensus_distance(w, b, n);
  std::printf("rank %d: %lld of %d steps mixed peers in; final loss on its shard %.5f\n", rank,
              static_cast<long long>(mixed), c.steps, loss);
  if (rank == 0) {
    std::printf("averaging %s on %d ranks: mean loss %.5f -> %.5f; consensus distance %.3e before "
                "finish(), %.3e after\n",
                c.topology.c_str(), n, start, mean, before, after);
    if (mean < 0.1 * start && after == 0.0) {
      std::printf("averaging: trained (loss below a tenth of the start) and in consensus\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // MPI_THREAD_MULTIPLE: with --background the agent's worker thread reads the peers.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int code = 0;
  try {
    train(parse(argc, argv), rank, n);
    ex::report_finished("averaging");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "averaging: rank %d: %s\n", rank, e.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
