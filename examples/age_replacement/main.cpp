// age_replacement: a population of small MLPs, one per MPI rank, trained by hand-written
// gradient descent on a synthetic regression task. Each agent dies when it reaches an age
// drawn from [lo, hi] and is reborn from donors' parameters read one-sidedly through
// paramwin; the donors never stop training. The same population is then trained again
// without replacement (same seeds, same data) as a control, and both are compared.
//
//   mpiexec -n 4 ./age_replacement [--steps N] [--out DIR] [--seed S] [--no-plot] ...
//
// The trainer sees paramwin only through Agent::step(iteration, loss, spans). Everything
// else here is reporting: progress is gathered to rank 0 every --report-every steps with
// nonblocking collectives completed by polling with sleeps, never by spinning in MPI.
//
// Rank 0 prints a live progress table and writes, under --out:
//   losses.csv    run,agent,lr,step,loss,generation   (every agent, every step, both runs)
//   deaths.csv    run,agent,step,generation,reason,donors,donor_versions,loss_before,loss_after
//   summary.csv   run,step,best,median,worst
//   events.jsonl  paramwin's JSON-lines event log, one line per death (all agents)
//   losses.png    gnuplot plot of the above (and plot.gp to redraw it)
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../common/cli.hpp"
#include "../common/finish.hpp"
#include "../common/polite_mpi.hpp"
#include "mlp.hpp"
#include "paramwin/agent.hpp"
#include "paramwin/paramwin.hpp"
#include "report.hpp"

namespace pw = paramwin;
using namespace age_replacement;
using paramwin_examples::barrier_politely;
using paramwin_examples::check_mpi;
using paramwin_examples::flag_value;
using paramwin_examples::gather_doubles;
using paramwin_examples::parse_number;
using paramwin_examples::parse_range;
using paramwin_examples::UsageError;
using paramwin_examples::wait_politely;

namespace {

// ---------------------------------------------------------------------------------------
// Command line

struct Options {
  int steps = 800;
  std::string out = "out/age_replacement";
  std::uint64_t seed = 1;
  bool plot = true;
  bool control = true;
  bool free_running = false;
  int report_every = 50;
  std::size_t hidden = 32;
  std::int64_t age_lo = 50;
  std::int64_t age_hi = 150;
  std::string selection = "fittest";
  int donors = 1;
  std::string mixing = "mean";
  double lr_min = 0.003;
  double lr_max = 1.0;
  int last_n = 100;
  std::size_t train_points = 384;
  std::size_t test_points = 1024;
  double noise = 0.05;
  std::string checkpoint_dir;  // empty: no checkpoints
  int checkpoint_every = 0;
  bool resume = false;
  bool sequential = false;
};

constexpr const char* kUsage =
    "usage: mpiexec -n N age_replacement [options]\n"
    "  --steps N          training steps per run (default 800)\n"
    "  --out DIR          output directory (default out/age_replacement)\n"
    "  --seed S           seed of data, initialisations and deaths (default 1)\n"
    "  --no-plot          do not run gnuplot\n"
    "  --no-control       skip the control run (no replacement)\n"
    "  --report-every N   progress table cadence in steps (default 50); the progress gather\n"
    "                     also keeps the agents within N steps of each other\n"
    "  --free-running     only rank 0 waits for the progress gathers: agents drift apart\n"
    "                     freely (as fast or slow as the scheduler lets each one run)\n"
    "  --age LO..HI       range of the drawn maximum age (default 50..150)\n"
    "  --selection NAME   donor selection: fittest, uniform, tournament (default fittest)\n"
    "  --donors K         donors per rebirth (default 1)\n"
    "  --mixing NAME      mean, weighted or best (default mean)\n"
    "  --lr MIN..MAX      learning rates, log-spaced over the agents (default 0.003..1)\n"
    "  --hidden H         hidden units per layer (default 32)\n"
    "  --last N           steps averaged in the comparison (default 100)\n"
    "  --checkpoint-dir DIR    population checkpoints of the replacement run go to\n"
    "                     DIR/age_replacement-<step>.h5 (docs/checkpoints.md); the newest 3 are "
    "kept\n"
    "  --checkpoint-every N    save one every N steps (needs --checkpoint-dir)\n"
    "  --resume           continue the replacement run from the newest checkpoint in\n"
    "                     --checkpoint-dir if there is one, else start fresh\n"
    "  --sequential       agents step one at a time in rank order: a rerun with the same\n"
    "                     seed (resumed or not) gives the same bits (slower)\n";

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
    else if (a == "--free-running") o.free_running = true;
    else if (a == "--report-every") o.report_every = parse_number<int>(a, value(i));
    else if (a == "--age") std::tie(o.age_lo, o.age_hi) = parse_range<std::int64_t>(a, value(i));
    else if (a == "--selection") o.selection = value(i);
    else if (a == "--donors") o.donors = parse_number<int>(a, value(i));
    else if (a == "--mixing") o.mixing = value(i);
    else if (a == "--lr") std::tie(o.lr_min, o.lr_max) = parse_range<double>(a, value(i));
    else if (a == "--hidden") o.hidden = parse_number<std::size_t>(a, value(i));
    else if (a == "--last") o.last_n = parse_number<int>(a, value(i));
    else if (a == "--checkpoint-dir") o.checkpoint_dir = value(i);
    else if (a == "--checkpoint-every") o.checkpoint_every = parse_number<int>(a, value(i));
    else if (a == "--resume") o.resume = true;
    else if (a == "--sequential") o.sequential = true;
    else if (a == "--help" || a == "-h") throw UsageError("");
    else throw UsageError("unknown option " + std::string(a));
  }
  if (o.steps < 1) throw UsageError("--steps must be >= 1");
  if (o.report_every < 1) throw UsageError("--report-every must be >= 1");
  if (o.hidden < 1) throw UsageError("--hidden must be >= 1");
  if (o.last_n < 1) throw UsageError("--last must be >= 1");
  if (!(o.lr_min > 0.0) || !(o.lr_max >= o.lr_min)) throw UsageError("--lr needs 0 < MIN <= MAX");
  if (o.age_lo < 1 || o.age_hi < o.age_lo) throw UsageError("--age needs 1 <= LO <= HI");
  if (o.donors < 1) throw UsageError("--donors must be >= 1");
  if (o.checkpoint_every < 0) throw UsageError("--checkpoint-every must be >= 0");
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint_dir.empty()) {
    throw UsageError("--checkpoint-every and --resume need --checkpoint-dir");
  }
  try {  // the library's own parsers name the valid choices
    (void)pw::parse_selection(o.selection);
    (void)pw::parse_mixing(o.mixing);
  } catch (const pw::InvalidArgument& e) {
    throw UsageError(e.what());
  }
  return o;
}

