// Window: the one window class. Forwards to WindowImpl, guards moved-from use, and gives
// publish and pull the layers of the window's placement (placement.hpp: the caller's own, or
// host copies made with the HostStaging the window was created with).
#include "paramwin/window_core.hpp"

#include <Kokkos_Core.hpp>

#include <string>
#include <string_view>

#include "paramwin/error.hpp"
#include "window/window_impl.hpp"

namespace paramwin {

using detail::WindowImpl;

namespace {

using HostBytes = Kokkos::View<char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

void host_copy(void* to, const void* from, std::size_t bytes) {
  Kokkos::deep_copy(HostBytes(static_cast<char*>(to), bytes),
                    HostBytes(static_cast<char*>(const_cast<void*>(from)), bytes));
}

void check_bound(const Layout& layout, std::uint64_t layout_fingerprint, const char* op) {
  if (layout_fingerprint != layout.fingerprint()) {
    throw InvalidArgument(std::string("paramwin: ") + op +
                          ": the layers were bound to another layout than this window's");
  }
}

}  // namespace

HostStaging Window::host_staging() noexcept {
  return HostStaging{.to_host = &host_copy, .from_host = &host_copy, .host_accessible = true};
}

Window::Window(MPI_Comm comm, Layout layout, const WindowOptions& options,
               const std::source_location& site, HostStaging staging)
    : impl_(std::make_unique<WindowImpl>(comm, std::move(layout), options, site, staging)) {}

Window::Window(Window&& other) noexcept = default;

Window& Window::operator=(Window&& other) noexcept {
  if (this != &other) {
    impl_.reset();  // frees this window's MPI resources (collective) before taking over
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Window::~Window() = default;

bool Window::valid() const noexcept { return impl_ && !impl_->freed_at_finalize(); }

WindowImpl& Window::impl() const {
  if (!impl_) {
    throw Error("paramwin: use of a ParameterWindow that was moved from or closed");
  }
  if (impl_->freed_at_finalize()) {
    // The window was alive at MPI_Finalize, which freed its MPI resources and its memory.
    throw Error("paramwin: use of a ParameterWindow after MPI_Finalize (MPI_Finalize freed it)");
  }
  return *impl_;
}

void Window::close() {
  if (impl_) {
    std::unique_ptr<WindowImpl> doomed = std::move(impl_);
    doomed->close();
  }
}

void Window::abandon() noexcept {
  if (impl_) {
    impl_->abandon();
    impl_.reset();
  }
}

int Window::rank() const { return impl().rank(); }
int Window::size() const { return impl().size(); }
MPI_Comm Window::comm() const { return impl().comm(); }
const Layout& Window::layout() const { return impl().layout(); }
const WindowOptions& Window::options() const { return impl().options(); }
const std::string& Window::site() const { return impl().site(); }
Transport Window::transport_for(int rank) const { return impl().transport_for(rank); }
std::uint64_t Window::version() const { return impl().version(); }
void Window::continue_versions(std::uint64_t next) { impl().continue_versions(next); }

void Window::continue_from(Window& previous, std::string_view caller) {
  if (rank() != previous.rank() || size() != previous.size() ||
      fingerprint() != previous.fingerprint()) {
    throw InvalidArgument(std::string(caller) + ": the new window has rank " +
                          std::to_string(rank()) + " of " + std::to_string(size()) +
                          " and fingerprint " + std::to_string(fingerprint()) +
                          ", the agent's has rank " + std::to_string(previous.rank()) + " of " +
                          std::to_string(previous.size()) + " and fingerprint " +
                          std::to_string(previous.fingerprint()));
  }
  continue_versions(previous.version() + 1);
  set_status(previous.status());
  previous.abandon();
}
void Window::renew_incarnation() { impl().renew_incarnation(); }
std::size_t Window::wire_bytes() const { return impl().wire_bytes(); }
std::uint64_t Window::fingerprint() const { return impl().fingerprint(); }

PublishResult Window::publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp) {
  WindowImpl& w = impl();
  return w.publish(w.placement().stage_in(layers, w.layout()), stamp);
}

PublishResult Window::publish(const BoundLayers<ConstLayerRef>& layers, std::uint64_t stamp) {
  WindowImpl& w = impl();
  const std::span<const ConstLayerRef> refs = layers.refs();
  detail::check_contiguous(refs, w.layout());
  check_bound(w.layout(), layers.layout_fingerprint(), "publish");
  return w.publish(w.placement().stage_in(refs, w.layout()), stamp, true);
}

PublishResult Window::publish() { return impl().publish({}, 0); }

PullResult Window::pull(std::span<const int> donors, std::span<const LayerRef> out,
                        const PullOptions& options) {
  WindowImpl& w = impl();
  detail::Placement& placement = w.placement();
  PullResult result = w.pull(donors, placement.stage_out(out, w.layout()), options);
  placement.unstage(out);
  return result;
}

PullResult Window::pull(std::span<const int> donors, const BoundLayers<LayerRef>& out,
                        const PullOptions& options) {
  WindowImpl& w = impl();
  const std::span<const LayerRef> refs = out.refs();
  detail::check_contiguous(refs, w.layout());
  check_bound(w.layout(), out.layout_fingerprint(), "pull");
  detail::Placement& placement = w.placement();
  PullResult result = w.pull(donors, placement.stage_out(refs, w.layout()), options, true);
  placement.unstage(refs);
  return result;
}

void* Window::live_layer(std::size_t layer) const { return impl().live_layer(layer); }
void Window::progress() const { impl().progress(); }
std::size_t Window::pending_rma() const { return impl().pending_rma(); }

bool Window::has_rma_readers() const { return impl().has_rma_readers(); }
RosterEntry Window::roster(int rank, double timeout_seconds) const {
  return impl().roster(rank, timeout_seconds);
}
std::vector<RosterEntry> Window::roster_all(double timeout_seconds) const {
  return impl().roster_all(timeout_seconds);
}
void Window::set_status(const AgentStatus& status) { impl().set_status(status); }
const AgentStatus& Window::status() const { return impl().status(); }
void Window::set_hyperparameters(const Hyperparameters& hyper) {
  impl().set_hyperparameters(hyper);
}
const Hyperparameters& Window::hyperparameters() const { return impl().hyperparameters(); }

}  // namespace paramwin
