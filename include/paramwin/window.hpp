#pragma once
/// @file window.hpp
/// ParameterWindow: one agent's parameters exposed through MPI windows, published as
/// consistent snapshots and pulled (averaged) one-sidedly from donors.

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "paramwin/bound_layers.hpp"
#include "paramwin/detail/window_base.hpp"
#include "paramwin/error.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin {

/// One agent's parameter window. @p MemorySpace is where the caller's parameters live:
/// host-accessible spaces are read and written directly; other spaces are staged through
/// a host copy (Kokkos::deep_copy) on publish and pull, unless the window is a device window
/// (WindowOptions::memory = Memory::cuda, docs/gpu.md), which takes device memory as it is.
///
/// Every rank of the communicator owns one agent slot: a roster header and a versioned
/// double buffer, in page-aligned memory shared with the ranks of its node and exposed
/// through an RMA window to the others. Not thread-safe: one thread per window.
template <class MemorySpace = Kokkos::HostSpace>
class ParameterWindow {
 public:
  using memory_space = MemorySpace;  ///< where the caller's layers live

  /// Creates the window over @p comm (duplicated). Before allocating anything it checks,
  /// throwing on every rank: that the options every rank must share and the window's
  /// identity agree (InvalidArgument; see WindowOptions and WindowOptions::name), that the
  /// layouts agree (strict mode: LayoutMismatch naming the differing layer) and that the
  /// node can hold its ranks' segments (Error naming the bytes needed and the memory there
  /// is). Then it verifies that remote reads return the owner's bytes (VerificationError
  /// otherwise).
  ///
  /// An unnamed window cannot be created while this process holds a live unnamed window with
  /// the same layout (and wire format) over the same processes: whatever the call path
  /// (std::optional::emplace, std::make_unique, a container, Python), two such windows
  /// created in opposite orders on two ranks would pair crosswise, so the second one throws
  /// InvalidArgument on every rank before anything is allocated, naming the live one ("name
  /// your windows (WindowOptions::name)"). Under LayoutCheck::per_donor any two live unnamed
  /// windows over the same processes are refused. See docs/design.md, "Options and identity".
  ///
  /// @p site is where the window is created (leave the default: the caller's line). Error
  /// messages and the destructor's diagnostic name it, and unnamed windows created at
  /// different places at the same position on different ranks throw InvalidArgument on every
  /// rank naming both places; it does not count for a named window. Through a wrapper it is
  /// the wrapper's line (the standard library's, the bindings'); wrappers of this library
  /// forward their own caller's site (Agent, GroupAgent).
  /// @note Collective over @p comm.
  ParameterWindow(MPI_Comm comm, Layout layout, const WindowOptions& options = {},
                  const std::source_location& site = std::source_location::current())
      : base_(comm, std::move(layout), options, site) {}

  ParameterWindow(const ParameterWindow&) = delete;
  ParameterWindow& operator=(const ParameterWindow&) = delete;
  /// Moves the window; the source becomes empty (only destruction and assignment allowed).
  ParameterWindow(ParameterWindow&&) noexcept = default;
  /// Frees this window (collectively, see close()) and takes over @p other's.
  ParameterWindow& operator=(ParameterWindow&&) noexcept = default;
  /// Frees the window. Never throws; errors are swallowed (call close() to see them).
  /// When an exception is unwinding this rank past the window (std::uncaught_exceptions()
  /// above its count at creation), it first prints to stderr which window (name or creation
  /// site) and which rank, and that the other ranks must free it too before this rank goes
  /// on; with WindowOptions::abort_on_unwind (or PARAMWIN_ABORT_ON_UNWIND=1) it then aborts
  /// the job (MPI_Abort) instead of waiting.
  /// @note Collective over the window's communicator.
  ~ParameterWindow() = default;

  /// Frees the MPI windows and the communicator, reporting errors as exceptions.
  /// @note Collective over the window's communicator.
  void close() { base_.close(); }
  /// False once moved from or closed.
  [[nodiscard]] bool valid() const noexcept { return base_.valid(); }

