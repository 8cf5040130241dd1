// fp16-on-the-wire kernels (reduce_half_into, to_half_n, from_half_n, and
// fp16 compression's scaled conversions in convert.h): the AVX2/F16C path against the scalar one, bit for bit, for
// float32 and float64 buffers, every op and mode, unaligned pointers and in-place output; and the scalar path against
// the definition written out element by element.
#include <gtest/gtest.h>

#include <cstring>
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

const DataType kWireTypes[] = {DataType::kFloat32, DataType::kFloat64};
const int64_t kCounts[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099};

std::vector<uint16_t> random_halves(int64_t n, std::mt19937_64& rng) {
  std::vector<uint16_t> h(static_cast<size_t>(n) + 1);
  for (auto& x : h) x = static_cast<uint16_t>(rng());  // every bit pattern: NaN, inf, subnormals
  return h;
}

TEST(WireKernels, VectorMatchesScalarAndScalarMatchesDefinition) {
  if (!cpu_has_avx2_f16c()) GTEST_SKIP() << "no AVX2/F16C on this CPU";
  std::mt19937_64 rng(42);
  for (DataType t : kWireTypes) {
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
            const std::vector<uint16_t> src = random_halves(n, rng);
            std::vector<uint16_t> sv = src, ss = src, sr = src;
            std::vector<uint16_t> ov(n + 1, 0x1234), os(n + 1, 0x1234), orf(n + 1, 0x1234);
            uint16_t* outv = out_kind == 0 ? nullptr : out_kind == 1 ? ov.data() : sv.data();
            uint16_t* outs = out_kind == 0 ? nullptr : out_kind == 1 ? os.data() : ss.data();
            uint16_t* outr = out_kind == 0 ? nullptr : out_kind == 1 ? orf.data() : sr.data();
            detail::avx2_reduce_half_into(dv.data(), sv.data(), outv, n, t, op, round);
            detail::scalar_reduce_half_into(ds.data(), ss.data(), outs, n, t, op, round);
            if (t == DataType::kFloat32) {
              testing::wire_reference(reinterpret_cast<float*>(dr.data()), sr.data(), outr, n, op, round,
                                      DataType::kFloat16);
            } else {
              testing::wire_reference(reinterpret_cast<double*>(dr.data()), sr.data(), outr, n, op, round,
                                      DataType::kFloat16);
            }
            ASSERT_EQ(first_mismatch(dv.data(), ds.data(), n, t), -1) << what << ": vector vs scalar buffer";
            ASSERT_EQ(first_mismatch(ds.data(), dr.data(), n, t), -1) << what << ": scalar vs definition";
            if (out_kind == 1) {
              ASSERT_EQ(first_mismatch(ov.data(), os.data(), n + 1, DataType::kFloat16), -1) << what;
              ASSERT_EQ(first_mismatch(os.data(), orf.data(), n + 1, DataType::kFloat16), -1) << what;
              ASSERT_EQ(os[n], 0x1234) << what << ": wrote past the end";
            } else if (out_kind == 2) {
              ASSERT_EQ(first_mismatch(sv.data(), ss.data(), n + 1, DataType::kFloat16), -1) << what;
              ASSERT_EQ(first_mismatch(ss.data(), sr.data(), n + 1, DataType::kFloat16), -1) << what;
            } else {
              ASSERT_EQ(sv, src) << what << ": source modified";
            }
          }
        }
      }
    }
  }
}

// reduce_half(dst, a, ...): out of place equals reduce_half_into on a copy of
// a (buffer and half output), and a is left alone.
TEST(WireKernels, OutOfPlaceMatchesInPlace) {
  std::mt19937_64 rng(4242);
  for (DataType t : kWireTypes) {
    const size_t es = dtype_size(t);
    for (ReduceOp op : testing::all_ops()) {
      for (bool round : {false, true}) {
        for (int64_t n : kCounts) {
          SkewedBuffer a(n, es, 1), in_place(n, es, 0), out_of_place(n, es, 2);
          fill_random(a.data(), n, t, rng);
          std::memcpy(in_place.data(), a.data(), n * es);
          std::vector<uint8_t> a_copy(a.data(), a.data() + n * es);
          const std::vector<uint16_t> src = random_halves(n, rng);
          std::vector<uint16_t> half_in_place(n + 1, 0x1234), half_out(n + 1, 0x1234);
          reduce_half_into(in_place.data(), src.data(), half_in_place.data(), n, t, op, round);
          reduce_half(out_of_place.data(), a.data(), src.data(), half_out.data(), n, t, op, round);
          const std::string what = std::string(dtype_name(t)) + "/" + op_label(op) + " n=" + std::to_string(n) +
                                   " round=" + std::to_string(round);
          ASSERT_EQ(first_mismatch(out_of_place.data(), in_place.data(), n, t), -1) << what;
          ASSERT_EQ(half_out, half_in_place) << what;
          ASSERT_EQ(std::memcmp(a.data(), a_copy.data(), n * es), 0) << what << ": a modified";
        }
      }
    }
  }
}

