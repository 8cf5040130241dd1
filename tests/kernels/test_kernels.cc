// reduce_into / scale / scale_copy: the AVX2 kernels against the scalar ones
// for every dtype x op x awkward count with unaligned pointers, and the
// scalar semantics against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/reduce.h"
#include "kernels/reduce_impl.h"

namespace horovodlite {
namespace kernels {
namespace {

using testing::all_ops;
using testing::all_types;
using testing::fill_random;
using testing::first_mismatch;
using testing::op_label;
using testing::SkewedBuffer;

const int64_t kCounts[] = {0, 1, 7, 8, 15, 16, 17, 1000, 100003};
constexpr uint8_t kGuard = 0xa5;

// Runs `kernel` on a skewed copy of (d, s) and checks it matches `expected`
// and wrote nothing past the end.
template <class Kernel>
void check_reduce(Kernel kernel, const std::vector<uint8_t>& d, const std::vector<uint8_t>& s,
                  const std::vector<uint8_t>& expected, int64_t count, DataType t, ReduceOp op, int skew,
                  const char* what) {
  const size_t es = dtype_size(t);
  SkewedBuffer db(count, es, skew), sb(count, es, skew + 1);
  std::memcpy(db.data(), d.data(), count * es);
  std::memcpy(sb.data(), s.data(), count * es);
  std::memset(db.end_guard(count), kGuard, 16);
  kernel(db.data(), sb.data(), count, t, op);
  EXPECT_EQ(first_mismatch(db.data(), expected.data(), count, t), -1)
      << what << " dtype=" << dtype_name(t) << " op=" << op_label(op) << " count=" << count << " skew=" << skew;
  for (int g = 0; g < 16; ++g) ASSERT_EQ(db.end_guard(count)[g], kGuard) << what << " wrote past the end";
  EXPECT_EQ(std::memcmp(sb.data(), s.data(), count * es), 0) << what << " modified the source";
}

TEST(ReduceInto, VectorMatchesScalarForEveryTypeOpAndCount) {
  std::mt19937_64 rng(12345);
  for (DataType t : all_types()) {
    const size_t es = dtype_size(t);
    for (ReduceOp op : all_ops()) {
      for (int64_t count : kCounts) {
        std::vector<uint8_t> d(count * es + 1), s(count * es + 1);
        fill_random(d.data(), count, t, rng);
        fill_random(s.data(), count, t, rng);
        std::vector<uint8_t> expected = d;
        detail::scalar_reduce_into(expected.data(), s.data(), count, t, op);
        for (int skew : {0, 1, 3}) {
          check_reduce(reduce_into, d, s, expected, count, t, op, skew, "reduce_into");
#if HVL_KERNELS_X86
          if (cpu_has_avx2_f16c()) {
            check_reduce(detail::avx2_reduce_into, d, s, expected, count, t, op, skew, "avx2_reduce_into");
          }
#endif
        }
      }
    }
  }
}

// reduce(dst, a, b): out of place equals reduce_into on a copy of a, for the
// dispatcher, the scalar and the vector kernels, and neither input changes.
TEST(Reduce, OutOfPlaceMatchesInPlace) {
  std::mt19937_64 rng(777);
  for (DataType t : all_types()) {
    const size_t es = dtype_size(t);
    for (ReduceOp op : all_ops()) {
      for (int64_t count : kCounts) {
        std::vector<uint8_t> a(count * es + 1), b(count * es + 1);
        fill_random(a.data(), count, t, rng);
        fill_random(b.data(), count, t, rng);
        std::vector<uint8_t> expected = a;
        detail::scalar_reduce_into(expected.data(), b.data(), count, t, op);
        std::vector<void (*)(void*, const void*, const void*, int64_t, DataType, ReduceOp)> kernels = {
            reduce, detail::scalar_reduce};
#if HVL_KERNELS_X86
        if (cpu_has_avx2_f16c()) kernels.push_back(detail::avx2_reduce);
#endif
        for (size_t k = 0; k < kernels.size(); ++k) {
          for (int skew : {0, 1, 3}) {
            SkewedBuffer ab(count, es, skew), bb(count, es, skew + 1), db(count, es, skew + 2);
            std::memcpy(ab.data(), a.data(), count * es);
            std::memcpy(bb.data(), b.data(), count * es);
            std::memset(db.data(), 0x77, count * es);
            std::memset(db.end_guard(count), kGuard, 16);
            kernels[k](db.data(), ab.data(), bb.data(), count, t, op);
            const std::string what = "kernel " + std::to_string(k) + " dtype=" + dtype_name(t) + " op=" + op_label(op) +
                                     " count=" + std::to_string(count) + " skew=" + std::to_string(skew);
            EXPECT_EQ(first_mismatch(db.data(), expected.data(), count, t), -1) << what;
            for (int g = 0; g < 16; ++g) ASSERT_EQ(db.end_guard(count)[g], kGuard) << what << " wrote past the end";
            EXPECT_EQ(std::memcmp(ab.data(), a.data(), count * es), 0) << what << " modified a";
            EXPECT_EQ(std::memcmp(bb.data(), b.data(), count * es), 0) << what << " modified b";
          }
        }
      }
    }
  }
}

template <class T>
std::vector<T> reduce_values(std::vector<T> d, const std::vector<T>& s, DataType t, ReduceOp op) {
  reduce_into(d.data(), s.data(), static_cast<int64_t>(d.size()), t, op);
  return d;
}

// 37 elements so that both the vector body and the scalar tail are exercised.
template <class T>
std::vector<T> repeat(std::vector<T> pattern, size_t n = 37) {
  std::vector<T> out;
  while (out.size() < n) out.push_back(pattern[out.size() % pattern.size()]);
  return out;
}

TEST(ReduceInto, IntegerSemantics) {
  auto d = repeat<int8_t>({127, -128, 5, -3});
  auto s = repeat<int8_t>({1, -1, -7, 2});
  auto sum = reduce_values(d, s, DataType::kInt8, ReduceOp::kSum);
  auto avg = reduce_values(d, s, DataType::kInt8, ReduceOp::kAverage);
  auto mn = reduce_values(d, s, DataType::kInt8, ReduceOp::kMin);
  auto mx = reduce_values(d, s, DataType::kInt8, ReduceOp::kMax);
  auto pr = reduce_values(d, s, DataType::kInt8, ReduceOp::kProduct);
  for (size_t i = 0; i < d.size(); ++i) {
    const int a = d[i], b = s[i];
    EXPECT_EQ(sum[i], static_cast<int8_t>(static_cast<uint8_t>(a + b))) << i;  // wraps
    EXPECT_EQ(avg[i], sum[i]) << i;
    EXPECT_EQ(mn[i], std::min(a, b)) << i;
    EXPECT_EQ(mx[i], std::max(a, b)) << i;
    EXPECT_EQ(pr[i], static_cast<int8_t>(static_cast<uint8_t>(a * b))) << i;
  }
  auto u = reduce_values(repeat<uint8_t>({200, 3}), repeat<uint8_t>({100, 250}), DataType::kUInt8, ReduceOp::kMin);
  EXPECT_EQ(u[0], 100);
  EXPECT_EQ(u[1], 3);
  auto big = reduce_values(repeat<int64_t>({int64_t{1} << 40, -5}), repeat<int64_t>({int64_t{1} << 41, 9}),
                           DataType::kInt64, ReduceOp::kProduct);
  EXPECT_EQ(big[0], 0);  // 2^81 wraps to 0
  EXPECT_EQ(big[1], -45);
  auto mx64 = reduce_values(repeat<int64_t>({-1, std::numeric_limits<int64_t>::min()}), repeat<int64_t>({-2, 7}),
                            DataType::kInt64, ReduceOp::kMax);
  EXPECT_EQ(mx64[0], -1);
  EXPECT_EQ(mx64[1], 7);
}

TEST(ReduceInto, BoolSemantics) {
  auto d = repeat<uint8_t>({0, 0, 1, 1});
  auto s = repeat<uint8_t>({0, 1, 0, 1});
  const uint8_t kOr[] = {0, 1, 1, 1}, kAnd[] = {0, 0, 0, 1};
  for (ReduceOp op : all_ops()) {
    auto r = reduce_values(d, s, DataType::kBool, op);
    const bool is_and = op == ReduceOp::kMin || op == ReduceOp::kProduct;
    for (size_t i = 0; i < r.size(); ++i) EXPECT_EQ(r[i], is_and ? kAnd[i % 4] : kOr[i % 4]) << op_label(op) << i;
  }
}

TEST(ReduceInto, FloatSemanticsAndNanPropagation) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto d = repeat<float>({1.5f, nan, 2.0f, -0.0f});
  auto s = repeat<float>({2.25f, 1.0f, nan, 3.0f});
  auto sum = reduce_values(d, s, DataType::kFloat32, ReduceOp::kSum);
  auto mn = reduce_values(d, s, DataType::kFloat32, ReduceOp::kMin);
  auto mx = reduce_values(d, s, DataType::kFloat32, ReduceOp::kMax);
  auto pr = reduce_values(d, s, DataType::kFloat32, ReduceOp::kProduct);
  for (size_t i = 0; i + 4 <= d.size(); i += 4) {
    EXPECT_EQ(sum[i], 3.75f);
    EXPECT_EQ(mn[i], 1.5f);
    EXPECT_EQ(mx[i], 2.25f);
    EXPECT_EQ(pr[i], 3.375f);
    for (auto* r : {&sum, &mn, &mx, &pr}) {
      EXPECT_TRUE(std::isnan((*r)[i + 1])) << "NaN in dst must survive";
      EXPECT_TRUE(std::isnan((*r)[i + 2])) << "NaN in src must propagate";
    }
    EXPECT_EQ(mn[i + 3], -0.0f);
    EXPECT_EQ(mx[i + 3], 3.0f);
  }
  auto dd = reduce_values(repeat<double>({1e300, -2.0}), repeat<double>({1e300, 0.5}), DataType::kFloat64,
                          ReduceOp::kProduct);
  EXPECT_TRUE(std::isinf(dd[0]));
  EXPECT_EQ(dd[1], -1.0);
}

TEST(ReduceInto, HalfAndBfloat16Semantics) {
  const uint16_t one = 0x3c00, two = 0x4000, three = 0x4200, max_half = 0x7bff, inf = 0x7c00;
  auto h = reduce_values(repeat<uint16_t>({one, max_half, two}), repeat<uint16_t>({two, max_half, three}),
                         DataType::kFloat16, ReduceOp::kSum);
  for (size_t i = 0; i + 3 <= h.size(); i += 3) {
    EXPECT_EQ(h[i], three);
    EXPECT_EQ(h[i + 1], inf);     // 65504 + 65504 overflows to inf
    EXPECT_EQ(h[i + 2], 0x4500);  // 5.0
  }
  auto hp = reduce_values(repeat<uint16_t>({two}), repeat<uint16_t>({three}), DataType::kFloat16, ReduceOp::kProduct);
  EXPECT_EQ(hp[0], 0x4600);  // 6.0
  // bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1).
  const uint16_t b_one = 0x3f80, b_eps = 0x3b80;  // 2^-8
  auto b = reduce_values(repeat<uint16_t>({b_one}), repeat<uint16_t>({b_eps}), DataType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(b[0], b_one);
  auto bm = reduce_values(repeat<uint16_t>({b_one}), repeat<uint16_t>({0x4000}), DataType::kBFloat16, ReduceOp::kMax);
  EXPECT_EQ(bm[0], 0x4000);
}

// ---- scale / scale_copy ----

const double kFactors[] = {0.5, -1.5, 3.0, 1.0 / 3.0, 0.0};

TEST(Scale, VectorMatchesScalarForEveryTypeAndCount) {
  std::mt19937_64 rng(777);
  for (DataType t : all_types()) {
    const size_t es = dtype_size(t);
    for (double factor : kFactors) {
      for (int64_t count : kCounts) {
        std::vector<uint8_t> src(count * es + 1);
        fill_random(src.data(), count, t, rng);
        std::vector<uint8_t> expected(count * es + 1);
        detail::scalar_scale_copy(expected.data(), src.data(), count, t, factor);
        SkewedBuffer in(count, es, 1), out(count, es, 3);
        std::memcpy(in.data(), src.data(), count * es);
        std::memset(out.end_guard(count), kGuard, 16);
        scale_copy(out.data(), in.data(), count, t, factor);
        EXPECT_EQ(first_mismatch(out.data(), expected.data(), count, t), -1)
            << "scale_copy " << dtype_name(t) << " factor=" << factor << " count=" << count;
        for (int g = 0; g < 16; ++g) ASSERT_EQ(out.end_guard(count)[g], kGuard);
        scale(in.data(), count, t, factor);  // in place
        EXPECT_EQ(first_mismatch(in.data(), expected.data(), count, t), -1)
            << "scale " << dtype_name(t) << " factor=" << factor << " count=" << count;
#if HVL_KERNELS_X86
        if (cpu_has_avx2_f16c()) {
          std::memcpy(in.data(), src.data(), count * es);
          detail::avx2_scale_copy(out.data(), in.data(), count, t, factor);
          EXPECT_EQ(first_mismatch(out.data(), expected.data(), count, t), -1)
              << "avx2_scale_copy " << dtype_name(t) << " factor=" << factor << " count=" << count;
        }
#endif
      }
    }
  }
}

TEST(Scale, IntegerTruncatesTowardZeroAndSaturates) {
  std::vector<int32_t> v = repeat<int32_t>({7, -7, 2000000000, -2000000000, 1});
  scale(v.data(), static_cast<int64_t>(v.size()), DataType::kInt32, 1.5);
  for (size_t i = 0; i + 5 <= v.size(); i += 5) {
    EXPECT_EQ(v[i], 10);
    EXPECT_EQ(v[i + 1], -10);
    EXPECT_EQ(v[i + 2], std::numeric_limits<int32_t>::max());
    EXPECT_EQ(v[i + 3], std::numeric_limits<int32_t>::min());
    EXPECT_EQ(v[i + 4], 1);
  }
  std::vector<int8_t> b = repeat<int8_t>({100, -100, 3});
  scale(b.data(), static_cast<int64_t>(b.size()), DataType::kInt8, 2.0);
  EXPECT_EQ(b[0], 127);
  EXPECT_EQ(b[1], -128);
  EXPECT_EQ(b[2], 6);
  std::vector<int64_t> l = repeat<int64_t>({int64_t{1} << 62, -3});
  scale(l.data(), static_cast<int64_t>(l.size()), DataType::kInt64, 4.0);
  EXPECT_EQ(l[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(l[1], -12);
}

TEST(Scale, FloatsAndFactorOne) {
  std::vector<float> f = repeat<float>({1.0f, -3.0f, 0.25f});
  std::vector<float> out(f.size(), 99.0f);
  scale_copy(out.data(), f.data(), static_cast<int64_t>(f.size()), DataType::kFloat32, 1.0);
  EXPECT_EQ(out, f);  // factor 1 is a copy
  scale(f.data(), static_cast<int64_t>(f.size()), DataType::kFloat32, 0.5);
  EXPECT_EQ(f[0], 0.5f);
  EXPECT_EQ(f[1], -1.5f);
  EXPECT_EQ(f[2], 0.125f);
  std::vector<uint16_t> h = repeat<uint16_t>({0x4200 /*3*/, 0x7bff /*65504*/});
  scale(h.data(), static_cast<int64_t>(h.size()), DataType::kFloat16, 0.5);
  EXPECT_EQ(h[0], 0x3e00);  // 1.5
  EXPECT_EQ(h[1], 0x77ff);  // 32752
  std::vector<uint16_t> b = repeat<uint16_t>({0x4040 /*3*/});
  scale(b.data(), static_cast<int64_t>(b.size()), DataType::kBFloat16, 2.0);
  EXPECT_EQ(b[0], 0x40c0);  // 6
}

}  // namespace
}  // namespace kernels
}  // namespace horovodlite
