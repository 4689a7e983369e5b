#pragma once
// Placement: where the caller's parameters live, the one seam of the window layer between the
// protocol (seqlock, pins, roster: publish.cpp, pull*.cpp, roster.cpp) and the memory kind.
// A window holds one placement, chosen once at creation (make_placement) from
// WindowOptions::memory, WindowOptions::stage_through_host and the caller's HostStaging:
//   - host in place (host_placement.cpp): the window reads and writes the caller's host
//     memory itself; no copies;
//   - staged through host (host_placement.cpp): the one staging implementation: the caller's
//     layers are copied into reused host buffers with the copies of their memory kind
//     (HostStaging: Kokkos::deep_copy of a ParameterWindow's space, the LibTorch adapter's
//     tensor copies), published from there, pulled into them and copied back;
//   - the GPU placement (make_gpu_placement, in its own file beside this one): its own slots
//     on the GPU, shared within the node, written by its publish; its pull side is the GPU
//     reader of the pull engine.
// A new memory kind (ROCm, pinned host) is one new placement file (CONTRIBUTING.md).

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpi/handles.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/window_core.hpp"
#include "window/segment.hpp"

namespace paramwin::detail {

/// What a placement is given when the window's segments exist (Placement::create).
struct PlacementSetup {
  MPI_Comm comm = MPI_COMM_NULL;       ///< the window's communicator
  MPI_Comm node_comm = MPI_COMM_NULL;  ///< its ranks on this node
  std::span<const int> node_to_comm;   ///< per node rank: its rank in comm
  int rank = -1;
  int size = 0;
  const WindowOptions* options = nullptr;
  const SlotLayout* slots = nullptr;
  const std::string* site = nullptr;  ///< "file:line:column" of the window's creation
};

/// One publish's slot write (Placement::write_slot).
struct SlotWrite {
  std::span<const ConstLayerRef> layers;  ///< what the placement gave the window (stage_in)
  std::span<const std::size_t> order;     ///< layout position -> index into layers
  const SlotLayout* slots = nullptr;
  std::span<const std::uint64_t> hyper;  ///< the hyperparameter words this snapshot carries
  std::uint64_t version = 0;             ///< the version being published
  bool live = false;                     ///< Exposure::live: the slot is the trainer's memory
  std::byte* host_slot = nullptr;        ///< its slot in the host segment; nullptr: none
};

/// Where the caller's parameters live. Owned by one window; not thread-safe.
class Placement {
 public:
  Placement() = default;
  virtual ~Placement() = default;
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;
  Placement(Placement&&) = delete;
  Placement& operator=(Placement&&) = delete;

  /// Throws InvalidArgument when @p options do not suit this placement (before creation,
  /// agreed on every rank by the window).
  virtual void check_options(const WindowOptions& options) const { (void)options; }
  /// Slots the host segment holds (the protocol's header page always lives there).
  [[nodiscard]] virtual std::size_t host_slots(Exposure exposure, bool rma_readers) const {
    (void)rma_readers;
    return slot_count(exposure);
  }
  /// How a segment without host slots holds its snapshots (the memory check's message).
  [[nodiscard]] virtual const char* slots_elsewhere() const noexcept { return "nowhere"; }
  /// Makes what the placement needs once the segments are mapped (collective over
  /// setup.comm; throws on every rank alike).
  virtual void create(const PlacementSetup& setup) { (void)setup; }
  /// Frees what create() made (collective over the node; never throws).
  virtual MpiStatus free() noexcept { return {}; }
  /// After MPI_Finalize: drops what create() made without MPI calls.
  virtual void abandon() noexcept {}

  /// Throws InvalidArgument, naming the layer, unless every layer of @p refs (in layout
  /// order through @p order) is memory this placement takes.
  virtual void check_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                            std::span<const std::size_t> order, const char* operation) const;
  virtual void check_layers(const Layout& layout, std::span<const LayerRef> refs,
                            std::span<const std::size_t> order, const char* operation) const;

  /// Publish side: the layers the window reads for @p layers (the caller's own, or host
  /// copies holding their values). InvalidArgument for a view that is not contiguous.
  /// Valid until the next call.
  [[nodiscard]] virtual std::span<const ConstLayerRef> stage_in(
      std::span<const ConstLayerRef> layers, const Layout& layout);
  /// Pull side: the layers a pull writes for @p out, holding @p out's values (momentum); a
  /// successful pull then calls unstage(@p out). Valid until the next call.
  [[nodiscard]] virtual std::span<const LayerRef> stage_out(std::span<const LayerRef> out,
                                                            const Layout& layout);
  /// Copies what the pull wrote into stage_out()'s layers back into @p out (nothing when
  /// they were @p out itself).
  virtual void unstage(std::span<const LayerRef> out) { (void)out; }

  /// Writes one snapshot (layers, then the hyperparameter words) into the slot of
  /// @p w.version; returns the finiteness record (0, or 1 + the first layer holding NaN or
  /// infinity; live: kUnknownFinite). The default writes the host slot (kernels.hpp).
  virtual std::uint64_t write_slot(const SlotWrite& w);
};

/// The placement of a window created with @p options whose caller's memory is copied with
/// @p staging. Never throws for bad options (check_options() says what is wrong).
[[nodiscard]] std::unique_ptr<Placement> make_placement(const WindowOptions& options,
                                                        const HostStaging& staging);
/// The GPU placement (WindowOptions::memory other than Memory::host).
[[nodiscard]] std::unique_ptr<Placement> make_gpu_placement();

/// InvalidArgument for a view that is not contiguous (staging copies bytes, which would hide
/// a strided layout): named by its name, else its position and the layer it binds to.
template <class Ref>
void check_contiguous(std::span<const Ref> refs, const Layout& layout);

/// A host window's check of its layers (every host placement's check_layers): once this
/// process created a window of GPU memory, layers declared as host memory must not be GPU
/// memory (defined beside that placement, which alone can tell).
void check_host_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                       std::span<const std::size_t> order, const char* operation);
void check_host_layers(const Layout& layout, std::span<const LayerRef> refs,
                       std::span<const std::size_t> order, const char* operation);

}  // namespace paramwin::detail
