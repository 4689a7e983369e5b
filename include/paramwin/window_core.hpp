#pragma once
/// @file window_core.hpp
/// Window: the one window class (non-template, pimpl) that ParameterWindow<MemorySpace>,
/// Agent, GroupAgent and the LibTorch adapter hold and call.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/bound_layers.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin {

namespace detail {
class WindowImpl;   // NOLINT(cppcoreguidelines-virtual-class-destructor): final; window_impl.hpp
class WorkerReads;  // src/window/worker_reads.hpp: a second thread's reads of a window
}  // namespace detail

/// How a window copies the caller's layers to and from host memory when they are staged
/// (memory the host cannot read, or WindowOptions::stage_through_host): the copies of the
/// memory space the caller's parameters live in. The default is host memory;
/// ParameterWindow<MemorySpace> passes Kokkos::deep_copy of its space.
struct HostStaging {
  /// Copies @p bytes of the caller's memory at @p from into host memory at @p to.
  void (*to_host)(void* to, const void* from, std::size_t bytes) = nullptr;
  /// Copies @p bytes of host memory at @p from into the caller's memory at @p to.
  void (*from_host)(void* to, const void* from, std::size_t bytes) = nullptr;
  /// Whether the host reads the caller's memory space directly (then only
  /// WindowOptions::stage_through_host or a ref that is not host-accessible stages).
  bool host_accessible = true;
};

/// One agent's parameter window (see ParameterWindow, its typed adaptor, for the guarantees:
/// consistent snapshots, one-sided pulls, the roster). Every rank of the communicator owns one
/// agent slot. Move-only; a moved-from or closed window throws Error from every call but
/// valid(), destruction and assignment. Not thread-safe: one thread per window.
class Window {
 public:
  /// Creates the window over @p comm (duplicated); see ParameterWindow's constructor for the
  /// checks and @p site. @p staging: how layers are staged through host memory (host memory
  /// unless given). @note Collective over @p comm.
  Window(MPI_Comm comm, Layout layout, const WindowOptions& options = {},
         const std::source_location& site = std::source_location::current(),
         HostStaging staging = host_staging());
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  /// Moves the window; the source becomes empty (only destruction and assignment allowed).
  Window(Window&& other) noexcept;
  /// Frees this window (collectively, see close()) and takes over @p other's.
  Window& operator=(Window&& other) noexcept;
  /// Frees the window; never throws (see ParameterWindow's destructor).
  /// @note Collective over the window's communicator.
  ~Window();

  /// The staging of host memory: plain copies.
  [[nodiscard]] static HostStaging host_staging() noexcept;

  /// Frees the MPI windows and the communicator, reporting errors as exceptions.
  /// @note Collective over the window's communicator.
  void close();
  /// Gives the window up without freeing it, for a window whose communicator holds a dead
  /// rank (its collective free, and MPI_Finalize, would never return: docs/elastic.md).
  /// Local and immediate: stops the progress thread, makes no MPI call that could wait for
  /// another rank, and leaves the window empty (as moved from). Its host memory stays
  /// mapped until the process ends, so that other ranks' reads of it never fault; a device
  /// window's GPU slots are released (unmapped from the peers first). Never throws.
  void abandon() noexcept;
  /// False once moved from, closed, or freed by MPI_Finalize (a window still alive then).
  [[nodiscard]] bool valid() const noexcept;

