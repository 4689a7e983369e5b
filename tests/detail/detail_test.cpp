// Internals that decide sizes: piece splitting for MPI counts, checked narrowing, slot format;
// and the ref binder's rules for multi-dimensional Kokkos views.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/cuda.hpp"
#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "groups/shard_outcomes.hpp"
#include "paramwin/error.hpp"
#include "paramwin/layer_ref.hpp"
#include "window/binding.hpp"
#include "window/liveness.hpp"
#include "window/segment.hpp"
#include "window/window_impl.hpp"

namespace pw = paramwin;
namespace pd = paramwin::detail;

TEST(Detail, PiecesKeepEveryMpiCountBelowIntMax) {
  const std::size_t huge = (std::size_t{5} << 30) + 123;  // 5 GiB + 123 bytes
  const auto pieces = pd::split_pieces(huge, std::size_t{1} << 30);
  ASSERT_EQ(pieces.size(), 6U);
  std::size_t next = 0;
  for (const auto& [offset, size] : pieces) {
    EXPECT_EQ(offset, next);
    EXPECT_LE(size, static_cast<std::size_t>(INT_MAX));
    EXPECT_GT(size, 0U);
    next += size;
  }
  EXPECT_EQ(next, huge);
  EXPECT_EQ(pieces.back().second, 123U);
  EXPECT_TRUE(pd::split_pieces(0, 1024).empty());
}

TEST(Detail, CheckedIntNamesTheValue) {
  EXPECT_EQ(pd::checked_int(static_cast<std::size_t>(INT_MAX), "n"), INT_MAX);
  try {
    (void)pd::checked_int(std::size_t{1} << 31, "layer bytes");
    FAIL();
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer bytes = 2147483648"), std::string::npos);
  }
}

TEST(Detail, SlotLayoutAlignsLayersAndPagesAndHandlesHugeCounts) {
  pw::Layout l;
  l.add("a", std::size_t{3}).add("b", std::size_t{5}, pw::DType::float64);
  l.add("huge", std::size_t{3} << 30);  // 3G float32 = 12 GiB: sizes are size_t throughout
  const pd::SlotLayout s = pd::make_slot_layout(l, pw::WireFormat::bfloat16);
  EXPECT_EQ(s.entries[0].wire, pw::DType::bfloat16);
  EXPECT_EQ(s.entries[1].wire, pw::DType::float64);  // float64 keeps its precision
  EXPECT_EQ(s.entries[1].offset % pd::kLayerAlign, 0U);
  EXPECT_EQ(s.entries[2].offset % pd::kLayerAlign, 0U);
  EXPECT_EQ(s.payload_bytes, s.entries[2].offset + (std::size_t{3} << 30) * 2);
  EXPECT_EQ(s.stride % pd::kPage, 0U);
  EXPECT_NE(s.fingerprint, pd::make_slot_layout(l, pw::WireFormat::native).fingerprint);
}

// convert(): the publish kernel. It must copy exactly and find a non-finite value wherever it
// sits (first element, middle, the last elements a vector loop leaves to its tail), with a
// source at any alignment and layers below and above a megabyte.
template <class T>
void check_convert(std::size_t n, std::size_t src_offset) {
  const pw::DType dt = std::is_same_v<T, float> ? pw::DType::float32 : pw::DType::float64;
  std::vector<T> src(n + src_offset);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(i % 1000) - T(500);
  // 16-byte aligned destination, like a slot.
  std::vector<T> dst_store(n + 16);
  auto* dst =
      reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(dst_store.data()) + 15) / 16 * 16);
  const T* s = src.data() + src_offset;
  ASSERT_TRUE(pd::convert(dst, dt, s, dt, n));
  ASSERT_EQ(std::memcmp(dst, s, n * sizeof(T)), 0) << n << " +" << src_offset;
  for (std::size_t at : {std::size_t{0}, n / 2, n - 1, n - 2, n - 3}) {
    for (T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                  -std::numeric_limits<T>::infinity()}) {
      const T keep = src[src_offset + at];
      src[src_offset + at] = bad;
      EXPECT_FALSE(pd::convert(dst, dt, s, dt, n)) << "non-finite at " << at << " of " << n;
      src[src_offset + at] = keep;
    }
  }
  // Largest finite values and denormals are finite.
  src[src_offset] = std::numeric_limits<T>::max();
  src[src_offset + 1] = std::numeric_limits<T>::denorm_min();
  EXPECT_TRUE(pd::convert(dst, dt, s, dt, n));
}