// ---------------------------------------------------------------------------------------
// MPI without spinning: MPICH busy-polls inside blocking calls, and with more ranks than
// cores a rank spinning in MPI_Gather steals the core a training rank needs. Every wait in
// this program is a nonblocking call completed by MPI_Test plus a short sleep.

/// Gathers the live progress (step loss and deaths of every agent) to rank 0 every few
/// steps. Rank 0 waits for each gather and prints a table row; the other ranks post their
/// contribution and carry on training, completing it later (poll()).
class ProgressGather {
 public:
  /// With @p lockstep every rank waits (politely) for each gather, which keeps the agents
  /// within one report interval of each other; otherwise only rank 0 waits.
  ProgressGather(MPI_Comm comm, int steps, bool lockstep)
      : comm_(comm), steps_(steps), lockstep_(lockstep) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
  }
  ProgressGather(const ProgressGather&) = delete;
  ProgressGather& operator=(const ProgressGather&) = delete;
  ~ProgressGather() {
    // Completes what is left; finish() should have done so already.
    for (auto& p : pending_) MPI_Wait(&p->request, MPI_STATUS_IGNORE);
  }

  void post(int step, double loss, std::int64_t deaths) {
    auto p = std::make_unique<Pending>();
    p->send = {loss, static_cast<double>(deaths)};
    if (rank_ == 0) p->recv.resize(2 * static_cast<std::size_t>(size_));
    check_mpi(MPI_Igather(p->send.data(), 2, MPI_DOUBLE, p->recv.data(), 2, MPI_DOUBLE, 0, comm_,
                          &p->request),
              "MPI_Igather(progress)");
    if (rank_ != 0 && !lockstep_) {
      pending_.push_back(std::move(p));
      return;
    }
    wait_politely(p->request);
    if (rank_ != 0) return;
    std::vector<double> losses;
    long deaths_total = 0;
    for (int r = 0; r < size_; ++r) {
      losses.push_back(p->recv[2 * static_cast<std::size_t>(r)]);
      deaths_total += static_cast<long>(p->recv[2 * static_cast<std::size_t>(r) + 1]);
    }
    print_progress_row(step, steps_, spread(losses), deaths_total);
  }

  /// Completes finished gathers without waiting.
  void poll() {
    while (!pending_.empty()) {
      int done = 0;
      check_mpi(MPI_Test(&pending_.front()->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done == 0) return;
      pending_.pop_front();
    }
  }

  /// Completes every gather (politely).
  void finish() {
    for (auto& p : pending_) wait_politely(p->request);
    pending_.clear();
  }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::array<double, 2> send{};
    std::vector<double> recv;
  };
  MPI_Comm comm_;
  int steps_;
  bool lockstep_;
  int rank_ = 0;
  int size_ = 1;
  std::deque<std::unique_ptr<Pending>> pending_;
};

