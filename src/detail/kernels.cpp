#include "detail/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <type_traits>

#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  // the streaming copies, each built for its own target (below)
#define PARAMWIN_STREAM_X86 1
#endif

// The hot loops are built with everything inlined (flatten: the float16 conversions are big
// enough that GCC otherwise calls them per element and vectorises nothing). At the x86-64
// baseline (SSE2) the narrowing and widening loops are still compute-bound: SSE2 has no 32- to
// 16-bit pack, and float16 needs several selects per element. So they are also built for
// x86-64-v3 (AVX2) and x86-64-v4 (AVX-512), and the loader picks the best clone once (ifunc).
// Same source, same IEEE arithmetic (no FP contraction, see src/CMakeLists.txt), so every clone
// gives the same bits (tests/detail/detail_test.cpp checks the running clone against dtype.hpp).
// Not under ThreadSanitizer: it instruments the clones' ifunc resolvers, which the loader runs
// before the sanitizer's runtime exists (a crash at start-up).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(__SANITIZE_THREAD__)
#define PARAMWIN_KERNEL_CLONES 1
#define PARAMWIN_KERNEL \
  __attribute__((flatten, target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__)
#define PARAMWIN_KERNEL __attribute__((flatten))
#else
#define PARAMWIN_KERNEL
#endif

namespace paramwin::detail {
namespace {

// How each element type is stored, widened, narrowed and tested. 16-bit types are handled as
// raw bits: GCC 12 vectorises none of the loops that load or store the wrapper structs (the
// float16 accumulate ran at 2 ns per element that way). Non-finite <=> exponent bits all ones;
// integer tests OR-reduce, so the loops vectorise (a floating-point test such as x - x == 0
// would block that without -ffast-math).
template <class T>
struct Elem;
template <>
struct Elem<float> {
  using raw = float;
  static constexpr std::uint64_t exp = 0x7f800000U;
  static float widen(raw v) noexcept { return v; }
  static raw narrow(float v) noexcept { return v; }
  static std::uint32_t non_finite(raw v) noexcept {
    return static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v) & 0x7f800000U) ==
                                      0x7f800000U);
  }
};
template <>
struct Elem<double> {
  using raw = double;
  static constexpr std::uint64_t exp = 0x7ff0000000000000ULL;
  static double widen(raw v) noexcept { return v; }
  static raw narrow(double v) noexcept { return v; }
  static std::uint32_t non_finite(raw v) noexcept {
    constexpr std::uint64_t kExp = 0x7ff0000000000000ULL;
    return static_cast<std::uint32_t>((std::bit_cast<std::uint64_t>(v) & kExp) == kExp);
  }
};
template <>
struct Elem<bfloat16> {
  using raw = std::uint16_t;
  static constexpr std::uint64_t exp = 0x7f80U;
  static float widen(raw v) noexcept { return to_float(bfloat16{v}); }
  static raw narrow(float v) noexcept { return to_bfloat16(v).bits; }
  static std::uint32_t non_finite(raw v) noexcept {
    return static_cast<std::uint32_t>((v & 0x7f80U) == 0x7f80U);
  }
};
template <>
struct Elem<float16> {
  using raw = std::uint16_t;
  static constexpr std::uint64_t exp = 0x7c00U;
  static float widen(raw v) noexcept { return to_float(float16{v}); }
  static raw narrow(float v) noexcept { return to_float16(v).bits; }
  static std::uint32_t non_finite(raw v) noexcept {
    return static_cast<std::uint32_t>((v & 0x7c00U) == 0x7c00U);
  }
};
template <class T>
using Raw = typename Elem<T>::raw;

// --- where outputs go: through the cache or around it ----------------------------------------
//
// A loop with ordinary stores into memory that is not cached first reads every output line
// (read for ownership), then writes it back: 3 memory transfers per line written instead of 2.
// glibc's memcpy avoids that on large copies (non-temporal stores, or `rep movsb`, whose fast
// string protocol skips the read on Intel), so a plain store loop loses to it by up to 1.5x
// there, and a bfloat16 widening (2 bytes read, 4 written) loses its whole advantage. Outputs of
// kStreamBytes or more are therefore computed block by block into an L1-sized buffer with the
// same loop (same bits) and streamed out with non-temporal stores; a same-type copy streams
// in one pass (copy_check below).

std::atomic<StoreMode> g_store_mode{StoreMode::automatic};

