// Microbenchmark of the kernels' store paths on one core, no MPI (docs/benchmarks-intel.md):
// memcpy against the publish copy + finite check, the bfloat16 widening and narrowing, each
// with ordinary and streaming stores (detail::set_store_mode), and a hand-written AVX-512
// streaming copy and the bfloat16 widening before it read two streams, for reference. Medians of
// 11, interleaved. Target paramwin_kernel_micro
// (built where the compiler accepts -mavx512f -mavx512bw; runs on AVX-512 CPUs only):
//   cmake --build BUILD --target paramwin_kernel_micro && BUILD/benchmarks/paramwin_kernel_micro
//   50000000
#include <immintrin.h>
#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include "detail/kernels.hpp"
namespace pd = paramwin::detail;
using paramwin::DType;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static void* big(size_t b) {
  void* p = mmap(nullptr, b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(p, 1, b);
  return p;
}
// direct AVX-512 streaming copy + finite check (dst 64-aligned)
__attribute__((target("avx512f"))) static bool nt512(float* d, const float* s, size_t n, bool pf) {
  __m512i acc = _mm512_setzero_si512();
  const __m512i e = _mm512_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (pf && (i % 16) == 0) _mm_prefetch((const char*)(s + i) + 2048, _MM_HINT_T0);
    __m512i v = _mm512_loadu_si512(s + i);
    acc = _mm512_or_si512(acc,
                          _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(_mm512_and_si512(v, e), e),
                                                 _mm512_set1_epi32(1)));
    _mm512_stream_si512((__m512i*)(d + i), v);
  }
  _mm_sfence();
  return _mm512_reduce_or_epi32(acc) == 0;
}
// The bfloat16 widening the library ran before it read two streams (05ea26e): w * widen into a
// 4 KiB L1 block, then that block streamed out; and the same widening streamed straight from
// registers but from one stream. References for the library's row (dst 64-aligned). (GCC 12
// warns on its own AVX-512 conversions here: bug 105593, see src/detail/kernels.cpp.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw"))) static void widen_l1_block(float* d, const uint16_t* s,
                                                                       size_t n) {
  alignas(64) float block[1024];
  const __m512 w = _mm512_set1_ps(1.0f);
  for (size_t i = 0; i + 1024 <= n; i += 1024) {
    for (size_t j = 0; j < 1024; j += 16) {
      const __m512i v =
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(s + i + j))),
                            16);
      _mm512_store_ps(block + j, _mm512_mul_ps(_mm512_castsi512_ps(v), w));
    }
    for (size_t j = 0; j < 1024; j += 16) _mm512_stream_ps(d + i + j, _mm512_load_ps(block + j));
  }
  _mm_sfence();
}
__attribute__((target("avx512f,avx512bw"))) static void widen_one_stream(float* d,
                                                                         const uint16_t* s,
                                                                         size_t n) {
  const __m512 w = _mm512_set1_ps(1.0f);
  for (size_t i = 0; i + 16 <= n; i += 16) {
    const __m512i v =
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(s + i))), 16);
    _mm512_stream_ps(d + i, _mm512_mul_ps(_mm512_castsi512_ps(v), w));
  }
  _mm_sfence();
}
#pragma GCC diagnostic pop
static volatile bool g_sink;  // keeps the check pass (05ea26e's run lost it: row not used)
static bool check_only(const float* s, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    bad |= ((std::bit_cast<uint32_t>(s[i]) & 0x7f800000u) == 0x7f800000u);
  return bad == 0;
}
int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 50000000;
  float* src = (float*)big(n * 4);
  float* dst = (float*)big(n * 4);
  uint16_t* h = (uint16_t*)big(n * 2);
  for (size_t i = 0; i < n; ++i) {
    src[i] = 1.5f;
    h[i] = 0x3f80;
  }
  struct Case {
    const char* name;
    std::function<void()> f;
  };
  auto mode = [](pd::StoreMode m) { pd::set_store_mode(m); };
  pd::MixSource ms{h, 1.0};
  std::vector<Case> cases = {
      {"memcpy", [&] { memcpy(dst, src, n * 4); }},
      {"copy+check regular (lib)",
       [&] {
         mode(pd::StoreMode::regular);
         pd::convert(dst, DType::float32, src, DType::float32, n);
       }},
      {"copy+check streaming (lib)",
       [&] {
         mode(pd::StoreMode::streaming);
         pd::convert(dst, DType::float32, src, DType::float32, n);
       }},
      {"copy+check nt512 direct", [&] { nt512(dst, src, n, false); }},
      {"copy+check nt512+prefetch", [&] { nt512(dst, src, n, true); }},
      {"memcpy then check (2 pass)",
       [&] {
         memcpy(dst, src, n * 4);
         g_sink = check_only(dst, n);
       }},
      {"widen bf16 regular (lib)",
       [&] {
         mode(pd::StoreMode::regular);
         pd::mix(dst, DType::float32, {&ms, 1}, DType::bfloat16, n, 0.0);
       }},
      {"widen bf16 streaming (lib)",
       [&] {
         mode(pd::StoreMode::streaming);
         pd::mix(dst, DType::float32, {&ms, 1}, DType::bfloat16, n, 0.0);
       }},
      {"widen bf16 L1 block (05ea26e)", [&] { widen_l1_block(dst, h, n); }},
      {"widen bf16 direct, one stream", [&] { widen_one_stream(dst, h, n); }},
      {"narrow bf16 regular (lib)",
       [&] {
         mode(pd::StoreMode::regular);
         pd::convert(h, DType::bfloat16, src, DType::float32, n);
       }},
      {"narrow bf16 streaming (lib)",
       [&] {
         mode(pd::StoreMode::streaming);
         pd::convert(h, DType::bfloat16, src, DType::float32, n);
       }},
      {"memcpy half (bf16 bytes)", [&] { memcpy(h, src, n * 2); }},
  };
  std::vector<std::vector<double>> t(cases.size());
  for (int r = 0; r < 11; ++r)
    for (size_t k = 0; k < cases.size(); ++k) {
      double t0 = now();
      cases[k].f();
      t[k].push_back(now() - t0);
    }
  std::printf("n=%zu (%s)\n", n, pd::kernel_summary().c_str());
  double m0 = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    std::sort(t[k].begin(), t[k].end());
    double med = t[k][5];
    if (k == 0) m0 = med;
    std::printf("%-30s median %8.3f ms  min %8.3f  %.2fx memcpy\n", cases[k].name, med * 1e3,
                t[k][0] * 1e3, med / m0);
  }
}
