#include "detail/kernels.hpp"

#include <algorithm>
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

// --- mix(): k donors fused into one pass ----------------------------------------------------

// How a layer type's elements are stored and widened: 16-bit types as raw bits (GCC 12 does
// not vectorise loads and stores of the wrapper structs).
template <class T>
struct Elem {
  using raw = T;
  static T widen(T v) noexcept { return v; }
  template <class Acc>
  static T narrow(Acc v) noexcept { return v; }
};
template <>
struct Elem<bfloat16> {
  using raw = std::uint16_t;
  static float widen(raw v) noexcept { return to_float(bfloat16{v}); }
  static raw narrow(float v) noexcept { return to_bfloat16(v).bits; }
};
template <>
struct Elem<float16> {
  using raw = std::uint16_t;
  static float widen(raw v) noexcept { return to_float(float16{v}); }
  static raw narrow(float v) noexcept { return to_float16(v).bits; }
};

enum class MixMode { write, blend, add };  // out = sum | m * out + (1 - m) * sum | out += sum

constexpr std::size_t kMaxFused = 4;      // donors per fused pass
constexpr std::size_t kMixBlock = 2048;   // elements per stack block when k > kMaxFused

// One pass over n elements with K (1..4) sources. The sum runs left to right from the first
// donor (or from out[i] in add mode), exactly as accumulate() does.
template <MixMode M, std::size_t K, class Acc, class Src, class Out>
void fused(typename Elem<Out>::raw* __restrict out, const typename Elem<Src>::raw* __restrict s0,
           const typename Elem<Src>::raw* __restrict s1, const typename Elem<Src>::raw* __restrict s2,
           const typename Elem<Src>::raw* __restrict s3, const Acc* w, std::size_t n, Acc m) {
  const Acc w0 = w[0];
  const Acc w1 = K > 1 ? w[1] : Acc{};
  const Acc w2 = K > 2 ? w[2] : Acc{};
  const Acc w3 = K > 3 ? w[3] : Acc{};
  const Acc keep = Acc{1} - m;
  for (std::size_t i = 0; i < n; ++i) {
    Acc v;
    if constexpr (M == MixMode::add) {
      v = out[i] + w0 * static_cast<Acc>(Elem<Src>::widen(s0[i]));
    } else {
      v = w0 * static_cast<Acc>(Elem<Src>::widen(s0[i]));
    }
    if constexpr (K > 1) v += w1 * static_cast<Acc>(Elem<Src>::widen(s1[i]));
    if constexpr (K > 2) v += w2 * static_cast<Acc>(Elem<Src>::widen(s2[i]));
    if constexpr (K > 3) v += w3 * static_cast<Acc>(Elem<Src>::widen(s3[i]));
    if constexpr (M == MixMode::blend) {
      out[i] = Elem<Out>::narrow(m * static_cast<Acc>(Elem<Out>::widen(out[i])) + keep * v);
    } else if constexpr (M == MixMode::add) {
      out[i] = v;
    } else {
      out[i] = Elem<Out>::narrow(v);
    }
  }
}

// Up to 4 sources starting at @p first, dispatched to the fused loop of their count.
template <MixMode M, class Acc, class Src, class Out>
void fused_group(typename Elem<Out>::raw* out, std::span<const MixSource> src, std::size_t first,
                 std::size_t offset, std::size_t n, Acc m) {
  using S = typename Elem<Src>::raw;
  const std::size_t k = std::min(kMaxFused, src.size() - first);
  const S* p[kMaxFused] = {};
  Acc w[kMaxFused] = {};
  for (std::size_t d = 0; d < k; ++d) {
    p[d] = static_cast<const S*>(src[first + d].data) + offset;
    w[d] = static_cast<Acc>(src[first + d].weight);
  }
  for (std::size_t d = k; d < kMaxFused; ++d) {
    p[d] = p[0];
  }
  switch (k) {
    case 1: fused<M, 1, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m); return;
    case 2: fused<M, 2, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m); return;
    case 3: fused<M, 3, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m); return;
    default: fused<M, 4, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m); return;
  }
}

template <class Acc, class Src, class Out>
void mix_typed(void* out_v, DType out_dtype, std::span<const MixSource> src, std::size_t count,
               double momentum) {
  auto* out = static_cast<typename Elem<Out>::raw*>(out_v);
  const auto m = static_cast<Acc>(momentum);
  if (src.size() <= kMaxFused) {
    if (momentum == 0.0) {
      fused_group<MixMode::write, Acc, Src, Out>(out, src, 0, 0, count, m);
    } else {
      fused_group<MixMode::blend, Acc, Src, Out>(out, src, 0, 0, count, m);
    }
    return;
  }
  // More donors than one pass holds: sum groups of 4 into a stack block, then commit it.
  Acc block[kMixBlock];
  for (std::size_t first = 0; first < count; first += kMixBlock) {
    const std::size_t n = std::min(kMixBlock, count - first);
    fused_group<MixMode::write, Acc, Src, Acc>(block, src, 0, first, n, Acc{});
    for (std::size_t g = kMaxFused; g < src.size(); g += kMaxFused) {
      fused_group<MixMode::add, Acc, Src, Acc>(block, src, g, first, n, Acc{});
    }
    commit(out + first, out_dtype, block, n, momentum);
  }
}

template <class Src>
void mix_float(void* out, DType out_dtype, std::span<const MixSource> src, std::size_t count,
               double momentum) {
  switch (out_dtype) {
    case DType::float32: return mix_typed<float, Src, float>(out, out_dtype, src, count, momentum);
    case DType::bfloat16: return mix_typed<float, Src, bfloat16>(out, out_dtype, src, count, momentum);
    case DType::float16: return mix_typed<float, Src, float16>(out, out_dtype, src, count, momentum);
    case DType::float64: break;
  }
  throw std::logic_error("paramwin: mix: float64 output from a 32-bit accumulation");
}

}  // namespace

void mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
         std::size_t count, double momentum) {
  if (count == 0 || sources.empty()) {
    return;
  }
  if (out_dtype == DType::float64) {
    // float64 layers are stored natively whatever the wire format.
    mix_typed<double, double, double>(out, out_dtype, sources, count, momentum);
    return;
  }
  switch (wire) {
    case DType::float32: return mix_float<float>(out, out_dtype, sources, count, momentum);
    case DType::bfloat16: return mix_float<bfloat16>(out, out_dtype, sources, count, momentum);
    case DType::float16: return mix_float<float16>(out, out_dtype, sources, count, momentum);
    case DType::float64: break;
  }
  throw std::logic_error("paramwin: mix: float64 wire for a non-float64 layer");
}

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