constexpr std::size_t kLine = 64;           // the cache line (and the stream alignment)
constexpr std::size_t kStreamBlock = 4096;  // bytes computed into the L1 buffer per block

// @p bytes: the output of the call, or of the batch of calls it is part of (a publish or a pull
// of many layers, whose lines all compete for the cache).
bool stream_output(std::size_t bytes) noexcept {
  switch (g_store_mode.load(std::memory_order_relaxed)) {
    case StoreMode::regular: return false;
    case StoreMode::streaming: return true;
    case StoreMode::automatic: break;
  }
  return bytes >= kStreamBytes;
}

// The block copies to memory with non-temporal stores: @p bytes (a multiple of kLine) from an
// L1 buffer to a line-aligned destination, without reading the destination's lines. Whole-line
// (64-byte) stores where the CPU has them, else 32- or 16-byte ones, which the write-combining
// buffers merge into lines. Called through a pointer chosen once for the CPU (not per kernel
// clone), so each can be tested on any CPU that runs it.
#if defined(PARAMWIN_STREAM_X86)
__attribute__((target("avx512f"))) void stream_copy_avx512(void* dst, const void* src,
                                                           std::size_t bytes) noexcept {
  auto* d = static_cast<__m512i*>(dst);
  const auto* s = static_cast<const __m512i*>(src);
  for (std::size_t i = 0; i < bytes / sizeof(__m512i); ++i) {
    _mm512_stream_si512(d + i, _mm512_load_si512(s + i));
  }
}
__attribute__((target("avx2"))) void stream_copy_avx2(void* dst, const void* src,
                                                      std::size_t bytes) noexcept {
  auto* d = static_cast<__m256i*>(dst);
  const auto* s = static_cast<const __m256i*>(src);
  for (std::size_t i = 0; i < bytes / sizeof(__m256i); ++i) {
    _mm256_stream_si256(d + i, _mm256_load_si256(s + i));
  }
}
void stream_copy_sse2(void* dst, const void* src, std::size_t bytes) noexcept {
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (std::size_t i = 0; i < bytes / sizeof(__m128i); ++i) {
    _mm_stream_si128(d + i, _mm_load_si128(s + i));
  }
}
bool has_avx512bw() noexcept {
  return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
}
bool has_avx2() noexcept { return __builtin_cpu_supports("avx2") != 0; }
#else
void stream_copy_plain(void* dst, const void* src, std::size_t bytes) noexcept {
  std::memcpy(dst, src, bytes);  // no streaming stores known here: an ordinary copy
}
#endif
// A copy of whole lines with non-temporal stores that also looks for non-finite elements
// (exponent bits all ones: (x & exp) == exp in lanes of elem bytes): the same-type publish in
// one pass, loads and streaming stores interleaved. (Computing into an L1 block and then
// streaming it, as the converting loops do, measured 1.3-1.4x a memcpy for this copy on an
// AVX-512 Xeon, interleaved 1.0-1.2x; docs/benchmarks-intel.md.) @p src any alignment;
// returns nonzero if one was found.
#if defined(PARAMWIN_STREAM_X86)
__attribute__((target("avx512f,avx512bw"))) std::uint32_t copy_check_avx512(
    void* dst, const void* src, std::size_t bytes, std::size_t elem, std::uint64_t exp) noexcept {
  auto* d = static_cast<__m512i*>(dst);
  const auto* s = static_cast<const __m512i*>(src);
  const std::size_t n = bytes / sizeof(__m512i);
  std::uint64_t bad = 0;
  if (elem == 2) {
    const __m512i m = _mm512_set1_epi16(static_cast<short>(exp));
    for (std::size_t i = 0; i < n; ++i) {
      const __m512i v = _mm512_loadu_si512(s + i);
      bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(v, m), m);
      _mm512_stream_si512(d + i, v);
    }
  } else if (elem == 4) {
    const __m512i m = _mm512_set1_epi32(static_cast<int>(exp));
    for (std::size_t i = 0; i < n; ++i) {
      const __m512i v = _mm512_loadu_si512(s + i);
      bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, m), m);
      _mm512_stream_si512(d + i, v);
    }
  } else {
    const __m512i m = _mm512_set1_epi64(static_cast<long long>(exp));
    for (std::size_t i = 0; i < n; ++i) {
      const __m512i v = _mm512_loadu_si512(s + i);
      bad |= _mm512_cmpeq_epi64_mask(_mm512_and_si512(v, m), m);
      _mm512_stream_si512(d + i, v);
    }
  }
  return bad != 0 ? 1U : 0U;
}
__attribute__((target("avx2"))) std::uint32_t copy_check_avx2(void* dst, const void* src,
                                                              std::size_t bytes, std::size_t elem,
                                                              std::uint64_t exp) noexcept {
  auto* d = static_cast<__m256i*>(dst);
  const auto* s = static_cast<const __m256i*>(src);
  const std::size_t n = bytes / sizeof(__m256i);
  __m256i bad = _mm256_setzero_si256();
  const __m256i m = elem == 2   ? _mm256_set1_epi16(static_cast<short>(exp))
                    : elem == 4 ? _mm256_set1_epi32(static_cast<int>(exp))
                                : _mm256_set1_epi64x(static_cast<long long>(exp));
  for (std::size_t i = 0; i < n; ++i) {
    const __m256i v = _mm256_loadu_si256(s + i);
    const __m256i x = _mm256_and_si256(v, m);
    bad = _mm256_or_si256(bad, elem == 2   ? _mm256_cmpeq_epi16(x, m)
                               : elem == 4 ? _mm256_cmpeq_epi32(x, m)
                                           : _mm256_cmpeq_epi64(x, m));
    _mm256_stream_si256(d + i, v);
  }
  return _mm256_testz_si256(bad, bad) != 0 ? 0U : 1U;
}
std::uint32_t copy_check_sse2(void* dst, const void* src, std::size_t bytes, std::size_t elem,
                              std::uint64_t exp) noexcept {
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  const std::size_t n = bytes / sizeof(__m128i);
  // 8-byte lanes with 32-bit compares: the low half's target (1) never equals (x & 0).
  const auto hi = static_cast<int>(exp >> 32);
  const __m128i m = elem == 2   ? _mm_set1_epi16(static_cast<short>(exp))
                    : elem == 4 ? _mm_set1_epi32(static_cast<int>(exp))
                                : _mm_set_epi32(hi, 0, hi, 0);
  const __m128i t = elem == 8 ? _mm_set_epi32(hi, 1, hi, 1) : m;
  __m128i bad = _mm_setzero_si128();
  for (std::size_t i = 0; i < n; ++i) {
    const __m128i v = _mm_loadu_si128(s + i);
    const __m128i x = _mm_and_si128(v, m);
    bad = _mm_or_si128(bad, elem == 2 ? _mm_cmpeq_epi16(x, t) : _mm_cmpeq_epi32(x, t));
    _mm_stream_si128(d + i, v);
  }
  return _mm_movemask_epi8(bad) != 0 ? 1U : 0U;
}
#else
std::uint32_t copy_check_plain(void* dst, const void* src, std::size_t bytes, std::size_t elem,
                               std::uint64_t exp) noexcept {
  std::memcpy(dst, src, bytes);
  const auto* p = static_cast<const unsigned char*>(src);
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < bytes; i += elem) {
    std::uint64_t v = 0;
    std::memcpy(&v, p + i, elem);  // little- or big-endian: the value's own bits either way
    if (elem == 2) v = static_cast<std::uint16_t>(v);
    bad |= static_cast<std::uint32_t>((v & exp) == exp);
  }
  return bad;
}
#endif

