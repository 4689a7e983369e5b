// checkpoint_resume: a deterministic population run for the resume tests
// (tests/checkpoint/checkpoint_resume_test.cmake), of one-rank Agents or (--ranks-per-agent G) of
// GroupAgents of G ranks. Agents step one at a time in agent order (a barrier between turns),
// every rank of an agent training its replica identically, so two runs with the same seed read
// the same donor versions (stamps) and end with the same bits; the test compares a run of S
// steps with a run of N steps + checkpoint + a new mpiexec that resumes and runs to S, on every
// rank (a group's followers included).
//
//   mpiexec -n P checkpoint_resume --steps S --out DIR --tag T [--save-at N] [--resume FILE]
//                                  [--ranks-per-agent G]
//
// Writes DIR/T.params.rank<r>.txt (every parameter as %a, per world rank) and the event logs
// DIR/T.events.rank<a>.jsonl (one per agent: a = rank, or a group's agent id, from its leader).
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

struct Args {
  int steps = 40;
  int save_at = 0;
  int ranks_per_agent = 0;  // 0: one-rank Agents on MPI_COMM_WORLD
  std::string out = ".";
  std::string tag = "run";
  std::string resume;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--save-at") a.save_at = std::stoi(v);
    else if (k == "--out") a.out = v;
    else if (k == "--tag") a.tag = v;
    else if (k == "--resume") a.resume = v;
    else if (k == "--ranks-per-agent") a.ranks_per_agent = std::stoi(v);
    else throw std::runtime_error("unknown option " + std::string(k));
  }
  return a;
}

// The "trainer": a deterministic update that makes agents differ (their id and step); the
// same on every rank of an agent (data-parallel replicas).
void train(std::vector<float>& w, std::vector<double>& b, int agent, std::int64_t it) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = 0.9F * w[i] + 0.01F * static_cast<float>((agent + 1) * static_cast<int>(i % 7) + 1) +
           0.001F * static_cast<float>(it % 5);
  }
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = 0.95 * b[i] + 0.1 * (agent - 1.5) + 0.01 * static_cast<double>(i);
}

double loss_of(const std::vector<float>& w, const std::vector<double>& b) {
  double s = 0.0;
  for (const float x : w) s += static_cast<double>(x) * static_cast<double>(x);
  for (const double x : b) s += x * x;
  return s;
}

pw::Layout layout_of() {
  pw::Layout layout;
  layout.add("w", std::vector<std::size_t>{4, 16});
  layout.add("b", 8, pw::DType::float64);
  return layout;
}

pw::AgentOptions options_of(const Args& a, int agents) {
  pw::AgentOptions o;
  o.seed = 7;
  o.triggers.age = {.enabled = true, .lo = 3, .hi = 9};
  o.selection.kind = pw::SelectionKind::fittest;
  o.selection.k = agents > 2 ? 2 : 1;
  o.mixing.kind = pw::MixingKind::weighted;
  o.event_log = a.out + "/" + a.tag + ".events.rank{rank}.jsonl";
  return o;
}

// The run of agent @p id of @p agents (an Agent<> or a GroupAgent); @p counters writes the
// agent's counters after the parameters.
template <class A, class Counters>
void run(const Args& a, A& agent, int id, int agents, int rank, Counters counters) {
  std::vector<float> w(64);
  std::vector<double> b(8);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>(id) + 0.01F * static_cast<float>(i);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = -static_cast<double>(id) * 0.5 + static_cast<double>(i);
  std::vector<pw::LayerRef> params{w, b};
  std::int64_t start = 0;
  if (!a.resume.empty()) {
    start = agent.load_checkpoint(a.resume, params).steps;
  } else {
    (void)agent.publish(std::vector<pw::ConstLayerRef>{w, b});
    MPI_Barrier(MPI_COMM_WORLD);
  }
  for (std::int64_t it = start; it < a.steps; ++it) {
    train(w, b, id, it);
    const double loss = loss_of(w, b);
    for (int turn = 0; turn < agents; ++turn) {
      if (turn == id) (void)agent.step(it, loss, params);
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (a.save_at > 0 && it + 1 == a.save_at) {
      agent.save_checkpoint(pw::checkpoint_path(a.out + "/" + a.tag + "-{step}.h5", it + 1),
                            std::vector<pw::ConstLayerRef>{w, b});
      break;
    }
  }
  std::ofstream p(a.out + "/" + a.tag + ".params.rank" + std::to_string(rank) + ".txt");
  char buf[64];
  for (const float x : w) {
    std::snprintf(buf, sizeof buf, "%a\n", static_cast<double>(x));
    p << buf;
  }
  for (const double x : b) {
    std::snprintf(buf, sizeof buf, "%a\n", x);
    p << buf;
  }
  p << "steps " << agent.steps() << " age " << agent.age() << " max_age " << agent.max_age()
    << " generation " << agent.generation() << " deaths " << agent.stats().deaths() << ' ';
  counters(p);
  p << '\n';
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    try {
      const Args a = parse(argc, argv);
      if (a.ranks_per_agent == 0) {
        pw::Agent<> agent(MPI_COMM_WORLD, layout_of(), options_of(a, size));
        run(a, agent, rank, size, rank,
            [&](std::ostream& p) { p << "version " << agent.window().version(); });
      } else {
        const pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = a.ranks_per_agent});
        pw::GroupAgent agent(groups, layout_of(), options_of(a, groups.agents()));
        run(a, agent, groups.agent(), groups.agents(), rank, [&](std::ostream& p) {
          p << "epoch " << agent.epoch() << " publishes " << agent.stats().publishes();
        });
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] checkpoint_resume: %s\n", rank, e.what());
      rc = 1;
    }
  }
  MPI_Finalize();
  return rc;
}
