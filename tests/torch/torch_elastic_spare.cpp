// A LibTorch module's population outlives its processes (docs/elastic.md, "Epochs and
// spares"): torch::ElasticTorchAgent, the standing window, Adam's state inherited
// (TorchAgentOptions::inherit_optimizer_state) and the learning rate published as a
// hyperparameter. The world's last two ranks are spares, the others members; every member
// trains 150 iterations. Faults, by the first argument:
//   --exit    the last slot's process ends (std::_Exit(3)) after iteration 30, slot 1's after 70;
//   --kill    the same with SIGKILL (survivable under Open MPI's --enable-recovery only);
//   --resign  the same slots throw instead; each catches, resigns (a spare takes its slot) and
//             waits as a spare itself.
// A member's state before each step is its slot's constants: parameter element j of tensor t
// is 100 (slot + 1) + 0.01 j + t, Adam's exp_avg 10 (slot + 1), exp_avg_sq slot + 1, step
// 5 (slot + 1), learning rate 0.001 (slot + 1). Each joined spare's first step must be a
// rebirth (reason joined) from live donors whose exact weighted mix it holds in its module and
// in Adam's state (the step rounded), with the best donor's learning rate
// (explore.inherit = best, no explore rule) in its optimizer. Every slot must finish (0 lost
// agents), with as many joins and epochs as faults; the last epoch's processes meet over its
// communicator and print the pass line; every process ends with std::_Exit(0).
#include <mpi.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "death_test_util.hpp"
#include "elastic_test_util.hpp"
#include "paramwin/paramwin.hpp"
#include "paramwin/torch/elastic.hpp"
#include "torch_slot_state.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;

namespace {

constexpr int kSpares = 2;

/// Writes the member's state: its slot's constants (see the top of the file).
void encode(torch::nn::Linear& model, torch::optim::Adam& opt, int slot) {
  pw::test::encode_slot_state(model, opt, slot);
  for (auto& g : opt.param_groups()) {
    static_cast<torch::optim::AdamOptions&>(g.options()).lr(0.001 * (slot + 1));
  }
}

/// Whether the joined rebirth holds the exact mix of its donors; @p members: the world rank of
/// each slot (the standing window's ranks are world ranks).
bool exact_mix(const pw::StepEvent& e, torch::nn::Linear& model, torch::optim::Adam& opt,
               const std::vector<int>& members) {
  if (!e.died || e.reason != pw::DeathReason::joined || e.donors.empty()) return false;
  std::vector<std::pair<int, double>> donors;  // (slot, weight)
  for (const pw::DonorRecord& d : e.donors) {
    int slot = -1;
    for (std::size_t s = 0; s < members.size(); ++s) {
      if (members[s] == d.rank) slot = static_cast<int>(s);
    }
    if (slot < 0) return false;  // a donor that holds no slot
    donors.emplace_back(slot, d.weight);
  }
  bool ok = pw::test::holds_slot_mix(model, opt, donors);
  int best = static_cast<int>(members.size());
  for (const auto& [slot, w] : donors) best = std::min(best, slot);  // lower metric: fitter
  for (auto& g : opt.param_groups()) {
    const double lr = static_cast<torch::optim::AdamOptions&>(g.options()).lr();
    ok = ok && pw::test::near(lr, 0.001 * (best + 1));
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  const std::string how = argc > 1 ? argv[1] : "--exit";
  const int members = run.size - kSpares;
  torch::manual_seed(static_cast<std::uint64_t>(run.rank));
  torch::nn::Linear model(3, 2);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.001 * (run.rank + 1)));
  {  // one real step: every parameter gets its Adam state
    model->zero_grad();
    model(torch::ones({4, 3})).sum().backward();
    opt.step();
  }
  pw::AgentOptions options = pw::parse_agent_options("triggers=none k=2 selection=uniform");
  options.seed = 11;
  pwt::TorchAgentOptions torch_options;
  torch_options.inherit_optimizer_state = true;
  torch_options.hyperparameters = {"lr"};
  pw::WindowOptions window_options;
  window_options.name = "torch_elastic_spare";
  window_options.liveness.suspect_seconds = 1.0;
  pw::MembershipOptions membership;
  membership.members = members;
  membership.check_seconds = 0.02;
  membership.dead_after_seconds = 1.5;
  membership.agree_seconds = 20.0;
  membership.replacement = pw::Replacement::standing_window;
  pwt::ElasticTorchAgent agent(MPI_COMM_WORLD, *model, opt, options, torch_options, window_options,
                               membership);
  const bool original = run.rank < members;
  int joins = 0;
  int bad = 0;
  bool finished = false;
  while (agent.wait_for_slot()) {
    const int slot = agent.membership().slot();
    const bool joined = agent.torch_agent().agent().policy().pending() == pw::DeathReason::joined;
    if (joined) ++joins;
    bool first = true;
    try {
      for (std::int64_t it = agent.resume_iteration(); it < 150; ++it) {
        if (!(joined && first)) encode(model, opt, slot);
        const pw::StepEvent e = agent.step(it, 1.0 * slot);
        if (joined && first) {
          const bool ok = exact_mix(e, model, opt, agent.membership().members());
          if (!ok) ++bad;
          std::printf("world rank %d: joined slot %d at iteration %lld: %s from %zu donors, %s\n",
                      run.rank, slot, static_cast<long long>(it),
                      e.died ? pw::reason_name(e.reason).data() : "no rebirth", e.donors.size(),
                      ok ? "the exact mix" : "NOT the mix");
        }
        first = false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        pw::test::spare_test_fault(how, original && !joined, run.rank, slot, members, it);
      }
      agent.finish();
      finished = true;
      break;
    } catch (const pw::EvictedError& e) {
      std::printf("world rank %d: %s\n", run.rank, e.what());
    } catch (const std::runtime_error& e) {
      if (how != "--resign") throw;
      agent.resign();
    }
  }
  std::fflush(stdout);
  if (!finished) std::_Exit(0);  // a spare released at the end, or an evicted process
  MPI_Comm last = agent.membership().create_members_comm();
  if (bad != 0)
    std::printf("FAILED: world rank %d: %d joined rebirths not the mix\n", run.rank, bad);
  int totals[2] = {bad, joins};
  int sums[2] = {0, 0};
  MPI_Allreduce(totals, sums, 2, MPI_INT, MPI_SUM, last);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  const auto epoch = static_cast<int>(agent.membership().epoch());
  if (rank == 0) {
    if (sums[0] == 0 && sums[1] == 2 && epoch == 2 && size == members) {
      std::printf("elastic: torch spares inherited every dead slot (%s)\n", how.c_str());
    } else {
      std::printf("FAILED: %d bad, %d joins (want 2), epoch %d, %d slots\n", sums[0], sums[1],
                  epoch, size);
    }
  }
  std::fflush(stdout);
  std::_Exit(0);
}
