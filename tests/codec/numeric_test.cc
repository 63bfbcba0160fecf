#include "kvdepot/codec/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kvdepot/codec/tensor.h"

namespace kvdepot {
namespace {

// Independent reference: the exact value of a half, computed with ldexp.
double HalfValue(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f)
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(NumericTest, HalfToFloatIsExactForAllPatterns) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfBitsToFloat(static_cast<std::uint16_t>(h));
    const double want = HalfValue(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), want) << h;
      EXPECT_EQ(std::signbit(f), (h >> 15) != 0) << h;
    }
    // Every half survives a round trip through float; NaN payloads too, made quiet.
    const bool snan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0 && (h & 0x200u) == 0;
    EXPECT_EQ(FloatToHalfBits(f), snan ? (h | 0x200u) : h) << h;
  }
}

TEST(NumericTest, FloatToHalfRoundsToNearestEven) {
  // Exhaustively over a stride of fp32 patterns: the result is the nearest half, ties to even.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const std::uint32_t bits = rng();
    const float f = BitsToFloat(bits);
    if (std::isnan(f)) {
      EXPECT_EQ(FloatToHalfBits(f) & 0x7e00u, 0x7e00u);
      continue;
    }
    const std::uint16_t h = FloatToHalfBits(f);
    const double got = HalfValue(h);
    const double x = f;
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(x), 65520.0) << bits;
      continue;
    }
    // Neighbours of h (toward zero and away) must not be strictly closer.
    const std::uint16_t mag = h & 0x7fff;
    for (int d : {-1, 1}) {
      const int n = static_cast<int>(mag) + d;
      if (n < 0 || n >= 0x7c00) continue;
      const double other = HalfValue(static_cast<std::uint16_t>((h & 0x8000) | n));
      const double e0 = std::fabs(got - x), e1 = std::fabs(other - x);
      EXPECT_TRUE(e0 < e1 || (e0 == e1 && (mag & 1) == 0)) << "bits " << bits;
    }
  }
}

TEST(NumericTest, HalfBoundaries) {
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalfBits(65519.99f), 0x7bffu);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00u);
  EXPECT_EQ(FloatToHalfBits(-1e9f), 0xfc00u);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000u);  // tie to even (zero)
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001u);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002u);  // tie 1.5 ulp -> even 2
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00u);
}

TEST(NumericTest, Bf16) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80u);
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x3f808000u)), 0x3f80u);  // tie -> even
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x3f818000u)), 0x3f82u);  // tie -> even (up)
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x7f7fffffu)), 0x7f80u);  // max float rounds to inf
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0x7f800001u)), 0x7fc0u);  // sNaN -> quiet NaN
  EXPECT_EQ(FloatToBf16Bits(BitsToFloat(0xffc12345u)), 0xffc1u);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16BitsToFloat(static_cast<std::uint16_t>(b));
    const bool snan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0 && (b & 0x40u) == 0;
    EXPECT_EQ(FloatToBf16Bits(f), snan ? (b | 0x40u) : b) << b;
  }
}

TEST(NumericTest, ConvertDTypeMatchesScalars) {
  KvShape shape{1, 3, 2, 5};
  KvTensor t = KvTensor::Zeros(DType::kFloat32, shape);
  for (std::uint64_t i = 0; i < shape.elements(); ++i) {
    const float f = static_cast<float>(i) * 0.37f - 5.0f;
    std::memcpy(t.data.data() + i * 4, &f, 4);
  }
  auto half = ConvertDType(t.view(), DType::kFloat16);
  ASSERT_TRUE(half.ok());
  auto back = ConvertDType(half->view(), DType::kFloat32);
  ASSERT_TRUE(back.ok());
  for (std::uint64_t i = 0; i < shape.elements(); ++i) {
    EXPECT_EQ(ElementAsFloat(back->view(), i),
              HalfBitsToFloat(FloatToHalfBits(ElementAsFloat(t.view(), i))));
  }
  KvTensorView bad = t.view();
  bad.data = bad.data.first(4);
  EXPECT_EQ(ConvertDType(bad, DType::kFloat16).status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorTest, ShapeValidation) {
  EXPECT_TRUE(ValidateShape({2, 256, 8, 128}, DType::kFloat16).ok());
  const Status s = ValidateShape({2, 0, 8, 128}, DType::kFloat16);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("tokens = 0"), std::string::npos) << s.message();
  EXPECT_FALSE(ValidateShape({1025, 1, 1, 1}, DType::kFloat16).ok());
  const Status big = ValidateShape({1024, 65536, 1024, 1024}, DType::kFloat32);
  EXPECT_NE(big.message().find("over the limit"), std::string::npos) << big.message();
  EXPECT_EQ(KvShape({2, 768, 4, 16}).ToString(), "[2, 2, 768, 4, 16]");
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBFloat16);
  EXPECT_FALSE(ParseDType("fp8").ok());
}

}  // namespace
}  // namespace kvdepot
