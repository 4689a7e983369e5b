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
#include <vector>

#include "detail/segment.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

using ByteView = Kokkos::View<std::byte*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

class WindowImpl {
 public:
  WindowImpl(MPI_Comm comm, Layout layout, const WindowOptions& options);
  WindowImpl(const WindowImpl&) = delete;
  WindowImpl& operator=(const WindowImpl&) = delete;
  WindowImpl(WindowImpl&&) = delete;
  WindowImpl& operator=(WindowImpl&&) = delete;
  ~WindowImpl();

  /// Frees everything; throws MpiError on the first failing call (after freeing the rest).
  void close();

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  [[nodiscard]] const Layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const WindowOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  [[nodiscard]] std::size_t wire_bytes() const noexcept { return slots_.payload_bytes; }
  [[nodiscard]] Transport transport_for(int rank) const;

  PublishResult publish(std::span<const ConstLayerRef> layers);
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
  /// Lets MPI progress (serves RMA readers of this rank); cheap.
  void progress() const;
  [[nodiscard]] const SlotLayout& slots() const noexcept { return slots_; }
  /// Accumulation scratch for one whole model (grown on demand, reused).
  std::byte* scratch(std::size_t bytes);
  void check_rank(int rank, const char* what) const;

 private:
  void create(MPI_Comm comm);
  void verify();
  void release() noexcept;
  void check_layouts_strict(std::uint64_t slot_fingerprint);
  void start_progress_thread();
  void stop_progress_thread() noexcept;
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
  struct FreeBytes {
    void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], FreeBytes> scratch_;
  std::size_t scratch_bytes_ = 0;
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

/// Batches of request-based RMA reads on one window, chunked below INT_MAX bytes.
class RmaBatch {
 public:
  explicit RmaBatch(MPI_Win win) : win_(win) {}
  RmaBatch(const RmaBatch&) = delete;
  RmaBatch& operator=(const RmaBatch&) = delete;
  RmaBatch(RmaBatch&&) = delete;
  RmaBatch& operator=(RmaBatch&&) = delete;
  /// Completes outstanding requests (errors ignored) so no buffer is left in flight.
  ~RmaBatch();
  /// Starts reading @p bytes at @p offset of @p target's segment into @p dst.
  void get(void* dst, std::size_t bytes, int target, std::size_t offset);
  /// Waits for every started read.
  void wait();

 private:
  MPI_Win win_;
  std::vector<MPI_Request> requests_;
};

}  // namespace paramwin::detail
