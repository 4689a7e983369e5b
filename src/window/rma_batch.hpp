#pragma once
// Request-based RMA reads and what outlives them: RmaBatch (a batch of MPI_Rget /
// MPI_Rget_accumulate waited for together, optionally against a deadline), RmaArena (the
// buffers they land in), Graveyard (requests abandoned at a deadline, with their buffers),
// and Scratch (the pull's accumulation buffer, retired to the graveyard when reads may
// still land in it).

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace paramwin::detail {

/// Owner of the local buffers RMA reads land in. Shared, so that reads abandoned at a
/// deadline keep their destination alive until they complete.
class RmaArena {
 public:
  /// Zeroed storage for @p n objects of trivially copyable @p T, alive as long as the arena.
  template <class T>
  T* make(std::size_t n) {
    blocks_.push_back(std::make_unique<std::byte[]>(std::max<std::size_t>(n, 1) * sizeof(T)));
    return reinterpret_cast<T*>(blocks_.back().get());
  }
  /// As make(), without zeroing: for buffers that gets fill before anything reads them (the
  /// chunk buffers, megabytes per pull: zeroing them cost a 4 MiB direct pull ~0.3 ms, 0.56x
  /// of a raw get instead of 0.9x; docs/benchmarks.md section 12).
  template <class T>
  T* make_for_overwrite(std::size_t n) {
    blocks_.push_back(
        std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(n, 1) * sizeof(T)));
    return reinterpret_cast<T*>(blocks_.back().get());
  }

 private:
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
};

/// RMA requests abandoned at a deadline, with the arenas and blocks their buffers live in.
struct Graveyard {
  std::vector<MPI_Request> requests;
  std::vector<std::shared_ptr<RmaArena>> arenas;
  std::vector<std::shared_ptr<std::byte>> blocks;  // retired scratches (Scratch::retire)

  /// Completes what finished (everything if @p block); frees the buffers once all did.
  void reap(bool block) noexcept;
  /// Number of abandoned requests not completed yet (reaps first, never blocks).
  [[nodiscard]] std::size_t pending() noexcept {
    reap(false);
    return requests.size();
  }
};

/// Accumulation scratch for one whole model, 64-byte aligned, grown on demand and reused.
class Scratch {
 public:
  /// At least @p bytes; the previous contents are kept only if no growth was needed.
  std::byte* get(std::size_t bytes);
  /// Hands the buffer to @p graveyard (RMA reads abandoned in flight may still land in it);
  /// the next get() allocates a fresh one.
  void retire(Graveyard& graveyard) noexcept;

 private:
  std::shared_ptr<std::byte> data_;
  std::size_t bytes_ = 0;
};

/// The message of a TimeoutError for an RMA read of @p what from @p rank: names both causes
/// (a target busy outside MPI, a target process that is gone).
std::string timeout_text(const char* what, int rank);

/// Splits @p bytes into consecutive pieces of at most @p max_piece bytes (offset, size), so
/// that no MPI count exceeds INT_MAX however large a layer is.
std::vector<std::pair<std::size_t, std::size_t>> split_pieces(std::size_t bytes,
                                                              std::size_t max_piece);

/// A batch of request-based RMA operations on one window, split below INT_MAX bytes, waited
/// for together, optionally against an absolute deadline (MPI_Wtime).
class RmaBatch {
 public:
  explicit RmaBatch(MPI_Win win, Graveyard* graveyard = nullptr,
                    std::shared_ptr<RmaArena> arena = nullptr, double deadline = 0.0)
      : win_(win), graveyard_(graveyard), arena_(std::move(arena)), deadline_(deadline) {}
  RmaBatch(const RmaBatch&) = delete;
  RmaBatch& operator=(const RmaBatch&) = delete;
  RmaBatch(RmaBatch&&) = delete;
  RmaBatch& operator=(RmaBatch&&) = delete;
  /// Completes outstanding requests, or hands them to the graveyard when there is one.
  ~RmaBatch();
  /// Starts reading @p bytes at @p offset of @p target's segment into @p dst.
  void get(void* dst, std::size_t bytes, int target, std::size_t offset);
  /// Makes later get() calls plain MPI_Get, completed by wait() with one MPI_Win_flush per
  /// target (no deadline, nothing to abandon): raw gets move bytes faster than request-based
  /// ones on MPICH's ch4:ucx and Open MPI's osc/ucx (docs/benchmarks.md sections 11, 12).
  /// Only for a batch without a deadline whose destinations may not outlive an error.
  void flush_gets() noexcept { flush_ = true; }
  /// Starts an atomic @p op (MPI_BOR, MPI_BAND) of @p operand into the uint64 at @p offset
  /// of @p target's segment; the old value lands in @p old.
  void fetch_op(const std::uint64_t* operand, std::uint64_t* old, int target, std::size_t offset,
                MPI_Op op);
  /// Starts an atomic @p op of @p operand into the uint64 at @p offset of @p target's
  /// segment, fetching nothing (MPI_Raccumulate: its request completes locally, without
  /// waiting for the target). Atomic with respect to fetch_op() on the same word, and applied
  /// after every earlier accumulate of this rank to that word (MPI's default accumulate
  /// ordering).
  void accumulate(const std::uint64_t* operand, int target, std::size_t offset, MPI_Op op);
  /// Waits for every started operation; throws TimeoutError naming a rank that has not
  /// answered once the deadline has passed (the requests go to the graveyard).
  void wait();
  /// Hands outstanding requests to the graveyard without waiting.
  void abandon() noexcept;

 private:
  /// Polls until done or past the deadline (then abandons and throws TimeoutError).
  void wait_until_deadline();
  /// An RMA call to @p target failed with @p code (on these MPIs: its process is gone, the
  /// transport to it broken): the batch's requests abandoned, a DonorError naming @p target.
  [[noreturn]] void unreachable(int target, int code, const char* call);
  /// A completion call (@p call) failed with @p code: unreachable() with the first request
  /// whose status holds an error (MPI_ERR_IN_STATUS), else the first target.
  [[noreturn]] void completion_failed(int code, const std::vector<MPI_Status>& statuses,
                                      const char* call);

  MPI_Win win_;
  Graveyard* graveyard_;
  std::shared_ptr<RmaArena> arena_;
  double deadline_;
  std::vector<MPI_Request> requests_;
  std::vector<int> targets_;
  bool flush_ = false;
  std::vector<int> flush_targets_;  // targets of plain gets not flushed yet
};

}  // namespace paramwin::detail
