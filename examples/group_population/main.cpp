// A population of data-parallel agents: every agent is g ranks training one linear model on
// different halves of its data (gradients averaged inside the agent with MPI_Allreduce, as a
// data-parallel trainer does), with age-based replacement through paramwin::GroupAgent, and a
// population report at the end (table on stdout, JSON file).
//
//   mpiexec.mpich -n 4 group_population [--ranks-per-agent 2] [--steps 300] [--report r.json]
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../common/finish.hpp"
#include "paramwin/paramwin.hpp"

namespace {

struct Args {
  int ranks_per_agent = 2;
  int steps = 300;
  std::string report = "group_population_report.json";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--ranks-per-agent") a.ranks_per_agent = std::atoi(argv[i + 1]);
    else if (k == "--steps") a.steps = std::atoi(argv[i + 1]);
    else if (k == "--report") a.report = argv[i + 1];
  }
  return a;
}

constexpr std::size_t kFeatures = 16;
constexpr std::size_t kSamples = 256;  // per rank

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    const Args args = parse(argc, argv);
    try {
      paramwin::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = args.ranks_per_agent});
      const int agent_id = groups.agent();

      // The task: y = x . w_true, the same w_true everywhere; each rank its own samples.
      std::mt19937 rng(1234U + static_cast<unsigned>(groups.world_rank()));
      std::normal_distribution<float> normal(0.0F, 1.0F);
      std::vector<float> w_true(kFeatures);
      std::mt19937 task(99);
      for (float& v : w_true) v = std::normal_distribution<float>(0.0F, 1.0F)(task);
      std::vector<float> x(kSamples * kFeatures);
      std::vector<float> y(kSamples);
      for (std::size_t s = 0; s < kSamples; ++s) {
        float dot = 0.0F;
        for (std::size_t f = 0; f < kFeatures; ++f) {
          x[s * kFeatures + f] = normal(rng);
          dot += x[s * kFeatures + f] * w_true[f];
        }
        y[s] = dot;
      }

      // One replica per rank; the replicas of one agent start equal (seeded by agent id).
      std::vector<float> w(kFeatures);
      std::vector<float> bias(1, 0.0F);
      std::mt19937 init(77U + static_cast<unsigned>(agent_id));
      for (float& v : w) v = std::normal_distribution<float>(0.0F, 2.0F)(init);
      const float lr = 0.002F * static_cast<float>(1 + agent_id % 4);  // agents differ

      paramwin::Layout layout;
      layout.add("w", kFeatures).add("bias", std::vector<std::size_t>{});
      paramwin::AgentOptions options;
      options.seed = 5;
      options.triggers.age = {.enabled = true, .lo = 40, .hi = 80};
      options.selection = {.kind = paramwin::SelectionKind::fittest, .k = 1};
      paramwin::GroupAgent agent(groups, layout, options);  // collective
      agent.publish({w, bias});

      std::vector<float> grad(kFeatures + 1);
      for (int step = 0; step < args.steps; ++step) {
        // Local gradient of the mean squared error, averaged over the agent's ranks.
        std::fill(grad.begin(), grad.end(), 0.0F);
        double loss = 0.0;
        for (std::size_t s = 0; s < kSamples; ++s) {
          float pred = bias[0];
          for (std::size_t f = 0; f < kFeatures; ++f) pred += x[s * kFeatures + f] * w[f];
          const float err = pred - y[s];
          loss += static_cast<double>(err) * err / static_cast<double>(kSamples);
          for (std::size_t f = 0; f < kFeatures; ++f)
            grad[f] += 2.0F * err * x[s * kFeatures + f] / static_cast<float>(kSamples);
          grad[kFeatures] += 2.0F * err / static_cast<float>(kSamples);
        }
        MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(kFeatures + 1), MPI_FLOAT,
                      MPI_SUM, groups.agent_comm());
        for (std::size_t f = 0; f < kFeatures; ++f)
          w[f] -= lr * grad[f] / static_cast<float>(args.ranks_per_agent);
        bias[0] -= lr * grad[kFeatures] / static_cast<float>(args.ranks_per_agent);

        const paramwin::StepEvent ev = agent.step(step, loss, {w, bias});  // agent-collective
        if (ev.died && agent.leader()) {
          std::printf("agent %d reborn at step %d from agent %d (stamp %llu), loss was %.4f\n",
                      agent_id, step, ev.donors.at(0).rank,
                      static_cast<unsigned long long>(ev.donors.at(0).version), ev.metric);
        }
      }

      const paramwin::PopulationReport report =
          paramwin::gather_report(groups.training_comm(), agent.stats(), agent.leader());
      if (groups.world_rank() == 0) {
        report.write_table(std::cout);
        report.write_json(args.report);
        std::printf("report written to %s\n", args.report.c_str());
      }
    } catch (const paramwin::Error& e) {
      std::fprintf(stderr, "group_population: %s\n", e.what());
      code = 1;
    }
  }
  paramwin_examples::report_finished("group_population");  // see examples/common/finish.hpp
  MPI_Finalize();
  return code;
}
