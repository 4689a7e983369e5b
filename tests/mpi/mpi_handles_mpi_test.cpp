// The MPI handle owners (src/mpi/handles.hpp) and the agreement helpers (src/mpi/agree.hpp,
// and the public paramwin::agreed_error of paramwin/agreement.hpp):
// move-construct, move-assign over a live owner (the old handle is freed: an attribute
// delete callback counts the frees), self-move, errors on an owned handle become MpiError,
// and agreement on a local failure.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "mpi/handles.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/agreement.hpp"
#include "paramwin/error.hpp"

namespace pd = paramwin::detail;
using paramwin::test::world_rank;
using paramwin::test::world_size;

namespace {

int g_comm_frees = 0;
int g_win_frees = 0;

int count_comm_free(MPI_Comm, int, void*, void*) {
  ++g_comm_frees;
  return MPI_SUCCESS;
}
int count_win_free(MPI_Win, int, void*, void*) {
  ++g_win_frees;
  return MPI_SUCCESS;
}

/// Hangs an attribute on @p comm whose delete callback counts MPI_Comm_free calls.
void watch_comm(MPI_Comm comm) {
  static int key = MPI_KEYVAL_INVALID;
  if (key == MPI_KEYVAL_INVALID) {
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &count_comm_free, &key, nullptr);
  }
  MPI_Comm_set_attr(comm, key, nullptr);
}

/// Hangs an attribute on @p win whose delete callback counts MPI_Win_free calls.
void watch_win(MPI_Win win) {
  static int key = MPI_KEYVAL_INVALID;
  if (key == MPI_KEYVAL_INVALID) {
    MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, &count_win_free, &key, nullptr);
  }
  MPI_Win_set_attr(win, key, nullptr);
}

template <class T>
T& same(T& x) {
  return x;  // hides a self-move from the compiler's warning
}

pd::Win make_rma_win(std::vector<double>& memory) {
  return pd::Win::create(memory.data(), static_cast<MPI_Aint>(memory.size() * sizeof(double)),
                         MPI_INFO_NULL, MPI_COMM_WORLD);
}

}  // namespace

TEST(Comm, DupOwnsAHandleWithErrorsReturn) {
  pd::Comm c = pd::Comm::dup(MPI_COMM_WORLD);
  ASSERT_TRUE(c);
  EXPECT_EQ(c.size(), world_size());
  EXPECT_EQ(c.rank(), world_rank());
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(c.get(), MPI_COMM_WORLD, &result);
  EXPECT_EQ(result, MPI_CONGRUENT);
  // An invalid call on the owned communicator returns an error: an exception, no abort.
  int value = 0;
  try {
    pd::check_mpi(MPI_Send(&value, 1, MPI_INT, c.size(), 0, c.get()), "MPI_Send(bad rank)");
    ADD_FAILURE() << "MPI_Send to rank size() did not fail";
  } catch (const paramwin::MpiError& e) {
    EXPECT_NE(e.code(), MPI_SUCCESS);
    EXPECT_NE(std::string(e.what()).find("MPI_Send(bad rank)"), std::string::npos);
  }
}

TEST(Comm, MoveConstructAssignAndSelfMove) {
  pd::Comm a = pd::Comm::dup(MPI_COMM_WORLD);
  const MPI_Comm handle_a = a.get();
  pd::Comm b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from owner is empty
  EXPECT_EQ(b.get(), handle_a);

  pd::Comm c = pd::Comm::dup(MPI_COMM_WORLD);
  watch_comm(c.get());
  const int before = g_comm_frees;
  c = std::move(b);  // over a live owner: c's old communicator is freed now
  EXPECT_EQ(g_comm_frees, before + 1);
  EXPECT_EQ(c.get(), handle_a);
  EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move)

  c = std::move(same(c));
  EXPECT_EQ(c.get(), handle_a);
  EXPECT_EQ(c.size(), world_size());

  watch_comm(c.get());
  c.free();
  EXPECT_FALSE(c);
  EXPECT_EQ(g_comm_frees, before + 2);
  c.free();  // empty: nothing to do
}

