// bf16 compression's kernels: float32/float64 <-> bfloat16 arrays (round to
// nearest even, NaN/Inf, double rounded once), and the 16-bit-wire kernels of
// kernels/reduce.h and kernels/convert.h with wire = kBFloat16: the AVX2 path
// against the scalar one bit for bit, and the scalar one against the definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/convert.h"
#include "kernels/half.h"
#include "kernels/reduce.h"
#include "kernels/reduce_impl.h"

namespace horovodlite {
namespace kernels {
namespace {

using testing::fill_random;
using testing::first_mismatch;
using testing::op_label;
using testing::SkewedBuffer;

constexpr DataType kBf = DataType::kBFloat16;
const DataType kBufferTypes[] = {DataType::kFloat32, DataType::kFloat64};
const int64_t kCounts[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099};

float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint16_t> random_bf16(int64_t n, std::mt19937_64& rng) {
  std::vector<uint16_t> h(static_cast<size_t>(n) + 1);
  for (auto& x : h) x = static_cast<uint16_t>(rng());  // every bit pattern: NaN, inf, subnormals
  return h;
}

TEST(Bf16Wire, RoundToNearestEvenNanAndInfThroughTheArrayKernels) {
  // value, expected bfloat16 bits
  const std::pair<uint32_t, uint16_t> cases[] = {
      {0x3f800000u, 0x3f80},  // 1
      {0x3f808000u, 0x3f80},  // tie, even below
      {0x3f818000u, 0x3f82},  // tie, even above
      {0x3f808001u, 0x3f81},  // just above the tie
      {0x3f807fffu, 0x3f80},  // just below the tie
      {0xbf818000u, 0xbf82},  // negative tie rounds the magnitude
      {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to inf
      {0x7f7f7fffu, 0x7f7f},  // the largest value that stays finite
      {0x7f800000u, 0x7f80},  // inf
      {0xff800000u, 0xff80},  // -inf
      {0x80000000u, 0x8000},  // -0
      {0x00018000u, 0x0002},  // subnormal tie -> even
  };
  std::vector<float> in;
  std::vector<uint16_t> want;
  for (int rep = 0; rep < 3; ++rep) {  // more than one vector's worth, so the AVX2 loop sees them
    for (const auto& c : cases) {
      in.push_back(bitsf(c.first));
      want.push_back(c.second);
    }
  }
  std::vector<uint16_t> got(in.size()), scalar(in.size());
  float_to_bfloat16_n(got.data(), in.data(), static_cast<int64_t>(in.size()));
  detail::scalar_float_to_bfloat16_n(scalar.data(), in.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(got, want);
  EXPECT_EQ(scalar, want);
  // NaNs stay NaN (quiet), sign kept, also the signalling NaN whose payload
  // lies only in the bits that are cut off.
  const float nans[] = {bitsf(0x7f800001u), bitsf(0xff800001u), bitsf(0x7fc00000u), bitsf(0x7fbfffffu),
                        bitsf(0x7f800001u), bitsf(0xffc12345u), bitsf(0x7fa00000u), bitsf(0x7f800100u)};
  uint16_t out[8];
  float_to_bfloat16_n(out, nans, 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_GT(out[i] & 0x7fffu, 0x7f80u) << i;
    EXPECT_NE(out[i] & 0x40u, 0u) << i << ": quiet";
    EXPECT_EQ(out[i] & 0x8000u, (detail::float_bits(nans[i]) >> 16) & 0x8000u) << i << ": sign";
    EXPECT_TRUE(std::isnan(bfloat16_to_float(out[i]))) << i;
  }
}

TEST(Bf16Wire, RoundTripOfEveryBf16Value) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536);
  std::vector<double> d(65536);
  std::vector<uint16_t> back(65536), back_d(65536);
  bfloat16_to_float_n(f.data(), all.data(), 65536);
  bfloat16_to_double_n(d.data(), all.data(), 65536);
  float_to_bfloat16_n(back.data(), f.data(), 65536);
  double_to_bfloat16_n(back_d.data(), d.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const bool is_nan = (b & 0x7fffu) > 0x7f80u;
    ASSERT_EQ(detail::float_bits(f[i]), static_cast<uint32_t>(b) << 16) << std::hex << b << ": widening is exact";
    if (!is_nan) {
      ASSERT_EQ(static_cast<double>(f[i]), d[i]) << std::hex << b;
    }
    const uint16_t expect = is_nan ? static_cast<uint16_t>(b | 0x40u) : b;
    ASSERT_EQ(back[i], expect) << std::hex << b;
    ASSERT_EQ(back_d[i], expect) << std::hex << b;
  }
}

TEST(Bf16Wire, VectorConversionsMatchScalarOnRandomBits) {
  if (!cpu_has_avx2_f16c()) GTEST_SKIP() << "no AVX2/F16C on this CPU";
  std::mt19937_64 rng(2024);
  for (int64_t n : kCounts) {
    for (int skew : {0, 1, 3}) {
      SkewedBuffer src(n, 4, skew);
      float* f = reinterpret_cast<float*>(src.data());
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = static_cast<uint32_t>(rng());
        std::memcpy(f + i, &u, 4);  // every bit pattern: NaN, inf, subnormals, ties
      }
      std::vector<uint16_t> v(static_cast<size_t>(n) + 1, 0x1234), s(static_cast<size_t>(n) + 1, 0x1234);
      detail::avx2_float_to_bfloat16_n(v.data(), f, n);
      detail::scalar_float_to_bfloat16_n(s.data(), f, n);
      ASSERT_EQ(v, s) << "n=" << n << " skew=" << skew;
      SkewedBuffer wv(n, 4, skew), ws(n, 4, skew);
      detail::avx2_bfloat16_to_float_n(reinterpret_cast<float*>(wv.data()), v.data(), n);
      detail::scalar_bfloat16_to_float_n(reinterpret_cast<float*>(ws.data()), v.data(), n);
      ASSERT_EQ(std::memcmp(wv.data(), ws.data(), static_cast<size_t>(n) * 4), 0) << "n=" << n;
    }
  }
}

TEST(Bf16Wire, DoubleRoundsOnce) {
  // 1 + 2^-8 is the tie between bf16 neighbours 1 and 1 + 2^-7; a little above
  // it a double must round up, though through float (1 + 2^-8 exactly, then
  // ties to even) it would round down.
  const double above = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  const double below = 1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40);
  EXPECT_EQ(float_to_bfloat16(static_cast<float>(above)), 0x3f80);  // the double rounding it avoids
  const double in[] = {above,
                       -above,
                       below,
                       1.0 + std::ldexp(1.0, -8),
                       3.0,
                       -0.0,
                       1e300,
                       -1e300,
                       1e-300,
                       std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN(),
                       std::ldexp(1.0, -133),
                       3.3963e38,
                       3.3961e38};
  const uint16_t want[] = {0x3f81, 0xbf81, 0x3f80, 0x3f80, 0x4040, 0x8000, 0x7f80,
                           0xff80, 0x0000, 0x7f80, 0x7fc0, 0x0001, 0x7f80, 0x7f7f};
  const int64_t n = sizeof(in) / sizeof(in[0]);
  std::vector<uint16_t> got(n);
  to_half_n(got.data(), in, n, DataType::kFloat64, kBf);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i], want[i]) << i << ": " << in[i];
}

