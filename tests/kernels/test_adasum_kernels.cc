// Adasum's float16 and bfloat16 element kernels (ops/adasum_kernels.h): the
// vector forms (AVX2/FMA/F16C, where this CPU has them) against the scalar
// rules they implement. The combination must give the same bits as one
// rounding of the double multiply-add (the generic loops' store); the dot
// products must equal a long-double sum to double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/adasum_kernels.h"

namespace horovodlite {
namespace adasum_kernels {
namespace {

bool finite16(uint16_t h, bool bf16) { return bf16 ? (h & 0x7f80u) != 0x7f80u : (h & 0x7c00u) != 0x7c00u; }

// Random finite values of every exponent (bit patterns drawn uniformly).
std::vector<uint16_t> random_values(size_t n, bool bf16, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  std::vector<uint16_t> v;
  while (v.size() < n) {
    const auto h = static_cast<uint16_t>(bits(gen));
    if (finite16(h, bf16)) v.push_back(h);
  }
  return v;
}

// What one element of the combination must be: the double multiply-add
// rounded once (the vector form); the generic loop multiplies and adds.
template <typename E>
uint16_t expected(uint16_t x, uint16_t y, double cx, double cy) {
  const double a = E::load(x), b = E::load(y);
  return E::store(half_kernels_vectorized() ? std::fma(cx, a, cy * b) : cx * a + cy * b);
}

template <typename E>
void check_combine(bool bf16) {
  // Odd lengths: the vector loop and the scalar tail both run.
  const size_t n = (size_t{1} << 16) + 5;
  const std::vector<uint16_t> x = random_values(n, bf16, 1), y = random_values(n, bf16, 2);
  // Coefficients that keep, shrink (into subnormals and to zero), grow (past
  // the largest finite value) and mix the two pieces, and round in between.
  const std::vector<std::pair<double, double>> coefs = {
      {1.0, 0.0},        {0.5, 0.5},    {1.0 / 3, 2.0 / 3}, {1e-6, 3e-7},   {7.0e3, -1.1e4},
      {1 + 1e-9, 1e-12}, {-0.75, 1.25}, {1e-30, 0.0},       {3.3e30, 1e29}, {0.9999999, -0.0000001}};
  size_t mismatches = 0;
  for (const auto& [cx, cy] : coefs) {
    std::vector<uint16_t> out(n);
    combine<E>(out.data(), x.data(), y.data(), static_cast<int64_t>(n), cx, cy);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = expected<E>(x[i], y[i], cx, cy);
      if (out[i] != want && ++mismatches <= 10) {
        ADD_FAILURE() << (bf16 ? "bfloat16" : "float16") << " combine, coefficients " << cx << ", " << cy << ", [" << i
                      << "]: x=0x" << std::hex << x[i] << " y=0x" << y[i] << " got 0x" << out[i] << " want 0x" << want
                      << std::dec;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(AdasumKernels, Float16CombineRoundsOnce) { check_combine<F16>(false); }
TEST(AdasumKernels, BFloat16CombineRoundsOnce) { check_combine<BF16>(true); }

// Rounding boundaries: halfway between two float16 values (ties to even),
// just above and below, the largest finite value and the overflow point,
// the smallest subnormal and half of it.
TEST(AdasumKernels, Float16CombineBoundaries) {
  const std::vector<double> values = {1.0 + std::ldexp(1.0, -11),      // halfway above 1: to 1 (even)
                                      1.0 + 3 * std::ldexp(1.0, -11),  // halfway: up to even
                                      std::nextafter(1.0 + std::ldexp(1.0, -11), 2.0),
                                      std::nextafter(1.0 + std::ldexp(1.0, -11), 0.0),
                                      65504.0,
                                      65519.999,
                                      65520.0,
                                      65536.0,
                                      1e300,
                                      std::ldexp(1.0, -24),
                                      std::ldexp(1.0, -25),
                                      std::nextafter(std::ldexp(1.0, -25), 1.0),
                                      std::ldexp(3.0, -26),
                                      std::ldexp(1.0, -14) - std::ldexp(1.0, -40),
                                      1e-300,
                                      0.0,
                                      -0.0};
  // Each value v as 1.0 * v + 0 * 0: the multiply-add is exact, then rounded once.
  for (double v : values) {
    for (double s : {1.0, -1.0}) {
      // x = 1 (0x3c00), y = 0: out = (s * v) * 1 + 0.
      const uint16_t one = 0x3c00, zero = 0;
      std::vector<uint16_t> x(11, one), y(11, zero), out(11);
      combine<F16>(out.data(), x.data(), y.data(), 11, s * v, 0.0);
      const uint16_t want = F16::store(std::fma(s * v, 1.0, 0.0));  // -0 + 0 is +0
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i], want) << "value " << s * v << " [" << i << "]";
      }
    }
  }
}

// bfloat16 has float32's subnormals: there a value just above a tie must still
// round up (the scalar store's rule), where a second rounding through float
// would land on the tie and go to even.
TEST(AdasumKernels, BFloat16CombineBoundaries) {
  const double tie = std::ldexp(static_cast<double>(0x408000), -149);  // float bits 0x00408000: a bfloat16 tie
  const std::vector<double> values = {tie + std::ldexp(1.0, -151),
                                      tie - std::ldexp(1.0, -151),
                                      tie,
                                      std::ldexp(static_cast<double>(0x418000), -149) + std::ldexp(1.0, -152),
                                      1.0 + std::ldexp(1.0, -8),
                                      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
                                      3.4e38,
                                      3.4028235e38,
                                      1e300,
                                      std::ldexp(1.0, -149),
                                      std::ldexp(1.0, -150),
                                      std::ldexp(3.0, -151),
                                      0.0};
  for (double v : values) {
    for (double s : {1.0, -1.0}) {
      const uint16_t one = 0x3f80, zero = 0;  // bfloat16 1.0 and 0
      std::vector<uint16_t> x(11, one), y(11, zero), out(11);
      combine<BF16>(out.data(), x.data(), y.data(), 11, s * v, 0.0);
      const uint16_t want = BF16::store(std::fma(s * v, 1.0, 0.0));
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i], want) << "value " << s * v << " [" << i << "]";
      }
    }
  }
}

