#pragma once
/// @file detail/window_base.hpp
/// Host-memory implementation behind ParameterWindow (pimpl, non-template).

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
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
  WindowBase(MPI_Comm comm, Layout layout, const WindowOptions& options);
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
  [[nodiscard]] Transport transport_for(int rank) const;
  [[nodiscard]] std::uint64_t version() const;
  void continue_versions(std::uint64_t next);
  [[nodiscard]] std::size_t wire_bytes() const;
  [[nodiscard]] std::uint64_t fingerprint() const;

  PublishResult publish_host(std::span<const ConstLayerRef> layers, std::uint64_t stamp = 0);
  PullResult pull_host(std::span<const int> donors, std::span<const LayerRef> out,
                       const PullOptions& options);

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