/// Gathers every rank's string to rank 0 (returned there, in rank order).
std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(rank == 0 ? static_cast<std::size_t>(size) : 0);
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm, &r), "MPI_Igather");
  wait_politely(r);
  std::vector<int> displs(lens.size());
  int total = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                         MPI_CHAR, 0, comm, &r),
            "MPI_Igatherv");
  wait_politely(r);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    out.push_back(
        all.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i])));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// One population run

/// Learning rate of agent @p rank: log-spaced from lr_min to lr_max over the population, so
/// some agents learn too slowly and some too violently.
double agent_lr(const Options& o, int rank, int size) {
  if (size == 1) return o.lr_min;
  const double t = static_cast<double>(rank) / static_cast<double>(size - 1);
  return o.lr_min * std::pow(o.lr_max / o.lr_min, t);
}

std::string join(const std::vector<std::string>& parts, char sep) {
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i != 0) s += sep;
    s += parts[i];
  }
  return s;
}

struct Data {
  Dataset train;
  Dataset test;
};

/// Trains this rank's agent for o.steps steps, with age-based replacement when @p replace,
/// and returns the gathered result on rank 0 (an empty one elsewhere).
/// @note Collective over @p comm.
RunResult run_population(const Options& o, const Data& data, bool replace, MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string name = replace ? "replacement" : "control";
  const std::filesystem::path out(o.out);

  // The trainer's model: parameters in std::vectors; paramwin sees them as spans.
  Mlp mlp(o.hidden);
  const std::uint64_t init_seed =
      o.seed * std::uint64_t{1000003} + static_cast<std::uint64_t>(rank);
  mlp.initialise(init_seed, 1.0F);
  const float lr = static_cast<float>(agent_lr(o, rank, size));
  constexpr float kClip = 1.0F;

  pw::Layout layout;
  std::vector<pw::LayerRef> params;
  for (std::size_t l = 0; l < Mlp::kLayers; ++l) {
    layout.add(Mlp::kNames[l], mlp.shape(l));
    params.emplace_back(Mlp::kNames[l], mlp.layer(l));
  }

  std::optional<pw::Agent<>> agent;
  int first_step = 0;  // > 0 when resumed from a checkpoint
  if (replace) {
    pw::AgentOptions ao;
    ao.seed = o.seed;
    ao.direction = pw::MetricDirection::lower_is_better;
    ao.triggers.age = {.enabled = true, .lo = o.age_lo, .hi = o.age_hi};
    ao.selection.kind = pw::parse_selection(o.selection);
    ao.selection.k = o.donors;
    ao.mixing.kind = pw::parse_mixing(o.mixing);
    // A diverging donor must not poison a rebirth: leave it out instead.
    ao.mixing.non_finite = pw::NonFinitePolicy::skip_donor;
    ao.event_log = (out / "events.rank{rank}.jsonl").string();
    if (!o.checkpoint_dir.empty()) {
      // Saved explicitly below, after the update that follows step(): a save inside step()
      // would miss that update (its gradient is not in the checkpoint).
      ao.checkpoint.path =
          (std::filesystem::path(o.checkpoint_dir) / "age_replacement-{step}.h5").string();
      ao.checkpoint.keep = 3;
    }
    agent.emplace(comm, layout, std::move(ao));  // collective
    std::optional<pw::CheckpointLoad> resumed;
    if (o.resume) resumed = agent->resume_newest(params);  // collective
    if (resumed) {
      first_step = static_cast<int>(resumed->steps);
      if (rank == 0) {
        std::printf("  resumed from %s (%d agents in the file) at step %d\n", resumed->path.c_str(),
                    resumed->agents, first_step);
      }
    } else {
      // Publish the initial parameters so that every agent is a donor from the start.
      std::vector<pw::ConstLayerRef> initial;
      for (const pw::LayerRef& p : params) initial.push_back(p.as_const());
      (void)agent->publish(initial);
    }
  }

  if (rank == 0) print_progress_header(name);
  barrier_politely(comm);
  const double t0 = MPI_Wtime();

  // Steps before a resume were run by an earlier job: NaN in losses.csv.
  std::vector<double> history(static_cast<std::size_t>(o.steps),
                              std::numeric_limits<double>::quiet_NaN());
  std::string deaths_text;  // one CSV-ish line per death, parsed on rank 0
  std::int64_t deaths = 0;
  ProgressGather progress(comm, o.steps, !o.free_running);
  for (int step = first_step; step < o.steps; ++step) {
    double loss = mlp.loss(data.train, /*want_grad=*/true);
    if (!std::isfinite(loss)) loss = std::numeric_limits<double>::max();
    history[static_cast<std::size_t>(step)] = loss;
    bool reborn = false;
    if (agent) {
      // The parameters passed here are the ones `loss` was measured on: step() publishes
      // them with that metric, or replaces them if this agent dies now.
      pw::StepEvent ev;
      if (o.sequential) {
        // One agent at a time: each reads the others between their steps, never during one.
        for (int turn = 0; turn < size; ++turn) {
          if (turn == rank) ev = agent->step(step, loss, params);
          barrier_politely(comm);
        }
      } else {
        ev = agent->step(step, loss, params);
      }
      if (ev.died) {
        reborn = true;
        ++deaths;
        std::vector<std::string> donors;
        std::vector<std::string> versions;
        for (const pw::DonorRecord& d : ev.donors) {
          if (d.skipped) continue;
          donors.push_back(std::to_string(d.rank));
          versions.push_back(std::to_string(d.version));
        }
        std::ostringstream line;
        line.precision(9);
        line << rank << ',' << step << ',' << ev.generation << ',' << pw::reason_name(ev.reason)
             << ',' << join(donors, ';') << ',' << join(versions, ';') << ',' << loss << '\n';
        deaths_text += line.str();
      }
    }
    // After a rebirth the gradient belongs to the parameters that died: skip this update.
    if (!reborn) mlp.sgd_step(lr, kClip);
    if (agent && o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) {
      // Collective: every agent saves after the same step. The MLP holds nothing else
      // between steps (its gradient is recomputed from the parameters).
      std::vector<pw::ConstLayerRef> now;
      for (const pw::LayerRef& p : params) now.push_back(p.as_const());
      agent->save_checkpoint(pw::checkpoint_path(agent->options().checkpoint.path, step + 1), now);
    }

    if ((step + 1) % o.report_every == 0 || step + 1 == o.steps) {
      progress.post(step + 1, loss, deaths);
    } else {
      progress.poll();
    }
  }
  progress.finish();
  const double test_loss = mlp.loss(data.test, /*want_grad=*/false);

  RunResult result;
  result.name = name;
  result.agents = size;
  result.steps = o.steps;
  const std::vector<double> all_history = gather_doubles(comm, history);
  const std::vector<double> extras = gather_doubles(comm, {static_cast<double>(lr), test_loss});
  const std::vector<std::string> all_deaths = gather_strings(comm, deaths_text);
  result.seconds = MPI_Wtime() - t0;

  std::string summary;
  if (agent) {
    std::ostringstream s;
    agent->write_summary(s);
    summary = s.str();
  }
  const std::vector<std::string> summaries = gather_strings(comm, summary);

  // Free the windows together: arriving at the collective MPI_Win_free one by one would
  // busy-poll; the barrier lets early finishers sleep instead.
  barrier_politely(comm);
  agent.reset();  // collective; also closes the event log
  barrier_politely(comm);

  if (rank != 0) return result;

  result.losses.assign(all_history.begin(), all_history.end());
  for (int a = 0; a < size; ++a) {
    result.lrs.push_back(extras[2 * static_cast<std::size_t>(a)]);
    result.test_losses.push_back(extras[2 * static_cast<std::size_t>(a) + 1]);
  }
  for (const std::string& text : all_deaths) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::istringstream fields(line);
      std::string field;
      while (std::getline(fields, field, ',')) f.push_back(field);
      if (f.size() < 7) f.resize(7);
      DeathRecord d;
      d.agent = std::stoi(f[0]);
      d.step = std::stoll(f[1]);
      d.generation = std::stoull(f[2]);
      d.reason = f[3];
      d.donors = f[4];
      d.donor_versions = f[5];
      d.loss_before = std::stod(f[6]);
      if (d.step + 1 < o.steps) d.loss_after = result.loss(d.agent, static_cast<int>(d.step + 1));
      result.deaths.push_back(d);
    }
  }
  std::sort(result.deaths.begin(), result.deaths.end(),
            [](const DeathRecord& a, const DeathRecord& b) {
              return a.step != b.step ? a.step < b.step : a.agent < b.agent;
            });

  if (replace) {
    // One event log for the population, in rank order.
    std::ofstream merged(out / "events.jsonl");
    for (int r = 0; r < size; ++r) {
      std::string per_rank = "events.rank{rank}.jsonl";
      per_rank.replace(per_rank.find("{rank}"), 6, std::to_string(r));
      std::ifstream in(out / per_rank);
      merged << in.rdbuf();
      in.close();
      std::filesystem::remove(out / per_rank);
    }
    std::printf("\n  agent statistics (paramwin AgentStats), rank 0:\n");
    std::istringstream s(summaries.front());
    for (std::string line; std::getline(s, line);) std::printf("    %s\n", line.c_str());
  }
  std::printf("  %s run: %d steps in %.2f s, %zu deaths\n", name.c_str(), o.steps, result.seconds,
              result.deaths.size());
  std::fflush(stdout);
  return result;
}

