#include "detail/kernels.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace paramwin::detail {
namespace {

// Non-finite <=> exponent bits all ones. Integer tests OR-reduce, so the loops vectorise
// (a floating-point test such as x - x == 0 would block that without -ffast-math).
inline std::uint32_t non_finite(float x) noexcept {
  return static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(x) & 0x7f800000U) == 0x7f800000U);
}
inline std::uint32_t non_finite(double x) noexcept {
  constexpr std::uint64_t kExp = 0x7ff0000000000000ULL;
  return static_cast<std::uint32_t>((std::bit_cast<std::uint64_t>(x) & kExp) == kExp);
}
inline std::uint32_t non_finite(bfloat16 x) noexcept {
  return static_cast<std::uint32_t>((x.bits & 0x7f80U) == 0x7f80U);
}
inline std::uint32_t non_finite(float16 x) noexcept {
  return static_cast<std::uint32_t>((x.bits & 0x7c00U) == 0x7c00U);
}

inline float widen(float v) noexcept { return v; }
inline double widen(double v) noexcept { return v; }
inline float widen(bfloat16 v) noexcept { return to_float(v); }
inline float widen(float16 v) noexcept { return to_float(v); }

template <class Out>
inline Out narrow(float v) noexcept;
template <>
inline float narrow<float>(float v) noexcept {
  return v;
}
template <>
inline bfloat16 narrow<bfloat16>(float v) noexcept {
  return to_bfloat16(v);
}
template <>
inline float16 narrow<float16>(float v) noexcept {
  return to_float16(v);
}

template <class T>
bool copy_checked(T* __restrict dst, const T* __restrict src, std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T v = src[i];
    bad |= non_finite(v);
    dst[i] = v;
  }
  return bad == 0;
}

// 16-bit results are handled as raw bits: GCC 12 does not vectorise stores of the wrapper
// structs. Exponent masks: 0x7f80 for bfloat16, 0x7c00 for float16.
template <class Out, std::uint32_t kExpMask>
bool narrow_checked(void* dst, const float* __restrict src, std::size_t n) {
  auto* __restrict d = static_cast<std::uint16_t*>(dst);
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t v = narrow<Out>(src[i]).bits;
    bad |= static_cast<std::uint32_t>((v & kExpMask) == kExpMask);
    d[i] = v;
  }
  return bad == 0;
}

template <std::uint32_t kExpMask>
bool copy_checked_16(void* dst, const void* src, std::size_t n) {
  auto* __restrict d = static_cast<std::uint16_t*>(dst);
  const auto* __restrict s = static_cast<const std::uint16_t*>(src);
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t v = s[i];
    bad |= static_cast<std::uint32_t>((v & kExpMask) == kExpMask);
    d[i] = v;
  }
  return bad == 0;
}

template <class Acc, class Src>
bool accumulate_typed(Acc* __restrict acc, const Src* __restrict src, std::size_t n, Acc w,
                      bool first, bool check) {
  std::uint32_t bad = 0;
  if (first) {
    if (check) {
      for (std::size_t i = 0; i < n; ++i) {
        bad |= non_finite(src[i]);
        acc[i] = w * static_cast<Acc>(widen(src[i]));
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        acc[i] = w * static_cast<Acc>(widen(src[i]));
      }
    }
  } else if (check) {
    for (std::size_t i = 0; i < n; ++i) {
      bad |= non_finite(src[i]);
      acc[i] += w * static_cast<Acc>(widen(src[i]));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      acc[i] += w * static_cast<Acc>(widen(src[i]));
    }
  }
  return bad == 0;
}

template <class Out>
void commit_float(Out* __restrict out, const float* __restrict acc, std::size_t n, float m) {
  if (m == 0.0F) {
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = narrow<Out>(acc[i]);
    }
    return;
  }
  const float keep = 1.0F - m;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = narrow<Out>(m * widen(out[i]) + keep * acc[i]);
  }
}

}  // namespace

bool convert(void* dst, DType to, const void* src, DType from, std::size_t count) {
  if (to == from) {
    switch (to) {
      case DType::float32:
        return copy_checked(static_cast<float*>(dst), static_cast<const float*>(src), count);
      case DType::float64:
        return copy_checked(static_cast<double*>(dst), static_cast<const double*>(src), count);
      case DType::bfloat16:
        return copy_checked_16<0x7f80U>(dst, src, count);
      case DType::float16:
        return copy_checked_16<0x7c00U>(dst, src, count);
    }
  }
  if (from == DType::float32 && to == DType::bfloat16) {
    return narrow_checked<bfloat16, 0x7f80U>(dst, static_cast<const float*>(src), count);
  }
  if (from == DType::float32 && to == DType::float16) {
    return narrow_checked<float16, 0x7c00U>(dst, static_cast<const float*>(src), count);
  }
  throw std::logic_error("paramwin: unsupported wire conversion");
}

bool accumulate(void* acc, DType layer_dtype, const void* src, DType wire, std::size_t count,
                double weight, bool first, bool check) {
  if (layer_dtype == DType::float64) {
    // float64 layers are stored natively whatever the wire format.
    return accumulate_typed(static_cast<double*>(acc), static_cast<const double*>(src), count,
                            weight, first, check);
  }
  auto* a = static_cast<float*>(acc);
  const auto w = static_cast<float>(weight);
  switch (wire) {
    case DType::float32:
      return accumulate_typed(a, static_cast<const float*>(src), count, w, first, check);
    case DType::bfloat16:
      return accumulate_typed(a, static_cast<const bfloat16*>(src), count, w, first, check);
    case DType::float16:
      return accumulate_typed(a, static_cast<const float16*>(src), count, w, first, check);
    case DType::float64:
      break;
  }
  throw std::logic_error("paramwin: float64 wire for a non-float64 layer");
}

void commit(void* out, DType out_dtype, const void* acc, std::size_t count, double momentum) {
  if (count == 0) {
    return;  // an empty layer's data() may be null, and memcpy(nullptr, ..., 0) is undefined
  }
  switch (out_dtype) {
    case DType::float64: {
      auto* __restrict o = static_cast<double*>(out);
      const auto* __restrict a = static_cast<const double*>(acc);
      if (momentum == 0.0) {
        std::memcpy(o, a, count * sizeof(double));
      } else {
        for (std::size_t i = 0; i < count; ++i) {
          o[i] = momentum * o[i] + (1.0 - momentum) * a[i];
        }
      }
      return;
    }
    case DType::float32:
      if (momentum == 0.0) {
        std::memcpy(out, acc, count * sizeof(float));
        return;
      }
      commit_float(static_cast<float*>(out), static_cast<const float*>(acc), count,
                   static_cast<float>(momentum));
      return;
    case DType::bfloat16:
      commit_float(static_cast<bfloat16*>(out), static_cast<const float*>(acc), count,
                   static_cast<float>(momentum));
      return;
    case DType::float16:
      commit_float(static_cast<float16*>(out), static_cast<const float*>(acc), count,
                   static_cast<float>(momentum));
      return;
  }
}

}  // namespace paramwin::detail