// The bfloat16 widening of a one-donor pull, streamed straight from registers (see
// StreamCopy::widen_bf16): computing into an L1 block and copying that out costs a store and
// a load per element more, and one sequential read stream leaves the core's memory parallelism
// unused. The halves [0, h) and [h, 2h) advance together; the rest (< 2 steps) follows alone.
#if defined(PARAMWIN_STREAM_X86)
// GCC 12's AVX-512 headers start these conversions from _mm512_undefined_epi32(), which its
// -Wmaybe-uninitialized reports as uninitialised (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang (and clang-tidy) has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// 16 elements (one line out) / 8 elements (half a line), each for its own target (a lambda
// would not inherit the target).
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void widen16_avx512(
    float* dst, const std::uint16_t* src, __m512 w) noexcept {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m512i v = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
  _mm512_stream_ps(dst, _mm512_mul_ps(_mm512_castsi512_ps(v), w));
}
__attribute__((target("avx2"), always_inline)) inline void widen8_avx2(float* dst,
                                                                       const std::uint16_t* src,
                                                                       __m256 w) noexcept {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m256i v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  _mm256_stream_ps(dst, _mm256_mul_ps(_mm256_castsi256_ps(v), w));
}
inline void widen8_sse2(float* dst, const std::uint16_t* src, __m128 w) noexcept {
  // (bits << 16) is (0, bits) interleaved as 16-bit halves.
  const __m128i zero = _mm_setzero_si128();
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  _mm_stream_ps(dst, _mm_mul_ps(_mm_castsi128_ps(_mm_unpacklo_epi16(zero, v)), w));
  _mm_stream_ps(dst + 4, _mm_mul_ps(_mm_castsi128_ps(_mm_unpackhi_epi16(zero, v)), w));
}
constexpr std::size_t kWidenStep = 32;  // elements per half per iteration: two lines out

