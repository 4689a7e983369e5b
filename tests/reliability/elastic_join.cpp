// A process launched on its own joins a population and takes a dead member's slot
// (docs/elastic.md, "Joining from outside"; Open MPI with ompi-server, run by
// tests/reliability/elastic_join.sh). Usage (every process of one launch the same arguments):
//   elastic_join --population <exit|kill> <service>   the population: every rank a member
//   elastic_join --joiner <exit|kill> <service>       a joiner (JoinOptions::joining)
// The population (Replacement::new_window, no spares) loses its last slot at iteration 30
// (std::_Exit(3), or SIGKILL with kill); the slot waits, for there is no spare, until the
// script launches a joiner (mpirun -n 1 of its own). The coordinator finds the joiner's port
// under the service's name, the live processes connect to it and merge with it, and the
// joiner, a spare now, takes the slot: its first step a rebirth (reason joined) whose
// parameters are the exact mix of its donors' recorded versions. The survivors train until
// iteration 200 and the epoch has changed (at most 60 s). Checked over the last epoch's
// processes: 1 join, by the joiner, exact; every slot finished. Every process ends with
// std::_Exit(0).
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "death_test_util.hpp"
#include "elastic_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 256;
constexpr std::int64_t kSteps = 200;
constexpr double kLimitSeconds = 60.0;

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  if (argc < 4 || (std::string(argv[1]) == "--population" && run.size != 3)) {
    std::printf("usage: elastic_join --population|--joiner exit|kill <service> (the population "
                "on 3 processes, the joiner on 1)\n");
    std::_Exit(2);
  }
  const bool joiner = std::string(argv[1]) == "--joiner";
  const bool kill = std::string(argv[2]) == "kill";
  const int members = joiner ? 0 : run.size;
  pw::Layout layout;
  layout.add("w", kN);
  layout.add("v", 3);  // the population's slots (3 in the test)
  pw::test::EncodedSlot p(kN, 3);
  pw::AgentOptions options = pw::parse_agent_options("triggers=none k=2 selection=uniform");
  options.seed = 17;
  p.hook(options);
  pw::MembershipOptions membership = pw::test::test_membership(members);
  membership.join.service = argv[3];
  membership.join.joining = joiner;
  membership.join.look_seconds = 0.1;
  membership.join.publish_seconds = 30.0;
  const double started = monotonic_seconds();
  pw::ElasticAgent<> agent(MPI_COMM_WORLD, layout, options, pw::test::test_window("elastic_join"),
                           membership);
  p.agent = &agent;
  const bool original = !joiner && agent.membership().role() == pw::MemberRole::member;
  int joins = 0;
  int joiner_joins = 0;
  int bad = 0;
  bool finished = false;
  while (agent.wait_for_slot()) {
    const int slot = agent.membership().slot();
    const bool joined = agent.agent().policy().pending() == pw::DeathReason::joined;
    if (joined) {
      ++joins;
      if (joiner) ++joiner_joins;
    }
    bool first = true;
    for (std::int64_t it = agent.resume_iteration();
         it < kSteps || (original && agent.membership().epoch() == 0); ++it) {
      if (monotonic_seconds() - started > kLimitSeconds) {
        std::printf("FAILED: rank %d: no joiner took the slot within %.0f s\n",
                    agent.membership().world_rank(), kLimitSeconds);
        std::fflush(stdout);
        std::_Exit(1);
      }
      const pw::StepEvent e = agent.step(it, 1.0 * slot, {pw::LayerRef(p.w), pw::LayerRef(p.v)});
      if (joined && first &&
          !pw::test::check_first_step(agent, e, p, joiner ? "a joiner" : "of the start", it))
        ++bad;
      first = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (original && it == 30 && slot == run.size - 1) {
        std::printf("fault at %.6f: slot %d %s\n", monotonic_seconds(), slot,
                    kill ? "SIGKILL" : "exits");
        pw::test::die(kill);
      }
    }
    agent.finish({pw::LayerRef(p.w), pw::LayerRef(p.v)});
    finished = true;
    break;
  }
  const pw::RefillStats& stats = agent.membership().refills();
  std::printf("rank %d: %s, %llu joins (%llu processes), last %.3f s\n",
              agent.membership().world_rank(), finished ? "finished" : "released",
              static_cast<unsigned long long>(stats.joins),
              static_cast<unsigned long long>(stats.joined), stats.last_seconds);
  std::fflush(stdout);
  if (!finished) std::_Exit(0);
  MPI_Comm last = agent.membership().create_members_comm();
  int mine[3] = {bad, joins, joiner_joins};
  int sums[3] = {0, 0, 0};
  MPI_Allreduce(mine, sums, 3, MPI_INT, MPI_SUM, last);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  if (rank == 0) {
    std::printf("last epoch %llu, %d slots finished, %d joins (%d by a joiner)\n",
                static_cast<unsigned long long>(agent.membership().epoch()), size, sums[1],
                sums[2]);
    if (sums[0] == 0 && sums[1] == 1 && sums[2] == 1 && size == 3 &&
        agent.membership().epoch() == 1) {
      std::printf("elastic: a joiner took the dead slot\n");
    } else {
      std::printf("FAILED: %d bad joins, %d joins (want 1), %d by a joiner (want 1), %d slots "
                  "(want 3)\n",
                  sums[0], sums[1], sums[2], size);
    }
  }
  std::fflush(stdout);
  std::_Exit(0);
}