TEST(Comm, SplitUndefinedIsEmptyAndSharedCoversTheNode) {
  pd::Comm none = pd::Comm::split(MPI_COMM_WORLD, MPI_UNDEFINED, 0);
  EXPECT_FALSE(none);
  EXPECT_EQ(none.get(), MPI_COMM_NULL);
  pd::Comm node = pd::Comm::split_shared(MPI_COMM_WORLD);
  ASSERT_TRUE(node);
  EXPECT_GE(node.size(), 1);
  pd::Comm halves = pd::Comm::split(MPI_COMM_WORLD, world_rank() % 2, world_rank());
  EXPECT_EQ(halves.size(), (world_size() + 1 - world_rank() % 2) / 2);
}

TEST(Info, MoveAndSharedNoncontig) {
  pd::Info a = pd::Info::shared_noncontig();
  char value[16] = {};
  int found = 0;
  MPI_Info_get(a.get(), "alloc_shared_noncontig", 15, value, &found);
  EXPECT_EQ(found, 1);
  EXPECT_STREQ(value, "true");
  const MPI_Info handle = a.get();
  pd::Info b(std::move(a));
  EXPECT_EQ(a.get(), MPI_INFO_NULL);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), handle);
  pd::Info c = pd::Info::create();
  c = std::move(b);
  EXPECT_EQ(c.get(), handle);
  c = std::move(same(c));
  EXPECT_EQ(c.get(), handle);
}

TEST(LocalHandle, GroupAndDatatypeMoveAndFree) {
  pd::Group a;
  ASSERT_EQ(MPI_Comm_group(MPI_COMM_WORLD, a.out()), MPI_SUCCESS);
  const MPI_Group handle = a.get();
  int size = 0;
  MPI_Group_size(handle, &size);
  EXPECT_EQ(size, world_size());
  pd::Group b(std::move(a));
  EXPECT_EQ(a.get(), MPI_GROUP_NULL);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), handle);
  pd::Group c;
  ASSERT_EQ(MPI_Comm_group(MPI_COMM_SELF, c.out()), MPI_SUCCESS);
  c = std::move(b);  // frees the MPI_COMM_SELF group
  EXPECT_EQ(c.get(), handle);
  c = std::move(same(c));
  EXPECT_EQ(c.get(), handle);

  // A datatype owned from creation to the end of scope, usable in between.
  pd::Datatype t;
  ASSERT_EQ(MPI_Type_contiguous(3, MPI_INT, t.out()), MPI_SUCCESS);
  ASSERT_EQ(MPI_Type_commit(t.out()), MPI_SUCCESS);
  int bytes = 0;
  MPI_Type_size(t.get(), &bytes);
  EXPECT_EQ(bytes, 3 * static_cast<int>(sizeof(int)));
  pd::Datatype u(std::move(t));
  EXPECT_EQ(t.get(), MPI_DATATYPE_NULL);  // NOLINT(bugprone-use-after-move)
  EXPECT_NE(u.get(), MPI_DATATYPE_NULL);
}

TEST(Win, SharedLockedScratch) {
  pd::Comm node = pd::Comm::split_shared(MPI_COMM_WORLD);
  void* base = nullptr;
  pd::Win w = pd::Win::allocate_shared_locked(4096, node.get(), &base);
  ASSERT_TRUE(w);
  EXPECT_TRUE(w.locked());
  ASSERT_NE(base, nullptr);
  MPI_Aint bytes = 0;
  EXPECT_EQ(w.shared_query(node.rank(), &bytes), base);
  EXPECT_GE(bytes, 4096);
  std::memset(base, 1, 4096);
  pd::check_mpi(MPI_Win_sync(w.get()), "MPI_Win_sync");
  w.free();  // unlocks, then frees
  EXPECT_FALSE(w);
  EXPECT_FALSE(w.locked());
}

