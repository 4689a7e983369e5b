#pragma once
/// @file hyper.hpp
/// Hyperparameters: a small named set of scalars (int64 or double) declared with a Layout
/// (Layout::add_hyperparameter) and published inside the same snapshot as the parameters,
/// so that a pull reads the weights and the hyperparameters of one version.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/enum_names.hpp"

namespace paramwin {

/// Element type of a hyperparameter.
enum class HyperType : std::uint8_t {
  int64 = 0,    ///< a signed 64-bit integer (batch size, number of steps, a choice index)
  float64 = 1,  ///< a double (learning rate, weight decay, dropout)
};

namespace detail {
inline constexpr EnumName<HyperType> kHyperTypeNames[] = {{HyperType::int64, "int64"},
                                                          {HyperType::float64, "float64"}};
}  // namespace detail
/// Names of HyperType.
template <>
inline constexpr EnumTable<HyperType> enum_table<HyperType>{"hyperparameter type",
                                                            detail::kHyperTypeNames};

/// Lower-case name of @p type ("int64", "float64").
[[nodiscard]] constexpr std::string_view hyper_type_name(HyperType type) noexcept {
  return enum_name(type);
}

/// Largest number of hyperparameters a layout may declare (each is one 64-bit word of the
/// snapshot and of the roster).
inline constexpr std::size_t kMaxHyperparameters = 32;

/// One declared hyperparameter: its name (unique among the layout's hyperparameters) and type.
struct HyperSpec {
  std::string name;                     ///< non-empty, no whitespace
  HyperType type = HyperType::float64;  ///< int64 or float64
  /// "lr float64".
  [[nodiscard]] std::string describe() const;
  /// Same name and type.
  friend bool operator==(const HyperSpec&, const HyperSpec&) = default;
};

/// Values of a layout's hyperparameters, in declaration order. Each value is stored as one
/// 64-bit word (the int64's or the double's bits), exactly as it travels in a snapshot.
/// Copies share the (immutable) declarations and copy only the words. A default-constructed
/// set declares nothing.
class Hyperparameters {
 public:
  /// An empty set (no hyperparameters declared).
  Hyperparameters() = default;
  /// Every declared hyperparameter with value 0 (0 or 0.0).
  explicit Hyperparameters(std::shared_ptr<const std::vector<HyperSpec>> specs);

  /// Number of hyperparameters.
  [[nodiscard]] std::size_t size() const noexcept { return words_.size(); }
  /// True when none is declared.
  [[nodiscard]] bool empty() const noexcept { return words_.empty(); }
  /// The declarations, in order.
  [[nodiscard]] std::span<const HyperSpec> specs() const noexcept;
  /// Declaration @p i; InvalidArgument when out of range.
  [[nodiscard]] const HyperSpec& spec(std::size_t i) const;
  /// Index of @p name, if declared.
  [[nodiscard]] std::optional<std::size_t> find(std::string_view name) const noexcept;
  /// Index of @p name; InvalidArgument naming the declared hyperparameters otherwise.
  [[nodiscard]] std::size_t index_of(std::string_view name) const;

  /// Value @p i as a double (an int64 converted).
  [[nodiscard]] double as_double(std::size_t i) const;
  /// Value of @p name as a double (an int64 converted).
  [[nodiscard]] double get(std::string_view name) const { return as_double(index_of(name)); }
  /// Value of the int64 hyperparameter @p name; InvalidArgument if it is a float64.
  [[nodiscard]] std::int64_t get_int(std::string_view name) const;
  /// Sets value @p i from a double: stored as is for float64; for int64 the value must be
  /// finite and integral (InvalidArgument otherwise).
  void set(std::size_t i, double value);
  /// Sets the hyperparameter @p name from a double (see set(std::size_t, double)).
  void set(std::string_view name, double value) { set(index_of(name), value); }
  /// Sets the int64 hyperparameter @p name (a float64 one gets the value converted).
  void set_int(std::string_view name, std::int64_t value);

  /// The raw words (int64 bits or double bits), in declaration order.
  [[nodiscard]] std::span<const std::uint64_t> words() const noexcept { return words_; }
  /// Writable raw words (same size as the declarations).
  [[nodiscard]] std::span<std::uint64_t> words() noexcept { return words_; }

  /// "lr=0.01 batch=32" (declaration order).
  [[nodiscard]] std::string describe() const;
  /// Same declarations and same words.
  friend bool operator==(const Hyperparameters& a, const Hyperparameters& b);

 private:
  std::shared_ptr<const std::vector<HyperSpec>> specs_;
  std::vector<std::uint64_t> words_;
};

}  // namespace paramwin
