// Conversions between fp32 and the 16-bit float formats used on the wire: bf16 and fp16 (IEEE
// binary16), held as uint16_t bit patterns.
//
// fp32 -> 16 bits rounds to nearest, ties to even; a value too large for the format becomes
// infinity; NaN stays NaN (made quiet, sign kept); fp16 keeps subnormals. 16 bits -> fp32 is
// exact. The array forms are vectorised (common/simd.h; F16C instructions for fp16 where the CPU
// has them) and give the same bits as the scalar forms.
#ifndef HETPS_COMMON_HALF_H_
#define HETPS_COMMON_HALF_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hetps {

namespace half_internal {
inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float Float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
}  // namespace half_internal

inline uint16_t Fp32ToBf16(float value) {
  const uint32_t x = half_internal::Bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float Bf16ToFp32(uint16_t value) {
  return half_internal::Float(static_cast<uint32_t>(value) << 16);
}

// Round to nearest even through the float unit (the method of F. Giesen's float_to_half_rtne).
inline uint16_t Fp32ToFp16(float value) {
  using half_internal::Bits;
  using half_internal::Float;
  constexpr uint32_t kFp32Infinity = 255u << 23;
  constexpr uint32_t kFp16Overflow = (127u + 16u) << 23;    // first fp32 above fp16's range
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t x = Bits(value);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t out;
  if (x >= kFp16Overflow) {
    out = x > kFp32Infinity ? 0x7e00u : 0x7c00u;  // NaN : infinity
  } else if (x < (113u << 23)) {
    // Subnormal or zero in fp16: let the float adder round the mantissa into place.
    out = Bits(Float(x) + Float(kDenormMagic)) - kDenormMagic;
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
    x += odd;
    out = x >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

inline float Fp16ToFp32(uint16_t value) {
  using half_internal::Bits;
  using half_internal::Float;
  constexpr uint32_t kShiftedExponent = 0x7c00u << 13;
  uint32_t out = (static_cast<uint32_t>(value) & 0x7fffu) << 13;
  const uint32_t exponent = kShiftedExponent & out;
  out += (127u - 15u) << 23;
  if (exponent == kShiftedExponent) {
    out += (128u - 16u) << 23;  // infinity or NaN
  } else if (exponent == 0) {
    out += 1u << 23;  // zero or subnormal: renormalise
    out = Bits(Float(out) - Float(113u << 23));
  }
  return Float(out | (static_cast<uint32_t>(value) & 0x8000u) << 16);
}

// The element formats tensors travel in.
enum class FloatFormat : uint8_t { kFp32, kBf16, kFp16 };

inline size_t BytesPerElement(FloatFormat format) {
  return format == FloatFormat::kFp32 ? 4 : 2;
}

// Converts n elements from one format to another (a copy when the formats are the same).
// REQUIRES: `in` and `out` do not overlap.
void ConvertFloats(const void* in, FloatFormat from, void* out, FloatFormat to, size_t n);

void Fp32ToBf16(const float* in, uint16_t* out, size_t n);
void Bf16ToFp32(const uint16_t* in, float* out, size_t n);
void Fp32ToFp16(const float* in, uint16_t* out, size_t n);
void Fp16ToFp32(const uint16_t* in, float* out, size_t n);

}  // namespace hetps

#endif  // HETPS_COMMON_HALF_H_