  /// This rank's rank in the window's communicator.
  [[nodiscard]] int rank() const;
  /// Number of agents (ranks) in the window.
  [[nodiscard]] int size() const;
  /// The window's own duplicate of the communicator it was created on.
  [[nodiscard]] MPI_Comm comm() const;
  /// This rank's layout.
  [[nodiscard]] const Layout& layout() const;
  /// Options the window was created with.
  [[nodiscard]] const WindowOptions& options() const;
  /// The window's name (WindowOptions::name; empty if unnamed).
  [[nodiscard]] const std::string& name() const { return options().name; }
  /// Where the window was created ("file:line:column", the constructor's @p site).
  [[nodiscard]] const std::string& site() const;
  /// Transport a pull from @p rank uses (shm or rma).
  [[nodiscard]] Transport transport_for(int rank) const;
  /// Number of completed publishes of this rank.
  [[nodiscard]] std::uint64_t version() const;
  /// For a checkpoint resume: the next publish gets version @p next if that is ahead of
  /// version() + 1 (versions never go backwards), so that a resumed population numbers its
  /// publishes as the uninterrupted one did.
  void continue_versions(std::uint64_t next);
  /// Makes this window (a new one over a new communicator: a membership epoch,
  /// docs/elastic.md) the successor of @p previous, an agent's window until now: this one
  /// continues its versions and status, and @p previous is abandoned (never freed: it may
  /// hold a dead rank). InvalidArgument (nothing changed), its message starting with
  /// @p caller, when the rank, size or layout differ. Local.
  void continue_from(Window& previous, std::string_view caller);
  /// A new life of this rank's agent in the window (an elastic process re-entering a slot of
  /// a standing window): draws a new RosterEntry::liveness incarnation, so that readers judge
  /// the process afresh, forgetting what they had concluded about the previous one. Local.
  void renew_incarnation();
  /// The fingerprint other agents see in this agent's roster: layout and wire format.
  /// Donors are compatible when their RosterEntry::fingerprint equals it.
  [[nodiscard]] std::uint64_t fingerprint() const;
  /// Bytes one snapshot of this rank occupies in wire format.
  [[nodiscard]] std::size_t wire_bytes() const;

