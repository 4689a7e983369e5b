// The spare pool refilled by MPI_Comm_spawn (docs/elastic.md, "Refilling the spares"; Open
// MPI under mpirun --enable-recovery). The world's last rank is the one spare of the start,
// the others members of one ElasticAgent population (Replacement::new_window) that keeps one
// spare (SpawnOptions::pool = 1). Three members are killed (SIGKILL) one after the other, at
// their iterations 30, 80 and 130 (the last slot, slot 1, slot 2); after the first the pool is
// empty, so every later slot is taken by a process a refill spawned, which runs this program
// with the same arguments, joins the population as a spare (its MPI_COMM_WORLD holds only the
// refill's new processes) and reads its donors across the two MPI jobs. --exit: the victims
// end with std::_Exit(3) instead (the same path, no signal).
// Checked by every process of the last epoch: 3 joins, each joiner's first step a rebirth
// (reason joined) whose parameters are the exact mix of its donors' recorded versions; every
// slot finished its iterations (0 lost agents); at least two joiners were spawned. The last
// epoch's processes meet over its communicator and print the pass line; the spare left at the
// end (spawned by the last refill) is released and ends. Every process ends with std::_Exit(0).
// With a third argument `low`: a pool of 3 refilled only when no spare is left
// (SpawnOptions::low = 1), so the spare of the start takes the first slot, one refill spawns 3
// processes at once, and two of them take the next slots: checked, exactly one refill of 3.
// `ahead` (the UCX PML): a pool of 3 refilled when fewer than 2 spares live, by a spare that
// spawns ahead (SpawnOptions::ahead): the spare of the start spawns 2 at once, and again after
// the second death (or, should the third death come first, every live process spawns 2):
// checked, exactly two refills of 4 processes in all.
// `ahead_dies <path>` (the UCX PML): as `ahead`, but the spare of the start, busy spawning ahead,
// is killed (SIGKILL) by the first of its new processes as soon as that one is started (after
// its MPI_Init, mostly before the spawner sent them its word; the spare writes its pid to
// <path>.pid; the first new process to create <path>.killed kills it). The population forgets the
// spawn and refills again; the spawn's orphaned processes, which got no word from it, must end
// within agree_seconds (5 s here; each writes <path>.orphan.<pid> and ends) instead of waiting
// forever, which would keep the job from ending. Each orphan then waits for the population's
// end (<path>.done, at most 30 s) before its process exits: in Open MPI 4.1.4 an MPI_Comm_spawn
// after spawned processes ended hangs about once in 25 (docs/elastic.md, "What the MPIs
// allow"), and the population's next refill would be one. Checked, besides the slots: two
// orphans ended their Membership, and the spawner was killed.
// `ahead_dies_elsewhere <path> <other_host.sh>` (the UCX PML, root): as `ahead_dies`, but the
// first spawn's processes run in a UTS namespace of their own under another hostname
// (other_host.sh, the spawn command), so paramwin's liveness takes them for processes on
// another host than their spawner, whose pid they cannot watch; and the spawner is killed 2 s
// after their start, once it has sent them its word: they wait for its go, and only the end of
// its beats can tell them it died (the members wait at their iteration 20 for the kill, so
// that the population refills again before its slots need spares). Checked, besides the
// slots: both orphans ended with "sent nothing for" (the beats' silence), not "sent no word".
// `ahead_late <path> <late_start.sh>` (the UCX PML): as `ahead`, but the first spawn's first
// process starts 7 s late (late_start.sh, the spawn command), longer than agree_seconds (5 s):
// the coordinator forgets the spawn (not ready in time) and asks the last live spare, the same
// one, to spawn again; that spare, which still holds the late processes, offers those instead
// (the members wait at their iteration 20 for the merge). Checked, besides the slots and the
// refills (2 of 4 processes, as `ahead`): exactly 4 processes were spawned (each writes
// <path>.spawned.<pid>), and every one of them was merged into the population.
// `ahead_forgotten <path> <late_start.sh>` (the UCX PML): the same late spawn, with the last slot
// killed 2 s into it. No spare is left over when the coordinator forgets the spawn (at 5 s),
// so every live process spawns (the spawner too, once its own spawn returned), and the next
// proposal gives the dead slot to the spawner, which must let go of the late processes to
// take it (before, it answered every proposal no while it held them: the slot was never
// filled). The members wait at their iteration 20 for that epoch. Checked, besides the slots:
// 6 processes spawned, the 2 late ones told to stop, the 4 of the two refills merged, and the
// spare of the start took a slot (2 joins by spawned processes).
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "death_test_util.hpp"
#include "elastic_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 256;
constexpr std::int64_t kSteps = 200;

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The files of @p prefix's folder whose names start with its file name (the orphans' marks).
std::vector<std::filesystem::path> marks(const std::string& prefix) {
  const std::filesystem::path p(prefix);
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path(), ec)) {
    if (e.path().filename().string().rfind(p.filename().string(), 0) == 0) out.push_back(e.path());
  }
  return out;
}