TEST(Detail, ConvertCopiesExactlyAndFindsNonFiniteValuesOnBothPaths) {
  for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    check_convert<float>(1000, offset);
    check_convert<float>((1U << 20) / 4 + 3, offset);
    check_convert<float>((1U << 20) / 4 + 16, offset);
    check_convert<double>(1000, offset);
    check_convert<double>((1U << 20) / 8 + 5, offset);
  }
}

namespace {

// Values of every magnitude, both signs, for a source of rank @p d (exact in every dtype).
float sample(std::size_t i, std::size_t d) {
  const float base = static_cast<float>(static_cast<int>((i * 7 + d * 13) % 61) - 30);
  return base * std::ldexp(1.0F, static_cast<int>((i + d) % 9) - 4);
}

template <class T>
T as(float v) {
  if constexpr (std::is_same_v<T, pw::bfloat16>) {
    return pw::to_bfloat16(v);
  } else if constexpr (std::is_same_v<T, pw::float16>) {
    return pw::to_float16(v);
  } else {
    return static_cast<T>(v);
  }
}

// mix() against the chunked reference accumulate() + commit(): same bits, any k (fused
// groups of 4 and the stack-block path), momentum 0 and 0.5, unaligned starts, odd counts.
template <class Layer, class Wire>
void check_mix(std::size_t count, std::size_t k, double momentum, std::size_t offset) {
  const pw::DType layer = pw::dtype_of<Layer>::value;
  const pw::DType wire = pw::dtype_of<Wire>::value;
  std::vector<std::vector<Wire>> src(k, std::vector<Wire>(count + offset));
  std::vector<pd::MixSource> sources;
  for (std::size_t d = 0; d < k; ++d) {
    for (std::size_t i = 0; i < count; ++i) {
      src[d][offset + i] = as<Wire>(sample(i, d));
    }
    sources.push_back({src[d].data() + offset, 1.0 / static_cast<double>(d + 2)});
  }
  std::vector<Layer> got(count + offset), want(count + offset);
  for (std::size_t i = 0; i < count; ++i) {
    got[offset + i] = want[offset + i] = as<Layer>(sample(i, 99));
  }
  std::vector<std::byte> acc(count * pd::acc_size(layer) + 8);
  for (std::size_t d = 0; d < k; ++d) {
    (void)pd::accumulate(acc.data(), layer, sources[d].data, wire, count, sources[d].weight, d == 0,
                         false);
  }
  pd::commit(want.data() + offset, layer, acc.data(), count, momentum);
  pd::mix(got.data() + offset, layer, sources, wire, count, momentum);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(Layer)))
      << "layer " << pw::dtype_name(layer) << ", wire " << pw::dtype_name(wire) << ", count "
      << count << ", k " << k << ", momentum " << momentum << ", offset " << offset;
}

}  // namespace

TEST(Detail, MixEqualsAccumulateThenCommitBitForBit) {
  for (std::size_t k = 1; k <= 9; ++k) {
    for (double momentum : {0.0, 0.5}) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        for (std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{5000}}) {
          check_mix<float, float>(count, k, momentum, offset);
          check_mix<float, pw::bfloat16>(count, k, momentum, offset);
          check_mix<float, pw::float16>(count, k, momentum, offset);
          check_mix<pw::bfloat16, pw::bfloat16>(count, k, momentum, offset);
          check_mix<pw::float16, pw::float16>(count, k, momentum, offset);
          check_mix<double, double>(count, k, momentum, offset);
        }
      }
    }
  }
}

TEST(Detail, MixOfNothingWritesNothing) {
  std::vector<float> out{1.0F, 2.0F};
  const float src[2] = {5.0F, 6.0F};
  const pd::MixSource one[1] = {{src, 1.0}};
  pd::mix(out.data(), pw::DType::float32, {}, pw::DType::float32, out.size(), 0.0);
  pd::mix(out.data(), pw::DType::float32, one, pw::DType::float32, 0, 0.0);
  EXPECT_EQ(out, (std::vector<float>{1.0F, 2.0F}));
  pd::mix(out.data(), pw::DType::float32, one, pw::DType::float32, out.size(), 0.0);
  EXPECT_EQ(out, (std::vector<float>{5.0F, 6.0F}));
}

