#include "common/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>

#include "common/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hetps {
namespace {

struct ToBf16 {
  HETPS_KERNEL static void Run(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Fp32ToBf16(in[i]);
  }
};
struct FromBf16 {
  HETPS_KERNEL static void Run(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFp32(in[i]);
  }
};
struct ToFp16 {
  HETPS_KERNEL static void Run(const float* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Fp32ToFp16(in[i]);
  }
};
struct FromFp16 {
  HETPS_KERNEL static void Run(const uint16_t* in, float* out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Fp16ToFp32(in[i]);
  }
};

#if defined(__x86_64__)
// F16C converts 8 values per instruction, IEEE-exact (round to nearest even, subnormals kept).
__attribute__((target("avx2,f16c"))) void ToFp16F16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), half);
  }
  for (; i < n; ++i) out[i] = Fp32ToFp16(in[i]);
}

__attribute__((target("avx2,f16c"))) void FromFp16F16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(half));
  }
  for (; i < n; ++i) out[i] = Fp16ToFp32(in[i]);
}

bool UseF16c() {
  // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  }();
  return has && ActiveSimdLevel() != SimdLevel::kBaseline;
}
#endif

}  // namespace

void Fp32ToBf16(const float* in, uint16_t* out, size_t n) { RunKernel<ToBf16>(in, out, n); }

void Bf16ToFp32(const uint16_t* in, float* out, size_t n) { RunKernel<FromBf16>(in, out, n); }

void Fp32ToFp16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (UseF16c()) return ToFp16F16c(in, out, n);
#endif
  RunKernel<ToFp16>(in, out, n);
}

void Fp16ToFp32(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (UseF16c()) return FromFp16F16c(in, out, n);
#endif
  RunKernel<FromFp16>(in, out, n);
}

void ConvertFloats(const void* in, FloatFormat from, void* out, FloatFormat to, size_t n) {
  if (from == to) {
    std::memcpy(out, in, n * BytesPerElement(from));
    return;
  }
  if (from == FloatFormat::kFp32) {
    const float* values = static_cast<const float*>(in);
    uint16_t* half = static_cast<uint16_t*>(out);
    to == FloatFormat::kBf16 ? Fp32ToBf16(values, half, n) : Fp32ToFp16(values, half, n);
    return;
  }
  const uint16_t* half = static_cast<const uint16_t*>(in);
  if (to == FloatFormat::kFp32) {
    float* values = static_cast<float*>(out);
    from == FloatFormat::kBf16 ? Bf16ToFp32(half, values, n) : Fp16ToFp32(half, values, n);
    return;
  }
  // bf16 <-> fp16 goes through fp32, a block at a time.
  constexpr size_t kBlock = 1024;
  float block[kBlock];
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t count = std::min(kBlock, n - begin);
    ConvertFloats(half + begin, from, block, FloatFormat::kFp32, count);
    ConvertFloats(block, FloatFormat::kFp32, static_cast<uint16_t*>(out) + begin, to, count);
  }
}

}  // namespace hetps
