// checkpoint_resume_torch: tests/checkpoint/checkpoint_resume_test.cmake's run for TorchAgent.
// A small MLP trained with Adam; agents step one at a time in rank order (deterministic). Writes
// every module parameter and the sums of Adam's moments and its step counts (%a) per rank, so
// that a resume that lost the optimizer's state shows.
//
//   mpiexec -n P checkpoint_resume_torch --steps S --out DIR --tag T [--save-at N] [--resume FILE]
#include <mpi.h>
#include <torch/torch.h>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>

#include "paramwin/torch/agent.hpp"

namespace pw = paramwin;

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
      int steps = 30;
      int save_at = 0;
      std::string out = ".";
      std::string tag = "run";
      std::string resume;
      for (int i = 1; i + 1 < argc; i += 2) {
        const std::string_view k = argv[i];
        const std::string v = argv[i + 1];
        if (k == "--steps") steps = std::stoi(v);
        else if (k == "--save-at") save_at = std::stoi(v);
        else if (k == "--out") out = v;
        else if (k == "--tag") tag = v;
        else if (k == "--resume") resume = v;
        else throw std::runtime_error("unknown option " + std::string(k));
      }
      torch::set_num_threads(1);
      torch::manual_seed(static_cast<std::uint64_t>(1000 + rank));
      const torch::Tensor x = torch::randn({32, 4});
      const torch::Tensor y = torch::tanh(x.sum(1, true)) * 0.5;
      torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::Tanh(),
                                  torch::nn::Linear(8, 1));
      torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.002 * (rank + 1)));

      pw::AgentOptions o;
      o.seed = 11;
      o.triggers.age = {.enabled = true, .lo = 3, .hi = 8};
      o.selection.kind = pw::SelectionKind::fittest;
      o.selection.k = 1;
      o.event_log = out + "/" + tag + ".events.rank{rank}.jsonl";
      pw::torch::TorchAgent agent(MPI_COMM_WORLD, *model, adam, o);
      std::int64_t start = 0;
      if (!resume.empty()) {
        start = agent.load_checkpoint(resume).steps;
      } else {
        (void)agent.publish();
        MPI_Barrier(MPI_COMM_WORLD);
      }
      for (std::int64_t it = start; it < steps; ++it) {
        adam.zero_grad();
        const torch::Tensor loss = torch::mse_loss(model->forward(x), y);
        loss.backward();
        adam.step();
        const double metric = loss.item<double>();
        for (int turn = 0; turn < size; ++turn) {
          if (turn == rank) (void)agent.step(it, metric);
          MPI_Barrier(MPI_COMM_WORLD);
        }
        if (save_at > 0 && it + 1 == save_at) {
          agent.save_checkpoint(pw::checkpoint_path(out + "/" + tag + "-{step}.h5", it + 1));
          break;
        }
      }
      std::ofstream p(out + "/" + tag + ".params.rank" + std::to_string(rank) + ".txt");
      char buf[64];
      torch::NoGradGuard no_grad;
      for (const auto& item : model->named_parameters()) {
        const torch::Tensor t = item.value().contiguous().to(torch::kDouble);
        const double* d = t.data_ptr<double>();
        for (std::int64_t i = 0; i < t.numel(); ++i) {
          std::snprintf(buf, sizeof buf, "%a\n", d[i]);
          p << item.key() << ' ' << buf;
        }
        auto* s = pw::torch::optimizer_state(adam, item.value());
        if (s != nullptr) {
          auto& a = static_cast<torch::optim::AdamParamState&>(*s);
          std::snprintf(buf, sizeof buf, "%a %a", a.exp_avg().sum().item<double>(),
                        a.exp_avg_sq().sum().item<double>());
          p << item.key() << " adam step " << a.step() << " moments " << buf << '\n';
        } else {
          p << item.key() << " no optimizer state\n";
        }
      }
      p << "steps " << agent.agent().steps() << " generation " << agent.agent().generation()
        << " deaths " << agent.stats().deaths() << '\n';
      MPI_Barrier(MPI_COMM_WORLD);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] checkpoint_resume_torch: %s\n", rank, e.what());
      rc = 1;
    }
  }
  MPI_Finalize();
  return rc;
}