TEST(Bf16Wire, ReduceVectorMatchesScalarAndScalarMatchesDefinition) {
  const bool vector = cpu_has_avx2_f16c();
  std::mt19937_64 rng(43);
  for (DataType t : kBufferTypes) {
    const size_t es = dtype_size(t);
    for (ReduceOp op : testing::all_ops()) {
      for (int mode = 0; mode < 6; ++mode) {  // round x {no out, separate out, out in place}
        const bool round = mode & 1;
        const int out_kind = mode >> 1;
        for (int64_t n : kCounts) {
          for (int skew : {0, 1, 3}) {
            const std::string what = std::string(dtype_name(t)) + "/" + op_label(op) + " n=" + std::to_string(n) +
                                     " skew=" + std::to_string(skew) + " round=" + std::to_string(round) +
                                     " out=" + std::to_string(out_kind);
            SkewedBuffer dv(n, es, skew), ds(n, es, skew), dr(n, es, 0);
            fill_random(dv.data(), n, t, rng);
            std::memcpy(ds.data(), dv.data(), n * es);
            std::memcpy(dr.data(), dv.data(), n * es);
            const std::vector<uint16_t> src = random_bf16(n, rng);
            std::vector<uint16_t> sv = src, ss = src, sr = src;
            std::vector<uint16_t> ov(n + 1, 0x1234), os(n + 1, 0x1234), orf(n + 1, 0x1234);
            uint16_t* outv = out_kind == 0 ? nullptr : out_kind == 1 ? ov.data() : sv.data();
            uint16_t* outs = out_kind == 0 ? nullptr : out_kind == 1 ? os.data() : ss.data();
            uint16_t* outr = out_kind == 0 ? nullptr : out_kind == 1 ? orf.data() : sr.data();
            if (vector) {
              detail::avx2_reduce_half_into(dv.data(), sv.data(), outv, n, t, op, round, kBf);
            } else {
              reduce_half_into(dv.data(), sv.data(), outv, n, t, op, round, kBf);
            }
            detail::scalar_reduce_half_into(ds.data(), ss.data(), outs, n, t, op, round, kBf);
            if (t == DataType::kFloat32) {
              testing::wire_reference(reinterpret_cast<float*>(dr.data()), sr.data(), outr, n, op, round, kBf);
            } else {
              testing::wire_reference(reinterpret_cast<double*>(dr.data()), sr.data(), outr, n, op, round, kBf);
            }
            ASSERT_EQ(first_mismatch(dv.data(), ds.data(), n, t), -1) << what << ": vector vs scalar buffer";
            ASSERT_EQ(first_mismatch(ds.data(), dr.data(), n, t), -1) << what << ": scalar vs definition";
            if (out_kind == 1) {
              ASSERT_EQ(first_mismatch(ov.data(), os.data(), n + 1, kBf), -1) << what;
              ASSERT_EQ(first_mismatch(os.data(), orf.data(), n + 1, kBf), -1) << what;
              ASSERT_EQ(os[n], 0x1234) << what << ": wrote past the end";
            } else if (out_kind == 2) {
              ASSERT_EQ(first_mismatch(sv.data(), ss.data(), n + 1, kBf), -1) << what;
              ASSERT_EQ(first_mismatch(ss.data(), sr.data(), n + 1, kBf), -1) << what;
            } else {
              ASSERT_EQ(sv, src) << what << ": source modified";
            }
          }
        }
      }
    }
  }
}

