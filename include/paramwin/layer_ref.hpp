#pragma once
/// @file layer_ref.hpp
/// Type-erased references to the caller's parameter memory, one per layer: built from a
/// std::span, a contiguous container or a Kokkos view, optionally with the layer's name.
///
/// Layers are in row-major (C) element order. Spans, containers, raw pointers and views of
/// rank 0 or 1 are flat: they bind to a layer of any shape with the right element count. A
/// Kokkos view of rank 2 or more must have exactly the layer's shape and row-major element
/// order (Kokkos::LayoutRight; a LayoutLeft view with more than one extent above 1 is
/// refused, never transposed silently).

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "paramwin/dtype.hpp"

namespace paramwin {

class LayerRef;

/// Tag of a layer reference over device (GPU) memory, for the raw-pointer constructors:
/// `LayerRef(name, ptr, count, dtype, paramwin::device_memory)`. A device window
/// (Memory::cuda, docs/gpu.md) takes only such references (and Kokkos views of a device
/// memory space).
struct DeviceMemoryTag {
  explicit constexpr DeviceMemoryTag() = default;
};
/// The DeviceMemoryTag value.
inline constexpr DeviceMemoryTag device_memory{};

namespace detail {
template <class View>
constexpr bool view_host_accessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename View::memory_space>::accessible;

/// What a Kokkos view of rank 2 or more adds to a layer reference: its extents and whether
/// its elements lie in row-major order. rank 0 means a flat reference.
struct ViewShape {
  static constexpr std::size_t kMaxRank = 8;  // Kokkos views have at most 8 dimensions
  std::array<std::size_t, kMaxRank> extents{};
  std::uint8_t rank = 0;
  bool row_major = true;
};

template <class T, class... P>
ViewShape view_shape(const Kokkos::View<T, P...>& view) {
  constexpr std::size_t rank = Kokkos::View<T, P...>::traits::rank;
  static_assert(rank <= ViewShape::kMaxRank);
  ViewShape s;
  if constexpr (rank >= 2) {
    s.rank = static_cast<std::uint8_t>(rank);
    // Row-major: every dimension longer than 1 has the stride of the extents after it.
    // (Dimensions of extent 1 have no order; an empty view has no elements to order.)
    std::size_t after = 1;
    for (std::size_t d = rank; d-- > 0;) {
      s.extents[d] = view.extent(d);
      if (s.extents[d] > 1 && view.stride(d) != after) {
        s.row_major = false;
      }
      after *= s.extents[d];
    }
    s.row_major = s.row_major || after == 0;
  }
  return s;
}
}  // namespace detail

/// Read-only reference to one layer of the caller's parameters (for publish).
/// Unnamed references bind to layers by position, named ones by name.
class ConstLayerRef {
 public:
  /// From any contiguous range of float, double, bfloat16 or float16.
  template <std::ranges::contiguous_range R>
  // Implicit on purpose: a span or vector passes where a layer is expected. ConstLayerRef is
  // not a contiguous range, so the constraint keeps copy and move constructors visible.
  // NOLINTNEXTLINE(google-explicit-constructor, bugprone-forwarding-reference-overload)
  requires Element<std::remove_cvref_t<std::ranges::range_value_t<R>>> ConstLayerRef(R&& range)
      : ConstLayerRef({}, std::forward<R>(range)) {}

  /// Named: binds to the layer called @p name.
  template <std::ranges::contiguous_range R>
  requires Element<std::remove_cvref_t<std::ranges::range_value_t<R>>> ConstLayerRef(
      std::string_view name, R&& range)
      : name_(name),
        data_(std::ranges::data(range)),
        count_(std::ranges::size(range)),
        dtype_(dtype_of<std::remove_cvref_t<std::ranges::range_value_t<R>>>::value) {}