__attribute__((target("avx512f,avx512bw"))) void widen_bf16_avx512(float* dst,
                                                                   const std::uint16_t* src,
                                                                   std::size_t n,
                                                                   float w) noexcept {
  const __m512 vw = _mm512_set1_ps(w);
  const std::size_t h = n / 2 / kWidenStep * kWidenStep;
  for (std::size_t i = 0; i < h; i += kWidenStep) {
    widen16_avx512(dst + i, src + i, vw);
    widen16_avx512(dst + i + 16, src + i + 16, vw);
    widen16_avx512(dst + h + i, src + h + i, vw);
    widen16_avx512(dst + h + i + 16, src + h + i + 16, vw);
  }
  for (std::size_t i = 2 * h; i < n; i += 16) widen16_avx512(dst + i, src + i, vw);
}
#pragma GCC diagnostic pop
__attribute__((target("avx2"))) void widen_bf16_avx2(float* dst, const std::uint16_t* src,
                                                     std::size_t n, float w) noexcept {
  const __m256 vw = _mm256_set1_ps(w);
  const std::size_t h = n / 2 / kWidenStep * kWidenStep;
  for (std::size_t i = 0; i < h; i += kWidenStep) {
    for (std::size_t j = 0; j < kWidenStep; j += 8) widen8_avx2(dst + i + j, src + i + j, vw);
    for (std::size_t j = 0; j < kWidenStep; j += 8) {
      widen8_avx2(dst + h + i + j, src + h + i + j, vw);
    }
  }
  for (std::size_t i = 2 * h; i < n; i += 8) widen8_avx2(dst + i, src + i, vw);
}
void widen_bf16_sse2(float* dst, const std::uint16_t* src, std::size_t n, float w) noexcept {
  const __m128 vw = _mm_set1_ps(w);
  const std::size_t h = n / 2 / kWidenStep * kWidenStep;
  for (std::size_t i = 0; i < h; i += kWidenStep) {
    for (std::size_t j = 0; j < kWidenStep; j += 8) widen8_sse2(dst + i + j, src + i + j, vw);
    for (std::size_t j = 0; j < kWidenStep; j += 8) {
      widen8_sse2(dst + h + i + j, src + h + i + j, vw);
    }
  }
  for (std::size_t i = 2 * h; i < n; i += 8) widen8_sse2(dst + i, src + i, vw);
}
#else
void widen_bf16_plain(float* dst, const std::uint16_t* src, std::size_t n, float w) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = w * std::bit_cast<float>(static_cast<std::uint32_t>(src[i]) << 16);
  }
}
#endif

bool always() noexcept { return true; }

// Every copy this build has, widest first, and whether the CPU runs it.
struct StreamCopyEntry {
  StreamCopy copy;
  bool (*supported)() noexcept;
};
#if defined(PARAMWIN_STREAM_X86)
constexpr StreamCopyEntry kStreamCopies[] = {
    {{"avx512 (64-byte)", stream_copy_avx512, copy_check_avx512, widen_bf16_avx512}, has_avx512bw},
    {{"avx2 (32-byte)", stream_copy_avx2, copy_check_avx2, widen_bf16_avx2}, has_avx2},
    {{"sse2 (16-byte)", stream_copy_sse2, copy_check_sse2, widen_bf16_sse2}, always},
};
#else
constexpr StreamCopyEntry kStreamCopies[] = {
    {{"memcpy", stream_copy_plain, copy_check_plain, widen_bf16_plain}, always}};
#endif

