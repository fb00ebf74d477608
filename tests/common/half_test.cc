#include "common/half.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/simd.h"
#include "gtest/gtest.h"

namespace hetps {
namespace {

float FromBits(uint32_t bits) { return half_internal::Float(bits); }

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(-2.0f), 0xc000);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808000)), 0x3f80);               // tie, even below
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f818000)), 0x3f82);               // tie, even above
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808001)), 0x3f81);               // just above the tie
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f807fff)), 0x3f80);               // just below
  EXPECT_EQ(Fp32ToBf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(Fp32ToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(Fp32ToBf16(-INFINITY), 0xff80);
  EXPECT_EQ(Fp32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00010000)), 0x0001);    // subnormal kept
  const uint16_t nan = Fp32ToBf16(FromBits(0x7f800001));  // signalling NaN: stays NaN, quiet
  EXPECT_TRUE(std::isnan(Bf16ToFp32(nan)));
  EXPECT_NE(nan & 0x0040, 0);
  EXPECT_EQ(Bf16ToFp32(0x3f80), 1.0f);
}

TEST(Bf16Test, EveryBf16SurvivesARoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = Bf16ToFp32(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(Fp32ToBf16(value), bits);
  }
}

TEST(Fp16Test, KnownValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(-2.5f), 0xc100);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7bff);  // rounds down
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // tie rounds to even: infinity
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(-INFINITY), 0xfc00);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even, 0
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -24)), 0x0002);  // tie to even, up
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(NAN))));
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x7c00), INFINITY);
}

TEST(Fp16Test, EveryFp16SurvivesARoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = Fp16ToFp32(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(value))));
      continue;
    }
    ASSERT_EQ(Fp32ToFp16(value), bits);
  }
}

// The array forms (vectorised; F16C for fp16 where present) agree with the scalar forms at every
// SIMD level, on every 16-bit value and on a million random fp32 bit patterns.
TEST(HalfArrayTest, ArrayFormsMatchTheScalarFormsAtEverySimdLevel) {
  std::vector<float> floats;
  std::mt19937 rng(1);
  for (int i = 0; i < 1000000; ++i) floats.push_back(FromBits(rng()));
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 3e-8f, 6e-8f, INFINITY, NAN}) {
    floats.push_back(v);
  }
  std::vector<uint16_t> halves(65536);
  for (uint32_t i = 0; i < 65536; ++i) halves[i] = static_cast<uint16_t>(i);

  auto same_float = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || half_internal::Bits(a) == half_internal::Bits(b);
  };
  const SimdLevel best = BestSimdLevel();
  for (int level = 0; level <= static_cast<int>(best); ++level) {
    SetActiveSimdLevel(static_cast<SimdLevel>(level));
    std::vector<uint16_t> bf16(floats.size()), fp16(floats.size());
    Fp32ToBf16(floats.data(), bf16.data(), floats.size());
    Fp32ToFp16(floats.data(), fp16.data(), floats.size());
    for (size_t i = 0; i < floats.size(); ++i) {
      ASSERT_EQ(bf16[i], Fp32ToBf16(floats[i])) << i << " level " << level;
      const bool both_nan = std::isnan(Fp16ToFp32(fp16[i])) && std::isnan(floats[i]);
      ASSERT_TRUE(both_nan || fp16[i] == Fp32ToFp16(floats[i])) << i << " level " << level;
    }
    std::vector<float> from_bf16(65536), from_fp16(65536);
    Bf16ToFp32(halves.data(), from_bf16.data(), halves.size());
    Fp16ToFp32(halves.data(), from_fp16.data(), halves.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_TRUE(same_float(from_bf16[i], Bf16ToFp32(halves[i]))) << i;
      ASSERT_TRUE(same_float(from_fp16[i], Fp16ToFp32(halves[i]))) << i << " level " << level;
    }
  }
  SetActiveSimdLevel(best);
}

TEST(HalfArrayTest, ConvertFloatsBetweenEveryPairOfFormats) {
  const std::vector<float> values = {1.0f, -0.5f, 3.140625f, 1024.0f, 0.0f};
  const FloatFormat formats[] = {FloatFormat::kFp32, FloatFormat::kBf16, FloatFormat::kFp16};
  for (FloatFormat from : formats) {
    std::vector<uint8_t> source(values.size() * 4);
    ConvertFloats(values.data(), FloatFormat::kFp32, source.data(), from, values.size());
    for (FloatFormat to : formats) {
      std::vector<uint8_t> converted(values.size() * 4);
      ConvertFloats(source.data(), from, converted.data(), to, values.size());
      std::vector<float> back(values.size());
      ConvertFloats(converted.data(), to, back.data(), FloatFormat::kFp32, values.size());
      EXPECT_EQ(back, values);  // all exactly representable in every format
    }
  }
}

}  // namespace
}  // namespace hetps
