// Spares take dead members' slots in an averaging population (docs/elastic.md, "Averaging
// populations"). The world's last two ranks are spares, the others members of one
// ElasticAveragingAgent population; every member steps 150 times, 5 ms apart. Faults, by the
// first argument (as elastic_spare's):
//   --exit    the last slot's process ends (std::_Exit(3)) after iteration 30, slot 1's after 70;
//   --kill    the same with SIGKILL (survivable under Open MPI's --enable-recovery only);
//   --resign  the same slots throw instead; each catches, resigns and waits as a spare.
// Options (any position after the fault):
//   --standing  Replacement::standing_window (default: a new window per epoch);
//   --exact     no gossip rounds (interval 10^9): a member's snapshots hold 1000 * slot +
//               0.001 * j in w[j] and 1 in v[slot], so each joined spare's first step must
//               hold the exact uniform mix of the slots its round reports, with their weights.
// Without --exact the members gossip over a ring (neighbour lists of the 4 slots; every step,
// self weight 1/3) and the spares
// start from junk (10^6), which must never reach a member. Checked by every process:
//   - every peer of every round is a member of the process's current epoch (with the standing
//     window, a ring over the world's ranks would name spares and dead processes: the topology
//     must range over the slots), never the process itself;
//   - each joined spare's first step is a join (RoundKind::joined) that read at least one
//     member, self weight 0, member weights summing to 1; with --exact the exact mix;
//   - without --exact, members read the joined slots afterwards, and the last epoch's members
//     end in consensus (w[0] within 0.01 of each other) among the members' values, no junk;
//   - every slot finished (0 lost agents), with as many joins and epochs as faults.
// The processes of the last epoch meet over its communicator and print the pass line; every
// process ends with std::_Exit(0).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "death_test_util.hpp"
#include "elastic_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 256;
constexpr int kSpares = 2;
constexpr float kJunk = 1.0e6F;

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool has_arg(int argc, char** argv, const std::string& what) {
  for (int i = 2; i < argc; ++i) {
    if (what == argv[i]) return true;
  }
  return false;
}

/// The slot of window rank @p rank in the current epoch (-1: none).
int slot_of(const pw::Membership& m, int rank, bool standing) {
  return pw::test::slot_of_rank(rank, m.members(), standing);
}

/// Whether @p w and @p v hold the exact mix of the slots @p round read (--exact: version 0).
bool exact_mix(const pw::AveragingRound& round, const std::vector<float>& w,
               const std::vector<float>& v, const pw::Membership& m, bool standing) {
  std::vector<pw::test::SlotRead> reads;
  for (const pw::AveragingPeer& p : round.peers) {
    if (p.skipped == pw::SkipReason::none)
      reads.push_back({slot_of(m, p.rank, standing), 0, p.weight});
  }
  return pw::test::exact_encoded_mix(reads, w, v);
}