template <typename E>
void check_dots(bool bf16) {
  const size_t n = 100003;
  const std::vector<uint16_t> x = random_values(n, bf16, 3), y = random_values(n, bf16, 4);
  // Keep the squares inside double's range (bfloat16 reaches 2^127): scale the
  // exponents down by drawing again where a value is too large.
  std::vector<uint16_t> xs, ys;
  for (size_t i = 0; i < n; ++i) {
    if (std::fabs(E::load(x[i])) < 1e30 && std::fabs(E::load(y[i])) < 1e30) {
      xs.push_back(x[i]);
      ys.push_back(y[i]);
    }
  }
  long double d = 0, xx = 0, yy = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const long double a = E::load(xs[i]), b = E::load(ys[i]);
    d += a * b;
    xx += a * a;
    yy += b * b;
  }
  Scalar got[3] = {0, 0, 0};
  dots<E>(xs.data(), ys.data(), static_cast<int64_t>(xs.size()), got);
  const long double want[3] = {d, xx, yy};
  // Double accumulation of ~1e5 terms: relative error well under 1e-12 of the
  // sum of the absolute terms (the squares' sums are their own bound).
  long double abs_d = 0;
  for (size_t i = 0; i < xs.size(); ++i) abs_d += std::fabs(static_cast<long double>(E::load(xs[i])) * E::load(ys[i]));
  const long double scale[3] = {abs_d, xx, yy};
  for (int k = 0; k < 3; ++k) {
    EXPECT_LE(std::fabs(static_cast<double>(got[k] - want[k])), 1e-12 * static_cast<double>(scale[k]))
        << (bf16 ? "bfloat16" : "float16") << " dots[" << k << "]: " << static_cast<double>(got[k]) << " vs "
        << static_cast<double>(want[k]);
  }
}

TEST(AdasumKernels, Float16Dots) { check_dots<F16>(false); }
TEST(AdasumKernels, BFloat16Dots) { check_dots<BF16>(true); }

TEST(AdasumKernels, VectorFormsRunWhereTheCpuHasThem) {
#if defined(__x86_64__)
  const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  EXPECT_EQ(half_kernels_vectorized(), has);
#else
  EXPECT_FALSE(half_kernels_vectorized());
#endif
}

}  // namespace
}  // namespace adasum_kernels
}  // namespace horovodlite