  /// From a contiguous Kokkos view of any rank in any memory space. A view of rank 2 or
  /// more keeps its extents and element order: binding requires the layer's exact shape and
  /// row-major order (see the file comment).
  template <class T, class... P>
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> ConstLayerRef(
      std::string_view name, const Kokkos::View<T, P...>& view)
      : name_(name),
        data_(view.data()),
        count_(view.span()),
        dtype_(dtype_of<typename Kokkos::View<T, P...>::non_const_value_type>::value),
        host_accessible_(detail::view_host_accessible<Kokkos::View<T, P...>>),
        contiguous_(view.span_is_contiguous()),
        shape_(detail::view_shape(view)) {}

  /// Unnamed Kokkos view.
  template <class T, class... P>
  // NOLINTNEXTLINE(google-explicit-constructor): converts implicitly, like the ranges above
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> ConstLayerRef(
      const Kokkos::View<T, P...>& view)
      : ConstLayerRef(std::string_view{}, view) {}

  /// From a raw pointer, element count and dtype (for adapters).
  ConstLayerRef(std::string_view name, const void* data, std::size_t count, DType dtype,
                bool host_accessible = true) noexcept
      : name_(name), data_(data), count_(count), dtype_(dtype), host_accessible_(host_accessible) {}
  /// From a raw pointer into device (GPU) memory (see DeviceMemoryTag).
  ConstLayerRef(std::string_view name, const void* data, std::size_t count, DType dtype,
                DeviceMemoryTag /*tag*/) noexcept
      : name_(name), data_(data), count_(count), dtype_(dtype), host_accessible_(false) {}

  [[nodiscard]] std::string_view name() const noexcept { return name_; }  ///< "" if unnamed
  [[nodiscard]] const void* data() const noexcept { return data_; }       ///< first element
  [[nodiscard]] std::size_t count() const noexcept { return count_; }     ///< elements
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }           ///< element type
  /// True when the host can read the memory (false for device views).
  [[nodiscard]] bool host_accessible() const noexcept { return host_accessible_; }
  [[nodiscard]] bool contiguous() const noexcept { return contiguous_; }  ///< views only
  /// The extents of a Kokkos view of rank 2 or more; empty for a flat reference (a range,
  /// a raw pointer, a view of rank 0 or 1), which binds to a layer of any shape.
  [[nodiscard]] std::span<const std::size_t> view_extents() const noexcept {
    return {shape_.extents.data(), shape_.rank};
  }
  /// False for a view of rank 2 or more whose elements are not in row-major (C) order
  /// (e.g. Kokkos::LayoutLeft); binding refuses such a view.
  [[nodiscard]] bool row_major() const noexcept { return shape_.row_major; }
  /// The same reference (name, count, dtype, view shape and order) to a copy of its memory
  /// at @p data, host memory (for adapters that stage layers through the host).
  [[nodiscard]] ConstLayerRef with_data(const void* data) const noexcept {
    ConstLayerRef r = *this;
    r.data_ = data;
    r.host_accessible_ = true;
    return r;
  }

 private:
  friend class LayerRef;  // as_const() copies every field
  std::string_view name_;
  const void* data_;
  std::size_t count_;
  DType dtype_;
  bool host_accessible_ = true;
  bool contiguous_ = true;
  detail::ViewShape shape_;
};

/// Writable reference to one layer of the caller's parameters (for pull).
class LayerRef {
 public:
  /// From any contiguous range of non-const float, double, bfloat16 or float16.
  template <std::ranges::contiguous_range R>
  requires Element<std::ranges::range_value_t<R>> &&
      (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>)
      // Implicit on purpose, and LayerRef is not a range (see ConstLayerRef's).
      // NOLINTNEXTLINE(google-explicit-constructor, bugprone-forwarding-reference-overload)
      LayerRef(R&& range)
      : LayerRef({}, std::forward<R>(range)) {}

  /// Named: binds to the layer called @p name.
  template <std::ranges::contiguous_range R>
  requires Element<std::ranges::range_value_t<R>> &&
      (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>)
          LayerRef(std::string_view name, R&& range)
      : name_(name),
        data_(std::ranges::data(range)),
        count_(std::ranges::size(range)),
        dtype_(dtype_of<std::ranges::range_value_t<R>>::value) {}

