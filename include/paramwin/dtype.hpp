#pragma once
/// @file dtype.hpp
/// Element types of parameter layers, and the 16-bit float types used on the wire.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "paramwin/enum_names.hpp"

namespace paramwin {

/// Element type of a layer (and of its wire representation).
enum class DType : std::uint8_t { float32 = 1, float64 = 2, bfloat16 = 3, float16 = 4 };

/// Size of one element of @p dtype in bytes.
[[nodiscard]] constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::float64: return 8;
    case DType::float32: return 4;
    case DType::bfloat16:
    case DType::float16: return 2;
  }
  return 0;
}

namespace detail {
inline constexpr EnumName<DType> kDTypeNames[] = {{DType::float32, "float32"},
                                                  {DType::float64, "float64"},
                                                  {DType::bfloat16, "bfloat16"},
                                                  {DType::float16, "float16"}};
}  // namespace detail
/// Names of DType.
template <>
inline constexpr EnumTable<DType> enum_table<DType>{"dtype", detail::kDTypeNames};

/// Lower-case name of @p dtype ("float32", ...).
[[nodiscard]] constexpr std::string_view dtype_name(DType dtype) noexcept {
  return enum_name(dtype);
}
/// Parses a dtype name; throws InvalidArgument listing the valid names.
[[nodiscard]] inline DType parse_dtype(std::string_view name) { return parse_enum<DType>(name); }

/// Brain float: the upper 16 bits of an IEEE float32. Storage type only.
struct bfloat16 {
  std::uint16_t bits = 0;  ///< the raw 16 bits
  /// Bitwise equality (NaNs with equal bits compare equal).
  friend constexpr bool operator==(bfloat16, bfloat16) = default;
};

/// IEEE 754 binary16. Storage type only.
struct float16 {
  std::uint16_t bits = 0;  ///< the raw 16 bits
  /// Bitwise equality (NaNs with equal bits compare equal).
  friend constexpr bool operator==(float16, float16) = default;
};

namespace detail {
/// Branch-free select (keeps conversion loops vectorisable).
[[nodiscard]] constexpr std::uint32_t select_bits(bool c, std::uint32_t a,
                                                  std::uint32_t b) noexcept {
  const std::uint32_t m = 0U - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}
}  // namespace detail

/// Widens a bfloat16 to float (exact).
[[nodiscard]] inline float to_float(bfloat16 v) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16U);
}

/// Narrows a float to bfloat16, rounding to nearest even; NaN stays NaN.
[[nodiscard]] inline bfloat16 to_bfloat16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (u + 0x7fffU + ((u >> 16U) & 1U)) >> 16U;
  const std::uint32_t quiet_nan = (u >> 16U) | 0x40U;
  return bfloat16{static_cast<std::uint16_t>(
      detail::select_bits((u & 0x7fffffffU) > 0x7f800000U, quiet_nan, rounded))};
}

/// Widens an IEEE binary16 to float (exact, subnormals included).
[[nodiscard]] inline float to_float(float16 v) noexcept {
  const std::uint32_t h = v.bits;
  std::uint32_t o = (h & 0x7fffU) << 13U;  // exponent and mantissa in float position
  const std::uint32_t exp = o & 0x0f800000U;
  o += 0x38000000U;                                                 // rebias 15 -> 127
  o = detail::select_bits(exp == 0x0f800000U, o + 0x38000000U, o);  // infinity / NaN
  // Subnormal: let the FPU normalise man * 2^-24.
  const float sub = std::bit_cast<float>(o + 0x00800000U) - std::bit_cast<float>(0x38800000U);
  const std::uint32_t bits = detail::select_bits(exp == 0, std::bit_cast<std::uint32_t>(sub), o);
  return std::bit_cast<float>(bits | ((h & 0x8000U) << 16U));
}

/// Narrows a float to IEEE binary16, rounding to nearest even; overflow gives infinity.
[[nodiscard]] inline float16 to_float16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16U) & 0x8000U;
  const std::uint32_t abs = u & 0x7fffffffU;
  const std::uint32_t nan = 0x7e00U | ((abs >> 13U) & 0x3ffU);
  // Below 2^-14 the result is subnormal: adding 0.5 lets the FPU's round-to-nearest-even
  // place the bits of man * 2^-24.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(abs) + 0.5F) - 0x3f000000U;
  // Normal: rebias the exponent (-112 << 23) and round at bit 13, ties to even.
  const std::uint32_t normal = (abs + 0xc8000fffU + ((abs >> 13U) & 1U)) >> 13U;
  std::uint32_t r = detail::select_bits(abs < 0x38800000U, sub, normal);
  r = detail::select_bits(abs >= 0x477ff000U, 0x7c00U, r);  // rounds to >= 65520: infinity
  r = detail::select_bits(abs > 0x7f800000U, nan, r);
  return float16{static_cast<std::uint16_t>(sign | r)};
}

/// Maps a C++ element type to its DType (float, double, bfloat16, float16).
template <class T>
struct dtype_of;
/// float is DType::float32.
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;  ///< the DType of float
};
/// double is DType::float64.
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;  ///< the DType of double
};
/// bfloat16 is DType::bfloat16.
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bfloat16;  ///< the DType of bfloat16
};
/// float16 is DType::float16.
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::float16;  ///< the DType of float16
};

/// True for the element types a layer can hold.
template <class T>
concept Element = requires {
  dtype_of<T>::value;
};

}  // namespace paramwin