TEST(Win, MoveConstructAssignAndSelfMove) {
  std::vector<double> m1(512, 1.0);
  std::vector<double> m2(512, 2.0);
  pd::Win a = make_rma_win(m1);
  a.lock_all();
  const MPI_Win handle_a = a.get();
  pd::Win b(std::move(a));
  EXPECT_FALSE(a);           // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(a.locked());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.get(), handle_a);
  EXPECT_TRUE(b.locked());

  pd::Win c = make_rma_win(m2);
  watch_win(c.get());
  const int before = g_win_frees;
  c = std::move(b);  // over a live owner (collective free of c's old window)
  EXPECT_EQ(g_win_frees, before + 1);
  EXPECT_EQ(c.get(), handle_a);
  EXPECT_TRUE(c.locked());

  c = std::move(same(c));
  EXPECT_EQ(c.get(), handle_a);

  // Still a working window in its lock_all epoch: read the right neighbour's memory.
  const int right = (world_rank() + 1) % world_size();
  double got = 0.0;
  pd::check_mpi(MPI_Get(&got, 1, MPI_DOUBLE, right, 0, 1, MPI_DOUBLE, c.get()), "MPI_Get");
  pd::check_mpi(MPI_Win_flush(right, c.get()), "MPI_Win_flush");
  EXPECT_EQ(got, 1.0);
  pd::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

TEST(Win, ErrorsOnTheOwnedWindowBecomeMpiError) {
  std::vector<double> m(64, 0.0);
  pd::Win w = make_rma_win(m);
  w.lock_all();
  double got = 0.0;
  // Target rank out of range: MPI returns an error code instead of aborting.
  EXPECT_THROW(pd::check_mpi(MPI_Get(&got, 1, MPI_DOUBLE, world_size(), 0, 1, MPI_DOUBLE, w.get()),
                             "MPI_Get(bad rank)"),
               paramwin::MpiError);
  // A second lock_all epoch on the same window is an error too.
  EXPECT_THROW(w.lock_all(), paramwin::MpiError);
  pd::check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

TEST(Agree, EveryRankThrowsWhenOneFails) {
  EXPECT_NO_THROW(pd::agree_or_throw<paramwin::InvalidArgument>(MPI_COMM_WORLD, ""));
  const int failing = world_size() - 1;
  const std::string mine = world_rank() == failing ? "paramwin: bad on the last rank" : "";
  try {
    pd::agree_or_throw<paramwin::InvalidArgument>(MPI_COMM_WORLD, mine);
    ADD_FAILURE() << "no exception";
  } catch (const paramwin::InvalidArgument& e) {
    if (world_rank() == failing) {
      EXPECT_EQ(std::string(e.what()), mine);
    } else {
      EXPECT_EQ(std::string(e.what()), "paramwin: rank " + std::to_string(failing) +
                                           " failed: paramwin: bad on the last rank");
    }
  }
}

TEST(Agree, RethrowKeepsTheFailingRanksType) {
  std::exception_ptr local;
  if (world_rank() == 0) {
    local = std::make_exception_ptr(paramwin::LayoutMismatch("paramwin: mine"));
  }
  try {
    pd::agree_or_rethrow<paramwin::VerificationError>(MPI_COMM_WORLD, local);
    ADD_FAILURE() << "no exception";
  } catch (const paramwin::LayoutMismatch& e) {
    EXPECT_EQ(world_rank(), 0);
    EXPECT_STREQ(e.what(), "paramwin: mine");
  } catch (const paramwin::VerificationError& e) {
    EXPECT_NE(world_rank(), 0);
    EXPECT_NE(std::string(e.what()).find("rank 0 failed: paramwin: mine"), std::string::npos);
  }
  EXPECT_NO_THROW(pd::agree_or_rethrow<paramwin::Error>(MPI_COMM_WORLD, nullptr));
}

// The public form (paramwin/agreement.hpp, what the Python package's agree() calls): the
// messages agree_or_throw would throw, returned.
TEST(Agree, AgreedErrorReturnsTheMessages) {
  EXPECT_EQ(paramwin::agreed_error(MPI_COMM_WORLD, ""), "");
  const int failing = world_size() - 1;
  const std::string mine = world_rank() == failing ? "paramwin: bad on the last rank" : "";
  const std::string got = paramwin::agreed_error(MPI_COMM_WORLD, mine);
  if (world_rank() == failing) {
    EXPECT_EQ(got, mine);
  } else {
    EXPECT_EQ(got, "paramwin: rank " + std::to_string(failing) +
                       " failed: paramwin: bad on the last rank");
  }
}

TEST(Agree, SameOnAllRanks) {
  EXPECT_TRUE(pd::same_on_all_ranks(MPI_COMM_WORLD, 42));
  EXPECT_TRUE(pd::same_on_all_ranks(MPI_COMM_WORLD, ~std::uint64_t{0}));
  EXPECT_EQ(pd::same_on_all_ranks(MPI_COMM_WORLD, static_cast<std::uint64_t>(world_rank())),
            world_size() == 1);
}
