// Window: the one window class. Forwards to WindowImpl, guards moved-from use, and stages
// layers the host cannot read (or WindowOptions::stage_through_host) through host copies.
#include "paramwin/window_core.hpp"

#include <Kokkos_Core.hpp>

#include <cstring>
#include <string>

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
    : impl_(std::make_unique<WindowImpl>(comm, std::move(layout), options, site)),
      staging_(staging) {}

Window::Window(Window&& other) noexcept = default;

Window& Window::operator=(Window&& other) noexcept {
  if (this != &other) {
    impl_.reset();  // frees this window's MPI resources (collective) before taking over
    impl_ = std::move(other.impl_);
    staging_ = other.staging_;
    staged_ = std::move(other.staged_);
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

int Window::rank() const { return impl().rank(); }
int Window::size() const { return impl().size(); }
MPI_Comm Window::comm() const { return impl().comm(); }
const Layout& Window::layout() const { return impl().layout(); }
const WindowOptions& Window::options() const { return impl().options(); }
const std::string& Window::site() const { return impl().site(); }
Transport Window::transport_for(int rank) const { return impl().transport_for(rank); }
std::uint64_t Window::version() const { return impl().version(); }
void Window::continue_versions(std::uint64_t next) { impl().continue_versions(next); }
std::size_t Window::wire_bytes() const { return impl().wire_bytes(); }
std::uint64_t Window::fingerprint() const { return impl().fingerprint(); }

PublishResult Window::publish(std::span<const ConstLayerRef> layers, std::uint64_t stamp) {
  if (!needs_staging(layers)) return impl().publish(layers, stamp);
  return impl().publish(staged_in(layers), stamp);
}

PublishResult Window::publish(const BoundLayers<ConstLayerRef>& layers, std::uint64_t stamp) {
  const std::span<const ConstLayerRef> refs = layers.refs();
  const bool staging = needs_staging(refs);
  check_bound(impl().layout(), layers.layout_fingerprint(), "publish");
  if (!staging) return impl().publish(refs, stamp, true);
  return impl().publish(staged_in(refs), stamp, true);
}

PublishResult Window::publish() { return impl().publish({}, 0); }

PullResult Window::pull(std::span<const int> donors, std::span<const LayerRef> out,
                        const PullOptions& options) {
  if (!needs_staging(out)) return impl().pull(donors, out, options);
  PullResult result = impl().pull(donors, staged_out(out), options);
  unstage(out);
  return result;
}

PullResult Window::pull(std::span<const int> donors, const BoundLayers<LayerRef>& out,
                        const PullOptions& options) {
  const std::span<const LayerRef> refs = out.refs();
  const bool staging = needs_staging(refs);
  check_bound(impl().layout(), out.layout_fingerprint(), "pull");
  if (!staging) return impl().pull(donors, refs, options, true);
  PullResult result = impl().pull(donors, staged_out(refs), options, true);
  unstage(refs);
  return result;
}

template <class Ref>
bool Window::needs_staging(std::span<const Ref> refs) const {
  bool staging = valid() && impl_->options().stage_through_host;
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
        if (valid() && i < impl_->layout().size()) {
          msg.append(" (").append(impl_->layout()[i].name).append(")");
        }
      }
      throw InvalidArgument(msg.append(" is a view that is not contiguous"));
    }
    staging = staging || !r.host_accessible() || !staging_.host_accessible;
  }
  // A device window (Memory::cuda) takes device memory as it is (it checks each layer).
  if (valid() && impl_->options().memory == Memory::cuda) {
    return false;
  }
  if (staging && !Kokkos::is_initialized()) {
    throw Error("paramwin: staging parameters through host memory needs Kokkos to be "
                "initialized (Kokkos::ScopeGuard or Kokkos::initialize)");
  }
  return staging;
}

std::vector<ConstLayerRef> Window::staged_in(std::span<const ConstLayerRef> layers) {
  std::vector<ConstLayerRef> host;
  host.reserve(layers.size());
  staged_.resize(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const ConstLayerRef& ref = layers[i];
    std::vector<char>& buf = staged_[i];
    const std::size_t bytes = dtype_size(ref.dtype()) * ref.count();
    buf.resize(bytes);
    if (bytes != 0) staging_.to_host(buf.data(), ref.data(), bytes);
    // The staged copy keeps the view's shape and order: binding checks them after staging.
    host.push_back(ref.with_data(buf.data()));
  }
  return host;
}

std::vector<LayerRef> Window::staged_out(std::span<const LayerRef> out) {
  // The current values are needed for momentum; copying them in also keeps the staged
  // output identical to the caller's memory if the pull fails.
  std::vector<ConstLayerRef> in;
  in.reserve(out.size());
  for (const LayerRef& r : out) in.push_back(r.as_const());
  const std::vector<ConstLayerRef> staged = staged_in(in);
  std::vector<LayerRef> host;
  host.reserve(out.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    host.push_back(out[i].with_data(const_cast<void*>(staged[i].data())));
  }
  return host;
}

void Window::unstage(std::span<const LayerRef> out) const {
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::vector<char>& buf = staged_[i];
    if (!buf.empty()) staging_.from_host(out[i].data(), buf.data(), buf.size());
  }
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
