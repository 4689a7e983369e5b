// 16-bit float conversions: exactness, rounding to nearest even, specials, subnormals.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "paramwin/dtype.hpp"
#include "paramwin/error.hpp"

namespace pw = paramwin;

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(pw::dtype_size(pw::DType::float64), 8U);
  EXPECT_EQ(pw::dtype_size(pw::DType::bfloat16), 2U);
  EXPECT_EQ(pw::dtype_name(pw::DType::float16), "float16");
  EXPECT_EQ(pw::parse_dtype("bfloat16"), pw::DType::bfloat16);
  EXPECT_THROW((void)pw::parse_dtype("fp8"), pw::InvalidArgument);
}

TEST(BFloat16, RoundTripsEveryValueAndRoundsToNearestEven) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const pw::bfloat16 h{static_cast<std::uint16_t>(b)};
    const float f = pw::to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(pw::to_float(pw::to_bfloat16(f))));
    } else {
      ASSERT_EQ(pw::to_bfloat16(f).bits, h.bits) << b;
    }
  }
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(pw::to_float(pw::to_bfloat16(1.0F + 0.00390625F)), 1.0F);
  EXPECT_EQ(pw::to_float(pw::to_bfloat16(1.0F + 3 * 0.00390625F)), 1.015625F);
  EXPECT_TRUE(std::isinf(pw::to_float(pw::to_bfloat16(std::numeric_limits<float>::infinity()))));
}

TEST(Float16, RoundTripsEveryValueIncludingSubnormals) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const pw::float16 h{static_cast<std::uint16_t>(b)};
    const float f = pw::to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(pw::to_float(pw::to_float16(f))));
    } else {
      ASSERT_EQ(pw::to_float16(f).bits, h.bits) << "bits " << b << " value " << f;
    }
  }
}

TEST(Float16, RoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(pw::to_float(pw::to_float16(1.0F + 0.00048828125F)), 1.0F);  // halfway: even
  EXPECT_EQ(pw::to_float(pw::to_float16(65504.0F)), 65504.0F);
  EXPECT_TRUE(std::isinf(pw::to_float(pw::to_float16(65520.0F))));
  EXPECT_TRUE(std::isinf(pw::to_float(pw::to_float16(1e10F))));
  EXPECT_EQ(pw::to_float(pw::to_float16(1e-10F)), 0.0F);
  EXPECT_EQ(pw::to_float(pw::to_float16(5.9604644775390625e-8F)), 5.9604644775390625e-8F);
  // Relative error bound of float16 in the normal range: 2^-11.
  for (float x = 1e-4F; x < 6e4F; x *= 1.37F) {
    EXPECT_LE(std::fabs(pw::to_float(pw::to_float16(x)) - x), x * 0x1p-11F) << x;
  }
}