// The ones this CPU supports, computed once.
struct StreamCopies {
  StreamCopy list[std::size(kStreamCopies)] = {};
  std::size_t count = 0;
  StreamCopies() noexcept {
#if defined(PARAMWIN_STREAM_X86)
    __builtin_cpu_init();
#endif
    for (const StreamCopyEntry& e : kStreamCopies) {
      if (e.supported()) list[count++] = e.copy;
    }
  }
};
const StreamCopies& supported_copies() noexcept {
  static const StreamCopies copies;
  return copies;
}

std::atomic<std::size_t> g_stream_copy{0};  // index into supported_copies(), 0 = widest

const StreamCopy& current_copy() noexcept {
  return supported_copies().list[g_stream_copy.load(std::memory_order_relaxed)];
}

// Streaming stores are weakly ordered: fence them before anything that publishes their data
// (publish's release store of the version, a reader's unpin).
inline void stream_fence() noexcept {
#if defined(PARAMWIN_STREAM_X86)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Runs loop(dst, first, count) over [0, n) of @p out: in one call with ordinary stores, or,
// when @p stream, into an L1 block that is then streamed to out (the unaligned head and the
// tail use ordinary stores). loop returns a value OR-ed over the calls (the non-finite flag).
template <class T, class Loop>
[[gnu::always_inline]] inline std::uint32_t store_blocks(T* out, std::size_t n, bool stream,
                                                         Loop&& loop) {
  const auto addr = reinterpret_cast<std::uintptr_t>(out);
  if (!stream || addr % sizeof(T) != 0) {
    return loop(out, std::size_t{0}, n);
  }
  const std::size_t head = std::min(n, ((kLine - addr % kLine) % kLine) / sizeof(T));
  std::uint32_t bad = loop(out, std::size_t{0}, head);
  constexpr std::size_t kBlock = kStreamBlock / sizeof(T);
  alignas(kLine) T block[kBlock];
  std::size_t i = head;
  for (; n - i >= kBlock; i += kBlock) {
    bad |= loop(block, i, kBlock);
    current_copy().copy(out + i, block, kStreamBlock);
  }
  bad |= loop(out + i, i, n - i);
  stream_fence();
  return bad;
}

// dst = narrow(src), or a plain copy when From is To; true if every element written is finite.
template <class To, class From>
[[gnu::always_inline]] inline std::uint32_t convert_loop(Raw<To>* __restrict d,
                                                         const Raw<From>* __restrict s,
                                                         std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Raw<To> v;
    if constexpr (std::is_same_v<To, From>) {
      v = s[i];
    } else {
      v = Elem<To>::narrow(Elem<From>::widen(s[i]));
    }
    bad |= Elem<To>::non_finite(v);
    d[i] = v;
  }
  return bad;
}

template <class To, class From>
PARAMWIN_KERNEL bool convert_typed(void* dst, const void* src, std::size_t n, bool stream) {
  auto* d = static_cast<Raw<To>*>(dst);
  const auto* s = static_cast<const Raw<From>*>(src);
  using T = Raw<To>;
  const auto addr = reinterpret_cast<std::uintptr_t>(d);
  if constexpr (std::is_same_v<To, From>) {
    if (stream && addr % sizeof(T) == 0) {  // head, whole lines in one streamed pass, tail
      const std::size_t head = std::min(n, ((kLine - addr % kLine) % kLine) / sizeof(T));
      std::uint32_t bad = convert_loop<To, From>(d, s, head);
      const std::size_t bytes = (n - head) * sizeof(T) / kLine * kLine;
      bad |= current_copy().copy_check(d + head, s + head, bytes, sizeof(T), Elem<To>::exp);
      const std::size_t i = head + bytes / sizeof(T);
      bad |= convert_loop<To, From>(d + i, s + i, n - i);
      stream_fence();
      return bad == 0;
    }
  }
  return store_blocks(d, n, stream, [s](Raw<To>* out, std::size_t first, std::size_t count) {
           return convert_loop<To, From>(out, s + first, count);
         }) == 0;
}

// --- the fused loop: k donors in one pass (mix(), and accumulate() for one donor) ---------

enum class MixMode { write, blend, add };  // out = sum | m * out + (1 - m) * sum | out += sum

constexpr std::size_t kMaxFused = 4;     // donors per fused pass
constexpr std::size_t kMixBlock = 2048;  // elements per stack block when k > kMaxFused