  /// This rank's rank in the window's communicator.
  [[nodiscard]] int rank() const { return base_.rank(); }
  /// Number of agents (ranks) in the window.
  [[nodiscard]] int size() const { return base_.size(); }
  /// The window's own duplicate of the communicator it was created on.
  [[nodiscard]] MPI_Comm comm() const { return base_.comm(); }
  /// This rank's layout.
  [[nodiscard]] const Layout& layout() const { return base_.layout(); }
  /// Options the window was created with.
  [[nodiscard]] const WindowOptions& options() const { return base_.options(); }
  /// The window's name (WindowOptions::name; empty if unnamed).
  [[nodiscard]] const std::string& name() const { return base_.options().name; }
  /// Where the window was created ("file:line:column", the constructor's @p site).
  [[nodiscard]] const std::string& site() const { return base_.site(); }
  /// Transport a pull from @p rank uses (shm or rma).
  [[nodiscard]] Transport transport_for(int rank) const { return base_.transport_for(rank); }
  /// Number of completed publishes of this rank.
  [[nodiscard]] std::uint64_t version() const { return base_.version(); }
  /// For a checkpoint resume: the next publish gets version @p next if that is ahead of
  /// version() + 1 (versions never go backwards), so that a resumed population numbers its
  /// publishes as the uninterrupted one did.
  void continue_versions(std::uint64_t next) { base_.continue_versions(next); }
  /// The fingerprint other agents see in this agent's roster: layout and wire format.
  /// Donors are compatible when their RosterEntry::fingerprint equals it.
  [[nodiscard]] std::uint64_t fingerprint() const { return base_.fingerprint(); }
  /// Bytes one snapshot of this rank occupies in wire format.
  [[nodiscard]] std::size_t wire_bytes() const { return base_.wire_bytes(); }

