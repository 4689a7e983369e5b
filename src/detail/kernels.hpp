#pragma once
// The inner loops: writing a layer in wire format, accumulating donors chunk by chunk, and
// committing the mix into the caller's memory. Memory-bound; written to vectorise (finiteness
// is tested on exponent bits and conversions are branch-free, see dtype.hpp).

#include <cstddef>
#include <span>

#include "paramwin/dtype.hpp"

namespace paramwin::detail {

/// Copies (or narrows) @p count elements from @p src (type @p from) to @p dst (type @p to)
/// in one pass, and returns whether every element written is finite. Supported: identical
/// types, and float32 to bfloat16 / float16 (where large values may overflow to infinity).
bool convert(void* dst, DType to, const void* src, DType from, std::size_t count);

/// acc[i] = (first ? 0 : acc[i]) + weight * widen(src[i]) for i < count, where @p acc holds
/// the accumulation type of a layer of @p layer_dtype (double for float64, else float).
/// Returns false if some src element is NaN or infinite (only looked for when @p check).
bool accumulate(void* acc, DType layer_dtype, const void* src, DType wire, std::size_t count,
                double weight, bool first, bool check);

/// One donor's contribution to mix(): its values in wire format and its weight.
struct MixSource {
  const void* data = nullptr;
  double weight = 0.0;
};

/// out[i] = momentum * out[i] + (1 - momentum) * sum_d weight_d * widen(src_d[i]) for
/// i < count, narrowed to @p out_dtype (the layer type; sources are in @p wire, float64 for a
/// float64 layer). One pass that reads every donor at once: k + 1 memory streams, which the
/// hardware prefetchers follow (accumulating donor after donor into a cache-sized block
/// measured 1.5-2x slower at k = 3, 50M floats). Up to 4 donors go straight into @p out;
/// more are summed in groups of 4 into a stack block first. Same accumulation type and order
/// as accumulate() then commit(), so both give bit-identical results. Never fails: callers
/// check finiteness beforehand.
void mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
         std::size_t count, double momentum);

/// out[i] = momentum * out[i] + (1 - momentum) * acc[i], narrowed to @p out_dtype
/// (out[i] = acc[i] when momentum is 0).
void commit(void* out, DType out_dtype, const void* acc, std::size_t count, double momentum);

/// Bytes per element of the accumulation type for a layer of @p layer_dtype.
[[nodiscard]] constexpr std::size_t acc_size(DType layer_dtype) noexcept {
  return layer_dtype == DType::float64 ? sizeof(double) : sizeof(float);
}

}  // namespace paramwin::detail