// One pass over n elements with K (1..4) sources. The sum runs left to right from the first
// donor (or from out[i] in add mode), exactly as accumulate() does.
template <MixMode M, std::size_t K, class Acc, class Src, class Out>
[[gnu::always_inline]] inline void fused_loop(Raw<Out>* __restrict out,
                                              const Raw<Src>* __restrict s0,
                                              const Raw<Src>* __restrict s1,
                                              const Raw<Src>* __restrict s2,
                                              const Raw<Src>* __restrict s3, const Acc* w,
                                              std::size_t n, Acc m) {
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

// The loop above; in write mode (out is only written) large outputs are streamed.
template <MixMode M, std::size_t K, class Acc, class Src, class Out>
PARAMWIN_KERNEL void fused(Raw<Out>* out, const Raw<Src>* s0, const Raw<Src>* s1,
                           const Raw<Src>* s2, const Raw<Src>* s3, const Acc* w, std::size_t n,
                           Acc m, bool stream) {
  if constexpr (M == MixMode::write && K == 1 && std::is_same_v<Src, bfloat16> &&
                std::is_same_v<Out, float> && std::is_same_v<Acc, float>) {
    // One bfloat16 donor into float32: streamed from registers, lines in two streams.
    const auto addr = reinterpret_cast<std::uintptr_t>(out);
    if (stream && addr % sizeof(float) == 0) {
      const std::size_t head = std::min(n, ((kLine - addr % kLine) % kLine) / sizeof(float));
      constexpr std::size_t kLineFloats = kLine / sizeof(float);
      const std::size_t body = (n - head) / kLineFloats * kLineFloats;
      fused_loop<M, K, Acc, Src, Out>(out, s0, s0, s0, s0, w, head, m);
      current_copy().widen_bf16(out + head, s0 + head, body, w[0]);
      const std::size_t i = head + body;
      fused_loop<M, K, Acc, Src, Out>(out + i, s0 + i, s0 + i, s0 + i, s0 + i, w, n - i, m);
      stream_fence();
      return;
    }
  }
  if constexpr (M == MixMode::write) {
    (void)store_blocks(out, n, stream, [&](Raw<Out>* o, std::size_t first, std::size_t count) {
      fused_loop<M, K, Acc, Src, Out>(o, s0 + first, s1 + first, s2 + first, s3 + first, w, count,
                                      m);
      return std::uint32_t{0};
    });
  } else {
    (void)stream;
    fused_loop<M, K, Acc, Src, Out>(out, s0, s1, s2, s3, w, n, m);
  }
}

template <class Acc, class Src>
PARAMWIN_KERNEL bool accumulate_typed(Acc* __restrict acc, const Raw<Src>* __restrict src,
                                      std::size_t n, Acc w, bool first, bool check) {
  if (!check) {  // the one-donor case of the fused loop
    if (first) {
      fused<MixMode::write, 1, Acc, Src, Acc>(acc, src, src, src, src, &w, n, Acc{},
                                              stream_output(n * sizeof(Acc)));
    } else {
      fused<MixMode::add, 1, Acc, Src, Acc>(acc, src, src, src, src, &w, n, Acc{}, false);
    }
    return true;
  }
  std::uint32_t bad = 0;
  if (first) {
    for (std::size_t i = 0; i < n; ++i) {
      bad |= Elem<Src>::non_finite(src[i]);
      acc[i] = w * static_cast<Acc>(Elem<Src>::widen(src[i]));
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      bad |= Elem<Src>::non_finite(src[i]);
      acc[i] += w * static_cast<Acc>(Elem<Src>::widen(src[i]));
    }
  }
  return bad == 0;
}

// out = narrow(m * out + (1 - m) * acc); with m == 0, out = narrow(acc).
template <class Out, class Acc>
PARAMWIN_KERNEL void commit_typed(Raw<Out>* __restrict out, const Acc* __restrict acc,
                                  std::size_t n, Acc m) {
  if (m == Acc{0}) {
    const bool stream = stream_output(n * sizeof(Raw<Out>));
    (void)store_blocks(out, n, stream, [acc](Raw<Out>* o, std::size_t first, std::size_t count) {
      const Acc* __restrict a = acc + first;
      for (std::size_t i = 0; i < count; ++i) {
        o[i] = Elem<Out>::narrow(a[i]);
      }
      return std::uint32_t{0};
    });
    return;
  }
  const Acc keep = Acc{1} - m;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = Elem<Out>::narrow(m * static_cast<Acc>(Elem<Out>::widen(out[i])) + keep * acc[i]);
  }
}

