// The host placements (placement.hpp): host in place, and staged through host (the one
// staging implementation), with the default slot write every host placement shares, and
// make_placement, which chooses a window's placement once at its creation.
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "detail/kernels.hpp"
#include "paramwin/error.hpp"
#include "window/placement.hpp"

namespace paramwin::detail {

template <class Ref>
void check_contiguous(std::span<const Ref> refs, const Layout& layout) {
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const Ref& r = refs[i];
    if (r.contiguous()) continue;
    // An unnamed ref is named by its position and the layer it binds to.
    // (Appends, not "literal" + string: GCC 12's -Wrestrict misfires on the latter.)
    std::string msg = "paramwin: layer ";
    if (!r.name().empty()) {
      msg.append("'").append(r.name()).append("'");
    } else {
      msg.append("#").append(std::to_string(i));
      if (i < layout.size()) msg.append(" (").append(layout[i].name).append(")");
    }
    throw InvalidArgument(msg.append(" is a view that is not contiguous"));
  }
}

template void check_contiguous<ConstLayerRef>(std::span<const ConstLayerRef>, const Layout&);
template void check_contiguous<LayerRef>(std::span<const LayerRef>, const Layout&);

// --- what every placement does unless it says otherwise: the host's own memory -------------

void Placement::check_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                             std::span<const std::size_t> order, const char* operation) const {
  check_host_layers(layout, refs, order, operation);
}

void Placement::check_layers(const Layout& layout, std::span<const LayerRef> refs,
                             std::span<const std::size_t> order, const char* operation) const {
  check_host_layers(layout, refs, order, operation);
}

std::span<const ConstLayerRef> Placement::stage_in(std::span<const ConstLayerRef> layers,
                                                   const Layout& layout) {
  check_contiguous(layers, layout);
  return layers;
}

std::span<const LayerRef> Placement::stage_out(std::span<const LayerRef> out,
                                               const Layout& layout) {
  check_contiguous(out, layout);
  return out;
}

std::uint64_t Placement::write_slot(const SlotWrite& w) {
  const SlotLayout& slots = *w.slots;
  std::uint64_t bad_layer = w.live ? kUnknownFinite : 0;
  for (std::size_t layer = 0; layer < w.order.size(); ++layer) {
    const ConstLayerRef& ref = w.layers[w.order[layer]];
    const SlotLayout::Entry& e = slots.entries[layer];
    if (w.live && ref.data() == w.host_slot + e.offset) {
      continue;  // already the live memory
    }
    // The whole slot is written: large enough in all, every layer streams (kernels.hpp).
    const bool finite = convert(w.host_slot + e.offset, e.wire, ref.data(), ref.dtype(), e.count,
                                slots.payload_bytes);
    if (!finite && bad_layer == 0) {
      bad_layer = layer + 1;
    }
  }
  // The hyperparameters ride in the slot, after the layers: same seqlock, same copy.
  if (slots.hyper_count != 0) {
    std::memcpy(w.host_slot + slots.hyper_offset, w.hyper.data(),
                slots.hyper_count * sizeof(std::uint64_t));
  }
  return bad_layer;
}

namespace {

/// Staged through host: every layer is copied into a host buffer of its own (kept and reused
/// across calls) with the copies of the caller's memory kind; the window reads and writes
/// those. The one staging implementation of the window layer.
class StagedThroughHost final : public Placement {
 public:
  explicit StagedThroughHost(const HostStaging& staging) : staging_(staging) {}

  std::span<const ConstLayerRef> stage_in(std::span<const ConstLayerRef> layers,
                                          const Layout& layout) override {
    check_contiguous(layers, layout);
    copy_in(layers);
    return host_in_;
  }

  std::span<const LayerRef> stage_out(std::span<const LayerRef> out,
                                      const Layout& layout) override {
    check_contiguous(out, layout);
    // The current values are needed for momentum; copying them in also keeps the staged
    // output identical to the caller's memory if the pull fails.
    in_.clear();
    in_.reserve(out.size());
    for (const LayerRef& r : out) in_.push_back(r.as_const());
    copy_in(in_);
    host_out_.clear();
    host_out_.reserve(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      host_out_.push_back(out[i].with_data(buffers_[i].data()));
    }
    return host_out_;
  }

  void unstage(std::span<const LayerRef> out) override {
    for (std::size_t i = 0; i < out.size() && i < buffers_.size(); ++i) {
      const std::vector<char>& buf = buffers_[i];
      if (!buf.empty()) staging_.from_host(out[i].data(), buf.data(), buf.size());
    }
  }

 private:
  /// host_in_: host copies of @p layers (the staged copy keeps the view's shape and order:
  /// binding checks them after staging).
  void copy_in(std::span<const ConstLayerRef> layers) {
    if (!Kokkos::is_initialized()) {
      throw Error("paramwin: staging parameters through host memory needs Kokkos to be "
                  "initialized (Kokkos::ScopeGuard or Kokkos::initialize)");
    }
    host_in_.clear();
    host_in_.reserve(layers.size());
    buffers_.resize(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const ConstLayerRef& ref = layers[i];
      std::vector<char>& buf = buffers_[i];
      const std::size_t bytes = dtype_size(ref.dtype()) * ref.count();
      buf.resize(bytes);
      if (bytes != 0) staging_.to_host(buf.data(), ref.data(), bytes);
      host_in_.push_back(ref.with_data(buf.data()));
    }
  }

  HostStaging staging_;
  std::vector<std::vector<char>> buffers_;  // host copies of the caller's layers, by position
  std::vector<ConstLayerRef> in_;
  std::vector<ConstLayerRef> host_in_;
  std::vector<LayerRef> host_out_;
};

/// Host in place: the window reads and writes the caller's host memory itself. A call with a
/// layer that the host cannot read (a ref declared so) goes through the staged placement.
class HostInPlace final : public Placement {
 public:
  explicit HostInPlace(const HostStaging& staging) : staged_(staging) {}

  std::span<const ConstLayerRef> stage_in(std::span<const ConstLayerRef> layers,
                                          const Layout& layout) override {
    check_contiguous(layers, layout);
    if (host_readable(layers)) return layers;
    return staged_.stage_in(layers, layout);
  }

  std::span<const LayerRef> stage_out(std::span<const LayerRef> out,
                                      const Layout& layout) override {
    check_contiguous(out, layout);
    staging_ = !host_readable(out);
    if (!staging_) return out;
    return staged_.stage_out(out, layout);
  }

  void unstage(std::span<const LayerRef> out) override {
    if (staging_) staged_.unstage(out);
  }

 private:
  template <class Ref>
  static bool host_readable(std::span<const Ref> refs) {
    for (const Ref& r : refs) {
      if (!r.host_accessible()) return false;
    }
    return true;
  }

  StagedThroughHost staged_;
  bool staging_ = false;  // the last stage_out() staged
};

}  // namespace

std::unique_ptr<Placement> make_placement(const WindowOptions& options,
                                          const HostStaging& staging) {
  if (options.memory != Memory::host) {
    return make_gpu_placement();  // its check_options() refuses what it cannot be
  }
  if (options.stage_through_host || !staging.host_accessible) {
    return std::make_unique<StagedThroughHost>(staging);
  }
  return std::make_unique<HostInPlace>(staging);
}

}  // namespace paramwin::detail
