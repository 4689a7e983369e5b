#pragma once
/// @file bound_layers.hpp
/// BoundLayers: the caller's layers matched to a layout once — by name or by position, with
/// every check of ParameterWindow::publish and pull done (count, dtype, contiguity, a view's
/// shape and row-major order, null data) — and held in the layout's order. A training step
/// binds its parameters once and hands the result to the pull, the publish and the
/// checkpoint writer, none of which binds again.

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"

namespace paramwin {

template <class Ref>
class BoundLayers;

namespace detail {
/// Makes BoundLayers from refs the library has bound (or made in layout order itself).
struct BoundLayersAccess {
  template <class Ref>
  static BoundLayers<Ref> make(std::vector<Ref> ordered, std::uint64_t fingerprint) {
    return BoundLayers<Ref>(std::move(ordered), fingerprint);
  }
};
}  // namespace detail

/// Layers in a layout's order, checked against it (see bind()). Refers to the caller's
/// memory, which must outlive it. @p Ref is LayerRef (writable: a pull's output) or
/// ConstLayerRef (a publish's or a save's input).
template <class Ref>
class BoundLayers {
 public:
  BoundLayers() = default;  ///< bound to nothing (no layout's fingerprint)

  /// The layers, layer i of the layout first.
  [[nodiscard]] std::span<const Ref> refs() const noexcept { return refs_; }
  /// Number of layers.
  [[nodiscard]] std::size_t size() const noexcept { return refs_.size(); }
  /// Layer @p i of the layout.
  [[nodiscard]] const Ref& operator[](std::size_t i) const { return refs_[i]; }
  /// Fingerprint of the layout they were bound to (Layout::fingerprint()).
  [[nodiscard]] std::uint64_t layout_fingerprint() const noexcept { return fingerprint_; }
  /// The same layers, read-only.
  [[nodiscard]] BoundLayers<ConstLayerRef> as_const() const {
    std::vector<ConstLayerRef> out;
    out.reserve(refs_.size());
    for (const Ref& r : refs_) {
      if constexpr (std::is_same_v<Ref, ConstLayerRef>) {
        out.push_back(r);
      } else {
        out.push_back(r.as_const());
      }
    }
    return detail::BoundLayersAccess::make(std::move(out), fingerprint_);
  }

 private:
  friend struct detail::BoundLayersAccess;
  BoundLayers(std::vector<Ref> ordered, std::uint64_t fingerprint)
      : refs_(std::move(ordered)), fingerprint_(fingerprint) {}

  std::vector<Ref> refs_;
  std::uint64_t fingerprint_ = 0;
};

/// Binds @p refs to @p layout: by position when no ref is named, else by name in any order.
/// InvalidArgument naming @p caller and the layer otherwise (count of layers, all named or
/// none, duplicates, element counts, dtypes, contiguity, a view's shape and order, null data).
[[nodiscard]] BoundLayers<LayerRef> bind(const Layout& layout, std::span<const LayerRef> refs,
                                         std::string_view caller);
/// @copydoc bind(const Layout&, std::span<const LayerRef>, std::string_view)
[[nodiscard]] BoundLayers<ConstLayerRef> bind(const Layout& layout,
                                              std::span<const ConstLayerRef> refs,
                                              std::string_view caller);

}  // namespace paramwin
