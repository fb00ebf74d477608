// The random draws of the initializers (server/initializer.h): each element's value is a pure
// function of (seed, the element's index in the tensor), made only of integer operations and
// IEEE additions, multiplications, divisions and square roots (no libm, no fused multiply-adds:
// callers compile with -ffp-contract=off). So every shard, CPU and SIMD level computes the same
// bits, and the loops that call these vectorise.
//
//   uniform  u(c)  = (Mix64(seed ^ Mix64(c)) >> 11) / 2^53            in [0, 1)
//   normal, elements 2k and 2k+1 (Box-Muller on the pair's two uniforms):
//            r = sqrt(-2 ln(1 - u(2k))),  t = u(2k + 1)
//            z(2k) = r cos(2 pi t),  z(2k+1) = r sin(2 pi t) = r cos(2 pi (t - 1/4))
//
// ln and cos are polynomials (relative error below 1e-13): one draw costs a few nanoseconds
// where libm's took about 30.
#ifndef HETPS_SERVER_RANDOM_DRAWS_H_
#define HETPS_SERVER_RANDOM_DRAWS_H_

#include <bit>
#include <cstdint>

#include "common/partitioning.h"

namespace hetps::server {

// The version of the formulas below, which peer shards compare (HelloRequest.initializer_draws):
// a change to any value they give needs a new one.
inline constexpr uint32_t kInitializerDraws = 2;

// The 53 random bits behind uniform u(counter).
inline uint64_t UniformBits(uint64_t seed, uint64_t counter) {
  return Mix64(seed ^ Mix64(counter)) >> 11;
}

// The double of an integer 0 <= n < 2^52, without an int64 -> double conversion (AVX2 has
// none): n's bits placed in the mantissa of 2^52.
inline double SmallIntegerAsDouble(uint64_t n) {
  return std::bit_cast<double>(n | 0x4330000000000000ull) - 0x1.0p52;
}

inline double UniformAt(uint64_t seed, uint64_t counter) {
  const uint64_t bits = UniformBits(seed, counter);  // < 2^53: two exact halves
  return (SmallIntegerAsDouble(bits >> 1) * 2.0 + SmallIntegerAsDouble(bits & 1)) * 0x1.0p-53;
}

// ln(u) for 2^-1022 <= u <= 1. u = 2^e m with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s),
// s = (m - 1) / (m + 1), |s| <= 0.172, as its series to s^21.
inline double LogOfUnitInterval(double u) {
  const uint64_t bits = std::bit_cast<uint64_t>(u);
  double m = std::bit_cast<double>((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
  double e = SmallIntegerAsDouble(bits >> 52) - 1023.0;
  const bool above = m > 1.4142135623730951;
  m = above ? m * 0.5 : m;
  e = above ? e + 1.0 : e;
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 21;
  p = p * s2 + 1.0 / 19;
  p = p * s2 + 1.0 / 17;
  p = p * s2 + 1.0 / 15;
  p = p * s2 + 1.0 / 13;
  p = p * s2 + 1.0 / 11;
  p = p * s2 + 1.0 / 9;
  p = p * s2 + 1.0 / 7;
  p = p * s2 + 1.0 / 5;
  p = p * s2 + 1.0 / 3;
  p = p * s2 + 1.0;
  return e * 0.6931471805599453 + 2.0 * s * p;
}

// cos(2 pi t) for t = bits / 2^53, bits < 2^53. The nearest quarter turn q is exact in the
// integer; what is left, phi in [-pi/4, pi/4), goes into the Taylor series of cos and sin.
inline double CosOfTurn(uint64_t bits) {
  constexpr uint64_t kQuarter = uint64_t{1} << 51;
  const uint64_t shifted = (bits + kQuarter / 2) & ((uint64_t{1} << 53) - 1);
  const uint64_t q = shifted >> 51;
  // phi = 2 pi (rest - 2^50) / 2^53, rest in [0, 2^51).
  const uint64_t rest = shifted & (kQuarter - 1);
  const double phi = (SmallIntegerAsDouble(rest) - 0x1.0p50) * (6.283185307179586 * 0x1.0p-53);
  const double x2 = phi * phi;
  double c = 1.0 / 20922789888000.0;  // 1/16!
  c = c * x2 - 1.0 / 87178291200.0;
  c = c * x2 + 1.0 / 479001600.0;
  c = c * x2 - 1.0 / 3628800.0;
  c = c * x2 + 1.0 / 40320.0;
  c = c * x2 - 1.0 / 720.0;
  c = c * x2 + 1.0 / 24.0;
  c = c * x2 - 0.5;
  c = 1.0 + c * x2;
  double s = -1.0 / 1307674368000.0;  // -1/15!
  s = s * x2 + 1.0 / 6227020800.0;
  s = s * x2 - 1.0 / 39916800.0;
  s = s * x2 + 1.0 / 362880.0;
  s = s * x2 - 1.0 / 5040.0;
  s = s * x2 + 1.0 / 120.0;
  s = s * x2 - 1.0 / 6.0;
  s = phi + phi * x2 * s;
  // cos(q pi/2 + phi): cos, -sin, -cos, sin.
  const double value = (q & 1) != 0 ? s : c;
  return (q == 1 || q == 2) ? -value : value;
}

// The standard normal draw of element `index` (its pair's Box-Muller value).
inline double StandardNormalAt(uint64_t seed, uint64_t index) {
  const uint64_t pair = index >> 1;
  // 1 - u is in (0, 1]: its log is finite.
  const double u1 = 1.0 - UniformAt(seed, 2 * pair);
  const double r = __builtin_sqrt(-2.0 * LogOfUnitInterval(u1));
  // The odd element takes sin(2 pi t) = cos(2 pi (t - 1/4)): a quarter turn less, mod 1.
  const uint64_t turn = (UniformBits(seed, 2 * pair + 1) - (index & 1) * (uint64_t{1} << 51)) &
                        ((uint64_t{1} << 53) - 1);
  return r * CosOfTurn(turn);
}

}  // namespace hetps::server

#endif  // HETPS_SERVER_RANDOM_DRAWS_H_
