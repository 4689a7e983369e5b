// A member of the population dies and the others train on (docs/elastic.md). The last rank
// is the fittest agent, so every rebirth would choose it as its donor; after its 20th step it
// ends its process (--exit: std::_Exit(3); --kill: SIGKILL, survivable under Open MPI's
// --enable-recovery only). The survivors step on, rebirths every 8-12 steps, and after each
// step read the dead rank's roster entry: once it is a suspect (its pid gone on this host),
// no later rebirth may have chosen it, and at least one must have happened (from a live
// donor). The survivors then gather their results over a communicator of the survivors
// alone (MPI_Comm_create_group), print them, and end with std::_Exit(0): freeing the window or
// MPI_Finalize would wait for the dead rank forever (docs/elastic.md). With a second argument
// --averaging the same for averaging agents (all peers every step): once a round reports the
// dead rank as a suspect, no later round reads it, and rounds with the others go on.
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 1000;
constexpr int kVictimSteps = 20;
constexpr int kSteps = 400;

void die(const std::string& how) {
  std::fflush(nullptr);
  if (how == "--kill") std::raise(SIGKILL);
  std::_Exit(3);
}

/// Survivors only: a communicator without @p victim.
MPI_Comm survivors_comm(int victim) {
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group alive = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_excl(world, 1, &victim, &alive);
  MPI_Comm survivors = MPI_COMM_NULL;
  MPI_Comm_create_group(MPI_COMM_WORLD, alive, 17, &survivors);
  return survivors;
}

/// Averaging agents (all peers every step): once a survivor's round reports the dead rank
/// as a suspect, no later round may read it, and rounds with the other peers go on.
int averaging(const std::string& how, int rank, int size, int victim) {
  pw::Layout layout;
  layout.add("w", kN);
  pw::AveragingOptions options;
  options.window.name = "member_death_averaging";
  options.window.liveness.suspect_seconds = 2.0;
  pw::AveragingAgent agent(MPI_COMM_WORLD, layout, options);
  std::vector<float> w(kN, static_cast<float>(rank));
  agent.publish({pw::ConstLayerRef(w)});
  MPI_Barrier(MPI_COMM_WORLD);
  int detected_at = -1;
  int read_after = 0;
  int applied_after = 0;
  for (int t = 1; t <= kSteps; ++t) {
    for (float& x : w) x += 0.001F;
    const pw::AveragingRound round = agent.step({pw::LayerRef(w)});
    if (rank == victim && t == kVictimSteps) die(how);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    for (const pw::AveragingPeer& p : round.peers) {
      if (p.rank != victim) continue;
      if (detected_at < 0 && p.skipped == pw::SkipReason::suspect) detected_at = t;
      if (detected_at >= 0 && t > detected_at && p.skipped == pw::SkipReason::none) ++read_after;
    }
    if (detected_at >= 0 && t > detected_at && round.applied) ++applied_after;
  }
  const MPI_Comm survivors = survivors_comm(victim);
  const int mine[3] = {detected_at, read_after, applied_after};
  std::vector<int> all(static_cast<std::size_t>(3 * (size - 1)));
  MPI_Gather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, 0, survivors);
  std::printf("rank %d: dead rank %d skipped as a suspect from step %d; %d rounds read it "
              "afterwards, %d rounds applied afterwards\n",
              rank, victim, detected_at, read_after, applied_after);
  std::fflush(stdout);
  MPI_Barrier(survivors);
  if (rank == 0) {
    bool ok = true;
    for (int r = 0; r < size - 1; ++r) {
      const int* m = &all[static_cast<std::size_t>(3 * r)];
      if (m[0] < 0 || m[1] != 0 || m[2] < 100) {
        ok = false;
        std::printf("FAILED: rank %d: suspect from step %d, %d reads of it afterwards, %d rounds "
                    "applied afterwards\n",
                    r, m[0], m[1], m[2]);
      }
    }
    if (ok) std::printf("survivors: member death survived (%s, averaging)\n", how.c_str());
    std::fflush(stdout);
  }
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const std::string mode = argc > 1 ? argv[1] : "--exit";
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 3) {
    if (rank == 0) std::printf("FAILED: member_death needs at least 3 ranks\n");
    MPI_Finalize();
    return 1;
  }
  const int victim = size - 1;
  if (argc > 2 && std::string(argv[2]) == "--averaging") return averaging(mode, rank, size, victim);

  pw::Layout layout;
  layout.add("w", kN);
  pw::AgentOptions options =
      pw::parse_agent_options("triggers=age age=8..12 k=1 selection=fittest");
  options.seed = 7;
  pw::WindowOptions window_options;
  window_options.name = "member_death";
  window_options.liveness.suspect_seconds = 2.0;
  pw::Agent agent(MPI_COMM_WORLD, layout, options, window_options);

  std::vector<float> w(kN, static_cast<float>(rank));
  const double metric = rank == victim ? 0.0 : 1.0 + rank;  // lower is better: the victim wins
  agent.publish({pw::ConstLayerRef(w)});
  MPI_Barrier(MPI_COMM_WORLD);

  int detected_at = -1;
  std::string reason;
  int rebirths_after = 0;
  int victim_donor_after = 0;
  int victim_donor_before = 0;
  for (int t = 1; t <= kSteps; ++t) {
    for (float& x : w) x += 0.001F;
    const pw::StepEvent event = agent.step(t, metric, {pw::LayerRef(w)});
    if (rank == victim && t == kVictimSteps) die(mode);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    if (event.died) {
      bool chose_victim = false;
      for (const pw::DonorRecord& d : event.donors) chose_victim |= d.rank == victim;
      if (detected_at >= 0) {
        ++rebirths_after;
        victim_donor_after += chose_victim ? 1 : 0;
      } else {
        victim_donor_before += chose_victim ? 1 : 0;
      }
    }
    if (detected_at < 0) {
      const pw::RosterEntry e = agent.window().roster(victim);
      if (e.suspect) {
        detected_at = t;
        reason = e.suspect_reason;
      }
    }
  }

  const MPI_Comm survivors = survivors_comm(victim);
  const int mine[4] = {detected_at, rebirths_after, victim_donor_after, victim_donor_before};
  std::vector<int> all(static_cast<std::size_t>(4 * (size - 1)));
  MPI_Gather(mine, 4, MPI_INT, all.data(), 4, MPI_INT, 0, survivors);
  std::printf("rank %d: dead rank %d a suspect at step %d (%s); %d rebirths after it, %d of them "
              "from the dead rank; %d rebirths from it before\n",
              rank, victim, detected_at, reason.c_str(), rebirths_after, victim_donor_after,
              victim_donor_before);
  std::fflush(stdout);
  MPI_Barrier(survivors);
  if (rank == 0) {
    bool ok = true;
    for (int r = 0; r < size - 1; ++r) {
      const int* m = &all[static_cast<std::size_t>(4 * r)];
      if (m[0] < 0 || m[1] < 1 || m[2] != 0) {
        ok = false;
        std::printf("FAILED: rank %d: suspect at step %d, %d rebirths after, %d from the dead "
                    "rank\n",
                    r, m[0], m[1], m[2]);
      }
    }
    if (ok) std::printf("survivors: member death survived (%s)\n", mode.c_str());
    std::fflush(stdout);
  }
  // Freeing the window or MPI_Finalize would wait for the dead rank.
  std::_Exit(0);
}