/// Runs both populations and writes the outputs. Returns the process exit code.
int run(const Options& o, bool& want_plot, RunResult& repl, RunResult& ctrl) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);

  const std::filesystem::path out(o.out);
  if (rank == 0) {
    std::filesystem::create_directories(out);
    if (!o.checkpoint_dir.empty()) std::filesystem::create_directories(o.checkpoint_dir);
    std::printf("age_replacement: %d agents (one per rank), %d steps, MLP 2-%zu-%zu-1 (tanh), "
                "%zu training points\n",
                size, o.steps, o.hidden, o.hidden, o.train_points);
    std::printf("  deaths at an age drawn from [%lld, %lld]; donors: %s, k=%d, mixing %s\n",
                static_cast<long long>(o.age_lo), static_cast<long long>(o.age_hi),
                o.selection.c_str(), o.donors, o.mixing.c_str());
    std::printf("  learning rates:");
    for (int r = 0; r < size; ++r) std::printf(" %.4g", agent_lr(o, r, size));
    std::printf("\n");
    std::fflush(stdout);
  }
  barrier_politely(comm);  // the directory exists before anyone opens a log in it

  // The same data on every rank and in both runs.
  const Data data{make_dataset(o.train_points, o.seed, static_cast<float>(o.noise)),
                  make_dataset(o.test_points, o.seed + 7919, 0.0F)};

  repl = run_population(o, data, /*replace=*/true, comm);
  if (o.control) ctrl = run_population(o, data, /*replace=*/false, comm);
  MPI_Comm_free(&comm);

  if (rank != 0) {
    want_plot = false;
    return 0;
  }
  std::vector<const RunResult*> runs{&repl};
  if (o.control) runs.push_back(&ctrl);
  write_losses_csv(out / "losses.csv", runs);
  write_deaths_csv(out / "deaths.csv", runs);
  write_summary_csv(out / "summary.csv", runs);
  if (o.control) print_comparison(repl, ctrl, o.last_n);
  want_plot = o.plot && o.control;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rc = 0;
  bool want_plot = false;
  Options options;
  RunResult repl;
  RunResult ctrl;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      options = parse_options(argc, argv);
      int size = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      if (size < 2) throw UsageError("needs at least 2 ranks (one agent per rank)");
      if (options.donors > size - 1) {
        throw UsageError("--donors " + std::to_string(options.donors) + " needs at least " +
                         std::to_string(options.donors + 1) +
                         " ranks (donors never include the "
                         "dying agent), have " +
                         std::to_string(size));
      }
      rc = run(options, want_plot, repl, ctrl);
    } catch (const UsageError& e) {
      // Every rank parses the same command line, so every rank gets here: no hang.
      if (rank == 0) {
        if (e.what()[0] != '\0') std::fprintf(stderr, "age_replacement: %s\n", e.what());
        std::fputs(kUsage, stderr);
      }
      rc = e.what()[0] != '\0' ? 2 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] age_replacement: %s\n", rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  paramwin_examples::report_finished("age_replacement");  // see examples/common/finish.hpp
  MPI_Finalize();

  // gnuplot runs after MPI is gone: forking inside an MPI process is best avoided.
  if (rank == 0 && rc == 0) {
    const std::filesystem::path out(options.out);
    if (want_plot && render_plot(out, repl, ctrl)) {
      std::printf("\nplot: %s\n", (out / "losses.png").c_str());
    }
    if (!repl.losses.empty()) {
      std::printf("data: %s  %s  %s  %s\n", (out / "losses.csv").c_str(),
                  (out / "deaths.csv").c_str(), (out / "summary.csv").c_str(),
                  (out / "events.jsonl").c_str());
    }
  }
  return rc;
}
