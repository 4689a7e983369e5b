// Latency of the one-sided operations a paramwin RMA pull is built from, each completed both
// ways the MPI standard offers: request-based (MPI_Rget, MPI_Rget_accumulate, MPI_Raccumulate
// + MPI_Wait) and plain (MPI_Get, MPI_Get_accumulate, MPI_Fetch_and_op, MPI_Accumulate +
// MPI_Win_flush). Rank 0 targets rank 1, which waits inside MPI_Barrier (so that RMA aimed at
// it progresses), on an MPI_Win_create window of 1 MiB under MPI_Win_lock_all, as paramwin's
// windows are. Prints the median over 7 batches of 2000 operations (after 200 untimed).
// docs/rma-semantics.md ("MPICH and Open MPI") records what it printed under both MPIs:
//   mpiexec -n 2 build/benchmarks/paramwin_rma_ops_micro
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int kOps = 2000;
constexpr int kWarmup = 200;
constexpr int kBatches = 7;
constexpr MPI_Aint kWord = 64;  // the int64 the atomics add to

double median_us(const std::function<void()>& op) {
  for (int i = 0; i < kWarmup; ++i) op();
  std::vector<double> per_op;
  for (int b = 0; b < kBatches; ++b) {
    const double t0 = MPI_Wtime();
    for (int i = 0; i < kOps; ++i) op();
    per_op.push_back((MPI_Wtime() - t0) / kOps * 1e6);
  }
  std::sort(per_op.begin(), per_op.end());
  return per_op[per_op.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "paramwin_rma_ops_micro: run on exactly 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<std::int64_t> memory((1U << 20) / sizeof(std::int64_t), 1);
  MPI_Win win = MPI_WIN_NULL;
  MPI_Win_create(memory.data(), static_cast<MPI_Aint>(memory.size() * sizeof(std::int64_t)), 1,
                 MPI_INFO_NULL, MPI_COMM_WORLD, &win);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  if (rank == 0) {
    constexpr int kTarget = 1;
    std::int64_t one = 1;
    std::int64_t old = 0;
    std::array<std::int64_t, 2> buf{};
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    const std::vector<std::pair<std::string, std::function<void()>>> cases = {
        {"MPI_Get 8 B + MPI_Win_flush",
         [&] {
           MPI_Get(buf.data(), 8, MPI_BYTE, kTarget, 0, 8, MPI_BYTE, win);
           MPI_Win_flush(kTarget, win);
         }},
        {"MPI_Rget 8 B + MPI_Wait",
         [&] {
           MPI_Rget(buf.data(), 8, MPI_BYTE, kTarget, 0, 8, MPI_BYTE, win, &r[0]);
           MPI_Wait(&r[0], MPI_STATUS_IGNORE);
         }},
        {"2 x MPI_Get 8 B + MPI_Win_flush",
         [&] {
           MPI_Get(&buf[0], 8, MPI_BYTE, kTarget, 0, 8, MPI_BYTE, win);
           MPI_Get(&buf[1], 8, MPI_BYTE, kTarget, 8, 8, MPI_BYTE, win);
           MPI_Win_flush(kTarget, win);
         }},
        {"2 x MPI_Rget 8 B + MPI_Waitall",
         [&] {
           MPI_Rget(&buf[0], 8, MPI_BYTE, kTarget, 0, 8, MPI_BYTE, win, &r[0]);
           MPI_Rget(&buf[1], 8, MPI_BYTE, kTarget, 8, 8, MPI_BYTE, win, &r[1]);
           MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
         }},
        {"MPI_Get_accumulate (sum, int64) + MPI_Win_flush",
         [&] {
           MPI_Get_accumulate(&one, 1, MPI_INT64_T, &old, 1, MPI_INT64_T, kTarget, kWord, 1,
                              MPI_INT64_T, MPI_SUM, win);
           MPI_Win_flush(kTarget, win);
         }},
        {"MPI_Rget_accumulate (sum, int64) + MPI_Wait",
         [&] {
           MPI_Rget_accumulate(&one, 1, MPI_INT64_T, &old, 1, MPI_INT64_T, kTarget, kWord, 1,
                               MPI_INT64_T, MPI_SUM, win, &r[0]);
           MPI_Wait(&r[0], MPI_STATUS_IGNORE);
         }},
        {"MPI_Fetch_and_op (sum, int64) + MPI_Win_flush",
         [&] {
           MPI_Fetch_and_op(&one, &old, MPI_INT64_T, kTarget, kWord, MPI_SUM, win);
           MPI_Win_flush(kTarget, win);
         }},
        {"MPI_Accumulate (sum, int64) + MPI_Win_flush",
         [&] {
           MPI_Accumulate(&one, 1, MPI_INT64_T, kTarget, kWord, 1, MPI_INT64_T, MPI_SUM, win);
           MPI_Win_flush(kTarget, win);
         }},
        {"MPI_Raccumulate (sum, int64) + MPI_Wait",
         [&] {
           MPI_Raccumulate(&one, 1, MPI_INT64_T, kTarget, kWord, 1, MPI_INT64_T, MPI_SUM, win,
                           &r[0]);
           MPI_Wait(&r[0], MPI_STATUS_IGNORE);
         }},
    };
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string first_line(version, static_cast<std::size_t>(length));
    first_line = first_line.substr(0, first_line.find('\n'));
    std::printf("# %s\n# median of %d batches of %d operations, target waiting in MPI_Barrier\n",
                first_line.c_str(), kBatches, kOps);
    for (const auto& [name, op] : cases) {
      std::printf("%-50s %8.2f us\n", name.c_str(), median_us(op));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Win_unlock_all(win);
  MPI_Win_free(&win);
  MPI_Finalize();
  return 0;
}
