#pragma once
/// @file layout.hpp
/// Ordered named layers: what an agent's parameters look like, and the fingerprint that
/// tells whether two agents can exchange them.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "paramwin/dtype.hpp"
#include "paramwin/hyper.hpp"

namespace paramwin {

/// One named layer: its shape (empty for a 0-dim scalar), element count and dtype.
struct LayerSpec {
  std::string name;                ///< unique within the layout
  std::vector<std::size_t> shape;  ///< dimensions; {} is a scalar (count 1)
  std::size_t count = 0;           ///< number of elements (product of shape)
  DType dtype = DType::float32;    ///< element type in the caller's memory

  /// "name [64x32 float32]".
  [[nodiscard]] std::string describe() const;
  /// Same name, shape, element count and dtype.
  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

/// Ordered named layers, and the hyperparameters that travel with them, with a fingerprint
/// over names, shapes, dtypes and order (of the layers and of the hyperparameters).
class Layout {
 public:
  Layout() = default;

  /// Appends a layer with the given shape ({} for a scalar). Throws InvalidArgument on an
  /// empty or duplicate name.
  Layout& add(std::string name, std::vector<std::size_t> shape, DType dtype = DType::float32);
  /// Appends a flat layer of @p count elements (shape {count}). A template so that a braced
  /// list always means a shape: add("s", {}) is a 0-dim scalar, never a 0-element layer.
  template <std::integral Count>
  Layout& add(std::string name, Count count, DType dtype = DType::float32) {
    if constexpr (std::is_signed_v<Count>) {
      if (count < 0) {
        throw_negative_count(name, static_cast<long long>(count));
      }
    }
    return add(std::move(name), std::vector<std::size_t>{static_cast<std::size_t>(count)}, dtype);
  }

  /// Declares a hyperparameter: a named scalar published inside every snapshot with the
  /// layers (see hyper.hpp). Names are unique among hyperparameters (a layer may share one);
  /// at most kMaxHyperparameters. Throws InvalidArgument on an empty, duplicate or
  /// whitespace-holding name, an unknown type or one too many.
  Layout& add_hyperparameter(std::string name, HyperType type = HyperType::float64);
  /// The declared hyperparameters, in order.
  [[nodiscard]] const std::vector<HyperSpec>& hyperparameters() const noexcept;
  /// A value set of this layout's hyperparameters, every value 0 (shares the declarations).
  [[nodiscard]] Hyperparameters make_hyperparameters() const;

  /// Number of layers.
  [[nodiscard]] std::size_t size() const noexcept { return layers_.size(); }
  /// True when the layout has no layers.
  [[nodiscard]] bool empty() const noexcept { return layers_.empty(); }
  /// Layer @p i in order; throws InvalidArgument when out of range.
  [[nodiscard]] const LayerSpec& operator[](std::size_t i) const;
  /// All layers in order.
  [[nodiscard]] const std::vector<LayerSpec>& layers() const noexcept { return layers_; }
  /// Index of the layer called @p name, if any.
  [[nodiscard]] std::optional<std::size_t> find(std::string_view name) const noexcept;
  /// Index of the layer called @p name; throws InvalidArgument naming the known layers.
  [[nodiscard]] std::size_t index_of(std::string_view name) const;
  /// Sum of all layers' element counts.
  [[nodiscard]] std::size_t total_elements() const noexcept { return total_elements_; }
  /// Sum of all layers' sizes in bytes (in their own dtypes).
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_bytes_; }
  /// 64-bit FNV-1a hash over names, shapes, dtypes and order, with the hyperparameters'
  /// names, types and order mixed in (a layout without hyperparameters hashes its layers only).
  [[nodiscard]] std::uint64_t fingerprint() const noexcept;

  /// A compact text form that deserialize() reads back (used to explain mismatches).
  [[nodiscard]] std::string serialize() const;
  /// Reads what serialize() wrote; throws InvalidArgument on malformed text.
  [[nodiscard]] static Layout deserialize(std::string_view text);
  /// Human explanation of the first difference between two layouts ("" when equal).
  [[nodiscard]] static std::string first_difference(const Layout& a, const Layout& b);

  /// Same layers and hyperparameters in the same order.
  friend bool operator==(const Layout& a, const Layout& b);

 private:
  [[noreturn]] static void throw_negative_count(const std::string& name, long long count);
  std::vector<LayerSpec> layers_;
  std::size_t total_elements_ = 0;
  std::size_t total_bytes_ = 0;
  std::uint64_t fingerprint_ = 0xcbf29ce484222325ULL;
  std::shared_ptr<const std::vector<HyperSpec>> hyper_;  // null: none declared
  std::uint64_t hyper_fingerprint_ = 0;                  // 0: none declared
};

}  // namespace paramwin
