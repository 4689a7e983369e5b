#pragma once
/// @file layer_ref.hpp
/// Type-erased references to the caller's parameter memory, one per layer: built from a
/// std::span, a contiguous container or a Kokkos view, optionally with the layer's name.

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <ranges>
#include <span>
#include <string_view>
#include <type_traits>

#include "paramwin/dtype.hpp"

namespace paramwin {

namespace detail {
template <class View>
constexpr bool view_host_accessible =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename View::memory_space>::accessible;
}  // namespace detail

/// Read-only reference to one layer of the caller's parameters (for publish).
/// Unnamed references bind to layers by position, named ones by name.
class ConstLayerRef {
 public:
  /// From any contiguous range of float, double, bfloat16 or float16.
  template <std::ranges::contiguous_range R>
  requires Element<std::remove_cvref_t<std::ranges::range_value_t<R>>> ConstLayerRef(
      R&& range)  // NOLINT(google-explicit-constructor): spans convert implicitly
      : ConstLayerRef({}, std::forward<R>(range)) {}

  /// Named: binds to the layer called @p name.
  template <std::ranges::contiguous_range R>
  requires Element<std::remove_cvref_t<std::ranges::range_value_t<R>>> ConstLayerRef(
      std::string_view name, R&& range)
      : name_(name),
        data_(std::ranges::data(range)),
        count_(std::ranges::size(range)),
        dtype_(dtype_of<std::remove_cvref_t<std::ranges::range_value_t<R>>>::value) {}

  /// From a contiguous Kokkos view of any rank in any memory space.
  template <class T, class... P>
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> ConstLayerRef(
      std::string_view name, const Kokkos::View<T, P...>& view)
      : name_(name),
        data_(view.data()),
        count_(view.span()),
        dtype_(dtype_of<typename Kokkos::View<T, P...>::non_const_value_type>::value),
        host_accessible_(detail::view_host_accessible<Kokkos::View<T, P...>>),
        contiguous_(view.span_is_contiguous()) {}

  /// Unnamed Kokkos view.
  template <class T, class... P>
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> ConstLayerRef(
      const Kokkos::View<T, P...>& view)  // NOLINT(google-explicit-constructor)
      : ConstLayerRef(std::string_view{}, view) {}

  /// From a raw pointer, element count and dtype (for adapters).
  ConstLayerRef(std::string_view name, const void* data, std::size_t count, DType dtype,
                bool host_accessible = true) noexcept
      : name_(name), data_(data), count_(count), dtype_(dtype), host_accessible_(host_accessible) {}

  [[nodiscard]] std::string_view name() const noexcept { return name_; }  ///< "" if unnamed
  [[nodiscard]] const void* data() const noexcept { return data_; }       ///< first element
  [[nodiscard]] std::size_t count() const noexcept { return count_; }     ///< elements
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }           ///< element type
  /// True when the host can read the memory (false for device views).
  [[nodiscard]] bool host_accessible() const noexcept { return host_accessible_; }
  [[nodiscard]] bool contiguous() const noexcept { return contiguous_; }  ///< views only

 private:
  std::string_view name_;
  const void* data_;
  std::size_t count_;
  DType dtype_;
  bool host_accessible_ = true;
  bool contiguous_ = true;
};

/// Writable reference to one layer of the caller's parameters (for pull).
class LayerRef {
 public:
  /// From any contiguous range of non-const float, double, bfloat16 or float16.
  template <std::ranges::contiguous_range R>
  requires Element<std::ranges::range_value_t<R>> &&
      (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>)
          LayerRef(R&& range)  // NOLINT(google-explicit-constructor)
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

  /// From a contiguous, non-const Kokkos view of any rank in any memory space.
  template <class T, class... P>
  requires Element<typename Kokkos::View<T, P...>::non_const_value_type> &&
      (!std::is_const_v<typename Kokkos::View<T, P...>::value_type>)
          LayerRef(std::string_view name, const Kokkos::View<T, P...>& view)
      : name_(name),
        data_(view.data()),
        count_(view.span()),
        dtype_(dtype_of<typename Kokkos::View<T, P...>::non_const_value_type>::value),
        host_accessible_(detail::view_host_accessible<Kokkos::View<T, P...>>),
        contiguous_(view.span_is_contiguous()) {}

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

  [[nodiscard]] std::string_view name() const noexcept { return name_; }  ///< "" if unnamed
  [[nodiscard]] void* data() const noexcept { return data_; }             ///< first element
  [[nodiscard]] std::size_t count() const noexcept { return count_; }     ///< elements
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }           ///< element type
  /// True when the host can read the memory (false for device views).
  [[nodiscard]] bool host_accessible() const noexcept { return host_accessible_; }
  [[nodiscard]] bool contiguous() const noexcept { return contiguous_; }  ///< views only
  /// The same memory, read-only.
  [[nodiscard]] ConstLayerRef as_const() const noexcept {
    return ConstLayerRef(name_, data_, count_, dtype_, host_accessible_);
  }

 private:
  std::string_view name_;
  void* data_;
  std::size_t count_;
  DType dtype_;
  bool host_accessible_ = true;
  bool contiguous_ = true;
};

}  // namespace paramwin
