// pbt: population-based training with paramwin. The age_replacement demo's population (one
// hand-written MLP per rank, the same regression task), with learning rates spread over three
// decades, one of them diverging. Three variants run one after the other with the same seeds
// and the same data:
//   control   no rebirth: every agent trains alone with its own learning rate
//   weights   age-based rebirth from the fittest donor's weights; the learning rate is kept
//             (AgentOptions::explore.inherit = keep): weights-only replacement
//   explore   the same rebirths, and the learning rate travels with the weights: inherited
//             from the donor (inherit = best), then explored (perturbed by 0.8 or 1.2, or
//             resampled log-uniformly with probability 0.25, Ray Tune's defaults)
// The learning rate is a hyperparameter declared with the layout ("lr"), published inside the
// same snapshot as the weights.
//
//   mpiexec -n 4 ./pbt [--steps N] [--out DIR] [--seed S] [--no-plot] ...
//
// Rank 0 prints the comparison table and writes under --out:
//   losses.csv                   variant,agent,step,loss,lr   (every agent, every step)
//   events.<variant>.jsonl       paramwin's event logs (one line per death, all agents)
//   losses.png, plot.gp          loss curves of the three variants (gnuplot)
//   lineage/                     scripts/lineage.py on the explore run's logs
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../age_replacement/mlp.hpp"
#include "../common/cli.hpp"
#include "../common/finish.hpp"
#include "../common/polite_mpi.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
namespace ex = paramwin_examples;
using age_replacement::Dataset;
using age_replacement::make_dataset;
using age_replacement::Mlp;
using ex::flag_value;
using ex::parse_number;
using ex::parse_range;
using ex::UsageError;

namespace {

struct Options {
  int steps = 800;
  std::string out = "out/pbt";
  std::uint64_t seed = 1;
  bool plot = true;
  std::size_t hidden = 32;
  std::int64_t age_lo = 50;
  std::int64_t age_hi = 150;
  double lr_min = 0.003;
  double lr_max = 3.0;
  std::string lineage_script = PARAMWIN_PBT_LINEAGE_SCRIPT;
  std::string python = "/usr/bin/python3";
};

constexpr const char* kUsage =
    "usage: mpiexec -n N pbt [options]\n"
    "  --steps N          training steps per variant (default 800)\n"
    "  --out DIR          output directory (default out/pbt)\n"
    "  --seed S           seed of data, initialisations, deaths and explore (default 1)\n"
    "  --age LO..HI       range of the drawn maximum age (default 50..150)\n"
    "  --lr MIN..MAX      learning rates, log-spaced over the agents (default 0.003..3)\n"
    "  --hidden H         hidden units per layer (default 32)\n"
    "  --no-plot          write no PNG (no gnuplot, no lineage.py)\n"
    "  --lineage PATH     scripts/lineage.py (default: the source tree's)\n"
    "  --python PATH      Python with matplotlib (default /usr/bin/python3)\n";

Options parse_options(int argc, char** argv) {
  Options o;
  auto value = [&](int& i) { return flag_value(argc, argv, i); };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--steps") o.steps = parse_number<int>(a, value(i));
    else if (a == "--out") o.out = value(i);
    else if (a == "--seed") o.seed = parse_number<std::uint64_t>(a, value(i));
    else if (a == "--age") std::tie(o.age_lo, o.age_hi) = parse_range<std::int64_t>(a, value(i));
    else if (a == "--lr") std::tie(o.lr_min, o.lr_max) = parse_range<double>(a, value(i));
    else if (a == "--hidden") o.hidden = parse_number<std::size_t>(a, value(i));
    else if (a == "--no-plot") o.plot = false;
    else if (a == "--lineage") o.lineage_script = value(i);
    else if (a == "--python") o.python = value(i);
    else if (a == "--help" || a == "-h") throw UsageError("");
    else throw UsageError("unknown option " + std::string(a));
  }
  if (o.steps < 1) throw UsageError("--steps must be >= 1");
  if (o.hidden < 1) throw UsageError("--hidden must be >= 1");
  if (!(o.lr_min > 0.0) || !(o.lr_max > o.lr_min)) throw UsageError("--lr needs 0 < MIN < MAX");
  if (o.age_lo < 1 || o.age_hi < o.age_lo) throw UsageError("--age needs 1 <= LO <= HI");
  return o;
}