// Up to 4 sources starting at @p first, dispatched to the fused loop of their count.
template <MixMode M, class Acc, class Src, class Out>
void fused_group(Raw<Out>* out, std::span<const MixSource> src, std::size_t first,
                 std::size_t offset, std::size_t n, Acc m, bool stream) {
  using S = Raw<Src>;
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
    case 1: fused<M, 1, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m, stream); return;
    case 2: fused<M, 2, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m, stream); return;
    case 3: fused<M, 3, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m, stream); return;
    default: fused<M, 4, Acc, Src, Out>(out, p[0], p[1], p[2], p[3], w, n, m, stream); return;
  }
}

template <class Acc, class Src, class Out>
void mix_typed(void* out_v, DType out_dtype, std::span<const MixSource> src, std::size_t count,
               double momentum, std::size_t batch_bytes) {
  auto* out = static_cast<Raw<Out>*>(out_v);
  const auto m = static_cast<Acc>(momentum);
  if (src.size() <= kMaxFused) {
    if (momentum == 0.0) {
      const bool stream = stream_output(std::max(count * sizeof(Raw<Out>), batch_bytes));
      fused_group<MixMode::write, Acc, Src, Out>(out, src, 0, 0, count, m, stream);
    } else {
      fused_group<MixMode::blend, Acc, Src, Out>(out, src, 0, 0, count, m, false);
    }
    return;
  }
  // More donors than one pass holds: sum groups of 4 into a stack block, then commit it.
  Acc block[kMixBlock];
  for (std::size_t first = 0; first < count; first += kMixBlock) {
    const std::size_t n = std::min(kMixBlock, count - first);
    fused_group<MixMode::write, Acc, Src, Acc>(block, src, 0, first, n, Acc{}, false);
    for (std::size_t g = kMaxFused; g < src.size(); g += kMaxFused) {
      fused_group<MixMode::add, Acc, Src, Acc>(block, src, g, first, n, Acc{}, false);
    }
    commit(out + first, out_dtype, block, n, momentum);
  }
}

template <class Src>
void mix_float(void* out, DType out_dtype, std::span<const MixSource> src, std::size_t count,
               double momentum, std::size_t batch) {
  switch (out_dtype) {
    case DType::float32:
      return mix_typed<float, Src, float>(out, out_dtype, src, count, momentum, batch);
    case DType::bfloat16:
      return mix_typed<float, Src, bfloat16>(out, out_dtype, src, count, momentum, batch);
    case DType::float16:
      return mix_typed<float, Src, float16>(out, out_dtype, src, count, momentum, batch);
    case DType::float64: break;
  }
  throw std::logic_error("paramwin: mix: float64 output from a 32-bit accumulation");
}

// The clone the loader picks for the kernels: the same three targets, resolved the same way
// (GCC's function multiversioning and target_clones share one priority order).
#if defined(PARAMWIN_KERNEL_CLONES)
__attribute__((target("default"))) const char* clone_name() noexcept { return "default"; }
__attribute__((target("arch=x86-64-v3"))) const char* clone_name() noexcept { return "x86-64-v3"; }
__attribute__((target("arch=x86-64-v4"))) const char* clone_name() noexcept { return "x86-64-v4"; }
#else
const char* clone_name() noexcept { return "portable"; }
#endif

}  // namespace

void set_store_mode(StoreMode mode) noexcept {
  g_store_mode.store(mode, std::memory_order_relaxed);
}

StoreMode store_mode() noexcept { return g_store_mode.load(std::memory_order_relaxed); }

std::span<const StreamCopy> stream_copies() noexcept {
  const StreamCopies& c = supported_copies();
  return {c.list, c.count};
}

void set_stream_copy(std::size_t index) {
  if (index >= stream_copies().size()) {
    throw std::out_of_range("paramwin: set_stream_copy: index " + std::to_string(index) +
                            " past the " + std::to_string(stream_copies().size()) +
                            " streaming copies this CPU supports");
  }
  g_stream_copy.store(index, std::memory_order_relaxed);
}

const char* stream_copy_name() noexcept {
  return stream_copies()[g_stream_copy.load(std::memory_order_relaxed)].name;
}

const char* kernel_clone() noexcept { return clone_name(); }

