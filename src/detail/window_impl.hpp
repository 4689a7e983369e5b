#pragma once
// WindowImpl: the MPI handles, the segment memory and the publish / pull / roster protocols
// behind ParameterWindow. See docs/design.md for the protocol and why it cannot tear.

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "detail/segment.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

using ByteView = Kokkos::View<std::byte*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

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

 private:
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
};

/// RMA requests abandoned at a deadline, with the arenas and blocks their buffers live in.
struct Graveyard {
  std::vector<MPI_Request> requests;
  std::vector<std::shared_ptr<RmaArena>> arenas;
  std::vector<std::shared_ptr<std::byte>> blocks;  // retired scratches (retire_scratch)
};

class WindowImpl {
 public:
  WindowImpl(MPI_Comm comm, Layout layout, const WindowOptions& options);
  WindowImpl(const WindowImpl&) = delete;
  WindowImpl& operator=(const WindowImpl&) = delete;
  WindowImpl(WindowImpl&&) = delete;
  WindowImpl& operator=(WindowImpl&&) = delete;
  ~WindowImpl();

  /// Frees everything; throws MpiError on the first failing call (after freeing the rest).
  /// After MPI_Finalize it throws Error ("called after MPI_Finalize") instead.
  void close();

  /// Frees this window's MPI resources from inside MPI_Finalize (the MPI_COMM_SELF attribute
  /// delete callback, window_impl.cpp), while MPI still works; the window then stays an
  /// empty shell: close() throws, the destructor does nothing. Never throws; a failing MPI
  /// call is recorded (finalize_error()) instead. Only the finalize hook calls this.
  void free_at_finalize() noexcept;
  /// Stops the progress thread, if any (joins it); the window keeps working without it.
  void stop_progress_thread() noexcept;
  /// True once free_at_finalize() ran: the window's MPI resources and segment are gone.
  [[nodiscard]] bool freed_at_finalize() const noexcept {
    return freed_at_finalize_.load(std::memory_order_acquire);
  }
  /// What failed in free_at_finalize(), empty if nothing did.
  [[nodiscard]] const std::string& finalize_error() const noexcept { return finalize_error_; }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  [[nodiscard]] const Layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const WindowOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  [[nodiscard]] std::size_t wire_bytes() const noexcept { return slots_.payload_bytes; }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return slots_.fingerprint; }
  [[nodiscard]] Transport transport_for(int rank) const;

  PublishResult publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp);
  PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                  const PullOptions& options);

  [[nodiscard]] RosterEntry roster(int rank) const;
  [[nodiscard]] std::vector<RosterEntry> roster_all() const;
  void set_status(const AgentStatus& status);
  [[nodiscard]] const AgentStatus& status() const noexcept { return status_; }

  // --- used by the pull engine (pull.cpp) -------------------------------------------------
  [[nodiscard]] SegmentHeader& header() const noexcept {
    return *reinterpret_cast<SegmentHeader*>(segment_.data());
  }
  [[nodiscard]] SegmentHeader* shm_header(int rank) const noexcept {
    return reinterpret_cast<SegmentHeader*>(shm_base_[static_cast<std::size_t>(rank)]);
  }
  [[nodiscard]] const std::byte* shm_segment(int rank) const noexcept {
    return shm_base_[static_cast<std::size_t>(rank)];
  }
  [[nodiscard]] MPI_Win rma_win() const noexcept { return rma_win_; }
  /// Start of layer @p layer in this rank's live memory (Exposure::live only).
  [[nodiscard]] std::byte* live_layer(std::size_t layer) const;
  /// Lets MPI progress (serves RMA readers of this rank, completes abandoned reads); cheap.
  void progress();
  /// Where RMA operations abandoned at a deadline wait to complete.
  [[nodiscard]] Graveyard& graveyard() noexcept { return graveyard_; }
  /// Number of RMA operations abandoned at a deadline that have not completed yet.
  [[nodiscard]] std::size_t pending_rma() noexcept {
    reap(false);
    return graveyard_.requests.size();
  }
  /// Completes what finished of the abandoned operations (never blocks).
  void reap_finished() noexcept { reap(false); }
  [[nodiscard]] const SlotLayout& slots() const noexcept { return slots_; }
  /// Accumulation scratch for one whole model (grown on demand, reused).
  std::byte* scratch(std::size_t bytes);
  /// Hands the scratch to the graveyard (RMA reads abandoned in flight may still land in it);
  /// the next scratch() allocates a fresh one.
  void retire_scratch() noexcept;
  void check_rank(int rank, const char* what) const;

 private:
  void create(MPI_Comm comm);
  void verify();
  void release() noexcept;
  /// The first MPI call that failed while freeing (code MPI_SUCCESS if none).
  struct FreeResult {
    int code = MPI_SUCCESS;
    const char* call = "";
  };
  /// The one freeing path (close(), the destructor, MPI_Finalize): stops the progress
  /// thread, completes abandoned reads, unlocks and frees both windows and both
  /// communicators, each handle exactly once (null afterwards even if its free failed).
  FreeResult free_mpi() noexcept;
  void check_layouts_strict(std::uint64_t slot_fingerprint);
  void start_progress_thread();
  void reap(bool block) noexcept;
  [[nodiscard]] RosterEntry read_local_roster(int rank, const SegmentHeader& h) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  MPI_Win shm_win_ = MPI_WIN_NULL;
  MPI_Win rma_win_ = MPI_WIN_NULL;
  bool shm_locked_ = false;
  bool rma_locked_ = false;
  int rank_ = -1;
  int size_ = 0;
  Layout layout_;
  WindowOptions options_;
  SlotLayout slots_;
  ByteView segment_;                     // this rank's segment: header page + two slots
  std::vector<std::byte*> shm_base_;     // per comm rank: segment base if on this node
  std::uint64_t version_ = 0;
  AgentStatus status_;
  std::jthread progress_thread_;
  Graveyard graveyard_;
  std::shared_ptr<std::byte> scratch_;
  std::size_t scratch_bytes_ = 0;
  std::atomic<bool> freed_at_finalize_{false};
  std::string finalize_error_;
};

/// Binds the caller's refs to layout order: result[i] is the ref index for layer i.
/// Throws InvalidArgument naming the layer on a count, dtype, name or contiguity problem.
std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                                     const char* operation);
std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const LayerRef> refs,
                                     const char* operation);

/// Splits @p bytes into consecutive pieces of at most @p max_piece bytes (offset, size), so
/// that no MPI count exceeds INT_MAX however large a layer is.
std::vector<std::pair<std::size_t, std::size_t>> split_pieces(std::size_t bytes,
                                                              std::size_t max_piece);

/// A batch of request-based RMA operations on one window, split below INT_MAX bytes, waited
/// for together, optionally against an absolute deadline (MPI_Wtime).
class RmaBatch {
 public:
  RmaBatch(MPI_Win win, Graveyard* graveyard = nullptr,
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
  /// Starts an atomic add of @p delta to the int64 at @p offset of @p target's segment;
  /// the old value lands in @p old.
  void fetch_add(const std::int64_t* delta, std::int64_t* old, int target, std::size_t offset);
  /// Waits for every started operation; throws TimeoutError naming a donor that has not
  /// answered once the deadline has passed (the requests go to the graveyard).
  void wait();
  /// Hands outstanding requests to the graveyard without waiting.
  void abandon() noexcept;

 private:
  MPI_Win win_;
  Graveyard* graveyard_;
  std::shared_ptr<RmaArena> arena_;
  double deadline_;
  std::vector<MPI_Request> requests_;
  std::vector<int> targets_;
};

}  // namespace paramwin::detail
