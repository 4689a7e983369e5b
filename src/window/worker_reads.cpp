// WorkerReads: pulls and roster reads of a window from a worker thread, with their own
// graveyard and scratch (see worker_reads.hpp for what each side touches).
#include "window/worker_reads.hpp"

#include <mpi.h>

#include <string>

#include "detail/mpi_check.hpp"
#include "window/pull_engine.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

WorkerReads::WorkerReads(const Window& window) : window_(&window) {}

std::string WorkerReads::unsafe_reason(const Window& window) {
  if (window.options().memory != Memory::host) {
    return "the window's slots live on a GPU, whose stream its publishes use too";
  }
  int level = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
  if (level != MPI_THREAD_MULTIPLE) {
    return "MPI was initialized with thread level " + std::to_string(level) +
           ", not MPI_THREAD_MULTIPLE (a read calls MPI beside the trainer's thread)";
  }
  return {};
}

RosterEntry WorkerReads::roster(int rank, double timeout_seconds) {
  return impl().roster(rank, timeout_seconds, graveyard_);
}

PullResult WorkerReads::pull(std::span<const int> donors, std::span<const LayerRef> out,
                             const PullOptions& options) {
  WindowImpl& w = impl();
  return PullEngine(w, PullPort{w.rma_win(), graveyard_, scratch_}, donors, out, options, true)
      .run();
}

void WorkerReads::settle() {
  if (graveyard_.requests.empty() && graveyard_.blocks.empty()) {
    graveyard_.arenas.clear();
    return;
  }
  if (!window_->valid()) {  // closed or freed at MPI_Finalize: nowhere to hand them
    graveyard_.reap(true);
    return;
  }
  impl().adopt(graveyard_);
}

}  // namespace paramwin::detail
