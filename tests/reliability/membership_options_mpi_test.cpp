// A Membership's bad options (docs/elastic.md, "What to set"): InvalidArgument on every rank
// (the rank with the bad option says what; the others that another rank's options are
// invalid), before anything collective but the agreement; and the spare pool's refills are
// refused where they cannot work (the standing window; an MPI without MPI_Comm_spawn), and
// so are joins of processes launched on their own (JoinOptions).
#include <mpi.h>

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int size_of() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// Constructs a Membership with the options @p change makes on the last rank only (@p
/// everywhere: on every rank) and expects InvalidArgument naming @p what there, and the
/// other ranks' message elsewhere.
void expect_refused(const std::function<void(pw::MembershipOptions&)>& change,
                    const std::string& what, bool everywhere = false) {
  pw::MembershipOptions o;
  const bool bad = everywhere || rank_of() == size_of() - 1;
  if (bad) change(o);
  try {
    pw::Membership m(MPI_COMM_WORLD, o);
    ADD_FAILURE() << "expected InvalidArgument (" << what << ")";
  } catch (const pw::InvalidArgument& e) {
    const std::string message = e.what();
    const std::string want = bad ? what : "another rank's options are invalid";
    EXPECT_NE(message.find(want), std::string::npos) << message;
  }
}

}  // namespace

TEST(MembershipOptions, BadOptionsAreRefusedOnEveryRank) {
  expect_refused([](pw::MembershipOptions& o) { o.members = size_of() + 1; },
                 "MembershipOptions::members is");
  expect_refused([](pw::MembershipOptions& o) { o.members = -1; }, "MembershipOptions::members is");
  expect_refused([](pw::MembershipOptions& o) { o.replacement = static_cast<pw::Replacement>(7); },
                 "replacement is out of range");
  expect_refused([](pw::MembershipOptions& o) { o.agree_seconds = 0.0; },
                 "agree_seconds finite and > 0");
  expect_refused([](pw::MembershipOptions& o) { o.check_seconds = -1.0; },
                 "must be finite and >= 0");
  expect_refused([](pw::MembershipOptions& o) { o.spawn.pool = -2; },
                 "SpawnOptions::pool is -2, not >= 0");
  expect_refused(
      [](pw::MembershipOptions& o) {
        o.spawn.pool = 2;
        o.spawn.low = 3;
      },
      "SpawnOptions::low is 3, not in 0..2 (the pool)");
  expect_refused([](pw::MembershipOptions& o) { o.spawn.low = -1; },
                 "SpawnOptions::low is -1, not in 0..0 (the pool)");
  expect_refused([](pw::MembershipOptions& o) { o.spawn.ahead = true; },
                 "SpawnOptions::ahead needs a pool");
}

TEST(MembershipOptions, RefillsNeedTheNewWindowAndAnMpiThatSpawns) {
  expect_refused(
      [](pw::MembershipOptions& o) {
        o.spawn.pool = 1;
        o.replacement = pw::Replacement::standing_window;
      },
      "SpawnOptions::pool needs Replacement::new_window", /*everywhere=*/true);
#if defined(OPEN_MPI)
  // Open MPI spawns: a pool is accepted (nothing is spawned before a coordinator's check).
  pw::MembershipOptions o;
  o.spawn.pool = 1;
  pw::Membership m(MPI_COMM_WORLD, o);
  EXPECT_EQ(m.role(), pw::MemberRole::member);
  EXPECT_EQ(m.world_rank(), rank_of());
  EXPECT_EQ(m.refills().refills, 0U);
  EXPECT_FALSE(m.refills().spawned_here);
  // A program that is not there is refused (Open MPI's spawn of it would hang).
  expect_refused(
      [](pw::MembershipOptions& bad) {
        bad.spawn.pool = 1;
        bad.spawn.command = "/nonexistent/paramwin-spare";
      },
      "SpawnOptions::command '/nonexistent/paramwin-spare' is not an executable file");
  expect_refused(
      [](pw::MembershipOptions& bad) {
        bad.spawn.pool = 1;
        bad.spawn.command = "paramwin-no-such-program";
      },
      "SpawnOptions::command 'paramwin-no-such-program' is not an executable file");
  // A name found in PATH is accepted.
  pw::MembershipOptions in_path;
  in_path.spawn.pool = 1;
  in_path.spawn.command = "sh";
  EXPECT_NO_THROW(pw::Membership(MPI_COMM_WORLD, in_path));
#else
  expect_refused([](pw::MembershipOptions& o) { o.spawn.pool = 1; },
                 "SpawnOptions::pool needs Open MPI", /*everywhere=*/true);
#endif
}

TEST(MembershipOptions, JoinsNeedTheNewWindowAServiceAndAnMpiThatConnects) {
  expect_refused(
      [](pw::MembershipOptions& o) {
        o.join.service = "paramwin-test";
        o.replacement = pw::Replacement::standing_window;
      },
      "JoinOptions::service needs Replacement::new_window", /*everywhere=*/true);
  expect_refused([](pw::MembershipOptions& o) { o.join.joining = true; },
                 "JoinOptions::joining needs JoinOptions::service");
  expect_refused([](pw::MembershipOptions& o) { o.join.look_seconds = -1.0; },
                 "JoinOptions: look_seconds and publish_seconds must be finite and >= 0");
#if defined(OPEN_MPI)
  // Open MPI connects: a service is accepted, and the coordinator's look for a joiner (none
  // waits, and this launch has no ompi-server: its own name service answers) changes nothing.
  pw::MembershipOptions o;
  o.join.service = "paramwin-test-nobody";
  pw::Membership m(MPI_COMM_WORLD, o);
  EXPECT_FALSE(m.poll().has_value());
  EXPECT_EQ(m.role(), pw::MemberRole::member);
  EXPECT_EQ(m.refills().joins, 0U);
  EXPECT_FALSE(m.refills().joined_here);
#else
  expect_refused([](pw::MembershipOptions& o) { o.join.service = "paramwin-test"; },
                 "JoinOptions::service needs Open MPI", /*everywhere=*/true);
#endif
}
