// torch_population: a population of LibTorch MLPs, one per MPI rank, each trained with Adam
// at its own learning rate on a synthetic regression task the program generates. Through
// paramwin::torch::TorchAgent each agent dies at an age drawn from [lo, hi] and is reborn
// from the mean of its donors' parameters (read one-sidedly: the donors keep training),
// with its Adam moments reset. The same population then trains again without replacement
// (same seeds, same data) as a control, and both are compared.
//
//   mpiexec.mpich -n 4 ./torch_population [--steps N] [--out DIR] [--no-plot] ...
//
// Rank 0 prints a progress table and writes, under --out (the formats of age_replacement,
// whose reporting code this example reuses): losses.csv, deaths.csv, summary.csv,
// losses.png (gnuplot) and plot.gp.
#include <mpi.h>

#include <torch/torch.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../age_replacement/report.hpp"
#include "../common/cli.hpp"
#include "../common/finish.hpp"
#include "../common/polite_mpi.hpp"
#include "paramwin/paramwin.hpp"
#include "paramwin/torch/agent.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;
using age_replacement::DeathRecord;
using age_replacement::RunResult;
using paramwin_examples::barrier_politely;
using paramwin_examples::check_mpi;
using paramwin_examples::flag_value;
using paramwin_examples::parse_number;
using paramwin_examples::parse_range;
using paramwin_examples::UsageError;
using paramwin_examples::wait_politely;

namespace {

struct Options {
  int steps = 600;
  std::string out = "out/torch_population";
  std::uint64_t seed = 1;
  bool plot = true;
  bool control = true;
  int report_every = 50;
  std::int64_t hidden = 32;
  std::int64_t age_lo = 60;
  std::int64_t age_hi = 120;
  int donors = 1;
  double lr_min = 1e-4;
  double lr_max = 0.3;
  int last_n = 100;
  std::int64_t train_points = 256;
  std::int64_t test_points = 1024;
};

constexpr const char* kUsage =
    "usage: mpiexec.mpich -n N torch_population [options]\n"
    "  --steps N          training steps per run (default 600)\n"
    "  --out DIR          output directory (default out/torch_population)\n"
    "  --seed S           seed of data, initialisations and deaths (default 1)\n"
    "  --no-plot          do not run gnuplot\n"
    "  --no-control       skip the control run (no replacement)\n"
    "  --report-every N   progress table cadence in steps (default 50)\n"
    "  --age LO..HI       range of the drawn maximum age (default 60..120)\n"
    "  --donors K         donors per rebirth, fittest first (default 1)\n"
    "  --lr MIN..MAX      Adam learning rates, log-spaced over the agents (default 1e-4..0.3)\n"
    "  --hidden H         hidden units per layer (default 32)\n"
    "  --last N           steps averaged in the comparison (default 100)\n";

Options parse_options(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) { return flag_value(argc, argv, i); };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--steps") o.steps = parse_number<int>(a, value(i));
    else if (a == "--out") o.out = value(i);
    else if (a == "--seed") o.seed = parse_number<std::uint64_t>(a, value(i));
    else if (a == "--no-plot") o.plot = false;
    else if (a == "--no-control") o.control = false;
    else if (a == "--report-every") o.report_every = parse_number<int>(a, value(i));
    else if (a == "--age") std::tie(o.age_lo, o.age_hi) = parse_range<std::int64_t>(a, value(i));
    else if (a == "--donors") o.donors = parse_number<int>(a, value(i));
    else if (a == "--lr") std::tie(o.lr_min, o.lr_max) = parse_range<double>(a, value(i));
    else if (a == "--hidden") o.hidden = parse_number<std::int64_t>(a, value(i));
    else if (a == "--last") o.last_n = parse_number<int>(a, value(i));
    else if (a == "--help" || a == "-h") throw UsageError("");
    else throw UsageError("unknown option " + std::string(a));
  }
  if (o.steps < 1 || o.report_every < 1 || o.hidden < 1 || o.last_n < 1 || o.donors < 1) {
    throw UsageError("--steps, --report-every, --hidden, --last and --donors must be >= 1");
  }
  if (!(o.lr_min > 0.0) || !(o.lr_max >= o.lr_min)) throw UsageError("--lr needs 0 < MIN <= MAX");
  if (o.age_lo < 1 || o.age_hi < o.age_lo) throw UsageError("--age needs 1 <= LO <= HI");
  return o;
}

// --- MPI without spinning: MPICH busy-polls in blocking calls, and 4 ranks share 2 cores. --

// --- the task and the model --------------------------------------------------------------

struct Data {
  torch::Tensor x_train, y_train, x_test, y_test;
};

/// y = sin(3 x0) cos(2 x1) + 0.5 x0 x1 (+ noise on the training set), x uniform in [-1, 1]^2.
Data make_data(const Options& o) {
  torch::manual_seed(o.seed);
  auto target = [](const torch::Tensor& x) {
    const torch::Tensor a = x.select(1, 0);
    const torch::Tensor b = x.select(1, 1);
    return (torch::sin(3 * a) * torch::cos(2 * b) + 0.5 * a * b).unsqueeze(1);
  };
  Data d;
  d.x_train = torch::rand({o.train_points, 2}) * 2 - 1;
  d.y_train = target(d.x_train) + 0.05 * torch::randn({o.train_points, 1});
  d.x_test = torch::rand({o.test_points, 2}) * 2 - 1;
  d.y_test = target(d.x_test);
  return d;
}

