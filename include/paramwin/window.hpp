#pragma once
/// @file window.hpp
/// ParameterWindow: one agent's parameters exposed through MPI windows, published as
/// consistent snapshots and pulled (averaged) one-sidedly from donors; the typed adaptor of
/// Window (window_core.hpp).

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
#include "paramwin/error.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin {

/// One agent's parameter window: the typed adaptor of Window (every member but the
/// constructor and the live views is Window's). @p MemorySpace is where the caller's
/// parameters live: host-accessible spaces are read and written directly; other spaces are
/// staged through a host copy (Kokkos::deep_copy) on publish and pull, unless the window is a
/// device window (WindowOptions::memory = Memory::cuda, docs/gpu.md), which takes device
/// memory as it is.
///
/// Every rank of the communicator owns one agent slot: a roster header and a versioned
/// double buffer, in page-aligned memory shared with the ranks of its node and exposed
/// through an RMA window to the others. Not thread-safe: one thread per window.
template <class MemorySpace = Kokkos::HostSpace>
class ParameterWindow : public Window {
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
      : Window(comm, std::move(layout), options, site, staging()) {}

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
    return std::span<T>(static_cast<T*>(live_layer(i)), spec.count);
  }

  /// Exposure::live only: layer @p name's window memory as an unmanaged rank-1 Kokkos view.
  template <Element T>
  [[nodiscard]] Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
  live_view(std::string_view name) {
    std::span<T> s = live_span<T>(name);
    return Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(s.data(),
                                                                                        s.size());
  }

 private:
  static constexpr bool kHostSpace =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible;

  using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using SpaceBytes = Kokkos::View<char*, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  // The window's staging of MemorySpace: Kokkos::deep_copy between it and host memory.
  static HostStaging staging() {
    return HostStaging{.to_host =
                           [](void* to, const void* from, std::size_t bytes) {
                             Kokkos::deep_copy(HostBytes(static_cast<char*>(to), bytes),
                                               SpaceBytes(static_cast<char*>(
                                                              const_cast<void*>(from)),
                                                          bytes));
                           },
                       .from_host =
                           [](void* to, const void* from, std::size_t bytes) {
                             Kokkos::deep_copy(SpaceBytes(static_cast<char*>(to), bytes),
                                               HostBytes(static_cast<char*>(
                                                             const_cast<void*>(from)),
                                                         bytes));
                           },
                       .host_accessible = kHostSpace};
  }
};

}  // namespace paramwin