/// What a process saw, checked at the end.
struct Seen {
  int joins = 0;
  int bad_joins = 0;           // a joined first step that was no proper join
  int bad_peers = 0;           // peers outside the current epoch's members, or itself
  long long joined_reads = 0;  // peers read that hold a slot a spare took
  std::set<int> joined_slots;  // slots spares took, as this process saw the epochs
};

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  const std::string how = argc > 1 ? argv[1] : "--exit";
  const bool standing = has_arg(argc, argv, "--standing");
  const bool exact = has_arg(argc, argv, "--exact");
  const int members = run.size - kSpares;
  constexpr std::int64_t kSteps = 150;
  pw::Layout layout;
  layout.add("w", kN);
  layout.add("v", static_cast<std::size_t>(members));
  pw::AveragingOptions options;
  // The ring as one neighbour list per slot (not per process: 6 processes, 4 slots), so a
  // standing window's spares, which hold ranks 4 and 5, must be left out of the topology.
  std::vector<std::vector<int>> ring(static_cast<std::size_t>(members));
  for (int s = 0; s < members; ++s) {
    ring[static_cast<std::size_t>(s)] = {(s + members - 1) % members, (s + 1) % members};
  }
  options.topology = exact ? pw::Topology::all_peers() : pw::Topology::neighbour_lists(ring);
  options.interval = exact ? 1000000000 : 1;
  options.timeout_seconds = 1.0;  // a dead member over RMA never answers
  options.window = pw::test::test_window("elastic_averaging");
  pw::MembershipOptions membership = pw::test::test_membership(members);
  if (standing) membership.replacement = pw::Replacement::standing_window;
  pw::ElasticAveragingAgent agent(MPI_COMM_WORLD, layout, options, membership);
  const pw::Membership& m = agent.membership();
  std::vector<float> w(kN, kJunk);
  std::vector<float> v(static_cast<std::size_t>(members), kJunk);
  if (run.rank < members) pw::test::encode_slot(w, v, run.rank, 0);
  Seen seen;
  const bool original = run.rank < members;
  bool finished = false;
  std::uint64_t epoch_seen = m.epoch();
  while (agent.wait_for_slot()) {
    const int slot = m.slot();
    const bool joined = agent.agent().joining();
    if (joined) {
      ++seen.joins;
      std::fill(w.begin(), w.end(), kJunk);  // a join that did not replace them shows
    }
    bool first = true;
    try {
      for (std::int64_t it = agent.resume_iteration(); it < kSteps; ++it) {
        if (exact) pw::test::encode_slot(w, v, slot, 0);  // what a republish shows, too
        const pw::AveragingRound round = agent.step({pw::LayerRef(w), pw::LayerRef(v)});
        if (m.epoch() != epoch_seen && m.last_change()) {
          for (const int s : m.last_change()->joined) seen.joined_slots.insert(s);
          epoch_seen = m.epoch();
        }
        for (const pw::AveragingPeer& p : round.peers) {
          const int peer_slot = slot_of(m, p.rank, standing);
          if (peer_slot < 0 || peer_slot == slot) {
            ++seen.bad_peers;
            std::printf("FAILED: world rank %d (slot %d, epoch %llu): round peer rank %d holds "
                        "no other slot\n",
                        run.rank, slot, static_cast<unsigned long long>(m.epoch()), p.rank);
          } else if (p.skipped == pw::SkipReason::none && seen.joined_slots.count(peer_slot)) {
            ++seen.joined_reads;
          }
        }
        if (joined && first) {
          double sum = 0.0;
          int read = 0;
          for (const pw::AveragingPeer& p : round.peers) {
            if (p.skipped == pw::SkipReason::none) {
              sum += p.weight;
              ++read;
            }
          }
          bool ok = round.kind == pw::RoundKind::joined && round.applied && !round.joining &&
                    round.self_weight == 0.0 && read > 0 && std::abs(sum - 1.0) < 1e-9 &&
                    round.published;
          if (ok && exact) ok = exact_mix(round, w, v, m, standing);
          if (ok && !exact) ok = w[0] >= 0.0F && w[0] <= 1000.0F * static_cast<float>(members);
          if (!ok) ++seen.bad_joins;
          std::printf("world rank %d: joined slot %d at iteration %lld (epoch %llu) at %.6f: %s "
                      "round, %d members read, w[0] %.4f%s\n",
                      run.rank, slot, static_cast<long long>(it),
                      static_cast<unsigned long long>(m.epoch()), monotonic_seconds(),
                      pw::enum_name(round.kind).data(), read, static_cast<double>(w[0]),
                      ok ? "" : " (FAILED: not a proper join)");
          std::fflush(stdout);
        }
        first = false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        pw::test::spare_test_fault(how, original && !joined, run.rank, slot, members, it);
      }
      agent.finish({pw::LayerRef(w), pw::LayerRef(v)});
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
  if (!finished) std::_Exit(0);  // a spare released at the end
  MPI_Comm last = agent.membership().create_members_comm();
  long long counts[4] = {seen.bad_joins + seen.bad_peers, seen.joins, seen.joined_reads, 0};
  long long sums[4] = {0, 0, 0, 0};
  MPI_Allreduce(counts, sums, 3, MPI_LONG_LONG, MPI_SUM, last);
  const int epoch = static_cast<int>(agent.membership().epoch());
  int min_epoch = 0;
  MPI_Allreduce(&epoch, &min_epoch, 1, MPI_INT, MPI_MIN, last);
  const float w0 = w[0];
  float lo = 0.0F;
  float hi = 0.0F;
  MPI_Allreduce(&w0, &lo, 1, MPI_FLOAT, MPI_MIN, last);
  MPI_Allreduce(&w0, &hi, 1, MPI_FLOAT, MPI_MAX, last);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  if (rank == 0) {
    std::printf("last epoch %d, %d slots finished, %lld joins, %lld reads of joined slots, "
                "w[0] from %.4f to %.4f\n",
                min_epoch, size, sums[1], sums[2], static_cast<double>(lo),
                static_cast<double>(hi));
    bool ok = sums[0] == 0 && sums[1] == 2 && min_epoch == 2 && size == members;
    if (!exact) {
      ok = ok && sums[2] > 0 && hi - lo < 0.01F && lo >= 0.0F &&
           hi <= 1000.0F * static_cast<float>(members);
    }
    if (ok) {
      std::printf("elastic averaging: spares took every dead slot (%s%s%s)\n", how.c_str(),
                  standing ? ", standing window" : "", exact ? ", exact" : ", ring");
    } else {
      std::printf("FAILED: %lld bad, %lld joins (want 2), epoch %d, %d slots, %lld reads of "
                  "joined slots, w[0] spread %.4f\n",
                  sums[0], sums[1], min_epoch, size, sums[2], static_cast<double>(hi - lo));
    }
  }
  std::fflush(stdout);
  std::_Exit(0);
}
