#include "detail/kernels.hpp"

#include <cstring>
#include <stdexcept>

namespace paramwin::detail {
namespace {

template <class T>
inline float widen(T v) noexcept {
  return to_float(v);
}
template <>
inline float widen<float>(float v) noexcept {
  return v;
}

template <class Acc, class Src>
bool accumulate_typed(Acc* __restrict acc, const Src* __restrict src, std::size_t n, Acc w,
                      bool first, bool check) {
  // x - x is 0 for every finite x and NaN for NaN and infinities; cheap and vectorisable.
  if (first) {
    if (check) {
      bool ok = true;
      for (std::size_t i = 0; i < n; ++i) {
        const Acc x = static_cast<Acc>(widen(src[i]));
        ok &= (x - x == Acc(0));
        acc[i] = w * x;
      }
      return ok;
    }
    for (std::size_t i = 0; i < n; ++i) {
      acc[i] = w * static_cast<Acc>(widen(src[i]));
    }
    return true;
  }
  if (check) {
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      const Acc x = static_cast<Acc>(widen(src[i]));
      ok &= (x - x == Acc(0));
      acc[i] += w * x;
    }
    return ok;
  }
  for (std::size_t i = 0; i < n; ++i) {
    acc[i] += w * static_cast<Acc>(widen(src[i]));
  }
  return true;
}

template <class Acc>
bool accumulate_double_src(Acc* acc, const double* __restrict src, std::size_t n, Acc w,
                           bool first, bool check) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = src[i];
    if (check) {
      ok &= (x - x == 0.0);
    }
    acc[i] = (first ? Acc(0) : acc[i]) + w * static_cast<Acc>(x);
  }
  return ok;
}

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

void convert(void* dst, DType to, const void* src, DType from, std::size_t count) {
  if (to == from) {
    if (count != 0) {
      std::memcpy(dst, src, count * dtype_size(to));
    }
    return;
  }
  if (from != DType::float32) {
    throw std::logic_error("paramwin: unsupported wire conversion");
  }
  const auto* s = static_cast<const float*>(src);
  if (to == DType::bfloat16) {
    auto* d = static_cast<bfloat16*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
      d[i] = to_bfloat16(s[i]);
    }
  } else if (to == DType::float16) {
    auto* d = static_cast<float16*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
      d[i] = to_float16(s[i]);
    }
  } else {
    throw std::logic_error("paramwin: unsupported wire conversion");
  }
}

bool accumulate(void* acc, DType layer_dtype, const void* src, DType wire, std::size_t count,
                double weight, bool first, bool check) {
  if (layer_dtype == DType::float64) {
    // float64 layers are stored natively whatever the wire format.
    return accumulate_double_src(static_cast<double*>(acc), static_cast<const double*>(src),
                                 count, weight, first, check);
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
  switch (out_dtype) {
    case DType::float64: {
      auto* o = static_cast<double*>(out);
      const auto* a = static_cast<const double*>(acc);
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