// bf16 compression's packing and unpacking: scaled, then rounded to bf16, and
// widened, then scaled in bf16 precision; the streaming widening equals the
// plain one (aligned or not).
TEST(Bf16Wire, ScaledAndStreamingConversionsEqualTheirDefinitions) {
  std::mt19937_64 rng(12);
  for (DataType t : kBufferTypes) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{2049}, int64_t{5000}}) {
      for (double factor : {1.0, 0.25, 1.0 / 3.0}) {
        const size_t es = dtype_size(t);
        SkewedBuffer src(n, es, 0), scaled(n, es, 0), widened(n, es, 0), expected(n, es, 0);
        fill_random(src.data(), n, t, rng);
        std::vector<uint16_t> half(static_cast<size_t>(n) + 1), want(static_cast<size_t>(n) + 1);
        to_half_scaled_n(half.data(), src.data(), n, t, factor, kBf);
        scale_copy(scaled.data(), src.data(), n, t, factor);
        to_half_n(want.data(), scaled.data(), n, t, kBf);
        const std::string where =
            std::string(dtype_name(t)) + " n=" + std::to_string(n) + " factor " + std::to_string(factor);
        EXPECT_EQ(first_mismatch(half.data(), want.data(), n, kBf), -1) << where;
        from_half_scaled_n(widened.data(), half.data(), n, t, factor, kBf);
        from_half_n(expected.data(), half.data(), n, t, kBf);
        for (int64_t i = 0; i < n && factor != 1.0; ++i) {  // the definition: scale, round to bf16, widen
          if (t == DataType::kFloat32) {
            float* e = reinterpret_cast<float*>(expected.data());
            e[i] = bfloat16_to_float(float_to_bfloat16(e[i] * static_cast<float>(factor)));
          } else {
            double* e = reinterpret_cast<double*>(expected.data());
            e[i] = bfloat16_to_float(detail::double_to_bfloat16_scalar(e[i] * factor));
          }
        }
        EXPECT_EQ(first_mismatch(widened.data(), expected.data(), n, t), -1) << where;
        for (int skew : {0, 1}) {
          SkewedBuffer streamed(n, es, skew), plain(n, es, skew);
          from_half_n_streaming(streamed.data(), half.data(), n, t, kBf);
          from_half_n(plain.data(), half.data(), n, t, kBf);
          EXPECT_EQ(first_mismatch(streamed.data(), plain.data(), n, t), -1) << where << " skew " << skew;
        }
      }
    }
  }
}

// bf16 has float32's range: sums that overflow fp16 stay finite; only float32's
// own overflow becomes inf. The fp16 wire's default is unchanged.
TEST(Bf16Wire, NoOverflowWhereFloat32HasNoneAndOtherDtypesAreUntouched) {
  float d[3] = {60000.0f, -60000.0f, 3e38f};
  const uint16_t s[3] = {float_to_bfloat16(10000.0f), float_to_bfloat16(-10000.0f), float_to_bfloat16(3e38f)};
  uint16_t out[3] = {0, 0, 0};
  reduce_half_into(d, s, out, 3, DataType::kFloat32, ReduceOp::kSum, true, kBf);
  EXPECT_EQ(out[0], float_to_bfloat16(70000.0f));
  EXPECT_NEAR(d[0], 70000.0f, 70000.0f / 128);
  EXPECT_EQ(d[1], -d[0]);
  EXPECT_EQ(out[2], 0x7f80);
  EXPECT_EQ(d[2], INFINITY);
  float e[1] = {60000.0f};
  const uint16_t h[1] = {float_to_half(10000.0f)};
  reduce_half_into(e, h, out, 1, DataType::kFloat32, ReduceOp::kSum, true);  // default wire: fp16
  EXPECT_EQ(e[0], INFINITY);
  int32_t ints[2] = {5, 6};
  reduce_half_into(ints, s, out, 2, DataType::kInt32, ReduceOp::kSum, true, kBf);
  EXPECT_EQ(ints[0], 5);
  EXPECT_EQ(ints[1], 6);
}

}  // namespace
}  // namespace kernels
}  // namespace horovodlite
