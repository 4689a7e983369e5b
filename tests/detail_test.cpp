// Internals that decide sizes: piece splitting for MPI counts, checked narrowing, slot format.
#include <gtest/gtest.h>

#include <climits>

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