/// The start of a run: removes <path><name> for each of @p names and the marks of
/// <path><prefix> that an earlier run left.
void clean(const std::string& path, std::initializer_list<const char*> names,
           const std::string& prefix) {
  std::error_code ec;
  for (const char* name : names) std::filesystem::remove(path + name, ec);
  for (const std::filesystem::path& m : marks(path + prefix)) std::filesystem::remove(m, ec);
}

/// ahead_dies: the first process started by a spawn kills the spawner (its pid in
/// <path>.pid), once; @p after_seconds after its start (elsewhere: once the spawner sent its
/// word).
void kill_spawner_once(const std::string& path, double after_seconds) {
  if (std::filesystem::exists(path + ".killed")) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(after_seconds));
  const int fd = open((path + ".killed").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) return;  // another one did, or will
  close(fd);
  long pid = 0;
  std::ifstream(path + ".pid") >> pid;
  if (pid > 0) {
    kill(static_cast<pid_t>(pid), SIGKILL);
    std::printf("killed the spawner, pid %ld, at %.6f\n", pid, monotonic_seconds());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  const bool kill = !(argc > 1 && std::string(argv[1]) == "--exit");
  // The members: given by the first process of the start (argv[2]); spawned processes run
  // with the same arguments.
  const int members = argc > 2 ? std::atoi(argv[2]) : 4;
  const bool low = argc > 3 && std::string(argv[3]) == "low";
  const bool elsewhere = argc > 5 && std::string(argv[3]) == "ahead_dies_elsewhere";
  const bool ahead_dies = elsewhere || (argc > 4 && std::string(argv[3]) == "ahead_dies");
  const bool forgotten = argc > 5 && std::string(argv[3]) == "ahead_forgotten";
  const bool late = forgotten || (argc > 5 && std::string(argv[3]) == "ahead_late");
  const bool ahead = ahead_dies || late || (argc > 3 && std::string(argv[3]) == "ahead");
  const std::string path = ahead_dies || late ? argv[4] : "";
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (elsewhere && geteuid() != 0) {
    if (run.rank == 0) std::printf("elastic_refill: SKIPPED: ahead_dies_elsewhere needs root\n");
    std::fflush(stdout);
    MPI_Finalize();
    return 77;
  }
  if (ahead_dies && parent == MPI_COMM_NULL) {  // the start: clean, then the spare's pid
    if (run.rank == 0) clean(path, {".pid", ".killed", ".done"}, ".orphan.");
    MPI_Barrier(MPI_COMM_WORLD);
    if (run.rank == members) {
      std::ofstream(path + ".tmp") << getpid() << "\n";
      std::filesystem::rename(path + ".tmp", path + ".pid");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  } else if (ahead_dies) {
    kill_spawner_once(path, elsewhere ? 2.0 : 0.0);
  }
  if (late && parent == MPI_COMM_NULL) {  // the start: clean
    if (run.rank == 0) clean(path, {".late"}, ".spawned.");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  pw::Layout layout;
  layout.add("w", kN);
  layout.add("v", static_cast<std::size_t>(members));
  pw::test::EncodedSlot p(kN, members);
  pw::AgentOptions options = pw::parse_agent_options("triggers=none k=2 selection=uniform");
  options.seed = 13;
  p.hook(options);
  pw::MembershipOptions membership = pw::test::test_membership(members);
  membership.spawn.pool = low || ahead ? 3 : 1;
  membership.spawn.low = low ? 1 : ahead ? 2 : 0;
  membership.spawn.ahead = ahead;
  // ahead_dies: the orphans wait agree_seconds for a word their killed spawner never sent.
  // ahead_late: the coordinator forgets a spawn not ready within agree_seconds (7 s late).
  if (ahead_dies || late) membership.agree_seconds = 5.0;
  if (elsewhere || late) {  // the spawns run through other_host.sh or late_start.sh
    membership.spawn.command = argv[5];
    std::vector<std::string> args = late ? std::vector<std::string>{path + ".late", "7"}
                                         : std::vector<std::string>{path + ".killed"};
    args.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
    for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
    membership.spawn.args = args;
  }
  std::optional<pw::ElasticAgent<>> made;
  try {
    made.emplace(MPI_COMM_WORLD, layout, options, pw::test::test_window("elastic_refill"),
                 membership);
  } catch (const pw::Error& e) {
    if (!ahead_dies || parent == MPI_COMM_NULL) throw;
    // An orphan of the killed spawner: it must get here, not wait forever.
    std::ofstream(path + ".orphan." + std::to_string(getpid())) << e.what() << "\n";
    std::printf("orphan %d ended: %s\n", static_cast<int>(getpid()), e.what());
    std::fflush(stdout);
    for (int i = 0; i < 600 && !std::filesystem::exists(path + ".done"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::_Exit(0);
  }
  pw::ElasticAgent<>& agent = *made;
  p.agent = &agent;
  const bool spawned = agent.membership().refills().spawned_here;
  if (late && spawned) {  // merged, or told to stop (its spawn forgotten and dropped)
    const bool merged = agent.membership().role() != pw::MemberRole::finished;
    std::ofstream(path + ".spawned." + std::to_string(getpid())) << (merged ? "merged" : "stopped");
  }
  const bool original = !spawned && agent.membership().role() == pw::MemberRole::member;
  int joins = 0;
  int spawned_joins = 0;
  int bad = 0;
  bool finished = false;
  const double start = monotonic_seconds();
  const double hold_until = start + 30.0;  // the longest hold (elsewhere, late)
  while (agent.wait_for_slot()) {
    const int slot = agent.membership().slot();
    const bool joined = agent.agent().policy().pending() == pw::DeathReason::joined;
    if (joined) {
      ++joins;
      if (spawned) ++spawned_joins;
    }
    bool first = true;
    for (std::int64_t it = agent.resume_iteration(); it < kSteps; ++it) {
      const pw::StepEvent e = agent.step(it, 1.0 * slot, {pw::LayerRef(p.w), pw::LayerRef(p.v)});
      if (joined && first &&
          !pw::test::check_first_step(agent, e, p, spawned ? "spawned" : "of the start", it))
        ++bad;
      first = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (elsewhere && original && it == 20 && !std::filesystem::exists(path + ".killed") &&
          monotonic_seconds() < hold_until) {
        // The faults come after the spawner's death (its spawn keeps the one spare busy), so
        // that the population refills again before its slots need spares: the members step
        // at iteration 20 until then (stepping: a member that stopped would be taken for
        // silent).
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        --it;
        continue;
      }
      if (forgotten && original && it == 20 && agent.membership().epoch() == 0 &&
          monotonic_seconds() < hold_until) {
        // The first death comes 2 s into the late spawn (no spare is left for its slot); the
        // others after its slot was filled, which the spawner can do only once it let go of
        // the forgotten spawn (the joiner starts at iteration 20, as the others).
        if (slot == members - 1 && monotonic_seconds() > start + 2.0) {
          std::printf("fault at %.6f: slot %d SIGKILL\n", monotonic_seconds(), slot);
          pw::test::die(kill);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        --it;
        continue;
      }
      if (late && !forgotten && original && it == 20 && agent.membership().spares().size() < 3 &&
          monotonic_seconds() < hold_until) {
        // The faults come after the late spawn merged (3 spares), as in `ahead`.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        --it;
        continue;
      }
      const bool victim = original && ((it == 30 && slot == members - 1) ||
                                       (it == 80 && slot == 1) || (it == 130 && slot == 2));
      if (victim) {
        std::printf("fault at %.6f: slot %d %s\n", monotonic_seconds(), slot,
                    kill ? "SIGKILL" : "exits");
        pw::test::die(kill);
      }
    }
    agent.finish({pw::LayerRef(p.w), pw::LayerRef(p.v)});
    finished = true;
    break;
  }
  const pw::RefillStats& refills = agent.membership().refills();
  std::printf("rank %d: %s, %llu refills (%llu processes spawned, %llu failed), last %.3f s\n",
              agent.membership().world_rank(), finished ? "finished" : "released",
              static_cast<unsigned long long>(refills.refills),
              static_cast<unsigned long long>(refills.spawned),
              static_cast<unsigned long long>(refills.failed), refills.last_seconds);
  std::fflush(stdout);
  if (!finished) std::_Exit(0);  // a spare released at the end
  MPI_Comm last = agent.membership().create_members_comm();
  int mine[3] = {bad, joins, spawned_joins};
  int sums[3] = {0, 0, 0};
  MPI_Allreduce(mine, sums, 3, MPI_INT, MPI_SUM, last);
  // Every refill had a process of the start in it (a slot's first holder lives to the end).
  const std::uint64_t counts[2] = {refills.refills, refills.spawned};
  std::uint64_t most[2] = {0, 0};
  MPI_Allreduce(counts, most, 2, MPI_UINT64_T, MPI_MAX, last);
  // ahead_dies: the orphans end within agree_seconds of their start.
  int orphans = 0;
  if (ahead_dies) {
    for (int i = 0; i < 400 && (orphans = static_cast<int>(marks(path + ".orphan.").size())) < 2;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (elsewhere) {  // only the orphans that the beats' silence ended
    orphans = 0;
    for (const std::filesystem::path& m : marks(path + ".orphan.")) {
      std::ifstream in(m);
      const std::string why((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (why.find("sent nothing for") != std::string::npos) ++orphans;
    }
  }
  // ahead_late: 4 processes spawned, every one merged; ahead_forgotten: 6 spawned, the 2 late
  // ones stopped, the 4 of the two refills merged.
  int merged = 0;
  int spawned_marks = 0;
  if (late) {
    for (const std::filesystem::path& m : marks(path + ".spawned.")) {
      ++spawned_marks;
      std::string word;
      std::ifstream(m) >> word;
      if (word == "merged") ++merged;
    }
  }
  const bool refills_ok = low          ? most[0] == 1 && most[1] == 3
                          : ahead_dies ? orphans == 2 && std::filesystem::exists(path + ".killed")
                          : forgotten  ? most[0] == 2 && most[1] == 4 && spawned_marks == 6 &&
                                            merged == 4 && sums[2] == 2
                          : late ? most[0] == 2 && most[1] == 4 && spawned_marks == 4 && merged == 4
                                 : !ahead || (most[0] == 2 && most[1] == 4);
  // One epoch per death; elsewhere the three deaths come close together, after the refill,
  // and two of them may share one.
  const std::uint64_t epoch = agent.membership().epoch();
  const bool epoch_ok = elsewhere ? epoch == 2 || epoch == 3 : epoch == 3;
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  if (rank == 0) {
    std::printf("last epoch %llu, %d slots finished, %d joins (%d by spawned processes)\n",
                static_cast<unsigned long long>(agent.membership().epoch()), size, sums[1],
                sums[2]);
    if (sums[0] == 0 && sums[1] == 3 && sums[2] >= 2 && size == members && epoch_ok && refills_ok) {
      std::printf("elastic: spawned spares took every dead slot\n");
    } else {
      std::printf("FAILED: %d bad joins, %d joins (want 3), %d spawned joins (want >= 2), "
                  "%d slots (want %d), %llu refills spawning %llu processes (low: want 1, 3; "
                  "ahead: 2, 4), %d orphans ended (ahead_dies: want 2), %d of %d spawned "
                  "processes merged (ahead_late: want 4 of 4; ahead_forgotten: 4 of 6), last "
                  "epoch %llu (want 3; "
                  "elsewhere 2 or 3)\n",
                  sums[0], sums[1], sums[2], size, members,
                  static_cast<unsigned long long>(most[0]),
                  static_cast<unsigned long long>(most[1]), orphans, merged, spawned_marks,
                  static_cast<unsigned long long>(epoch));
    }
    if (ahead_dies) std::ofstream(path + ".done") << "\n";  // the orphans may end now
  }
  std::fflush(stdout);
  std::_Exit(0);
}