enum class Variant { control, weights, explore };
constexpr Variant kVariants[] = {Variant::control, Variant::weights, Variant::explore};

const char* name_of(Variant v) {
  switch (v) {
    case Variant::control: return "control";
    case Variant::weights: return "weights";
    case Variant::explore: return "explore";
  }
  return "?";
}

/// Learning rate of agent @p rank: log-spaced from lr_min to lr_max.
double agent_lr(const Options& o, int rank, int size) {
  const double t = size == 1 ? 0.0 : static_cast<double>(rank) / static_cast<double>(size - 1);
  return o.lr_min * std::pow(o.lr_max / o.lr_min, t);
}

/// One variant's result on rank 0: per agent its loss and learning rate at every step.
struct VariantResult {
  Variant variant = Variant::control;
  int agents = 0;
  int steps = 0;
  std::vector<double> losses;  // agent-major: losses[a * steps + s]
  std::vector<double> lrs;     // same layout
  std::int64_t deaths = 0;
  [[nodiscard]] double final_loss(int a) const {
    return losses[static_cast<std::size_t>(a) * static_cast<std::size_t>(steps) +
                  static_cast<std::size_t>(steps - 1)];
  }
  [[nodiscard]] double final_lr(int a) const {
    return lrs[static_cast<std::size_t>(a) * static_cast<std::size_t>(steps) +
               static_cast<std::size_t>(steps - 1)];
  }
};

/// Trains this rank's agent for o.steps steps in @p variant; the gathered result on rank 0.
/// @note Collective over @p comm.
VariantResult run_variant(const Options& o, const Dataset& data, Variant variant, MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::filesystem::path out(o.out);

  // The same initialisation as the age_replacement demo, in every variant.
  Mlp mlp(o.hidden);
  mlp.initialise(o.seed * std::uint64_t{1000003} + static_cast<std::uint64_t>(rank), 1.0F);
  double lr = agent_lr(o, rank, size);
  constexpr float kClip = 1.0F;

  pw::Layout layout;
  std::vector<pw::LayerRef> params;
  for (std::size_t l = 0; l < Mlp::kLayers; ++l) {
    layout.add(Mlp::kNames[l], mlp.shape(l));
    params.emplace_back(Mlp::kNames[l], mlp.layer(l));
  }
  layout.add_hyperparameter("lr");  // travels inside every snapshot with the weights

  std::optional<pw::Agent<>> agent;
  if (variant != Variant::control) {
    pw::AgentOptions ao;
    ao.seed = o.seed;
    ao.triggers.age = {.enabled = true, .lo = o.age_lo, .hi = o.age_hi};
    ao.selection.kind = pw::SelectionKind::fittest;
    ao.selection.k = 1;
    ao.mixing.non_finite = pw::NonFinitePolicy::skip_donor;
    if (variant == Variant::weights) {
      ao.explore.inherit = pw::HyperInherit::keep;
    } else {
      ao.explore.inherit = pw::HyperInherit::best;
      ao.explore.rules = {pw::HyperRule{.name = "lr",
                                        .distribution = pw::HyperDistribution::log_uniform,
                                        .lo = o.lr_min,
                                        .hi = o.lr_max}};
    }
    ao.event_log =
        (out / (std::string("events.") + name_of(variant) + ".rank{rank}.jsonl")).string();
    agent.emplace(comm, layout, std::move(ao));  // collective
    agent->set_hyperparameter("lr", lr);
    std::vector<pw::ConstLayerRef> initial;
    for (const pw::LayerRef& p : params) initial.push_back(p.as_const());
    (void)agent->publish(initial);
  }
  ex::barrier_politely(comm);

  std::vector<double> history(static_cast<std::size_t>(o.steps));
  std::vector<double> lr_history(static_cast<std::size_t>(o.steps));
  std::int64_t deaths = 0;
  for (int step = 0; step < o.steps; ++step) {
    double loss = mlp.loss(data, /*want_grad=*/true);
    if (!std::isfinite(loss)) loss = std::numeric_limits<double>::max();
    history[static_cast<std::size_t>(step)] = loss;
    bool reborn = false;
    if (agent) {
      const pw::StepEvent ev = agent->step(step, loss, params);
      if (ev.died) {
        reborn = true;
        ++deaths;
        lr = ev.hyper.get("lr");  // inherited and explored (weights: kept)
      }
    }
    lr_history[static_cast<std::size_t>(step)] = lr;
    if (!reborn) mlp.sgd_step(static_cast<float>(lr), kClip);
    // Keep the agents within 50 steps of each other (the library needs no such thing; it
    // keeps the three variants comparable on an oversubscribed machine).
    if ((step + 1) % 50 == 0) ex::barrier_politely(comm);
  }

  VariantResult r;
  r.variant = variant;
  r.agents = size;
  r.steps = o.steps;
  r.losses = ex::gather_doubles(comm, history);
  r.lrs = ex::gather_doubles(comm, lr_history);
  const std::vector<double> all_deaths = ex::gather_doubles(comm, {static_cast<double>(deaths)});
  for (double d : all_deaths) r.deaths += static_cast<std::int64_t>(d);
  ex::barrier_politely(comm);
  agent.reset();  // collective; closes the event log
  ex::barrier_politely(comm);

  if (rank == 0 && variant != Variant::control) {
    std::ofstream merged(out / (std::string("events.") + name_of(variant) + ".jsonl"));
    for (int a = 0; a < size; ++a) {
      const std::filesystem::path per_rank = out / (std::string("events.") + name_of(variant) +
                                                    ".rank" + std::to_string(a) + ".jsonl");
      std::ifstream in(per_rank);
      merged << in.rdbuf();
      in.close();
      std::filesystem::remove(per_rank);
    }
  }
  return r;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
  double median = 0.0;
  double best = 0.0;
  double worst = 0.0;
};

