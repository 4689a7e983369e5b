// ParameterWindow's non-template part: forwards to WindowImpl, guards moved-from use.
#include "paramwin/detail/window_base.hpp"

#include <string>

#include "paramwin/error.hpp"
#include "window/window_impl.hpp"

namespace paramwin::detail {

WindowBase::WindowBase(MPI_Comm comm, Layout layout, const WindowOptions& options,
                       const std::source_location& site)
    : impl_(std::make_unique<WindowImpl>(comm, std::move(layout), options, site)) {}

WindowBase::WindowBase(WindowBase&& other) noexcept = default;

WindowBase& WindowBase::operator=(WindowBase&& other) noexcept {
  if (this != &other) {
    impl_.reset();  // frees this window's MPI resources (collective) before taking over
    impl_ = std::move(other.impl_);
  }
  return *this;
}

WindowBase::~WindowBase() = default;

bool WindowBase::valid() const noexcept { return impl_ && !impl_->freed_at_finalize(); }

WindowImpl& WindowBase::impl() const {
  if (!impl_) {
    throw Error("paramwin: use of a ParameterWindow that was moved from or closed");
  }
  if (impl_->freed_at_finalize()) {
    // The window was alive at MPI_Finalize, which freed its MPI resources and its memory.
    throw Error("paramwin: use of a ParameterWindow after MPI_Finalize (MPI_Finalize freed it)");
  }
  return *impl_;
}

void WindowBase::close() {
  if (impl_) {
    std::unique_ptr<WindowImpl> doomed = std::move(impl_);
    doomed->close();
  }
}

int WindowBase::rank() const { return impl().rank(); }
int WindowBase::size() const { return impl().size(); }
MPI_Comm WindowBase::comm() const { return impl().comm(); }
const Layout& WindowBase::layout() const { return impl().layout(); }
const WindowOptions& WindowBase::options() const { return impl().options(); }
const std::string& WindowBase::site() const { return impl().site(); }
Transport WindowBase::transport_for(int rank) const { return impl().transport_for(rank); }
std::uint64_t WindowBase::version() const { return impl().version(); }
void WindowBase::continue_versions(std::uint64_t next) { impl().continue_versions(next); }
std::size_t WindowBase::wire_bytes() const { return impl().wire_bytes(); }
std::uint64_t WindowBase::fingerprint() const { return impl().fingerprint(); }

PublishResult WindowBase::publish_host(std::span<const ConstLayerRef> layers, std::uint64_t stamp) {
  return impl().publish(layers, stamp);
}

PullResult WindowBase::pull_host(std::span<const int> donors, std::span<const LayerRef> out,
                                 const PullOptions& options) {
  return impl().pull(donors, out, options);
}

namespace {

void check_bound(const Layout& layout, std::uint64_t layout_fingerprint, const char* op) {
  if (layout_fingerprint != layout.fingerprint()) {
    throw InvalidArgument(std::string("paramwin: ") + op +
                          ": the layers were bound to another layout than this window's");
  }
}

}  // namespace

PublishResult WindowBase::publish_bound(std::span<const ConstLayerRef> ordered,
                                        std::uint64_t layout_fingerprint, std::uint64_t stamp) {
  check_bound(impl().layout(), layout_fingerprint, "publish");
  return impl().publish(ordered, stamp, true);
}

PullResult WindowBase::pull_bound(std::span<const int> donors, std::span<const LayerRef> ordered,
                                  std::uint64_t layout_fingerprint, const PullOptions& options) {
  check_bound(impl().layout(), layout_fingerprint, "pull");
  return impl().pull(donors, ordered, options, true);
}

void* WindowBase::live_layer(std::size_t layer) const { return impl().live_layer(layer); }
void WindowBase::progress() const { impl().progress(); }
std::size_t WindowBase::pending_rma() const { return impl().pending_rma(); }

bool WindowBase::has_rma_readers() const { return impl().has_rma_readers(); }
RosterEntry WindowBase::roster(int rank, double timeout_seconds) const {
  return impl().roster(rank, timeout_seconds);
}
std::vector<RosterEntry> WindowBase::roster_all(double timeout_seconds) const {
  return impl().roster_all(timeout_seconds);
}
void WindowBase::set_status(const AgentStatus& status) { impl().set_status(status); }
const AgentStatus& WindowBase::status() const { return impl().status(); }
void WindowBase::set_hyperparameters(const Hyperparameters& hyper) {
  impl().set_hyperparameters(hyper);
}
const Hyperparameters& WindowBase::hyperparameters() const { return impl().hyperparameters(); }

}  // namespace paramwin::detail
