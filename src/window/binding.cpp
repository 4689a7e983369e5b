// The one ref binder (see binding.hpp).
#include "window/binding.hpp"

#include <algorithm>
#include <string>

#include "paramwin/error.hpp"

namespace paramwin::detail {
namespace {

// "8x8", like LayerSpec::describe() writes a layer's shape.
std::string extents_text(std::span<const std::size_t> extents) {
  std::string s;
  for (std::size_t i = 0; i < extents.size(); ++i) {
    if (i != 0) {
      s += 'x';
    }
    s += std::to_string(extents[i]);
  }
  return s;
}

template <class Ref>
std::vector<std::size_t> bind_impl(const Layout& layout, std::span<const Ref> refs,
                                   const char* op) {
  const std::string where = std::string("paramwin: ") + op + ": ";
  if (refs.size() != layout.size()) {
    throw InvalidArgument(where + "got " + std::to_string(refs.size()) +
                          " layers, the layout has " + std::to_string(layout.size()));
  }
  std::size_t named = 0;
  for (const Ref& r : refs) {
    named += r.name().empty() ? std::size_t{0} : std::size_t{1};
  }
  if (named != 0 && named != refs.size()) {
    throw InvalidArgument(where + "either name every layer or none (" + std::to_string(named) +
                          " of " + std::to_string(refs.size()) + " are named)");
  }
  std::vector<std::size_t> order(layout.size(), static_cast<std::size_t>(-1));
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const std::size_t layer = named != 0 ? layout.index_of(refs[i].name()) : i;
    if (order[layer] != static_cast<std::size_t>(-1)) {
      throw InvalidArgument(where + "layer '" + layout[layer].name + "' given twice");
    }
    order[layer] = i;
    const LayerSpec& spec = layout[layer];
    const Ref& r = refs[i];
    if (r.count() != spec.count) {
      throw InvalidArgument(where + "layer " + spec.describe() + " expects " +
                            std::to_string(spec.count) + " elements, got " +
                            std::to_string(r.count()));
    }
    if (r.dtype() != spec.dtype) {
      throw InvalidArgument(where + "layer " + spec.describe() + " expects dtype " +
                            std::string(dtype_name(spec.dtype)) + ", got " +
                            std::string(dtype_name(r.dtype())));
    }
    if (!r.contiguous()) {
      throw InvalidArgument(where + "layer " + spec.describe() + " is not contiguous");
    }
    // Layers are row-major. A flat ref (empty extents) binds to any shape by count; a view of
    // rank 2 or more must be the layer's shape, in row-major order: otherwise a 4x16 view for
    // an 8x8 layer (another shape) or a LayoutLeft 8x8 one (the transpose) binds silently.
    const std::span<const std::size_t> extents = r.view_extents();
    if (!extents.empty() && !std::ranges::equal(extents, spec.shape)) {
      throw InvalidArgument(where + "layer " + spec.describe() + " got a view of shape " +
                            extents_text(extents) +
                            ": a view of rank 2 or more must have the layer's shape (a span or "
                            "rank-1 view binds to any shape, in row-major order)");
    }
    if (!r.row_major()) {
      throw InvalidArgument(where + "layer " + spec.describe() +
                            " got a view whose elements are not in row-major (C) order (e.g. "
                            "Kokkos::LayoutLeft): use a Kokkos::LayoutRight view, or deep_copy "
                            "into one");
    }
    if (r.count() != 0 && r.data() == nullptr) {
      throw InvalidArgument(where + "layer " + spec.describe() + " has a null data pointer");
    }
  }
  return order;
}

}  // namespace

std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                                     const char* operation) {
  return bind_impl(layout, refs, operation);
}

std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const LayerRef> refs,
                                     const char* operation) {
  return bind_impl(layout, refs, operation);
}

std::vector<std::size_t> identity_order(std::size_t n) {
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  return order;
}

namespace {

template <class Ref>
BoundLayers<Ref> bind_ordered(const Layout& layout, std::span<const Ref> refs,
                              std::string_view caller) {
  const std::string op(caller);
  const std::vector<std::size_t> order = bind_impl(layout, refs, op.c_str());
  std::vector<Ref> ordered;
  ordered.reserve(order.size());
  for (const std::size_t i : order) ordered.push_back(refs[i]);
  return BoundLayersAccess::make(std::move(ordered), layout.fingerprint());
}

}  // namespace

}  // namespace paramwin::detail

namespace paramwin {

BoundLayers<LayerRef> bind(const Layout& layout, std::span<const LayerRef> refs,
                           std::string_view caller) {
  return detail::bind_ordered(layout, refs, caller);
}

BoundLayers<ConstLayerRef> bind(const Layout& layout, std::span<const ConstLayerRef> refs,
                                std::string_view caller) {
  return detail::bind_ordered(layout, refs, caller);
}

}  // namespace paramwin