Row row_of(const VariantResult& r) {
  std::vector<double> finals;
  for (int a = 0; a < r.agents; ++a) finals.push_back(r.final_loss(a));
  return {median_of(finals), *std::min_element(finals.begin(), finals.end()),
          *std::max_element(finals.begin(), finals.end())};
}

void print_table(const std::vector<VariantResult>& results) {
  std::printf("\n  %-8s %7s %12s %12s %12s %11s   %s\n", "variant", "deaths", "median", "best",
              "worst", "worst/best", "final lr per agent");
  for (const VariantResult& r : results) {
    const Row row = row_of(r);
    std::printf("  %-8s %7lld %12.5f %12.5f %12.5f %10.2fx  ", name_of(r.variant),
                static_cast<long long>(r.deaths), row.median, row.best, row.worst,
                row.worst / row.best);
    for (int a = 0; a < r.agents; ++a) std::printf(" %.3g", r.final_lr(a));
    std::printf("\n");
  }
  const Row weights = row_of(results[1]);
  const Row explore = row_of(results[2]);
  std::printf("\n  target: explore median <= weights median: %s (%.5f vs %.5f)\n",
              explore.median <= weights.median ? "met" : "MISSED", explore.median, weights.median);
  std::printf("  target: explore worst within 2x of its best: %s (%.2fx; weights %.2fx)\n",
              explore.worst <= 2.0 * explore.best ? "met" : "MISSED", explore.worst / explore.best,
              weights.worst / weights.best);
  std::fflush(stdout);
}

void write_losses_csv(const std::filesystem::path& path,
                      const std::vector<VariantResult>& results) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path.string());
  f << "variant,agent,step,loss,lr\n";
  f.precision(9);
  for (const VariantResult& r : results) {
    for (int a = 0; a < r.agents; ++a) {
      for (int s = 0; s < r.steps; ++s) {
        const std::size_t i = static_cast<std::size_t>(a) * static_cast<std::size_t>(r.steps) +
                              static_cast<std::size_t>(s);
        f << name_of(r.variant) << ',' << a << ',' << s << ',' << r.losses[i] << ',' << r.lrs[i]
          << '\n';
      }
    }
  }
}

