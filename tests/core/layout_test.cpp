// Layout: names, shapes, lookup, fingerprint, serialisation, difference reports.
#include <gtest/gtest.h>

#include "paramwin/error.hpp"
#include "paramwin/layout.hpp"

namespace pw = paramwin;

TEST(Layout, AddsLayersInOrderWithCountsAndBytes) {
  pw::Layout l;
  l.add("w", {3, 4})
      .add("b", std::size_t{4}, pw::DType::float64)
      .add("s", std::vector<std::size_t>{}, pw::DType::bfloat16);
  ASSERT_EQ(l.size(), 3U);
  EXPECT_EQ(l[0].count, 12U);
  EXPECT_EQ(l[1].count, 4U);
  EXPECT_EQ(l[2].count, 1U);  // a 0-dim scalar holds one element
  EXPECT_TRUE(l[2].shape.empty());
  EXPECT_EQ(l.total_elements(), 17U);
  EXPECT_EQ(l.total_bytes(), 12U * 4 + 4U * 8 + 2U);
  EXPECT_EQ(l.index_of("b"), 1U);
  EXPECT_EQ(l.find("nope"), std::nullopt);
  EXPECT_EQ(l[0].describe(), "'w' [3x4 float32]");
  EXPECT_EQ(l[2].describe(), "'s' [scalar bfloat16]");
}

TEST(Layout, BracedListsAreShapesAndIntegersAreCounts) {
  pw::Layout l;
  l.add("scalar", {}).add("vec", {7}).add("mat", {2, 3}).add("n", 5).add("m", std::size_t{6});
  EXPECT_TRUE(l[0].shape.empty());
  EXPECT_EQ(l[0].count, 1U);
  EXPECT_EQ(l[1].shape, std::vector<std::size_t>{7});
  EXPECT_EQ(l[2].count, 6U);
  EXPECT_EQ(l[3].shape, std::vector<std::size_t>{5});
  EXPECT_EQ(l[4].count, 6U);
  EXPECT_THROW(l.add("neg", -3), pw::InvalidArgument);
}

TEST(Layout, RejectsBadNamesAndLookups) {
  pw::Layout l;
  l.add("w", std::size_t{1});
  EXPECT_THROW(l.add("w", std::size_t{2}), pw::InvalidArgument);
  EXPECT_THROW(l.add("", std::size_t{2}), pw::InvalidArgument);
  EXPECT_THROW(l.add("has space", std::size_t{2}), pw::InvalidArgument);
  EXPECT_THROW((void)l[1], pw::InvalidArgument);
  try {
    (void)l.index_of("x");
    FAIL();
  } catch (const pw::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "unknown layer 'x' (layers: 'w')");
  }
  EXPECT_EQ(l.size(), 1U);  // failed adds changed nothing
  EXPECT_THROW(l.add("huge", {std::size_t{1} << 40, std::size_t{1} << 40}), pw::InvalidArgument);
}

TEST(Layout, FingerprintCoversNamesShapesDtypesAndOrder) {
  auto make = [](const char* a, std::size_t n, pw::DType t, bool swap) {
    pw::Layout l;
    if (swap) {
      l.add("z", std::size_t{2});
      l.add(a, std::vector<std::size_t>{n}, t);
    } else {
      l.add(a, std::vector<std::size_t>{n}, t);
      l.add("z", std::size_t{2});
    }
    return l.fingerprint();
  };
  const auto base = make("a", 3, pw::DType::float32, false);
  EXPECT_EQ(base, make("a", 3, pw::DType::float32, false));
  EXPECT_NE(base, make("b", 3, pw::DType::float32, false));
  EXPECT_NE(base, make("a", 4, pw::DType::float32, false));
  EXPECT_NE(base, make("a", 3, pw::DType::float16, false));
  EXPECT_NE(base, make("a", 3, pw::DType::float32, true));
  pw::Layout flat, shaped;
  flat.add("w", std::size_t{12});
  shaped.add("w", {3, 4});
  EXPECT_NE(flat.fingerprint(), shaped.fingerprint());  // same count, other shape
}

TEST(Layout, SerializeRoundTripAndFirstDifference) {
  pw::Layout a;
  a.add("w", {3, 4}).add("s", std::vector<std::size_t>{}, pw::DType::float16);
  const pw::Layout b = pw::Layout::deserialize(a.serialize());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  EXPECT_EQ(pw::Layout::first_difference(a, b), "");
  pw::Layout c;
  c.add("w", {3, 4});
  EXPECT_EQ(pw::Layout::first_difference(a, c),
            "layer 1: 's' [scalar float16] vs missing (2 vs 1 layers)");
  pw::Layout d;
  d.add("w", {4, 3});
  EXPECT_EQ(pw::Layout::first_difference(c, d), "layer 0: 'w' [3x4 float32] vs 'w' [4x3 float32]");
  EXPECT_THROW((void)pw::Layout::deserialize("w x 1 3\n"), pw::InvalidArgument);
}