// The kernels run as an AVX-512, AVX2 or baseline clone (chosen at load time); whichever runs
// here must give the bits of the scalar conversions in dtype.hpp (compiled at the baseline
// into this test) for every float16 / bfloat16 pattern and a sweep of float32 patterns:
// subnormals, ties, overflow, infinities and NaNs included.
namespace {

void check_conversion_bits() {
  std::vector<float> f;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 4093) {
    f.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
  }
  for (const std::uint32_t b : {0x7f800000U, 0xff800000U, 0x7fc00001U, 0x477ff000U, 0x477fefffU,
                                0x38800000U, 0x387fffffU, 0x33000000U, 0x3f808000U, 0x3f818000U}) {
    f.push_back(std::bit_cast<float>(b));
  }
  std::vector<std::uint16_t> got(f.size());
  pd::convert(got.data(), pw::DType::bfloat16, f.data(), pw::DType::float32, f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(got[i], pw::to_bfloat16(f[i]).bits)
        << "bfloat16 of bits " << std::bit_cast<std::uint32_t>(f[i]);
  }
  pd::convert(got.data(), pw::DType::float16, f.data(), pw::DType::float32, f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(got[i], pw::to_float16(f[i]).bits)
        << "float16 of bits " << std::bit_cast<std::uint32_t>(f[i]);
  }
  std::vector<std::uint16_t> h(65536);
  for (std::size_t b = 0; b < h.size(); ++b) {
    h[b] = static_cast<std::uint16_t>(b);
  }
  std::vector<float> wide(h.size());
  for (const pw::DType wire : {pw::DType::bfloat16, pw::DType::float16}) {
    (void)pd::accumulate(wide.data(), pw::DType::float32, h.data(), wire, h.size(), 1.0, true,
                         false);
    for (std::size_t b = 0; b < h.size(); ++b) {
      const float want = wire == pw::DType::bfloat16 ? pw::to_float(pw::bfloat16{h[b]})
                                                     : pw::to_float(pw::float16{h[b]});
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(wide[b])) << pw::dtype_name(wire) << " bits " << b;
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[b]), std::bit_cast<std::uint32_t>(want))
            << pw::dtype_name(wire) << " bits " << b;
      }
    }
  }
}

// Forces a store mode for one scope (the process default is automatic).
class StoreModeScope {
 public:
  explicit StoreModeScope(pd::StoreMode mode) { pd::set_store_mode(mode); }
  StoreModeScope(const StoreModeScope&) = delete;
  StoreModeScope& operator=(const StoreModeScope&) = delete;
  ~StoreModeScope() { pd::set_store_mode(pd::StoreMode::automatic); }
};

}  // namespace

TEST(Detail, VectorKernelsGiveTheScalarConversionBits) { check_conversion_bits(); }

// Both store paths of the kernels (ordinary stores, and the L1 block streamed out with
// non-temporal stores after an ordinary unaligned head), whatever the automatic choice would
// be for these sizes: same bits, same non-finite findings, for the publish conversion, the
// widening accumulate, the fused mix (1 to 9 donors) and the narrowing commit.
TEST(Detail, StreamingAndOrdinaryStoresGiveTheSameBits) {
  // Ordinary stores, then streaming with each block copy this CPU runs (widest first).
  for (std::size_t variant = 0; variant <= pd::stream_copies().size(); ++variant) {
    const pd::StoreMode mode = variant == 0 ? pd::StoreMode::regular : pd::StoreMode::streaming;
    if (variant > 0) {
      pd::set_stream_copy(variant - 1);
    }
    SCOPED_TRACE(variant == 0 ? std::string("regular stores")
                              : std::string("streaming stores, ") + pd::stream_copy_name());
    const StoreModeScope scope(mode);
    EXPECT_EQ(pd::store_mode(), mode);
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      for (std::size_t n : {std::size_t{5}, std::size_t{1000}, std::size_t{10000 + 7}}) {
        check_convert<float>(n, offset);
        check_convert<double>(n, offset);
      }
    }
    for (std::size_t k : {std::size_t{1}, std::size_t{3}, std::size_t{5}}) {
      for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        for (std::size_t count : {std::size_t{3}, std::size_t{9000 + 5}}) {
          for (double momentum : {0.0, 0.5}) {
            check_mix<float, float>(count, k, momentum, offset);
            check_mix<float, pw::bfloat16>(count, k, momentum, offset);
            check_mix<float, pw::float16>(count, k, momentum, offset);
            check_mix<pw::bfloat16, pw::bfloat16>(count, k, momentum, offset);
            check_mix<pw::float16, pw::float16>(count, k, momentum, offset);
            check_mix<double, double>(count, k, momentum, offset);
          }
        }
      }
    }
    check_conversion_bits();
  }
  pd::set_stream_copy(0);
  EXPECT_EQ(pd::store_mode(), pd::StoreMode::automatic);
}

