#pragma once
/// @file detail/window_base.hpp
/// Host-memory implementation behind ParameterWindow (pimpl, non-template).

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::detail {

class WindowImpl;  // NOLINT(cppcoreguidelines-virtual-class-destructor): final; window_impl.hpp

/// Everything a ParameterWindow does on host memory. Move-only; see ParameterWindow.
class WindowBase {
 public:
  WindowBase(MPI_Comm comm, Layout layout, const WindowOptions& options,
             const std::source_location& site);
  WindowBase(const WindowBase&) = delete;
  WindowBase& operator=(const WindowBase&) = delete;
  WindowBase(WindowBase&& other) noexcept;
  WindowBase& operator=(WindowBase&& other) noexcept;
  ~WindowBase();

  void close();
  /// False once moved from, closed, or freed by MPI_Finalize (a window still alive then).
  [[nodiscard]] bool valid() const noexcept;

  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  [[nodiscard]] MPI_Comm comm() const;
  [[nodiscard]] const Layout& layout() const;
  [[nodiscard]] const WindowOptions& options() const;
  [[nodiscard]] const std::string& site() const;
  [[nodiscard]] Transport transport_for(int rank) const;
  [[nodiscard]] std::uint64_t version() const;
  void continue_versions(std::uint64_t next);
  [[nodiscard]] std::size_t wire_bytes() const;
  [[nodiscard]] std::uint64_t fingerprint() const;

  PublishResult publish_host(std::span<const ConstLayerRef> layers, std::uint64_t stamp = 0);
  PullResult pull_host(std::span<const int> donors, std::span<const LayerRef> out,
                       const PullOptions& options);
  /// publish_host of layers already in layout order and checked (BoundLayers): not bound
  /// again. @p layout_fingerprint: the layout they were bound to (InvalidArgument unless it
  /// is this window's).
  PublishResult publish_bound(std::span<const ConstLayerRef> ordered,
                              std::uint64_t layout_fingerprint, std::uint64_t stamp = 0);
  /// pull_host into layers already in layout order and checked (see publish_bound).
  PullResult pull_bound(std::span<const int> donors, std::span<const LayerRef> ordered,
                        std::uint64_t layout_fingerprint, const PullOptions& options);

  [[nodiscard]] void* live_layer(std::size_t layer) const;
  void progress() const;
  [[nodiscard]] std::size_t pending_rma() const;

  [[nodiscard]] bool has_rma_readers() const;
  [[nodiscard]] RosterEntry roster(int rank, double timeout_seconds = 0.0) const;
  [[nodiscard]] std::vector<RosterEntry> roster_all(double timeout_seconds = 0.0) const;
  void set_status(const AgentStatus& status);
  [[nodiscard]] const AgentStatus& status() const;
  void set_hyperparameters(const Hyperparameters& hyper);
  [[nodiscard]] const Hyperparameters& hyperparameters() const;

 private:
  [[nodiscard]] WindowImpl& impl() const;
  std::unique_ptr<WindowImpl> impl_;
};

}  // namespace paramwin::detail
