// Internals that decide sizes: piece splitting for MPI counts, checked narrowing, slot format.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "detail/kernels.hpp"
#include "detail/mpi_check.hpp"
#include "detail/segment.hpp"
#include "detail/window_impl.hpp"
#include "paramwin/error.hpp"

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
  auto* dst = reinterpret_cast<T*>(
      (reinterpret_cast<std::uintptr_t>(dst_store.data()) + 15) / 16 * 16);
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
