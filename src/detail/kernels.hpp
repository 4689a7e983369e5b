#pragma once
// The inner loops: writing a layer in wire format, accumulating donors chunk by chunk, and
// committing the mix into the caller's memory. Memory-bound; written to vectorise (finiteness
// is tested on exponent bits and conversions are branch-free, see dtype.hpp).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "paramwin/dtype.hpp"

namespace paramwin::detail {

/// Copies (or narrows) @p count elements from @p src (type @p from) to @p dst (type @p to)
/// in one pass, and returns whether every element written is finite. Supported: identical
/// types, and float32 to bfloat16 / float16 (where large values may overflow to infinity).
/// @p batch_bytes: the bytes written by the whole batch this call is part of (a publish of
/// many layers), for the choice of stores (StoreMode); 0 for this call alone.
bool convert(void* dst, DType to, const void* src, DType from, std::size_t count,
             std::size_t batch_bytes = 0);

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
/// @p batch_bytes: as for convert() (a pull of many layers).
void mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
         std::size_t count, double momentum, std::size_t batch_bytes = 0);

/// out[i] = momentum * out[i] + (1 - momentum) * acc[i], narrowed to @p out_dtype
/// (out[i] = acc[i] when momentum is 0).
void commit(void* out, DType out_dtype, const void* acc, std::size_t count, double momentum);

/// How the kernels store outputs they only write (convert(), mix() without momentum,
/// accumulate() of a first donor, commit() without momentum).
enum class StoreMode {
  automatic,  ///< streaming stores for outputs of kStreamBytes or more, ordinary ones below
  regular,    ///< always ordinary (write-allocate) stores
  streaming,  ///< always non-temporal stores (after an ordinary unaligned head)
};

/// Output size from which StoreMode::automatic streams: larger than the caches keep for one
/// core on the machines measured (docs/benchmarks-intel.md), smaller than the layers where a
/// store loop lost to memcpy.
inline constexpr std::size_t kStreamBytes = std::size_t{16} << 20;

/// Sets the store mode for every later kernel call in the process (automatic by default).
/// For tests, which must run both store paths whatever the CPU, and for benchmarks.
void set_store_mode(StoreMode mode) noexcept;

/// The store mode in force.
[[nodiscard]] StoreMode store_mode() noexcept;

/// Copies of whole cache lines with non-temporal stores (not fenced): @p dst 64-byte aligned,
/// @p bytes a multiple of 64; for copy, @p src (an L1 block) 64-byte aligned too.
struct StreamCopy {
  const char* name;  ///< "avx512 (64-byte)", "avx2 (32-byte)", "sse2 (16-byte)" or "memcpy"
  void (*copy)(void* dst, const void* src, std::size_t bytes) noexcept;
  /// The same copy from a @p src of any alignment, in one pass with a search for elements of
  /// @p elem bytes (2, 4 or 8) whose bits under @p exp are all set (non-finite); nonzero if
  /// one is found.
  std::uint32_t (*copy_check)(void* dst, const void* src, std::size_t bytes, std::size_t elem,
                              std::uint64_t exp) noexcept;
  /// @p dst[i] = @p w * float(@p src[i]) for the bfloat16 bits @p src (any alignment), i in
  /// [0, @p n), @p n a multiple of 16 (whole lines of @p dst), read as two streams (the two
  /// halves side by side: one core keeps more reads in flight than with one; 1.62x against
  /// 1.42x a float32 memcpy on the development Xeon, docs/benchmarks-intel.md). The same bits
  /// as the fused loop's widening (a shift, then an IEEE multiply).
  void (*widen_bf16)(float* dst, const std::uint16_t* src, std::size_t n, float w) noexcept;
};

/// The streaming copies this CPU runs, widest first (never empty). The kernels use the first
/// unless set_stream_copy() picks another.
[[nodiscard]] std::span<const StreamCopy> stream_copies() noexcept;

/// Makes the kernels stream with stream_copies()[@p index] (for tests: every variant the CPU
/// runs, not only the widest). Throws std::out_of_range past the supported ones.
void set_stream_copy(std::size_t index);

/// The name of the streaming copy in use.
[[nodiscard]] const char* stream_copy_name() noexcept;

/// Which clone of the kernels the loader chose on this CPU: "x86-64-v4" (AVX-512),
/// "x86-64-v3" (AVX2), "default" (the x86-64 baseline), or "portable" (a build without clones).
[[nodiscard]] const char* kernel_clone() noexcept;

/// One line for reports: the clone, the store mode and the streaming threshold.
[[nodiscard]] std::string kernel_summary();

/// Bytes per element of the accumulation type for a layer of @p layer_dtype.
[[nodiscard]] constexpr std::size_t acc_size(DType layer_dtype) noexcept {
  return layer_dtype == DType::float64 ? sizeof(double) : sizeof(float);
}

}  // namespace paramwin::detail
