#pragma once
// WorkerReads: the reads of one window from a thread other than its owner's (AveragingAgent's
// background worker, docs/averaging.md "Background averaging"), beside the owner's publish,
// set_status, progress and pulls.
//
// What each side touches. The owner's publish writes its own segment (header words, its
// slot) and the window's version, status and roster copy of the hyperparameters; set_status
// its own header's status block; progress() calls MPI_Iprobe and reaps the window's
// graveyard; its pulls and roster reads use the window's graveyard and scratch. A worker's
// pull or roster read reads the window's immutable parts (layout, slot format, ranks,
// transports, segment addresses, the RMA window handle), the peers' segments (same node: their
// header words and slots, pins as atomics; other nodes: MPI_Rget on the RMA window), and the
// window's hyperparameter values (read-only copies; only set_hyperparameters writes them).
// Its own graveyard and scratch replace the window's, so no buffer or request list is shared.
// Safe only where unsafe_reason() is empty: a device window's reads share the GPU stream its
// publishes use, and a pull calls MPI (MPI_Wtime always, RMA calls for remote peers), which a
// second thread may do only under MPI_THREAD_MULTIPLE.
#include <span>
#include <string>

#include "paramwin/layer_ref.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/window_core.hpp"
#include "window/rma_batch.hpp"

namespace paramwin::detail {

class WorkerReads {
 public:
  /// Reads of @p window (which must outlive this, at the same address; each read resolves its
  /// implementation anew, so a closed window throws Error instead of being read).
  explicit WorkerReads(const Window& window);
  WorkerReads(const WorkerReads&) = delete;
  WorkerReads& operator=(const WorkerReads&) = delete;
  WorkerReads(WorkerReads&&) = delete;
  WorkerReads& operator=(WorkerReads&&) = delete;
  ~WorkerReads() = default;

  /// Why @p window may not be read from a second thread ("" when it may): a window whose
  /// slots live on a GPU, or an MPI thread level below MPI_THREAD_MULTIPLE.
  [[nodiscard]] static std::string unsafe_reason(const Window& window);

  /// Window::roster from the worker thread.
  [[nodiscard]] RosterEntry roster(int rank, double timeout_seconds);
  /// Window::pull from the worker thread into @p out: host layers in layout order, owned by
  /// the worker.
  PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                  const PullOptions& options);
  /// Owner's thread, worker idle: hands reads abandoned at a deadline (and the buffers they
  /// may still land in) to the window's graveyard, which completes them.
  void settle();
  /// At MPI_Finalize (worker stopped): completes the abandoned reads here. Never throws.
  void complete_noexcept() noexcept { graveyard_.reap(true); }

 private:
  [[nodiscard]] WindowImpl& impl() const { return window_->impl(); }

  const Window* window_;
  Graveyard graveyard_;
  Scratch scratch_;
};

}  // namespace paramwin::detail
