// A donor dies in the middle of its publishes while others read it (docs/elastic.md). The last
// rank publishes a 16 MiB snapshot in a tight loop, every element equal to the version it
// becomes (exact in float32), and a thread of its own ends its process after 200-400 ms, most
// likely in the middle of a publish. The other ranks pull it for 2.5 s: rank 0 with the
// default read mode, the others with ReadMode::pinned. Every pull that returns must hold one
// complete version (every element equal to the version it reports: no torn snapshot, before
// or after the death); no pull may take longer than its deadline and a second. Over shared
// memory the dead donor's last complete version stays readable, and the readers judge it a
// suspect. --rma: the readers read over RMA with PullOptions::timeout_seconds = 0.5 (a read of
// a dead process never completes on MPICH; each pull then ends in TimeoutError, output
// untouched; across hosts, tests/multihost, it fails at once instead, the endpoint to the dead
// process having failed, and the library throws paramwin::MpiError: registered disabled
// there). Not under Open MPI on one host: its osc/ucx blocks inside the MPI_Rget_accumulate
// of a pin whose target has died (tests/CMakeLists.txt, docs/elastic.md). The survivors meet
// through files on one node (over a communicator made before the death across nodes) and end
// with std::_Exit(0) (death_test_util.hpp).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "death_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

int main(int argc, char** argv) {
  const pw::test::DeathRun run(argc, argv);
  const int rank = run.rank;
  const bool rma = run.rma;
  const int donor = run.size - 1;
  constexpr std::size_t kN = std::size_t{4} << 20;  // 16 MiB of float32
  constexpr double kSeconds = 2.5;
  constexpr double kTimeout = 0.5;

  pw::ParameterWindow<> window = pw::test::death_window("donor_death", kN, rma && rank != donor);
  std::vector<float> w(kN, 1.0F);
  window.publish({pw::ConstLayerRef(w)});  // version 1, every element 1
  // How the survivors meet at the end, prepared now (on one node: files, no MPI;
  // death_test_util.hpp says why).
  const pw::test::SurvivorMeeting meeting = pw::test::meet_later(donor);
  MPI_Barrier(MPI_COMM_WORLD);

  if (rank == donor) {
    pw::test::die_soon();
    for (;;) {
      std::fill(w.begin(), w.end(), static_cast<float>(window.version() + 1));
      (void)window.publish({pw::ConstLayerRef(w)});
      window.progress();
    }
  }

  pw::PullOptions pull;
  pull.read_mode = rank == 0 ? pw::ReadMode::automatic : pw::ReadMode::pinned;
  pull.timeout_seconds = kTimeout;
  long pulls = 0;
  long torn = 0;
  long timeouts = 0;
  long errors = 0;
  long gone = 0;  // DonorError naming the donor: a read of its process failed in MPI
  double longest = 0.0;
  std::uint64_t last_version = 0;
  std::uint64_t versions_seen = 0;
  const double t0 = MPI_Wtime();
  std::vector<float> out(kN, 0.0F);
  while (MPI_Wtime() - t0 < kSeconds) {
    const double start = MPI_Wtime();
    try {
      const pw::PullResult r = window.pull({donor}, {pw::LayerRef(out)}, pull);
      const std::uint64_t v = r.donors.front().version;
      ++pulls;
      const auto want = static_cast<float>(v);
      if (std::any_of(out.begin(), out.end(), [want](float x) { return x != want; })) ++torn;
      if (v != last_version) ++versions_seen;
      last_version = std::max(last_version, v);
    } catch (const pw::TimeoutError&) {
      ++timeouts;
    } catch (const pw::DonorError& e) {
      // Across hosts a read of the dead process fails at once in MPI (its transport endpoint
      // is gone): the pull says which donor, and every pull after the death ends so.
      if (e.rank() != donor) {
        ++errors;
        std::printf("rank %d: pull error naming rank %d: %s\n", rank, e.rank(), e.what());
      } else if (++gone == 1) {
        std::printf("rank %d: donor gone: %s\n", rank, e.what());
      }
    } catch (const std::exception& e) {
      // The first few only: across hosts every pull after the death fails at once (tens of
      // thousands in 2.5 s; tests/multihost).
      if (++errors <= 3) std::printf("rank %d: pull error: %s\n", rank, e.what());
    }
    longest = std::max(longest, MPI_Wtime() - start);
  }
  // roster_all marks a rank that does not answer before the deadline (roster() would throw).
  pw::RosterEntry entry;
  try {
    entry = window.roster_all(rma ? kTimeout : 0.0).at(static_cast<std::size_t>(donor));
  } catch (const std::exception& e) {  // an error, not a deadline: reported, fails the test
    ++errors;
    entry.answered = false;
    std::printf("rank %d: roster read error: %s\n", rank, e.what());
  }

  std::printf("rank %d (%s): %ld pulls of %llu versions, last %llu, %ld torn, %ld timeouts, %ld "
              "donor gone, %ld other errors, longest pull %.3f s; the donor %s\n",
              rank, std::string(pw::enum_name(pull.read_mode)).c_str(), pulls,
              static_cast<unsigned long long>(versions_seen),
              static_cast<unsigned long long>(last_version), torn, timeouts, gone, errors, longest,
              entry.suspect    ? ("a suspect: " + entry.suspect_reason).c_str()
              : entry.answered ? "not a suspect"
                               : "did not answer");
  // Over shared memory every pull returns (the dead donor's last version stays readable); over
  // RMA a slow reader (a sanitized build) may see every pull end at its deadline, even before
  // the death: bounded is what counts there.
  const bool shm_ok = rma || (entry.suspect && timeouts == 0 && pulls > 0);
  const bool failed = torn != 0 || errors != 0 || pulls + timeouts + gone == 0 ||
                      longest > kTimeout + 1.0 || !shm_ok;
  if (failed) std::printf("FAILED: rank %d: a reader of the dead donor\n", rank);
  pw::test::end_survivor(donor, failed,
                         std::string("survivors: donor death survived (") + (rma ? "rma" : "shm") +
                             ")",
                         meeting);
}