  /// Publishes the caller's parameters as the next version: one pass over them, never waits
  /// for readers. Skips (published == false) only if a reader pinned the slot it would
  /// overwrite. Layers bind by position (unnamed refs) or by name (named refs).
  /// @p stamp is stored with this snapshot and returned by every pull that reads it
  /// (DonorRead::stamp): e.g. the training iteration, or the epoch that ties together the
  /// shards one agent group publishes on several windows (GroupAgent).
  PublishResult publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp = 0) {
    if (!needs_staging(layers)) {
      return base_.publish_host(layers, stamp);
    }
    return base_.publish_host(staged_in(layers), stamp);
  }
  /// Publishes layers bound once to this window's layout (bind(); the agents' way): they are
  /// not bound again. InvalidArgument if they were bound to another layout.
  PublishResult publish(const BoundLayers<ConstLayerRef>& layers, std::uint64_t stamp = 0) {
    const std::span<const ConstLayerRef> refs = layers.refs();
    if (!needs_staging(refs)) {
      return base_.publish_bound(refs, layers.layout_fingerprint(), stamp);
    }
    return base_.publish_bound(staged_in(refs), layers.layout_fingerprint(), stamp);
  }
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

  /// Sets the hyperparameter values every later publish carries (until set again). @p hyper
  /// must have this layout's declarations (InvalidArgument naming the difference otherwise).
  void set_hyperparameters(const Hyperparameters& hyper) { base_.set_hyperparameters(hyper); }
  /// The hyperparameter values the next publish carries (zeros until set; empty when the
  /// layout declares none).
  [[nodiscard]] const Hyperparameters& hyperparameters() const { return base_.hyperparameters(); }

  /// Exposure::live only: advances the version of the parameters that already live in the
  /// window (see live_span); copies nothing.
  PublishResult publish() { return base_.publish_host({}); }

  /// Exposure::live only: the window memory of layer @p name, to be used as the trainer's
  /// own parameters (readers see it as it is, with no snapshot guarantee). @p T must be the
  /// layer's element type.
  template <Element T>
  [[nodiscard]] std::span<T> live_span(std::string_view name) {
    static_assert(kHostSpace, "live_span needs a host-accessible memory space");
    const std::size_t i = layout().index_of(name);
    const LayerSpec& spec = layout()[i];
    if (dtype_of<T>::value != spec.dtype) {
      throw InvalidArgument("paramwin: live_span<" + std::string(dtype_name(dtype_of<T>::value)) +
                            ">: layer " + spec.describe() + " has another dtype");
    }
    return std::span<T>(static_cast<T*>(base_.live_layer(i)), spec.count);
  }

  /// Exposure::live only: layer @p name's window memory as an unmanaged rank-1 Kokkos view.
  template <Element T>
  [[nodiscard]] Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
  live_view(std::string_view name) {
    std::span<T> s = live_span<T>(name);
    return Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(s.data(),
                                                                                        s.size());
  }

  /// Whether another rank may read this rank's snapshots over RMA (a rank on another node,
  /// or any rank created with Transport::rma): then this rank must let MPI progress for
  /// them (progress(), WindowOptions::progress_thread; Agent::step does it once per step).
  [[nodiscard]] bool has_rma_readers() const { return base_.has_rma_readers(); }

  /// Lets MPI progress once, serving RMA readers of this rank (on MPICH's ch4:ucx an MPI_Get
  /// waits until its target enters MPI). Cheap: place it in a training loop that otherwise
  /// makes no MPI call, or use WindowOptions::progress_thread.
  void progress() const { base_.progress(); }

  /// RMA reads (and pin releases) that a pull abandoned at its deadline
  /// (PullOptions::timeout_seconds) and that have not completed yet; they complete once the
  /// donor enters MPI again, and at the latest when the window is freed.
  [[nodiscard]] std::size_t pending_rma() const { return base_.pending_rma(); }

  /// Reads the latest complete snapshot of every donor and reduces it into @p out (mean,
  /// weights, momentum). Transactional: on any exception @p out is unchanged. Each donor's
  /// hyperparameters of the version read come back in DonorRead::hyper.
  PullResult pull(std::span<const int> donors, std::span<const LayerRef> out,
                  const PullOptions& options = {}) {
    if (!needs_staging(out)) {
      return base_.pull_host(donors, out, options);
    }
    PullResult result = base_.pull_host(donors, staged_out(out), options);
    unstage(out);
    return result;
  }
  /// Pulls into layers bound once to this window's layout (bind(); the agents' way): they
  /// are not bound again. InvalidArgument if they were bound to another layout.
  PullResult pull(std::span<const int> donors, const BoundLayers<LayerRef>& out,
                  const PullOptions& options = {}) {
    const std::span<const LayerRef> refs = out.refs();
    if (!needs_staging(refs)) {
      return base_.pull_bound(donors, refs, out.layout_fingerprint(), options);
    }
    PullResult result =
        base_.pull_bound(donors, staged_out(refs), out.layout_fingerprint(), options);
    unstage(refs);
    return result;
  }
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

  /// Reads one agent's roster (one-sided; @p rank may be this rank): only that agent's block,
  /// so an unreachable third rank never delays it. Same-node agents are read from shared
  /// memory (never waits); others over RMA, which on MPICH's ch4:ucx completes only when
  /// @p rank enters MPI. @p timeout_seconds > 0 bounds that wait: past it TimeoutError (the
  /// read completes in the background, as an abandoned pull's does); 0: no bound.
  [[nodiscard]] RosterEntry roster(int rank, double timeout_seconds = 0.0) const {
    return base_.roster(rank, timeout_seconds);
  }
  /// Reads every agent's roster (one-sided, no collective), indexed by rank; the RMA reads of
  /// all remote agents are pipelined together. @p timeout_seconds > 0 bounds the wait: the
  /// agents that have not answered by then come back with RosterEntry::answered == false
  /// (their reads complete in the background); the others are read whole. 0: no bound.
  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds = 0.0) const {
    return base_.roster_all(timeout_seconds);
  }
  /// Sets this agent's own roster fields (iteration, age, metric, generation, state).
  void set_status(const AgentStatus& status) { base_.set_status(status); }
  /// This agent's own roster fields as last set.
  [[nodiscard]] const AgentStatus& status() const { return base_.status(); }

 private:
  static constexpr bool kHostSpace =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

  template <class Ref>
  bool needs_staging(std::span<const Ref> refs) const {
    bool staging = base_.valid() && base_.options().stage_through_host;
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const Ref& r = refs[i];
      if (!r.contiguous()) {
        // Checked here too: staging copies bytes, which would hide a strided layout. An
        // unnamed ref is named by its position and the layer it binds to.
        // (Appends, not "literal" + string: GCC 12's -Wrestrict misfires on the latter.)
        std::string msg = "paramwin: layer ";
        if (!r.name().empty()) {
          msg.append("'").append(r.name()).append("'");
        } else {
          msg.append("#").append(std::to_string(i));
          if (base_.valid() && i < base_.layout().size()) {
            msg.append(" (").append(base_.layout()[i].name).append(")");
          }
        }
        throw InvalidArgument(msg.append(" is a view that is not contiguous"));
      }
      staging = staging || !r.host_accessible() || !kHostSpace;
    }
    // A device window (Memory::cuda) takes device memory as it is (it checks each layer).
    if (base_.valid() && base_.options().memory == Memory::cuda) {
      return false;
    }
    if (staging && !Kokkos::is_initialized()) {
      throw Error("paramwin: staging parameters through host memory needs Kokkos to be "
                  "initialized (Kokkos::ScopeGuard or Kokkos::initialize)");
    }
    return staging;
  }

  using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using SpaceBytes = Kokkos::View<char*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  static std::size_t bytes_of(DType dtype, std::size_t count) { return dtype_size(dtype) * count; }

  static ConstLayerRef stage_in(const ConstLayerRef& ref, std::vector<char>& buf) {
    const std::size_t bytes = bytes_of(ref.dtype(), ref.count());
    buf.resize(bytes);
    if (bytes != 0) {
      Kokkos::deep_copy(HostBytes(buf.data(), bytes),
                        SpaceBytes(static_cast<char*>(const_cast<void*>(ref.data())), bytes));
    }
    // The staged copy keeps the view's shape and order: binding checks them after staging.
    return ref.with_data(buf.data());
  }

  // Host copies of @p layers (device memory, or WindowOptions::stage_through_host).
  std::vector<ConstLayerRef> staged_in(std::span<const ConstLayerRef> layers) {
    std::vector<ConstLayerRef> host;
    host.reserve(layers.size());
    staging_.resize(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      host.push_back(stage_in(layers[i], staging_[i]));
    }
    return host;
  }

  // Host copies of @p out for a pull to write; unstage() copies them back.
  std::vector<LayerRef> staged_out(std::span<const LayerRef> out) {
    std::vector<LayerRef> host;
    host.reserve(out.size());
    staging_.resize(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      // The current values are needed for momentum; copying them in also keeps the staged
      // output identical to the caller's memory if the pull fails.
      ConstLayerRef staged = stage_in(out[i].as_const(), staging_[i]);
      host.push_back(out[i].with_data(const_cast<void*>(staged.data())));
    }
    return host;
  }

  void unstage(std::span<const LayerRef> out) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      stage_out(staging_[i], out[i]);
    }
  }

  static void stage_out(std::vector<char>& buf, const LayerRef& ref) {
    if (!buf.empty()) {
      Kokkos::deep_copy(SpaceBytes(static_cast<char*>(ref.data()), buf.size()),
                        HostBytes(buf.data(), buf.size()));
    }
  }

  detail::WindowBase base_;
  std::vector<std::vector<char>> staging_;
};

}  // namespace paramwin