// Each streaming block copy the CPU runs, called directly: whole lines, exact bytes, nothing
// past the end; an index past the supported ones is refused.
TEST(Detail, EveryStreamingCopyCopiesWholeLinesExactly) {
  ASSERT_FALSE(pd::stream_copies().empty());
  constexpr std::size_t kBytes = 64 * 37;
  alignas(64) static std::byte src[kBytes];
  alignas(64) static std::byte dst[kBytes + 64];
  for (std::size_t i = 0; i < kBytes; ++i) src[i] = static_cast<std::byte>(i * 31 + 7);
  for (const pd::StreamCopy& c : pd::stream_copies()) {
    std::memset(dst, 0xab, sizeof dst);
    c.copy(dst, src, kBytes);
    EXPECT_EQ(0, std::memcmp(dst, src, kBytes)) << c.name;
    for (std::size_t i = kBytes; i < sizeof dst; ++i) {
      ASSERT_EQ(dst[i], std::byte{0xab}) << c.name << " wrote past the end at " << i;
    }
  }
  // copy_check: exact bytes from an unaligned source, and a non-finite element of each width
  // found wherever it sits; values just below (exponent not all ones) and, for 8-byte lanes,
  // the exponent pattern in the low half are not.
  struct Lane {
    std::size_t elem;
    std::uint64_t exp;
  };
  for (const Lane lane :
       {Lane{2, 0x7f80}, Lane{2, 0x7c00}, Lane{4, 0x7f800000}, Lane{8, 0x7ff0000000000000ULL}}) {
    for (const pd::StreamCopy& c : pd::stream_copies()) {
      SCOPED_TRACE(std::string(c.name) + ", lanes of " + std::to_string(lane.elem));
      std::vector<std::byte> store(kBytes + 8);
      std::byte* in = store.data() + 2;  // unaligned, a multiple of 2 only
      for (std::size_t i = 0; i < kBytes; ++i) in[i] = static_cast<std::byte>(i % 5);
      // Just below non-finite in every 7th lane: the exponent's lowest bit cleared.
      const std::uint64_t below = lane.exp & (lane.exp - 1);
      for (std::size_t at = 0; at < kBytes; at += lane.elem * 7) {
        std::memcpy(in + at, &below, lane.elem);
      }
      if (lane.elem == 8) {
        const std::uint64_t low = lane.exp >> 32;  // the pattern in the low half only
        std::memcpy(in + 8 * 3, &low, 8);
      }
      std::memset(dst, 0, sizeof dst);
      EXPECT_EQ(c.copy_check(dst, in, kBytes, lane.elem, lane.exp), 0U);
      EXPECT_EQ(0, std::memcmp(dst, in, kBytes));
      for (std::size_t at : {std::size_t{0}, lane.elem * 5, kBytes / 2, kBytes - lane.elem}) {
        std::uint64_t keep = 0;
        std::memcpy(&keep, in + at, lane.elem);
        std::memcpy(in + at, &lane.exp, lane.elem);
        EXPECT_NE(c.copy_check(dst, in, kBytes, lane.elem, lane.exp), 0U) << "at " << at;
        std::memcpy(in + at, &keep, lane.elem);
      }
    }
  }
  EXPECT_STREQ(pd::stream_copy_name(), pd::stream_copies()[0].name);
  EXPECT_THROW(pd::set_stream_copy(pd::stream_copies().size()), std::out_of_range);
  EXPECT_STREQ(pd::stream_copy_name(), pd::stream_copies()[0].name);
}

