// A LibTorch module's averaging population outlives its processes (docs/elastic.md,
// "Averaging populations"): torch::ElasticAveragingAgent with Adam's state mixed
// (TorchAveragingOptions::mix_optimizer_state). The world's last two ranks are spares, the
// others members; every member steps 150 times, 5 ms apart, with no gossip rounds (interval
// 10^9), so the only mixes are the joins. Faults, by the first argument (as elastic_spare's):
//   --exit    the last slot's process ends (std::_Exit(3)) after iteration 30, slot 1's after 70;
//   --kill    the same with SIGKILL (survivable under Open MPI's --enable-recovery only);
//   --resign  the same slots throw instead; each catches, resigns and waits as a spare.
// --standing (any position after the fault): Replacement::standing_window (default: a new
// window per epoch).
// A member's state before each step is its slot's constants: parameter element j of tensor t
// is 100 (slot + 1) + 0.01 j + t, Adam's exp_avg 10 (slot + 1), exp_avg_sq slot + 1, step
// 5 (slot + 1). A spare holds junk (10^6, step 1). Each joined spare's first step must be a
// join (RoundKind::joined, self weight 0) whose module and Adam state hold the exact weighted
// mix of the slots its round read (the step count mixed and rounded: a joiner takes over the
// members' training). Every slot must finish (0 lost agents), with as many joins and epochs
// as faults; the last epoch's processes meet over its communicator and print the pass line;
// every process ends with std::_Exit(0).
#include <mpi.h>

#include <torch/torch.h>

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
#include "paramwin/torch/elastic_averaging.hpp"
#include "torch_slot_state.hpp"

namespace pw = paramwin;
namespace pwt = paramwin::torch;

namespace {

constexpr int kSpares = 2;
/// Whether @p round is a proper join and the module and Adam's state hold the exact mix of the
/// slots it read (@p m: the epoch's members; @p standing: whose window ranks are world ranks).
bool exact_join(const pw::AveragingRound& round, torch::nn::Linear& model, torch::optim::Adam& opt,
                const pw::Membership& m, bool standing) {
  if (round.kind != pw::RoundKind::joined || !round.applied || round.self_weight != 0.0) {
    return false;
  }
  std::vector<std::pair<int, double>> read;  // (slot, weight)
  double sum = 0.0;
  for (const pw::AveragingPeer& p : round.peers) {
    if (p.skipped != pw::SkipReason::none) continue;
    const int slot = pw::test::slot_of_rank(p.rank, m.members(), standing);
    if (slot < 0 || slot == m.slot()) return false;  // a spare, a dead process, or itself
    read.emplace_back(slot, p.weight);
    sum += p.weight;
  }
  if (read.empty() || std::abs(sum - 1.0) > 1e-9) return false;
  return pw::test::holds_slot_mix(model, opt, read);
}

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  const std::string how = argc > 1 ? argv[1] : "--exit";
  const bool standing = argc > 2 && std::string(argv[2]) == "--standing";
  const int members = run.size - kSpares;
  torch::manual_seed(static_cast<std::uint64_t>(run.rank));
  torch::nn::Linear model(3, 2);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.001));
  {  // one real step: every parameter gets its Adam state
    model->zero_grad();
    model(torch::ones({4, 3})).sum().backward();
    opt.step();
  }
  pw::AveragingOptions options;
  options.topology = pw::Topology::all_peers();
  options.interval = 1000000000;  // no gossip rounds: the joins are the only mixes
  options.timeout_seconds = 1.0;  // a dead member over RMA never answers
  options.window = pw::test::test_window("torch_elastic_averaging");
  pwt::TorchAveragingOptions torch_options;
  torch_options.mix_optimizer_state = true;
  pw::MembershipOptions membership = pw::test::test_membership(members);
  if (standing) membership.replacement = pw::Replacement::standing_window;
  pwt::ElasticAveragingAgent agent(MPI_COMM_WORLD, *model, opt, options, torch_options, membership);
  const pw::Membership& m = agent.membership();
  const bool original = run.rank < members;
  int joins = 0;
  int bad = 0;
  bool finished = false;
  while (agent.wait_for_slot()) {
    const int slot = m.slot();
    const bool joined = agent.elastic().agent().joining();
    if (joined) ++joins;
    bool first = true;
    try {
      for (std::int64_t it = agent.resume_iteration(); it < 150; ++it) {
        pw::test::encode_slot_state(model, opt,
                                    joined && first ? -1 : slot);  // a join that did not mix shows
        const pw::AveragingRound round = agent.step();
        if (joined && first) {
          const bool ok = exact_join(round, model, opt, m, standing);
          if (!ok) ++bad;
          const double now =
              std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
                  .count();
          std::printf("world rank %d: joined slot %d at iteration %lld (epoch %llu) at %.6f: %s "
                      "round over %zu peers, %s\n",
                      run.rank, slot, static_cast<long long>(it),
                      static_cast<unsigned long long>(m.epoch()), now,
                      pw::enum_name(round.kind).data(), round.peers.size(),
                      ok ? "the exact mix" : "NOT the mix");
          std::fflush(stdout);
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
  MPI_Comm last = agent.elastic().membership().create_members_comm();
  if (bad != 0) std::printf("FAILED: world rank %d: %d joins not the mix\n", run.rank, bad);
  int totals[2] = {bad, joins};
  int sums[2] = {0, 0};
  MPI_Allreduce(totals, sums, 2, MPI_INT, MPI_SUM, last);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  const auto epoch = static_cast<int>(m.epoch());
  if (rank == 0) {
    if (sums[0] == 0 && sums[1] == 2 && epoch == 2 && size == members) {
      std::printf("elastic: torch averaging spares joined every dead slot (%s%s)\n", how.c_str(),
                  standing ? ", standing window" : "");
    } else {
      std::printf("FAILED: %d bad, %d joins (want 2), epoch %d, %d slots\n", sums[0], sums[1],
                  epoch, size);
    }
  }
  std::fflush(stdout);
  std::_Exit(0);
}