  /// From a contiguous, non-const Kokkos view of any rank in any memory space. A view of
  /// rank 2 or more keeps its extents and element order: binding requires the layer's exact
  /// shape and row-major order (see the file comment).
  template <class T, class... P>
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> &&
      (!std::is_const_v<typename Kokkos::View<T, P...>::value_type>)
          LayerRef(std::string_view name, const Kokkos::View<T, P...>& view)
      : name_(name),
        data_(view.data()),
        count_(view.span()),
        dtype_(dtype_of<typename Kokkos::View<T, P...>::non_const_value_type>::value),
        host_accessible_(detail::view_host_accessible<Kokkos::View<T, P...>>),
        contiguous_(view.span_is_contiguous()),
        shape_(detail::view_shape(view)) {}

  /// Unnamed Kokkos view.
  template <class T, class... P>
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> &&
      (!std::is_const_v<typename Kokkos::View<T, P...>::value_type>)
          LayerRef(const Kokkos::View<T, P...>& view)  // NOLINT(google-explicit-constructor)
      : LayerRef(std::string_view{}, view) {}

  /// From a raw pointer, element count and dtype (for adapters).
  LayerRef(std::string_view name, void* data, std::size_t count, DType dtype,
           bool host_accessible = true) noexcept
      : name_(name), data_(data), count_(count), dtype_(dtype), host_accessible_(host_accessible) {}
  /// From a raw pointer into device (GPU) memory (see DeviceMemoryTag).
  LayerRef(std::string_view name, void* data, std::size_t count, DType dtype,
           DeviceMemoryTag /*tag*/) noexcept
      : name_(name), data_(data), count_(count), dtype_(dtype), host_accessible_(false) {}

  [[nodiscard]] std::string_view name() const noexcept { return name_; }  ///< "" if unnamed
  [[nodiscard]] void* data() const noexcept { return data_; }             ///< first element
  [[nodiscard]] std::size_t count() const noexcept { return count_; }     ///< elements
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }           ///< element type
  /// True when the host can read the memory (false for device views).
  [[nodiscard]] bool host_accessible() const noexcept { return host_accessible_; }
  [[nodiscard]] bool contiguous() const noexcept { return contiguous_; }  ///< views only
  /// The extents of a Kokkos view of rank 2 or more; empty for a flat reference (a range,
  /// a raw pointer, a view of rank 0 or 1), which binds to a layer of any shape.
  [[nodiscard]] std::span<const std::size_t> view_extents() const noexcept {
    return {shape_.extents.data(), shape_.rank};
  }
  /// False for a view of rank 2 or more whose elements are not in row-major (C) order
  /// (e.g. Kokkos::LayoutLeft); binding refuses such a view.
  [[nodiscard]] bool row_major() const noexcept { return shape_.row_major; }
  /// The same reference (memory, name, count, dtype, contiguity, view shape), read-only.
  [[nodiscard]] ConstLayerRef as_const() const noexcept {
    ConstLayerRef r(name_, data_, count_, dtype_, host_accessible_);
    r.contiguous_ = contiguous_;
    r.shape_ = shape_;
    return r;
  }
  /// The same reference (name, count, dtype, view shape and order) to a copy of its memory
  /// at @p data, host memory (for adapters that stage layers through the host).
  [[nodiscard]] LayerRef with_data(void* data) const noexcept {
    LayerRef r = *this;
    r.data_ = data;
    r.host_accessible_ = true;
    return r;
  }

 private:
  std::string_view name_;
  void* data_;
  std::size_t count_;
  DType dtype_;
  bool host_accessible_ = true;
  bool contiguous_ = true;
  detail::ViewShape shape_;
};

/// @p refs as read-only refs (what publish and save_checkpoint take), same order.
[[nodiscard]] inline std::vector<ConstLayerRef> const_refs(std::span<const LayerRef> refs) {
  std::vector<ConstLayerRef> out;
  out.reserve(refs.size());
  for (const LayerRef& r : refs) out.push_back(r.as_const());
  return out;
}

}  // namespace paramwin