  /// Publishes the caller's parameters as the next version: one pass over them, never waits
  /// for readers. Skips (published == false) only if a reader pinned the slot it would
  /// overwrite. Layers bind by position (unnamed refs) or by name (named refs).
  /// @p stamp is stored with this snapshot and returned by every pull that reads it
  /// (DonorRead::stamp): e.g. the training iteration, or the epoch that ties together the
  /// shards one agent group publishes on several windows (GroupAgent).
  PublishResult publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp = 0);
  /// Publishes layers bound once to this window's layout (bind(); the agents' way): they are
  /// not bound again. InvalidArgument if they were bound to another layout.
  PublishResult publish(const BoundLayers<ConstLayerRef>& layers, std::uint64_t stamp = 0);
  /// @copydoc publish(const BoundLayers<ConstLayerRef>&, std::uint64_t)
  /// Sets the hyperparameters first (see the span form).
  PublishResult publish(const BoundLayers<ConstLayerRef>& layers, const Hyperparameters& hyper,
                        std::uint64_t stamp = 0) {
    set_hyperparameters(hyper);
    return publish(layers, stamp);
  }
  /// @copydoc publish(std::span<const ConstLayerRef>, std::uint64_t)
  PublishResult publish(std::initializer_list<ConstLayerRef> layers, std::uint64_t stamp = 0) {
    return publish(std::span<const ConstLayerRef>(layers.begin(), layers.size()), stamp);
  }
  /// Sets the hyperparameters (set_hyperparameters) and publishes them with @p layers in
  /// one snapshot: a pull reads both of the same version (DonorRead::hyper).
  PublishResult publish(std::span<const ConstLayerRef> layers, const Hyperparameters& hyper,
                        std::uint64_t stamp = 0) {
    set_hyperparameters(hyper);
    return publish(layers, stamp);
  }
  /// @copydoc publish(std::span<const ConstLayerRef>, const Hyperparameters&, std::uint64_t)
  PublishResult publish(std::initializer_list<ConstLayerRef> layers, const Hyperparameters& hyper,
                        std::uint64_t stamp = 0) {
    return publish(std::span<const ConstLayerRef>(layers.begin(), layers.size()), hyper, stamp);
  }
  /// Exposure::live only: advances the version of the parameters that already live in the
  /// window (see ParameterWindow::live_span); copies nothing.
  PublishResult publish();

  /// Sets the hyperparameter values every later publish carries (until set again). @p hyper
  /// must have this layout's declarations (InvalidArgument naming the difference otherwise).
  void set_hyperparameters(const Hyperparameters& hyper);
  /// The hyperparameter values the next publish carries (zeros until set; empty when the
  /// layout declares none).
  [[nodiscard]] const Hyperparameters& hyperparameters() const;

  /// Reads the latest complete snapshot of every donor and reduces it into @p out (mean,
  /// weights, momentum). Transactional: on any exception @p out is unchanged. Each donor's
  /// hyperparameters of the version read come back in DonorRead::hyper.
  PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                  const PullOptions& options = {});
  /// Pulls into layers bound once to this window's layout (bind(); the agents' way): they
  /// are not bound again. InvalidArgument if they were bound to another layout.
  PullResult pull(std::span<const int> donors, const BoundLayers<LayerRef>& out,
                  const PullOptions& options = {});
  /// @copydoc pull(std::span<const int>, std::span<const LayerRef>, const PullOptions&)
  PullResult pull(std::initializer_list<int> donors, std::initializer_list<LayerRef> out,
                  const PullOptions& options = {}) {
    return pull(std::span<const int>(donors.begin(), donors.size()),
                std::span<const LayerRef>(out.begin(), out.size()), options);
  }
  /// @copydoc pull(std::span<const int>, std::span<const LayerRef>, const PullOptions&)
  PullResult pull(std::span<const int> donors, std::initializer_list<LayerRef> out,
                  const PullOptions& options = {}) {
    return pull(donors, std::span<const LayerRef>(out.begin(), out.size()), options);
  }

  /// Exposure::live only: the window memory of layer @p layer (by position).
  [[nodiscard]] void* live_layer(std::size_t layer) const;

  /// Whether another rank may read this rank's snapshots over RMA (a rank on another node,
  /// or any rank created with Transport::rma): then this rank must let MPI progress for
  /// them (progress(), WindowOptions::progress_thread; Agent::step does it once per step).
  [[nodiscard]] bool has_rma_readers() const;
  /// Lets MPI progress once, serving RMA readers of this rank (on MPICH's ch4:ucx an MPI_Get
  /// waits until its target enters MPI). Cheap: place it in a training loop that otherwise
  /// makes no MPI call, or use WindowOptions::progress_thread.
  void progress() const;
  /// RMA reads (and pin releases) that a pull abandoned at its deadline
  /// (PullOptions::timeout_seconds) and that have not completed yet; they complete once the
  /// donor enters MPI again, and at the latest when the window is freed.
  [[nodiscard]] std::size_t pending_rma() const;

  /// Reads one agent's roster (one-sided; @p rank may be this rank): only that agent's block,
  /// so an unreachable third rank never delays it. Same-node agents are read from shared
  /// memory (never waits); others over RMA, which on MPICH's ch4:ucx completes only when
  /// @p rank enters MPI. @p timeout_seconds > 0 bounds that wait: past it TimeoutError (the
  /// read completes in the background, as an abandoned pull's does); 0: no bound. A read
  /// that fails in MPI (a process gone on another host) is TimeoutError too, at once.
  [[nodiscard]] RosterEntry roster(int rank, double timeout_seconds = 0.0) const;
  /// Reads every agent's roster (one-sided, no collective), indexed by rank; the RMA reads of
  /// all remote agents are pipelined together. @p timeout_seconds > 0 bounds the wait: the
  /// agents that have not answered by then come back with RosterEntry::answered == false
  /// (their reads complete in the background); the others are read whole. 0: no bound.
  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds = 0.0) const;
  /// Sets this agent's own roster fields (iteration, age, metric, generation, state).
  void set_status(const AgentStatus& status);
  /// This agent's own roster fields as last set.
  [[nodiscard]] const AgentStatus& status() const;

 private:
  friend class detail::WorkerReads;  // reads from a worker thread with their own buffers
  [[nodiscard]] detail::WindowImpl& impl() const;

  std::unique_ptr<detail::WindowImpl> impl_;  // holds the placement (and its staging buffers)
};

}  // namespace paramwin
