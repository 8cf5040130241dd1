// fp16 and bf16 conversions: exhaustive round trips, special values, rounding
// ties, and the batch (vector) conversions against the scalar ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/half.h"
#include "kernels/reduce.h"
#include "kernels/reduce_impl.h"

namespace horovodlite {
namespace kernels {
namespace {

uint32_t fbits(float f) { return detail::float_bits(f); }
float bitsf(uint32_t u) { return detail::bits_float(u); }

bool half_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

TEST(Half, SpecialValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);  // max finite
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // tie with 65536 rounds to even = inf
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
  EXPECT_TRUE(half_is_nan(float_to_half(NAN)));
  EXPECT_TRUE(half_is_nan(float_to_half(-NAN)));
  EXPECT_TRUE(half_is_nan(float_to_half(bitsf(0x7f800001u))));    // signalling NaN with a low payload stays NaN
  EXPECT_EQ(float_to_half(bitsf(0x7f800001u)) & 0x200u, 0x200u);  // and is quiet
  // Subnormals: 2^-24 is the smallest, 2^-25 ties to zero, just above rounds up.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp ties to even (2)
  EXPECT_EQ(float_to_half(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(float_to_half(1e-30f), 0x0000);
  // Ties to even among normals.
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);

  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fbits(half_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(half_to_float(0x7c00), INFINITY);
  EXPECT_EQ(half_to_float(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));
}

TEST(Half, ExhaustiveRoundTripAndVectorAgreement) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536), fv(65536);
  std::vector<double> dbl(65536), dv(65536);
  detail::scalar_half_to_float_n(f.data(), all.data(), 65536);
  detail::scalar_half_to_double_n(dbl.data(), all.data(), 65536);
  half_to_float_n(fv.data(), all.data(), 65536);
  half_to_double_n(dv.data(), all.data(), 65536);
  std::vector<uint16_t> back(65536), back_d(65536), back_v(65536), back_dv(65536);
  detail::scalar_float_to_half_n(back.data(), f.data(), 65536);
  detail::scalar_double_to_half_n(back_d.data(), dbl.data(), 65536);
  float_to_half_n(back_v.data(), f.data(), 65536);
  double_to_half_n(back_dv.data(), dbl.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = all[i];
    // The batch path (vector where available) is bit-identical to the scalar one.
    ASSERT_EQ(fbits(fv[i]), fbits(f[i])) << std::hex << h;
    ASSERT_EQ(detail::double_bits(dv[i]), detail::double_bits(dbl[i])) << std::hex << h;
    ASSERT_EQ(detail::double_bits(static_cast<double>(f[i])), detail::double_bits(dbl[i])) << std::hex << h;
    const uint16_t expect = half_is_nan(h) ? static_cast<uint16_t>(h | 0x200u) : h;  // NaN comes back quiet
    ASSERT_EQ(back[i], expect) << std::hex << h;
    ASSERT_EQ(back_d[i], expect) << std::hex << h;
    ASSERT_EQ(back_v[i], expect) << std::hex << h;
    ASSERT_EQ(back_dv[i], expect) << std::hex << h;
  }
}

TEST(Half, FloatToHalfVectorMatchesScalarOnRandomBits) {
  std::mt19937 rng(42);
  const int64_t n = 1 << 20;
  std::vector<float> src(n + 3);
  for (auto& v : src) {
    uint32_t b = rng();
    // Bias half of the samples into the interesting exponent range (subnormal .. overflow).
    if (b & 1u) b = (b & 0x807fffffu) | ((100u + (b >> 24) % 50u) << 23);
    v = bitsf(b);
  }
  std::vector<uint16_t> a(n), b(n);
  detail::scalar_float_to_half_n(a.data(), src.data() + 3, n);  // unaligned source
  float_to_half_n(b.data(), src.data() + 3, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << std::hex << fbits(src[i + 3]);
    // The scalar conversion agrees with the hardware's where there is one.
#if HVL_KERNELS_X86
  if (cpu_has_avx2_f16c()) {
    detail::avx2_float_to_half_n(b.data(), src.data() + 3, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << std::hex << fbits(src[i + 3]);
  }
#endif
}

TEST(Half, DoubleToHalfRoundsOnce) {
  // 1 + 2^-11 + 2^-40: via float it would become the tie 1 + 2^-11 and round to 1.0;
  // rounded once it is above the tie and must round up.
  const double tricky = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  std::vector<double> src = {tricky,
                             -tricky,
                             65504.0,
                             65519.99,
                             65520.0,
                             1e300,
                             -1e300,
                             -0.0,
                             std::ldexp(1.0, -24),
                             std::ldexp(1.0, -25),
                             std::ldexp(1.0, -25) + std::ldexp(1.0, -60),
                             1e-300,
                             std::numeric_limits<double>::quiet_NaN(),
                             INFINITY,
                             3.4028235677973366e38,
                             std::ldexp(1.0, -14) - std::ldexp(1.0, -40)};
  const uint16_t expect[] = {0x3c01, 0xbc01, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0xfc00, 0x8000,
                             0x0001, 0x0000, 0x0001, 0x0000, 0x7e00, 0x7c00, 0x7c00, 0x0400};
  std::vector<double> padded;
  for (int rep = 0; rep < 3; ++rep) padded.insert(padded.end(), src.begin(), src.end());  // vector body + tail
  std::vector<uint16_t> out(padded.size()), ref(padded.size());
  double_to_half_n(out.data(), padded.data(), static_cast<int64_t>(padded.size()));
  detail::scalar_double_to_half_n(ref.data(), padded.data(), static_cast<int64_t>(padded.size()));
  for (size_t i = 0; i < padded.size(); ++i) {
    const uint16_t e = expect[i % src.size()];
    if (half_is_nan(e)) {
      EXPECT_TRUE(half_is_nan(out[i]) && half_is_nan(ref[i])) << i;
    } else {
      EXPECT_EQ(out[i], e) << i << " " << padded[i];
      EXPECT_EQ(ref[i], e) << i << " " << padded[i];
    }
  }
  // Random doubles across the fp16 range: vector == scalar, and == via-float where exact.
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int> ex(-30, 17);
  std::uniform_real_distribution<double> m(-2.0, 2.0);
  const int64_t n = 200003;
  std::vector<double> r(n);
  for (auto& v : r) v = std::ldexp(m(rng), ex(rng));
  std::vector<uint16_t> a(n), b(n);
  double_to_half_n(a.data(), r.data(), n);
  detail::scalar_double_to_half_n(b.data(), r.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], b[i]) << r[i];
    const float f = static_cast<float>(r[i]);
    if (static_cast<double>(f) == r[i]) {
      ASSERT_EQ(a[i], float_to_half(f)) << r[i];
    }
    // Correctly rounded: no other half is closer.
    const double got = half_to_float(a[i]);
    if (std::isfinite(got)) {
      const double err = std::fabs(got - r[i]);
      const double up = half_to_float(static_cast<uint16_t>(a[i] + 1));
      const double down = (a[i] & 0x7fffu) ? static_cast<double>(half_to_float(static_cast<uint16_t>(a[i] - 1))) : got;
      if (std::isfinite(up)) {
        ASSERT_LE(err, std::fabs(up - r[i])) << r[i];
      }
      ASSERT_LE(err, std::fabs(down - r[i])) << r[i];
    }
  }
}

// The device's float16/bfloat16 scale factor (Horovod's CUDA semantics, issue 29):
// rounded to the tensor's type, so that the product of two halves is exact in
// float32 and the result is rounded once. The CUDA kernels use this helper; the
// device test (tests/gpu) checks their bits against it.
TEST(Half, DeviceScaleFactorIsRoundedToTheTensorsType) {
  EXPECT_EQ(device_half_factor(0.5), 0.5f);  // representable: unchanged
  EXPECT_EQ(device_half_factor(-3.5), -3.5f);
  EXPECT_EQ(device_half_factor(0.3), half_to_float(float_to_half(0.3f)));
  EXPECT_NE(device_half_factor(0.3), 0.3f);
  EXPECT_EQ(device_half_factor(0.3), 0.300048828125f);  // 0x34cd
  EXPECT_EQ(device_bfloat16_factor(0.3), bfloat16_to_float(float_to_bfloat16(0.3f)));
  EXPECT_EQ(device_bfloat16_factor(0.3), 0.30078125f);
  // Exactness: for every half x, float(x) * factor is the exact product (11-bit
  // significands), so one rounding to half is Horovod's __hmul(x, half(f)).
  const float f = device_half_factor(1.0 / 3.0);
  int differ = 0;
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float x = half_to_float(static_cast<uint16_t>(h));
    const double exact = static_cast<double>(x) * static_cast<double>(f);
    ASSERT_EQ(static_cast<double>(x * f), exact) << h;
    if (float_to_half(x * f) != float_to_half(x * static_cast<float>(1.0 / 3.0))) ++differ;
  }
  EXPECT_GT(differ, 0);  // the rounded factor changes results in the last bit (as reported)
}

TEST(BFloat16, SpecialValuesAndTies) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16(bitsf(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bfloat16(bitsf(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bfloat16(bitsf(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bfloat16(bitsf(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bfloat16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-INFINITY), 0xff80);
  EXPECT_EQ(float_to_bfloat16(bitsf(0x00000001u)), 0x0000);    // tiny denormal rounds to zero
  EXPECT_EQ(float_to_bfloat16(bitsf(0x00018000u)), 0x0002);    // denormals keep their bits
  const uint16_t nan = float_to_bfloat16(bitsf(0x7f800001u));  // sNaN whose payload would be truncated away
  EXPECT_TRUE((nan & 0x7fffu) > 0x7f80u);
  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bfloat16_to_float(0xff80), -INFINITY);
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const bool is_nan = (b & 0x7fffu) > 0x7f80u;
    const uint16_t expect = is_nan ? static_cast<uint16_t>(b | 0x40u) : b;
    ASSERT_EQ(float_to_bfloat16(bfloat16_to_float(b)), expect) << std::hex << b;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace horovodlite