torch::nn::Sequential make_mlp(const Options& o, std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(2, o.hidden), torch::nn::Tanh(),
                               torch::nn::Linear(o.hidden, o.hidden), torch::nn::Tanh(),
                               torch::nn::Linear(o.hidden, 1));
}

double agent_lr(const Options& o, int rank, int size) {
  if (size == 1) return o.lr_min;
  const double t = static_cast<double>(rank) / static_cast<double>(size - 1);
  return o.lr_min * std::pow(o.lr_max / o.lr_min, t);
}

/// Trains this rank's agent; returns the gathered result on rank 0. Collective over @p comm.
RunResult run_population(const Options& o, const Data& data, bool replace, MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string name = replace ? "replacement" : "control";

  torch::nn::Sequential model = make_mlp(o, o.seed * 1000003U + static_cast<std::uint64_t>(rank));
  const double lr = agent_lr(o, rank, size);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(lr));

  std::optional<pwt::TorchAgent> agent;
  if (replace) {
    pw::AgentOptions ao;
    ao.seed = o.seed;
    ao.triggers.age = {.enabled = true, .lo = o.age_lo, .hi = o.age_hi};
    ao.selection.kind = pw::SelectionKind::fittest;
    ao.selection.k = std::min(o.donors, size - 1);
    ao.mixing.non_finite = pw::NonFinitePolicy::skip_donor;  // a diverged donor is left out
    // The adapter resets the Adam moments of the replaced parameters on every rebirth.
    agent.emplace(comm, *model, adam, std::move(ao));  // collective
    (void)agent->publish();                            // every agent is a donor from the start
  }
  if (rank == 0) age_replacement::print_progress_header(name);
  barrier_politely(comm);
  const double t0 = MPI_Wtime();

  std::vector<double> history(static_cast<std::size_t>(o.steps));
  std::vector<double> deaths_flat;  // step, generation, donor, donor version, loss (per death)
  for (int step = 0; step < o.steps; ++step) {
    adam.zero_grad();
    torch::Tensor loss_t = torch::mse_loss(model->forward(data.x_train), data.y_train);
    double loss = loss_t.item<double>();
    if (!std::isfinite(loss)) loss = std::numeric_limits<double>::max();
    history[static_cast<std::size_t>(step)] = loss;
    bool reborn = false;
    if (agent) {
      // The loss was measured on the parameters as they are: step() publishes them with it,
      // or replaces them (and resets Adam) if this agent dies now.
      const pw::StepEvent ev = agent->step(step, loss);
      if (ev.died) {
        reborn = true;
        deaths_flat.insert(deaths_flat.end(),
                           {static_cast<double>(step), static_cast<double>(ev.generation),
                            ev.donors.empty() ? -1.0 : static_cast<double>(ev.donors[0].rank),
                            ev.donors.empty() ? 0.0 : static_cast<double>(ev.donors[0].version),
                            loss});
      }
    }
    // After a rebirth the gradient would belong to the parameters that died.
    if (!reborn) {
      loss_t.backward();
      adam.step();
    }
    if ((step + 1) % o.report_every == 0 || step + 1 == o.steps) {
      const std::vector<double> all =
          paramwin_examples::gather_doubles(comm,
                                            {loss, static_cast<double>(deaths_flat.size() / 5)});
      if (rank == 0) {
        std::vector<double> losses;
        long deaths = 0;
        for (int r = 0; r < size; ++r) {
          losses.push_back(all[2 * static_cast<std::size_t>(r)]);
          deaths += static_cast<long>(all[2 * static_cast<std::size_t>(r) + 1]);
        }
        age_replacement::print_progress_row(step + 1, o.steps, age_replacement::spread(losses),
                                            deaths);
      }
    }
  }
  double test_loss = 0.0;
  {
    torch::NoGradGuard no_grad;
    test_loss = torch::mse_loss(model->forward(data.x_test), data.y_test).item<double>();
  }

  RunResult result;
  result.name = name;
  result.agents = size;
  result.steps = o.steps;
  const std::vector<double> all_history = paramwin_examples::gather_doubles(comm, history);
  const std::vector<double> extras = paramwin_examples::gather_doubles(comm, {lr, test_loss});
  // Death records have different counts per rank: gather the counts, then pad to the max.
  const std::vector<double> counts =
      paramwin_examples::gather_doubles(comm, {static_cast<double>(deaths_flat.size())});
  double max_count = static_cast<double>(deaths_flat.size());
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &max_count, 1, MPI_DOUBLE, MPI_MAX, comm, &req),
            "MPI_Iallreduce");
  wait_politely(req);
  std::vector<double> padded = deaths_flat;
  padded.resize(static_cast<std::size_t>(max_count), 0.0);
  const std::vector<double> all_deaths = paramwin_examples::gather_doubles(comm, padded);
  result.seconds = MPI_Wtime() - t0;
  if (agent && rank == 0) {
    std::printf("\n  rank 0: %llu optimizer state entries reset on rebirth; not exchanged: %zu "
                "tensors\n",
                static_cast<unsigned long long>(agent->optimizer_states_reset()),
                agent->skipped().size());
  }
  barrier_politely(comm);  // free the windows together (the free is collective)
  agent.reset();
  barrier_politely(comm);
  if (rank != 0) return result;

  result.losses.assign(all_history.begin(), all_history.end());
  const auto stride = static_cast<std::size_t>(max_count);
  for (int a = 0; a < size; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    result.lrs.push_back(extras[2 * ua]);
    result.test_losses.push_back(extras[2 * ua + 1]);
    const auto n = static_cast<std::size_t>(counts[ua]);
    for (std::size_t k = 0; k + 5 <= n; k += 5) {
      const double* f = &all_deaths[ua * stride + k];
      DeathRecord d;
      d.agent = a;
      d.step = static_cast<std::int64_t>(f[0]);
      d.generation = static_cast<std::uint64_t>(f[1]);
      d.reason = "age";
      d.donors = f[2] < 0 ? "" : std::to_string(static_cast<int>(f[2]));
      d.donor_versions = std::to_string(static_cast<std::uint64_t>(f[3]));
      d.loss_before = f[4];
      if (d.step + 1 < o.steps) d.loss_after = result.loss(a, static_cast<int>(d.step + 1));
      result.deaths.push_back(d);
    }
  }
  std::sort(result.deaths.begin(), result.deaths.end(),
            [](const DeathRecord& a, const DeathRecord& b) {
              return a.step != b.step ? a.step < b.step : a.agent < b.agent;
            });
  std::printf("  %s run: %d steps in %.2f s, %zu deaths\n", name.c_str(), o.steps, result.seconds,
              result.deaths.size());
  std::fflush(stdout);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // One intra-op thread per rank: the ranks already share the cores.
  torch::set_num_threads(1);
  int rc = 0;
  bool want_plot = false;
  Options o;
  RunResult repl;
  RunResult ctrl;
  try {
    Kokkos::ScopeGuard kokkos(argc, argv);
    o = parse_options(argc, argv);
    if (size < 2) throw UsageError("needs at least 2 ranks (one agent per rank)");
    if (rank == 0) {
      std::filesystem::create_directories(o.out);
      std::
          printf("torch_population: %d agents (one per rank), %d steps, LibTorch MLP 2-%lld-%lld-1 "
                 "(tanh), Adam, %lld training points\n",
                 size, o.steps, static_cast<long long>(o.hidden), static_cast<long long>(o.hidden),
                 static_cast<long long>(o.train_points));
      std::printf("  deaths at an age drawn from [%lld, %lld]; donors: fittest, k=%d, mean\n",
                  static_cast<long long>(o.age_lo), static_cast<long long>(o.age_hi),
                  std::min(o.donors, size - 1));
      std::printf("  learning rates:");
      for (int r = 0; r < size; ++r) std::printf(" %.4g", agent_lr(o, r, size));
      std::printf("\n");
      std::fflush(stdout);
    }
    const Data data = make_data(o);
    repl = run_population(o, data, /*replace=*/true, MPI_COMM_WORLD);
    if (o.control) ctrl = run_population(o, data, /*replace=*/false, MPI_COMM_WORLD);
    if (rank == 0) {
      const std::filesystem::path out(o.out);
      std::vector<const RunResult*> runs{&repl};
      if (o.control) runs.push_back(&ctrl);
      age_replacement::write_losses_csv(out / "losses.csv", runs);
      age_replacement::write_deaths_csv(out / "deaths.csv", runs);
      age_replacement::write_summary_csv(out / "summary.csv", runs);
      if (o.control) age_replacement::print_comparison(repl, ctrl, o.last_n);
      want_plot = o.plot && o.control;
    }
  } catch (const UsageError& e) {
    if (rank == 0) {
      if (e.what()[0] != '\0') std::fprintf(stderr, "torch_population: %s\n", e.what());
      std::fputs(kUsage, stderr);
    }
    rc = e.what()[0] != '\0' ? 2 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] torch_population: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  paramwin_examples::report_finished("torch_population");  // see examples/common/finish.hpp
  MPI_Finalize();
  // gnuplot runs after MPI is gone: forking inside an MPI process is best avoided.
  if (rank == 0 && rc == 0 && !repl.losses.empty()) {
    const std::filesystem::path out(o.out);
    if (want_plot && age_replacement::render_plot(out, repl, ctrl)) {
      std::printf("\nplot: %s\n", (out / "losses.png").c_str());
    }
    std::printf("data: %s  %s  %s\n", (out / "losses.csv").c_str(), (out / "deaths.csv").c_str(),
                (out / "summary.csv").c_str());
  }
  return rc;
}