// Each streamed bfloat16 widening the CPU runs, called directly: w * float(bits) with the bits of
// dtype.hpp for every kind of value (NaN payloads, infinities, subnormals, signed zeros), from
// an unaligned source, at lengths where the two streams have no steps, some, and a remainder;
// nothing written past the end.
TEST(Detail, EveryStreamedBfloat16WideningGivesTheBitsOfDtypeHpp) {
  const std::uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x3f80, 0xbf80, 0x7f7f,
                                    0x7f80, 0xff80, 0x7fc1, 0x7f81, 0xffff, 0x4049, 0x0080};
  for (const pd::StreamCopy& c : pd::stream_copies()) {
    for (std::size_t n : {std::size_t{16}, std::size_t{48}, std::size_t{64}, std::size_t{16 * 37},
                          std::size_t{64 * 9 + 16}}) {
      for (float w : {1.0F, 0.25F, -3.0F}) {
        SCOPED_TRACE(std::string(c.name) + ", n " + std::to_string(n) + ", w " + std::to_string(w));
        std::vector<std::uint16_t> store(n + 1);
        std::uint16_t* in = store.data() + 1;  // 2-byte aligned only
        for (std::size_t i = 0; i < n; ++i) {
          in[i] = i % 3 == 0 ? specials[(i / 3) % std::size(specials)]
                             : static_cast<std::uint16_t>(i * 2654435761U >> 7);
        }
        alignas(64) static float dst[64 * 9 + 16 + 16];
        std::memset(dst, 0xab, sizeof dst);
        c.widen_bf16(dst, in, n, w);
        for (std::size_t i = 0; i < n; ++i) {
          // Through a volatile: GCC folds 1.0F * x into x (no signalling NaNs assumed), but
          // the multiply quiets a signalling NaN, in the kernels as in the fused loop.
          const volatile float wv = w;
          const float want = wv * pw::to_float(pw::bfloat16{in[i]});
          ASSERT_EQ(std::bit_cast<std::uint32_t>(dst[i]), std::bit_cast<std::uint32_t>(want))
              << "element " << i << " bits 0x" << std::hex << in[i];
        }
        for (std::size_t i = n; i < n + 16; ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(dst[i]), 0xababababU) << "wrote past the end";
        }
      }
    }
  }
}