std::string kernel_summary() {
  std::string s = std::string("clone ") + kernel_clone() + ", stores ";
  const std::string streaming = std::string("streaming ") + stream_copy_name();
  switch (store_mode()) {
    case StoreMode::automatic:
      s += streaming + " from " + std::to_string(kStreamBytes >> 20) +
           " MiB of output, ordinary below";
      break;
    case StoreMode::regular: s += "ordinary (forced)"; break;
    case StoreMode::streaming: s += streaming + " (forced)"; break;
  }
  return s;
}

void mix(void* out, DType out_dtype, std::span<const MixSource> sources, DType wire,
         std::size_t count, double momentum, std::size_t batch_bytes) {
  if (count == 0 || sources.empty()) {
    return;
  }
  if (out_dtype == DType::float64) {
    // float64 layers are stored natively whatever the wire format.
    mix_typed<double, double, double>(out, out_dtype, sources, count, momentum, batch_bytes);
    return;
  }
  const std::size_t b = batch_bytes;
  switch (wire) {
    case DType::float32: return mix_float<float>(out, out_dtype, sources, count, momentum, b);
    case DType::bfloat16: return mix_float<bfloat16>(out, out_dtype, sources, count, momentum, b);
    case DType::float16: return mix_float<float16>(out, out_dtype, sources, count, momentum, b);
    case DType::float64: break;
  }
  throw std::logic_error("paramwin: mix: float64 wire for a non-float64 layer");
}

bool convert(void* dst, DType to, const void* src, DType from, std::size_t count,
             std::size_t batch_bytes) {
  const bool s = stream_output(std::max(count * dtype_size(to), batch_bytes));
  if (to == from) {
    switch (to) {
      case DType::float32: return convert_typed<float, float>(dst, src, count, s);
      case DType::float64: return convert_typed<double, double>(dst, src, count, s);
      case DType::bfloat16: return convert_typed<bfloat16, bfloat16>(dst, src, count, s);
      case DType::float16: return convert_typed<float16, float16>(dst, src, count, s);
    }
  }
  if (from == DType::float32 && to == DType::bfloat16) {
    return convert_typed<bfloat16, float>(dst, src, count, s);
  }
  if (from == DType::float32 && to == DType::float16) {
    return convert_typed<float16, float>(dst, src, count, s);
  }
  throw std::logic_error("paramwin: unsupported wire conversion");
}

bool accumulate(void* acc, DType layer_dtype, const void* src, DType wire, std::size_t count,
                double weight, bool first, bool check) {
  if (layer_dtype == DType::float64) {
    // float64 layers are stored natively whatever the wire format.
    return accumulate_typed<double, double>(static_cast<double*>(acc),
                                            static_cast<const double*>(src), count, weight, first,
                                            check);
  }
  auto* a = static_cast<float*>(acc);
  const auto w = static_cast<float>(weight);
  switch (wire) {
    case DType::float32:
      return accumulate_typed<float, float>(a, static_cast<const float*>(src), count, w, first,
                                            check);
    case DType::bfloat16:
      return accumulate_typed<float, bfloat16>(a, static_cast<const std::uint16_t*>(src), count, w,
                                               first, check);
    case DType::float16:
      return accumulate_typed<float, float16>(a, static_cast<const std::uint16_t*>(src), count, w,
                                              first, check);
    case DType::float64: break;
  }
  throw std::logic_error("paramwin: float64 wire for a non-float64 layer");
}

void commit(void* out, DType out_dtype, const void* acc, std::size_t count, double momentum) {
  if (count == 0) {
    return;  // an empty layer's data() may be null, and memcpy(nullptr, ..., 0) is undefined
  }
  if (momentum == 0.0 && (out_dtype == DType::float32 || out_dtype == DType::float64)) {
    std::memcpy(out, acc, count * dtype_size(out_dtype));  // already the accumulation type
    return;
  }
  const auto* a = static_cast<const float*>(acc);
  const auto m = static_cast<float>(momentum);
  switch (out_dtype) {
    case DType::float64:
      return commit_typed<double, double>(static_cast<double*>(out),
                                          static_cast<const double*>(acc), count, momentum);
    case DType::float32: return commit_typed<float, float>(static_cast<float*>(out), a, count, m);
    case DType::bfloat16:
      return commit_typed<bfloat16, float>(static_cast<std::uint16_t*>(out), a, count, m);
    case DType::float16:
      return commit_typed<float16, float>(static_cast<std::uint16_t*>(out), a, count, m);
  }
}

}  // namespace paramwin::detail