/// Loss curves of the three variants (gnuplot, after MPI_Finalize). False if it failed.
bool render_losses(const std::filesystem::path& dir, int agents, int steps) {
  {
    std::ofstream f(dir / "plot.gp");
    f << "# Rerun with: gnuplot plot.gp (from this directory)\n"
         "set terminal pngcairo size 1400,1100 font 'DejaVu Sans,10'\n"
         "set output 'losses.png'\n"
         "set datafile separator ','\n"
         "set logscale y\nset format y '10^{%L}'\nset yrange [1e-3:10]\n"
         "set xrange [0:"
      << steps
      << "]\n"
         "set grid ytics xtics lc rgb '#dddddd'\n"
         "set key outside right top\nset xlabel 'training step'\n"
         "set ylabel 'training loss (MSE)'\n"
         "sel(v, a, col) = (strcol(1) eq v && $2 == a) ? column(col) : NaN\n"
         "set multiplot layout 3,1 title 'paramwin PBT: "
      << agents << " agents, learning rates over three decades' font ',13'\n";
    for (const char* v : {"control", "weights", "explore"}) {
      const std::string title = std::string(v) == "control" ? "control: no rebirth"
                                : std::string(v) == "weights"
                                    ? "weights only: rebirth from the fittest, own lr kept"
                                    : "explore: rebirth, lr inherited and explored";
      f << "set title '" << title << "'\n"
        << "plot for [a=0:" << agents - 1 << "] 'losses.csv' every ::1 using 3:(sel('" << v
        << "', a, 4)) with lines lw 1.3 lc a+1 title sprintf('agent %d', a)\n";
    }
    f << "unset multiplot\n";
  }
  const std::string cmd = "cd '" + dir.string() + "' && gnuplot plot.gp";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  Options o;
  bool plot = false;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      o = parse_options(argc, argv);
      if (size < 2) throw UsageError("needs at least 2 ranks (one agent per rank)");
      MPI_Comm comm = MPI_COMM_NULL;
      ex::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
      const std::filesystem::path out(o.out);
      if (rank == 0) {
        std::filesystem::create_directories(out);
        std::printf("pbt: %d agents, %d steps per variant, MLP 2-%zu-%zu-1, ages %lld..%lld\n",
                    size, o.steps, o.hidden, o.hidden, static_cast<long long>(o.age_lo),
                    static_cast<long long>(o.age_hi));
        std::printf("  initial learning rates:");
        for (int r = 0; r < size; ++r) std::printf(" %.3g", agent_lr(o, r, size));
        std::printf("\n");
        std::fflush(stdout);
      }
      ex::barrier_politely(comm);
      const Dataset data = make_dataset(384, o.seed, 0.05F);
      std::vector<VariantResult> results;
      for (Variant v : kVariants) {
        results.push_back(run_variant(o, data, v, comm));
        if (rank == 0) {
          std::printf("  %s: done\n", name_of(v));
          std::fflush(stdout);
        }
      }
      MPI_Comm_free(&comm);
      if (rank == 0) {
        print_table(results);
        write_losses_csv(out / "losses.csv", results);
      }
      plot = o.plot && rank == 0;
    } catch (const UsageError& e) {
      if (rank == 0) {
        if (e.what()[0] != '\0') std::fprintf(stderr, "pbt: %s\n", e.what());
        std::fputs(kUsage, stderr);
      }
      rc = e.what()[0] != '\0' ? 2 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] pbt: %s\n", rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  ex::report_finished("pbt");
  MPI_Finalize();

  // Plots after MPI is gone: forking inside an MPI process is best avoided.
  if (plot && rc == 0) {
    const std::filesystem::path out(o.out);
    if (render_losses(out, size, o.steps)) {
      std::printf("plot: %s\n", (out / "losses.png").c_str());
    } else {
      std::printf("plot: gnuplot failed, losses.png not written\n");
    }
    const std::string cmd = "'" + o.python + "' '" + o.lineage_script + "' '" +
                            (out / "events.explore.jsonl").string() + "' --population " +
                            std::to_string(size) + " --steps " + std::to_string(o.steps - 1) +
                            " --title 'explore' --out '" + (out / "lineage").string() + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::printf("lineage: %s failed\n", o.lineage_script.c_str());
      rc = 1;
    }
  }
  return rc;
}