// Automatic mode streams a layer of kStreamBytes or more; the bits are those of the ordinary
// path, and a non-finite value in a streamed block is found.
TEST(Detail, AutomaticStoresStreamLargeLayersWithTheSameBits) {
  const std::size_t n = pd::kStreamBytes / sizeof(float) + 37;
  std::vector<float> src(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 997) * 0.25F - 100.0F;
  std::vector<std::uint16_t> narrow_auto(n), narrow_regular(n);
  std::vector<float> wide_auto(n), wide_regular(n);
  ASSERT_TRUE(
      pd::convert(narrow_auto.data(), pw::DType::bfloat16, src.data(), pw::DType::float32, n));
  (void)pd::accumulate(wide_auto.data(), pw::DType::float32, narrow_auto.data(),
                       pw::DType::bfloat16, n, 0.5, true, false);
  {
    const StoreModeScope scope(pd::StoreMode::regular);
    ASSERT_TRUE(
        pd::convert(narrow_regular.data(), pw::DType::bfloat16, src.data(), pw::DType::float32, n));
    (void)pd::accumulate(wide_regular.data(), pw::DType::float32, narrow_regular.data(),
                         pw::DType::bfloat16, n, 0.5, true, false);
  }
  EXPECT_EQ(narrow_auto, narrow_regular);
  EXPECT_EQ(0, std::memcmp(wide_auto.data(), wide_regular.data(), n * sizeof(float)));
  src[n / 2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(
      pd::convert(wide_auto.data(), pw::DType::float32, src.data(), pw::DType::float32, n));
}

// The report's clone is the one the loader's rule picks for this CPU (GCC on x86-64 ELF builds
// the three clones; other builds have one portable version).
TEST(Detail, KernelCloneIsTheOneThisCpuSupports) {
  const std::string clone = pd::kernel_clone();
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512cd");
  EXPECT_EQ(clone, v4 ? "x86-64-v4" : (v3 ? "x86-64-v3" : "default"));
#else
  EXPECT_EQ(clone, "portable");
#endif
  EXPECT_NE(pd::kernel_summary().find(clone), std::string::npos) << pd::kernel_summary();
#if defined(__x86_64__) && defined(__GNUC__)
  EXPECT_STREQ(pd::stream_copies()[0].name, __builtin_cpu_supports("avx512bw") ? "avx512 (64-byte)"
                                            : __builtin_cpu_supports("avx2")   ? "avx2 (32-byte)"
                                                                               : "sse2 (16-byte)");
#endif
}

namespace {

template <class Layout_>
using Unmanaged2 =
    Kokkos::View<float**, Layout_, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

/// bind_layers' message for one ref against a one-layer layout ("" when it binds).
std::string bind_one(const pw::Layout& layout, const pw::ConstLayerRef& ref) {
  try {
    (void)pd::bind_layers(layout, std::span<const pw::ConstLayerRef>(&ref, 1), "publish");
  } catch (const pw::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// A ref made from a view of rank >= 2 carries its extents and element order; flat refs carry
// none. Binding: a view of rank >= 2 must be the layer's shape, in row-major order.
TEST(Detail, ViewRefsCarryShapeAndOrderAndBindingChecksThem) {
  std::vector<float> buf(64);
  pw::Layout grid;
  grid.add("g", {8, 8});
  pw::Layout row;
  row.add("r", {1, 64});

  const Unmanaged2<Kokkos::LayoutRight> right(buf.data(), 8, 8);
  const Unmanaged2<Kokkos::LayoutLeft> left(buf.data(), 8, 8);
  const pw::ConstLayerRef r(right);
  ASSERT_EQ(r.view_extents().size(), 2U);
  EXPECT_EQ(r.view_extents()[0], 8U);
  EXPECT_EQ(r.view_extents()[1], 8U);
  EXPECT_TRUE(r.row_major());
  EXPECT_FALSE(pw::ConstLayerRef(left).row_major());
  EXPECT_EQ(bind_one(grid, r), "");

  // Flat refs: spans, containers, rank-1 views bind to any shape of the right count.
  EXPECT_TRUE(pw::ConstLayerRef(buf).view_extents().empty());
  const Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      flat(buf.data(), 64);
  EXPECT_TRUE(pw::ConstLayerRef(flat).view_extents().empty());
  EXPECT_EQ(bind_one(grid, pw::ConstLayerRef(buf)), "");
  EXPECT_EQ(bind_one(grid, pw::ConstLayerRef(flat)), "");
  EXPECT_EQ(bind_one(row, pw::ConstLayerRef(flat)), "");

  // Another shape of the same count, or another rank: refused, naming both shapes.
  const std::string wide = bind_one(grid, Unmanaged2<Kokkos::LayoutRight>(buf.data(), 4, 16));
  EXPECT_NE(wide.find("paramwin: publish: layer 'g' [8x8 float32] got a view of shape 4x16"),
            std::string::npos)
      << wide;
  const Kokkos::View<float***, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      cube(buf.data(), 4, 4, 4);
  EXPECT_NE(bind_one(grid, cube).find("got a view of shape 4x4x4"), std::string::npos);
  EXPECT_NE(bind_one(row, r).find("'r' [1x64 float32] got a view of shape 8x8"), std::string::npos);
  pw::Layout flat_layout;
  flat_layout.add("f", std::size_t{64});
  EXPECT_NE(bind_one(flat_layout, r).find("'f' [64 float32] got a view of shape 8x8"),
            std::string::npos);

  // Column-major order: refused for 8x8; a LayoutLeft 1x64 has only one order.
  const std::string transposed = bind_one(grid, left);
  EXPECT_NE(transposed.find("'g' [8x8 float32] got a view whose elements are not in row-major"),
            std::string::npos)
      << transposed;
  EXPECT_NE(transposed.find("LayoutRight"), std::string::npos) << transposed;
  const Unmanaged2<Kokkos::LayoutLeft> left_row(buf.data(), 1, 64);
  EXPECT_TRUE(pw::ConstLayerRef(left_row).row_major());
  EXPECT_EQ(bind_one(row, left_row), "");

  // LayoutStride: judged by its strides. Column-major strides are refused; a row-major,
  // contiguous slice of a larger view binds.
  using Strided = Kokkos::View<float**, Kokkos::LayoutStride, Kokkos::HostSpace,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const Strided col_major(buf.data(), Kokkos::LayoutStride(8, 1, 8, 8));
  EXPECT_TRUE(col_major.span_is_contiguous());
  EXPECT_FALSE(pw::ConstLayerRef(col_major).row_major());
  EXPECT_NE(bind_one(grid, col_major).find("not in row-major"), std::string::npos);
  const Strided row_major(buf.data(), Kokkos::LayoutStride(8, 8, 8, 1));
  EXPECT_EQ(bind_one(grid, row_major), "");
  std::vector<float> big(3 * 64);
  const Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace,
                     Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      stack(big.data(), 3, 8, 8);
  const auto slice = Kokkos::subview(stack, 1, Kokkos::ALL(), Kokkos::ALL());
  EXPECT_EQ(bind_one(grid, slice), "");
  EXPECT_EQ(pw::ConstLayerRef(slice).data(), big.data() + 64);

  // The shape and order survive as_const() and with_data() (the host staging copy).
  std::vector<float> other(64);
  pw::LayerRef w(left);
  EXPECT_FALSE(w.as_const().row_major());
  EXPECT_FALSE(w.with_data(other.data()).row_major());
  EXPECT_EQ(w.with_data(other.data()).data(), other.data());
  EXPECT_EQ(r.with_data(other.data()).view_extents().size(), 2U);
  EXPECT_NE(bind_one(grid, w.as_const()).find("not in row-major"), std::string::npos);
  // as_const() keeps non-contiguity too (it used to report every ref as contiguous).
  std::vector<float> grid2(128);
  const Unmanaged2<Kokkos::LayoutRight> two_cols(grid2.data(), 64, 2);
  const pw::LayerRef column(Kokkos::subview(two_cols, Kokkos::ALL(), 0));
  EXPECT_FALSE(column.contiguous());
  EXPECT_FALSE(column.as_const().contiguous());
}

// Device windows (docs/gpu.md): the host segment keeps the slots only where RMA readers need
// a host copy; the device slots alternate like the host ones; a device pull's donor limit.
TEST(Detail, DeviceWindowsKeepHostSlotsOnlyForRmaReaders) {
  using pw::Exposure;
  using pw::Memory;
  EXPECT_EQ(pd::host_slot_count(Exposure::snapshot, Memory::host, false), 2U);
  EXPECT_EQ(pd::host_slot_count(Exposure::snapshot, Memory::host, true), 2U);
  EXPECT_EQ(pd::host_slot_count(Exposure::live, Memory::host, false), 1U);
  EXPECT_EQ(pd::host_slot_count(Exposure::snapshot, Memory::cuda, false), 0U);
  EXPECT_EQ(pd::host_slot_count(Exposure::snapshot, Memory::cuda, true), 2U);
  pd::SlotLayout slots;
  slots.stride = 3 * pd::kPage;
  EXPECT_EQ(pd::segment_bytes(slots, 0), pd::kPage);
  EXPECT_EQ(pd::segment_bytes(slots, 2), 7 * pd::kPage);
  // Version v lives in slot v % 2, on the device as in the host segment (after its header).
  EXPECT_EQ(pd::device_slot_offset(4, slots.stride), 0U);
  EXPECT_EQ(pd::device_slot_offset(5, slots.stride), slots.stride);
  EXPECT_EQ(pd::slot_offset(5, slots.stride, false) - pd::kPage,
            pd::device_slot_offset(5, slots.stride));
}

TEST(Detail, DevicePullsMixAtMost32Donors) {
  EXPECT_TRUE(pd::cuda::device_donor_limit_error(1).empty());
  EXPECT_TRUE(pd::cuda::device_donor_limit_error(pd::cuda::kMaxDeviceSources).empty());
  const std::string e = pd::cuda::device_donor_limit_error(pd::cuda::kMaxDeviceSources + 1);
  EXPECT_NE(e.find("at most 32 donors in one pull"), std::string::npos) << e;
  EXPECT_NE(e.find("got 33"), std::string::npos) << e;
}

TEST(Detail, DeviceMemoryTagMarksRefsAsNotHostAccessible) {
  float x[4] = {};
  const pw::LayerRef r("w", x, 4, pw::DType::float32, pw::device_memory);
  EXPECT_FALSE(r.host_accessible());
  EXPECT_FALSE(r.as_const().host_accessible());
  const pw::ConstLayerRef c("w", x, 4, pw::DType::float32, pw::device_memory);
  EXPECT_FALSE(c.host_accessible());
  EXPECT_EQ(c.count(), 4U);
}

// Without a device (CI, this machine) CUDA reports none, with its reason; a build without
// CUDA says so.
TEST(Detail, CudaReportsItsDevicesAndWhyThereAreNone) {
  std::string why;
  const int n = pd::cuda::device_count(&why);
  if (n > 0) GTEST_SKIP() << n << " CUDA device(s) here";
  EXPECT_FALSE(why.empty());
  if (!pd::cuda::built()) {
    EXPECT_NE(why.find("without CUDA"), std::string::npos) << why;
  }
  // Host memory is never device memory (CUDA does not know it, or there is no CUDA).
  float x = 0.0F;
  EXPECT_FALSE(pd::cuda::classify(&x).device);
}

// The outcome table of a grouped agent's shard pulls (groups/shard_outcomes.hpp): 2 donors,
// 3 ranks; a row is {ok, failed donor, bytes, stamp0, stamp1, skipped0, skipped1}.
TEST(Detail, ShardOutcomesTellWhichRanksReadAnOlderPublish) {
  using Row = std::vector<std::int64_t>;
  auto table = [](const std::vector<Row>& rows) {
    std::vector<std::int64_t> all;
    for (const Row& r : rows) all.insert(all.end(), r.begin(), r.end());
    return all;
  };
  EXPECT_EQ(pd::ShardOutcomes::words(2), 7U);
  // Everyone read the same publishes: nothing to mend, nobody lags.
  const auto same = table({{1, -1, 8, 5, 9, 0, 0}, {1, -1, 8, 5, 9, 0, 0}, {1, -1, 8, 5, 9, 0, 0}});
  const pd::ShardOutcomes a(same, 2, 3);
  EXPECT_FALSE(a.only_stamps_differ());
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(a.lagging(r));
  // Rank 1 read donor 0's previous publish, rank 2 donor 1's: both read again, rank 0 not.
  const auto mixed =
      table({{1, -1, 8, 5, 9, 0, 0}, {1, -1, 8, 4, 9, 0, 0}, {1, -1, 8, 5, 8, 0, 0}});
  const pd::ShardOutcomes b(mixed, 2, 3);
  EXPECT_TRUE(b.only_stamps_differ());
  EXPECT_FALSE(b.lagging(0));
  EXPECT_TRUE(b.lagging(1));
  EXPECT_TRUE(b.lagging(2));
  // A rank ahead on one donor and behind on the other lags too.
  const auto crossed =
      table({{1, -1, 8, 5, 8, 0, 0}, {1, -1, 8, 4, 9, 0, 0}, {1, -1, 8, 5, 9, 0, 0}});
  const pd::ShardOutcomes c(crossed, 2, 3);
  EXPECT_TRUE(c.lagging(0));
  EXPECT_TRUE(c.lagging(1));
  EXPECT_FALSE(c.lagging(2));
  // A failed pull or a skipped shard is not mended by reading again: the attempt fails.
  const auto failed =
      table({{1, -1, 8, 5, 9, 0, 0}, {0, 1, 0, 0, 0, 0, 0}, {1, -1, 8, 4, 9, 0, 0}});
  EXPECT_FALSE(pd::ShardOutcomes(failed, 2, 3).only_stamps_differ());
  const auto skipped =
      table({{1, -1, 8, 5, 9, 0, 0}, {1, -1, 8, 5, 9, 0, 1}, {1, -1, 8, 4, 9, 0, 0}});
  EXPECT_FALSE(pd::ShardOutcomes(skipped, 2, 3).only_stamps_differ());
}

// A reader looks at an entry whose words were read while the owner still ran, finds its pid
// gone, then reads the owner's last beats (written before it ended): gone stays gone.
TEST(Detail, LivenessJudgeKeepsAGoneProcessGoneWhateverBeatsALaterLookCarries) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // reaped: the pid is gone

  pd::LivenessJudge judge(2, 0, pw::LivenessOptions{});
  pw::RosterEntry e;
  e.rank = 1;
  e.liveness = {.heartbeat = 42, .pid = child, .host = pd::host_id(), .incarnation = 7};
  judge.judge(e);
  EXPECT_TRUE(e.suspect);
  EXPECT_NE(e.suspect_reason.find("its process is gone"), std::string::npos);
  e.liveness.heartbeat = 44;  // beats that predate the death, seen only now
  judge.judge(e);
  EXPECT_TRUE(e.suspect) << "a later beat of the same incarnation revived a gone process";
  // A new incarnation in the slot (a process re-entering) is judged afresh.
  e.liveness.incarnation = 8;
  e.liveness.pid = getpid();
  e.liveness.heartbeat = 1;
  judge.judge(e);
  EXPECT_FALSE(e.suspect) << e.suspect_reason;
}
