// The finalize registry frees raw Win owners (src/mpi/handles.hpp) left alive at
// MPI_Finalize, including ones that were moved (the registry follows the owner) and a
// shared scratch in its lock_all epoch; MPICH 4.0.2 + UCX 1.13 would abort in MPI_Finalize
// otherwise. Attribute delete callbacks count the frees; after MPI_Finalize the owners'
// destructors must do nothing. Prints "handles freed at finalize" on success (CTest regex).
#include <mpi.h>

#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "mpi/handles.hpp"

namespace pd = paramwin::detail;

namespace {

int g_frees = 0;

int count_free(MPI_Win, int, void*, void*) {
  ++g_frees;
  return MPI_SUCCESS;
}

void watch(const pd::Win& win, int key) { MPI_Win_set_attr(win.get(), key, nullptr); }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int key = MPI_KEYVAL_INVALID;
  MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, &count_free, &key, nullptr);
  bool ok = true;
  {
    std::vector<double> m1(1024, 1.0);
    std::vector<double> m2(1024, 2.0);
    pd::Comm node = pd::Comm::split_shared(MPI_COMM_WORLD);
    void* base = nullptr;
    pd::Win scratch = pd::Win::allocate_shared_locked(1 << 16, node.get(), &base);
    watch(scratch, key);
    pd::Win a = pd::Win::create(m1.data(), 8192, MPI_INFO_NULL, MPI_COMM_WORLD);
    watch(a, key);
    a.lock_all();
    pd::Win b = pd::Win::create(m2.data(), 8192, MPI_INFO_NULL, MPI_COMM_WORLD);
    watch(b, key);
    a = std::move(b);  // frees a's first window now
    if (g_frees != 1) {
      std::fprintf(stderr, "[rank %d] FAILED: move-assign freed %d windows, expected 1\n", rank,
                   g_frees);
      ok = false;
    }
    // Moved twice more (one through a vector's reallocation): the registry follows.
    std::vector<pd::Win> kept;
    kept.push_back(std::move(a));
    kept.reserve(16);
    std::optional<pd::Win> last(std::move(kept.back()));
    kept.pop_back();
    MPI_Finalize();  // frees `last` and `scratch` (2 more), newest first
    if (g_frees != 3) {
      std::fprintf(stderr, "[rank %d] FAILED: MPI_Finalize freed %d windows, expected 2\n", rank,
                   g_frees - 1);
      ok = false;
    }
    if (*last || scratch) {
      std::fprintf(stderr, "[rank %d] FAILED: owners still hold handles after MPI_Finalize\n",
                   rank);
      ok = false;
    }
  }  // destructors after MPI_Finalize: nothing to do, no MPI call
  if (ok) {
    std::printf("[rank %d] handles freed at finalize\n", rank);
  }
  return ok ? 0 : 1;
}
