#pragma once
/// @file dtype.hpp
/// Element types of parameter layers, and the 16-bit float types used on the wire.

#include <bit>
#include <cstdint>
#include <cstddef>
#include <string_view>

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

/// Lower-case name of @p dtype ("float32", ...).
[[nodiscard]] std::string_view dtype_name(DType dtype) noexcept;

/// Parses a dtype name; throws InvalidArgument listing the valid names.
[[nodiscard]] DType parse_dtype(std::string_view name);

/// Brain float: the upper 16 bits of an IEEE float32. Storage type only.
struct bfloat16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(bfloat16, bfloat16) = default;
};

/// IEEE 754 binary16. Storage type only.
struct float16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(float16, float16) = default;
};

/// Widens a bfloat16 to float (exact).
[[nodiscard]] inline float to_float(bfloat16 v) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16U);
}

/// Narrows a float to bfloat16, rounding to nearest even; NaN stays NaN.
[[nodiscard]] inline bfloat16 to_bfloat16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffU) > 0x7f800000U) {
    return bfloat16{static_cast<std::uint16_t>((u >> 16U) | 0x0040U)};
  }
  const std::uint32_t rounding = 0x7fffU + ((u >> 16U) & 1U);
  return bfloat16{static_cast<std::uint16_t>((u + rounding) >> 16U)};
}

/// Widens an IEEE binary16 to float (exact, subnormals included).
[[nodiscard]] inline float to_float(float16 v) noexcept {
  const std::uint32_t h = v.bits;
  const std::uint32_t sign = (h & 0x8000U) << 16U;
  const std::uint32_t exp = (h >> 10U) & 0x1fU;
  const std::uint32_t man = h & 0x3ffU;
  if (exp == 0x1fU) {
    return std::bit_cast<float>(sign | 0x7f800000U | (man << 13U));
  }
  if (exp != 0) {
    return std::bit_cast<float>(sign | ((exp + 112U) << 23U) | (man << 13U));
  }
  // zero or subnormal: man * 2^-24
  const float mag = static_cast<float>(man) * 5.9604644775390625e-8F;
  return sign != 0 ? -mag : mag;
}

/// Narrows a float to IEEE binary16, rounding to nearest even; overflow gives infinity.
[[nodiscard]] inline float16 to_float16(float f) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16U) & 0x8000U);
  const std::uint32_t abs = u & 0x7fffffffU;
  if (abs > 0x7f800000U) {  // NaN
    return float16{static_cast<std::uint16_t>(sign | 0x7e00U | ((abs >> 13U) & 0x3ffU))};
  }
  if (abs >= 0x477ff000U) {  // rounds to >= 65520: infinity
    return float16{static_cast<std::uint16_t>(sign | 0x7c00U)};
  }
  if (abs < 0x38800000U) {  // below the smallest normal half (2^-14): subnormal or zero
    // Adding 0.5 lets the FPU's round-to-nearest-even place the bits of man * 2^-24.
    const float shifted = std::bit_cast<float>(abs) + 0.5F;
    return float16{static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000U))};
  }
  const std::uint32_t odd = (abs >> 13U) & 1U;
  const std::uint32_t rounded = abs + 0xc8000fffU + odd;  // rebias exponent (-112 << 23) and round
  return float16{static_cast<std::uint16_t>(sign | (rounded >> 13U))};
}

/// Maps a C++ element type to its DType (float, double, bfloat16, float16).
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bfloat16;
};
template <>
struct dtype_of<float16> {
  static constexpr DType value = DType::float16;
};

/// True for the element types a layer can hold.
template <class T>
concept Element = requires { dtype_of<T>::value; };

}  // namespace paramwin
