#pragma once
// WindowImpl: the MPI handles, the segment memory and the publish / pull / roster protocols
// behind ParameterWindow. See docs/design.md for the protocol and why it cannot tear.
//
// Where its members live: creation, progress and destruction in window_impl.cpp; the
// creation checks in verify.cpp; publish() in publish.cpp; the roster in roster.cpp; pull()
// in pull.cpp (the engine: pull_engine.hpp, pull_plan.cpp, pull_direct.cpp, pull_staged.cpp).
// Where the caller's parameters live is the window's Placement (placement.hpp), chosen once
// at creation; the GPU placement's accessors below are defined in device_placement.cpp.

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "detail/cuda.hpp"
#include "mpi/finalize_registry.hpp"
#include "mpi/handles.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"
#include "window/binding.hpp"
#include "window/live_windows.hpp"
#include "window/liveness.hpp"
#include "window/pins.hpp"
#include "window/placement.hpp"
#include "window/rma_batch.hpp"
#include "window/segment.hpp"

namespace paramwin::detail {

using ByteView =
    Kokkos::View<std::byte*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// Number of slots a segment holds in host memory: all of them for a host window; for a
/// device window (Memory::cuda, whose slots live on the GPU) a host copy of both only when
/// some rank reads this window over RMA (@p rma_readers, WindowImpl::has_rma_readers()),
/// which cannot map GPU memory; none otherwise.
[[nodiscard]] constexpr std::size_t host_slot_count(Exposure exposure, Memory memory,
                                                    bool rma_readers) noexcept {
  if (memory == Memory::cuda) {
    return rma_readers ? slot_count(exposure) : 0;
  }
  return slot_count(exposure);
}

/// Byte offset, inside a device window's device slots, of the slot holding @p version.
[[nodiscard]] constexpr std::size_t device_slot_offset(std::uint64_t version,
                                                       std::size_t stride) noexcept {
  return (version & 1U) * stride;
}

// Final, so never a base; owned and deleted as WindowImpl (FinalizeClient's destructor is
// protected): its destructor need not be virtual.
// NOLINTNEXTLINE(cppcoreguidelines-virtual-class-destructor): see above
class WindowImpl final : public FinalizeClient {
 public:
  /// @p staging: the copies of the caller's memory kind, for a placement that stages.
  WindowImpl(MPI_Comm comm, Layout layout, const WindowOptions& options,
             const std::source_location& site, const HostStaging& staging);
  WindowImpl(const WindowImpl&) = delete;
  WindowImpl& operator=(const WindowImpl&) = delete;
  WindowImpl(WindowImpl&&) = delete;
  WindowImpl& operator=(WindowImpl&&) = delete;
  ~WindowImpl();

  /// Frees everything; throws MpiError on the first failing call (after freeing the rest).
  /// After MPI_Finalize it throws Error ("called after MPI_Finalize") instead.
  void close();
  /// Gives the window up without any MPI call that could wait for another rank (see
  /// Window::abandon): stops the progress thread and forgets the windows and communicators
  /// unfreed; reads abandoned at a deadline keep their buffers for the life of the process.
  /// The destructor then does nothing.
  void abandon() noexcept;

  /// True once MPI_Finalize freed the window (free_at_finalize()): its MPI resources and
  /// segment are gone; close() throws, the destructor does nothing.
  [[nodiscard]] bool freed_at_finalize() const noexcept {
    return freed_at_finalize_.load(std::memory_order_acquire);
  }
  /// What failed in free_at_finalize(), empty if nothing did.
  [[nodiscard]] const std::string& finalize_error() const noexcept override {
    return finalize_error_;
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_.get(); }
  [[nodiscard]] const Layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const WindowOptions& options() const noexcept { return options_; }
  /// Where the window was created: "file:line:column".
  [[nodiscard]] const std::string& site() const noexcept { return site_; }
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  /// Checkpoint resume: the next publish gets version @p next when it is ahead of the
  /// version the next publish would get anyway (never backwards).
  void continue_versions(std::uint64_t next) noexcept {
    if (next > version_ + 1) version_ = next - 1;
  }
  void renew_incarnation() noexcept;
  [[nodiscard]] std::size_t wire_bytes() const noexcept { return slots_.payload_bytes; }
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return slots_.fingerprint; }
  [[nodiscard]] const SlotLayout& slots() const noexcept { return slots_; }
  [[nodiscard]] Transport transport_for(int rank) const;
  /// Whether some other rank may read this rank over RMA (see ParameterWindow).
  [[nodiscard]] bool has_rma_readers() const noexcept { return rma_readers_; }
  /// Throws InvalidArgument unless @p rank is a rank of the window.
  void check_rank(int rank, const char* what) const;