// Rounding the buffer must leave exactly what a receiver of the half gets.
TEST(WireKernels, RoundedBufferEqualsWidenedOutput) {
  std::mt19937_64 rng(7);
  for (DataType t : kWireTypes) {
    const int64_t n = 777;
    const size_t es = dtype_size(t);
    SkewedBuffer d(n, es, 1), back(n, es, 0);
    fill_random(d.data(), n, t, rng);
    const std::vector<uint16_t> src = random_halves(n, rng);
    std::vector<uint16_t> out(n);
    reduce_half_into(d.data(), src.data(), out.data(), n, t, ReduceOp::kSum, true);
    from_half_n(back.data(), out.data(), n, t);
    EXPECT_EQ(first_mismatch(d.data(), back.data(), n, t), -1) << dtype_name(t);
    std::vector<uint16_t> again(n);
    to_half_n(again.data(), d.data(), n, t);
    EXPECT_EQ(first_mismatch(again.data(), out.data(), n, DataType::kFloat16), -1) << dtype_name(t);
  }
}

// fp16 compression's packing and unpacking: scaled, then rounded to half
// (across the chunks the scaling goes through), and widened, then scaled in
// fp16 precision.
TEST(WireKernels, ScaledConversionsEqualScalingAndConvertingTheWholeBuffer) {
  std::mt19937_64 rng(11);
  for (DataType t : kWireTypes) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{2049}, int64_t{5000}}) {
      for (double factor : {1.0, 0.25, 3.0}) {
        const size_t es = dtype_size(t);
        SkewedBuffer src(n, es, 0), scaled(n, es, 0), widened(n, es, 0), expected(n, es, 0);
        fill_random(src.data(), n, t, rng);
        std::vector<uint16_t> half(static_cast<size_t>(n) + 1), want(static_cast<size_t>(n) + 1);
        to_half_scaled_n(half.data(), src.data(), n, t, factor);
        scale_copy(scaled.data(), src.data(), n, t, factor);
        to_half_n(want.data(), scaled.data(), n, t);
        const std::string where =
            std::string(dtype_name(t)) + " n=" + std::to_string(n) + " factor " + std::to_string(factor);
        EXPECT_EQ(first_mismatch(half.data(), want.data(), n, DataType::kFloat16), -1) << where;
        from_half_scaled_n(widened.data(), half.data(), n, t, factor);
        from_half_n(expected.data(), half.data(), n, t);
        scale_as_half(expected.data(), n, t, factor);
        EXPECT_EQ(first_mismatch(widened.data(), expected.data(), n, t), -1) << where;
      }
    }
  }
}

TEST(WireKernels, OverflowBecomesInfAndOtherDtypesAreUntouched) {
  float d[2] = {60000.0f, -60000.0f};
  const uint16_t s[2] = {float_to_half(10000.0f), float_to_half(-10000.0f)};
  uint16_t out[2] = {0, 0};
  reduce_half_into(d, s, out, 2, DataType::kFloat32, ReduceOp::kSum, true);
  EXPECT_EQ(out[0], 0x7c00);
  EXPECT_EQ(out[1], 0xfc00);
  EXPECT_EQ(d[0], INFINITY);
  EXPECT_EQ(d[1], -INFINITY);
  double dd[1] = {65519.0};
  uint16_t h[1] = {0};
  to_half_n(h, dd, 1, DataType::kFloat64);
  EXPECT_EQ(h[0], 0x7bff);
  int32_t ints[2] = {5, 6};
  reduce_half_into(ints, s, out, 2, DataType::kInt32, ReduceOp::kSum, true);
  EXPECT_EQ(ints[0], 5);
  EXPECT_EQ(ints[1], 6);
}

}  // namespace
}  // namespace kernels
}  // namespace horovodlite