  /// @p bound: @p layers are already in layout order and checked (BoundLayers), so they are
  /// not bound again.
  PublishResult publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp,
                        bool bound = false);
  /// @p bound: as for publish().
  PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                  const PullOptions& options, bool bound = false);

  /// @p timeout_seconds > 0 bounds the RMA reads (TimeoutError past it; 0: no bound).
  [[nodiscard]] RosterEntry roster(int rank, double timeout_seconds = 0.0) const;
  /// roster(), with reads abandoned at the deadline left in @p graveyard instead of the
  /// window's (WorkerReads: a thread other than the owner's).
  [[nodiscard]] RosterEntry roster(int rank, double timeout_seconds, Graveyard& graveyard) const;
  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds = 0.0) const;
  void set_status(const AgentStatus& status);
  [[nodiscard]] const AgentStatus& status() const noexcept { return status_; }
  /// This process's pins on the other ranks (the pull's readers count them here).
  [[nodiscard]] PinBook& pin_book() const noexcept { return *pin_book_; }
  /// The values the next publish carries; InvalidArgument unless @p hyper has this layout's
  /// declarations.
  void set_hyperparameters(const Hyperparameters& hyper);
  [[nodiscard]] const Hyperparameters& hyperparameters() const noexcept { return hyper_; }

  /// Start of layer @p layer in this rank's live memory (Exposure::live only).
  [[nodiscard]] std::byte* live_layer(std::size_t layer) const;
  /// Lets MPI progress (serves RMA readers of this rank, completes abandoned reads); cheap.
  void progress();
  /// Number of RMA operations abandoned at a deadline that have not completed yet.
  [[nodiscard]] std::size_t pending_rma() noexcept { return graveyard_.pending(); }
  /// Takes over what @p other holds (requests abandoned at a deadline, their buffers): they
  /// complete with the window's own (progress(), at the latest when the window is freed).
  void adopt(Graveyard& other);
  /// The RMA window pulls read through (MPI_WIN_NULL on a communicator of one process).
  [[nodiscard]] MPI_Win rma_win() const noexcept { return rma_win_.get(); }

  // --- the segments of this node's ranks (read by the pull engine and the roster) ---------
  /// Header of the same-node rank @p rank (nullptr if on another node).
  [[nodiscard]] SegmentHeader* shm_header(int rank) const noexcept {
    return reinterpret_cast<SegmentHeader*>(shm_base_[static_cast<std::size_t>(rank)]);
  }
  /// Segment of the same-node rank @p rank (nullptr if on another node).
  [[nodiscard]] const std::byte* shm_segment(int rank) const noexcept {
    return shm_base_[static_cast<std::size_t>(rank)];
  }

  // --- where the caller's parameters live (placement.hpp) --------------------------------
  /// The window's placement: stages the caller's layers (Window's publish and pull).
  [[nodiscard]] Placement& placement() const noexcept { return *placement_; }
  /// Slots held in this rank's host segment (Placement::host_slots()).
  [[nodiscard]] std::size_t host_slots() const noexcept { return host_slots_; }
  /// Throws InvalidArgument, naming the layer, unless every layer of @p refs (in layout
  /// order through @p order) is memory this window's placement takes.
  void check_layer_memory(std::span<const ConstLayerRef> refs, std::span<const std::size_t> order,
                          const char* operation) const {
    placement_->check_layers(layout_, refs, order, operation);
  }
  void check_layer_memory(std::span<const LayerRef> refs, std::span<const std::size_t> order,
                          const char* operation) const {
    placement_->check_layers(layout_, refs, order, operation);
  }
  /// The GPU placement's side (slots, stream, kernels; docs/gpu.md), for the pull engine's
  /// device reader: nullptr for a host window.
  [[nodiscard]] cuda::Device* device() const noexcept;
  /// The device slots of the same-node rank @p rank as mapped here (nullptr if on another
  /// node or a host window).
  [[nodiscard]] const std::byte* device_slots(int rank) const noexcept;

 private:
  // FinalizeClient: MPI_Finalize frees the window while MPI still works; it then stays an
  // empty shell. Never throw; a failing MPI call is recorded in finalize_error().
  void stop_threads_at_finalize() noexcept override { stop_progress_thread(); }
  void free_at_finalize() noexcept override;

  [[nodiscard]] SegmentHeader& header() const noexcept {
    return *reinterpret_cast<SegmentHeader*>(segment_.data());
  }
  void check_options() const;
  /// This window as the registry of live unnamed windows lists it (live_windows.hpp).
  [[nodiscard]] LiveWindow live_entry(std::uint64_t fingerprint) const;
  void create(MPI_Comm comm);
  /// One MPI_Allreduce: @p local_error (check_options(), or a live unnamed window this one
  /// could pair crosswise with: live_window_conflict()) on any rank, WindowOptions fields
  /// that every rank must share (verify, layout_check) and the identity (name, creation_).
  /// Throws InvalidArgument on every rank when something failed or differs (collective).
  /// Returns whether any rank uses Transport::rma (told in the same allreduce).
  bool agree_on_creation(const std::string& local_error);
  /// Throws Error on every rank when this node's ranks' segments together exceed what the
  /// node can hold (memory and swap; /dev/shm's free space under MPICH) (collective).
  /// That every rank's node communicator (MPI_Comm_split_type) holds the ranks whose node
  /// communicators hold it: Error on every rank otherwise. @note Collective over comm_.
  void check_node_split() const;
  void check_memory() const;
  /// The shared-memory segment and the RMA window over the same pages (collective).
  void create_windows();
  /// Checks the memory model, writes the header, opens both lock_all epochs (local).
  void init_segment();
  /// shm_base_: every comm rank on this node mapped to its segment.
  void map_node_segments();
  void verify();
  void check_layouts_strict(std::uint64_t slot_fingerprint);
  void release() noexcept;
  /// The destructor runs during stack unwinding: says so on stderr before the collective
  /// free (which rank, which window, that the others must free it too), then aborts the
  /// job under WindowOptions::abort_on_unwind.
  void report_unwinding() const noexcept;
  /// The one freeing path (close(), the destructor, MPI_Finalize): stops the progress
  /// thread, completes abandoned reads, unlocks and frees both windows and both
  /// communicators, each handle exactly once (null afterwards even if its free failed).
  MpiStatus free_mpi() noexcept;
  void start_progress_thread();
  void stop_progress_thread() noexcept;
  [[nodiscard]] RosterEntry read_local_roster(int rank, const SegmentHeader& h) const;
  /// Publish found @p slot pinned: releases the pins of readers on this node whose process
  /// is gone (pid no longer running: they will never release them) once the slot has been
  /// pinned for 0.1 s. Whether the slot is free now.
  bool release_dead_readers_pins(std::size_t slot);
  /// Writes the roster copy of the published hyperparameters (under the roster's seqlock)
  /// when they differ from what it holds.
  void publish_roster_hyper();
  /// Seqlock reads of the roster blocks of @p ranks (all on other nodes, or under
  /// Transport::rma) over RMA, in the order given. Past the deadline: with @p mark_late the
  /// ranks that have not answered come back with answered = false, else TimeoutError.
  [[nodiscard]] std::vector<RosterEntry> read_remote_rosters(std::span<const int> ranks,
                                                             double timeout_seconds, bool mark_late,
                                                             Graveyard& graveyard) const;
  static void check_roster_timeout(double timeout_seconds);

  Comm comm_;
  Comm node_comm_;
  Win shm_win_;
  Win rma_win_;  ///< Empty on a communicator of one process (nobody reads it remotely).
  int rank_ = -1;
  int size_ = 0;
  std::uint64_t creation_ = 0;  // windows created on the caller's communicator before this one
  Layout layout_;
  WindowOptions options_;
  std::string site_;  // "file:line:column" of the creation: named in messages
  // Exceptions in flight when the window was created: more at destruction means that the
  // destructor runs because an exception unwinds this rank past the window.
  int uncaught_at_creation_ = std::uncaught_exceptions();
  bool abort_on_unwind_ = false;  // options_.abort_on_unwind or PARAMWIN_ABORT_ON_UNWIND
  SlotLayout slots_;
  ByteView segment_;                      // this rank's segment: header page + two slots
  std::vector<std::byte*> shm_base_;      // per comm rank: segment base if on this node
  std::vector<int> node_to_comm_;         // per node rank: its rank in comm_
  std::size_t host_slots_ = 2;            // slots in the host segment (Placement::host_slots)
  std::unique_ptr<Placement> placement_;  // chosen once, at construction
  Placement* gpu_ = nullptr;              // placement_ when it is the GPU placement
  std::uint64_t version_ = 0;
  bool rma_readers_ = false;
  AgentStatus status_;
  Hyperparameters hyper_;                    // published with every publish (slot and roster)
  std::vector<std::uint64_t> roster_hyper_;  // what the roster copy holds now
  std::jthread progress_thread_;
  Heartbeat heartbeat_;                   // set_status and publish beat
  std::unique_ptr<LivenessJudge> judge_;  // this rank's judgement of the others' liveness
  std::unique_ptr<PinBook> pin_book_;     // this process's pins on the others
  // Publish: since when (MPI_Wtime) the slot it would write has been found pinned (0: not).
  double pinned_since_ = 0.0;
  mutable Graveyard graveyard_;  // roster reads (const) abandon requests at deadlines too
  Scratch scratch_;
  std::atomic<bool> freed_at_finalize_{false};
  bool abandoned_ = false;  // abandon(): nothing left to free
  std::string finalize_error_;
};

}  // namespace paramwin::detail
