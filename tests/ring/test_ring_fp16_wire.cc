// RingAllreduce::run_fp16_wire (run_bf16_wire): float32/float64 buffers with
// fp16 (bfloat16) on the wire.
// Every rank regenerates every rank's input, so the test can replay the ring's
// exact order of operations (chunk c starts at rank c, each hop adds the next
// rank's value to the half it received and rounds; the owner rounds the
// total) and demand bitwise equality; it also checks the result against a
// float64 reference sum within fp16 (bf16) tolerance and that all ranks agree bitwise.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "kernels/reduce.h"
#include "ops/ring_allreduce.h"
#include "ring/ring_test_world.h"

namespace horovodlite {
namespace {

using ring_test::wire;
using ring_test::World;
using ring_test::world;

// Inputs of rank `r`: reals in [-1, 1], plus a few values that overflow fp16
// when summed (for Sum/Average only, element 1 of counts above 2).
std::vector<double> input(int r, int64_t count, ReduceOp op) {
  std::mt19937_64 rng(977u * static_cast<unsigned>(r + 1) + static_cast<uint64_t>(count));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(count);
  for (auto& x : v) x = u(rng);
  const bool sum = op == ReduceOp::kSum || op == ReduceOp::kAverage;
  if (sum && count > 2) v[1] = 40000.0 + r;  // two ranks or more: beyond 65504 -> inf
  return v;
}

// kBf: bfloat16 on the wire, else IEEE binary16.
template <class T, bool kBf = false>
uint16_t to_half(T x) {
  if constexpr (kBf) {
    if constexpr (sizeof(T) == 4) {
      return kernels::detail::float_to_bfloat16_scalar(x);
    } else {
      return kernels::detail::double_to_bfloat16_scalar(x);
    }
  } else if constexpr (sizeof(T) == 4) {
    return kernels::detail::float_to_half_scalar(x);
  } else {
    return kernels::detail::double_to_half_scalar(x);
  }
}

template <bool kBf = false>
float from_half(uint16_t h) {
  return kBf ? kernels::bfloat16_to_float(h) : kernels::half_to_float(h);
}

template <class T>
T apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kMin:
      return (b < a || b != b) ? b : a;
    case ReduceOp::kMax:
      return (b > a || b != b) ? b : a;
    case ReduceOp::kProduct:
      return a * b;
    default:
      return a + b;
  }
}

// The ring's result, replayed: element i of chunk c leaves rank c as half(x_c);
// rank c+j adds x_{c+j} in T and sends the half on; the last rank (c-1) rounds.
template <class T, bool kBf = false>
std::vector<T> replay(int64_t count, ReduceOp op, int p) {
  std::vector<std::vector<double>> in(p);
  for (int r = 0; r < p; ++r) in[r] = input(r, count, op);
  std::vector<T> out(count);
  const int64_t base = count / p, extra = count % p;
  for (int c = 0; c < p; ++c) {
    const int64_t begin = c * base + std::min<int64_t>(c, extra);
    const int64_t len = base + (c < extra ? 1 : 0);
    for (int64_t i = begin; i < begin + len; ++i) {
      uint16_t h = to_half<T, kBf>(static_cast<T>(in[c][i]));
      for (int j = 1; j < p; ++j) {
        const T widened = static_cast<T>(from_half<kBf>(h));
        h = to_half<T, kBf>(apply(op, static_cast<T>(in[(c + j) % p][i]), widened));
      }
      out[i] = static_cast<T>(from_half<kBf>(h));
    }
  }
  return out;
}

double exact(ReduceOp op, int64_t i, const std::vector<std::vector<double>>& in) {
  double acc = in[0][i];
  for (size_t r = 1; r < in.size(); ++r) acc = apply(op, acc, in[r][i]);
  return acc;
}

template <class T, bool kBf = false>
void check_case(RingAllreduce& ring, ReduceOp op, int64_t count) {
  const World& w = world();
  const std::string what = std::string(kBf ? "bf16 wire " : "") + (sizeof(T) == 4 ? "float32" : "float64") +
                           " op=" + std::to_string(static_cast<int>(op)) + " count=" + std::to_string(count) +
                           " segment_bytes=" + std::to_string(ring.options().segment_bytes) +
                           " depth=" + std::to_string(ring.options().pipeline_depth);
  const std::vector<double> mine = input(w.rank, count, op);
  std::vector<T> buf(count + 1);
  for (int64_t i = 0; i < count; ++i) buf[i] = static_cast<T>(mine[i]);
  buf[count] = static_cast<T>(12345.0);  // guard after the data
  const DataType t = sizeof(T) == 4 ? DataType::kFloat32 : DataType::kFloat64;
  const Status s = kBf ? ring.run_bf16_wire(count ? buf.data() : nullptr, count, t, op)
                       : ring.run_fp16_wire(count ? buf.data() : nullptr, count, t, op);
  ASSERT_TRUE(s.ok()) << what << ": " << s.message();
  EXPECT_EQ(buf[count], static_cast<T>(12345.0)) << what << ": wrote past the end";

  // 1. Bitwise equal to the replayed ring.
  const std::vector<T> expected = replay<T, kBf>(count, op, w.size);
  int64_t first_bad = -1;
  for (int64_t i = 0; i < count && first_bad < 0; ++i) {
    if (std::memcmp(&buf[i], &expected[i], sizeof(T)) != 0) first_bad = i;
  }
  EXPECT_EQ(first_bad, -1) << what << ": got " << (first_bad >= 0 ? buf[first_bad] : 0) << " want "
                           << (first_bad >= 0 ? expected[first_bad] : 0);

  // 2. Within fp16 (bf16: 8 significant bits, half an ulp 2^-8 relative)
  // rounding of the float64 reduction (one rounding per hop, partial results
  // at most `size` in magnitude); sums that overflow fp16 are inf (bf16 has
  // float32's range: the 40000s stay finite, within 2^-8 of their size).
  std::vector<std::vector<double>> in(w.size);
  for (int r = 0; r < w.size; ++r) in[r] = input(r, count, op);
  const double tol = (w.size + 1) * w.size * std::ldexp(1.0, kBf ? -8 : -11);
  int64_t bad = 0;
  first_bad = -1;
  for (int64_t i = 0; i < count; ++i) {
    const double want = exact(op, i, in);
    const double got = static_cast<double>(buf[i]);
    const bool ok = kBf                          ? std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want))
                    : std::fabs(want) >= 65520.0 ? got == std::copysign(INFINITY, want)
                                                 : std::fabs(got - want) <= tol;
    if (!ok) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first at " << first_bad << " got " << (first_bad >= 0 ? buf[first_bad] : 0)
                    << " want " << (first_bad >= 0 ? exact(op, first_bad, in) : 0.0);

  // 3. Every rank holds the same bits as rank 0.
  std::vector<T> root(buf.begin(), buf.begin() + count);
  if (count > 0) MPI_Bcast(root.data(), static_cast<int>(count * sizeof(T)), MPI_BYTE, 0, w.comm);
  // (memcmp must not see the null data() of an empty vector, even for 0 bytes.)
  EXPECT_TRUE(count == 0 || std::memcmp(root.data(), buf.data(), count * sizeof(T)) == 0) << what << ": ranks differ";
}

template <bool kBf = false>
void sweep(RingAllreduce& ring, const std::vector<int64_t>& counts, const std::vector<ReduceOp>& ops) {
  for (ReduceOp op : ops) {
    for (int64_t count : counts) {
      check_case<float, kBf>(ring, op, count);
      check_case<double, kBf>(ring, op, count);
    }
  }
}

const std::vector<int64_t> kCounts = {0, 1, 2, 3, 5, 17, 1000, 65537};
const std::vector<ReduceOp> kAllOps = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                       ReduceOp::kProduct};

TEST(RingFp16Wire, EveryOpAndCountWithDefaultSegments) {
  RingAllreduce ring(wire(world().comm));
  sweep(ring, kCounts, kAllOps);
}

TEST(RingBf16Wire, EveryOpAndCountWithDefaultAndTinySegments) {
  RingAllreduce ring(wire(world().comm));
  sweep<true>(ring, kCounts, kAllOps);
  RingAllreduceOptions o;
  o.segment_bytes = 6;  // three bf16 values per segment
  o.pipeline_depth = 1;
  RingAllreduce tiny(wire(world().comm), o);
  sweep<true>(tiny, {1, 5, 17, 1000}, {ReduceOp::kSum, ReduceOp::kMax});
  // Interleaved with fp16 on the same object: each run uses its own wire.
  sweep(ring, {17, 1000}, {ReduceOp::kSum});
  sweep<true>(ring, {17, 1000}, {ReduceOp::kSum});
}

TEST(RingFp16Wire, TinySegmentsAndOneSlot) {
  for (int depth : {1, 2}) {
    for (int64_t seg : {2, 6, 64}) {
      RingAllreduceOptions options;
      options.segment_bytes = seg;
      options.pipeline_depth = depth;
      RingAllreduce ring(wire(world().comm), options);
      sweep(ring, {0, 1, 2, 3, 5, 17, 1000}, {ReduceOp::kSum});
    }
  }
  RingAllreduceOptions options;
  options.segment_bytes = 2;
  options.pipeline_depth = 3;
  RingAllreduce ring(wire(world().comm), options);
  sweep(ring, {65537}, {ReduceOp::kSum});  // 32768+ segments of one element, deep backlog of step-0 sends
}

TEST(RingFp16Wire, ReusedObjectAndInterleavedWithRun) {
  RingAllreduceOptions options;
  options.segment_bytes = 1000;
  RingAllreduce ring(wire(world().comm), options);
  for (int64_t count : {10, 100000, 3, 100000, 0, 4097}) {
    check_case<float>(ring, ReduceOp::kSum, count);
    std::vector<float> plain(count, 1.0f);
    ASSERT_TRUE(ring.run(plain.data(), count, DataType::kFloat32, ReduceOp::kSum).ok());
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(plain[i], static_cast<float>(world().size));
    check_case<double>(ring, ReduceOp::kMax, count);
  }
}

TEST(RingFp16Wire, InvalidArguments) {
  RingAllreduce ring(wire(world().comm));
  float x = 1.0f;
  int32_t i = 1;
  EXPECT_EQ(ring.run_fp16_wire(&x, -1, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run_fp16_wire(nullptr, 4, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run_fp16_wire(&i, 1, DataType::kInt32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run_fp16_wire(&x, 1, DataType::kFloat16, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run_fp16_wire(&x, 1, DataType::kFloat32, ReduceOp::kAdasum).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(ring.run_fp16_wire(nullptr, 0, DataType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(i, 1);
}

TEST(RingFp16Wire, SingleRankRoundsToHalf) {
  MPI_Comm self;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  RingAllreduce ring(wire(self));
  std::vector<float> v = {1.0f + 1e-4f, 70000.0f, -3.0f};
  v.resize(3000, 0.1f);
  ASSERT_TRUE(ring.run_fp16_wire(v.data(), static_cast<int64_t>(v.size()), DataType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], INFINITY);
  EXPECT_EQ(v[2], -3.0f);
  EXPECT_EQ(v[2999], kernels::half_to_float(kernels::float_to_half(0.1f)));
  MPI_Comm_free(&self);
}

}  // namespace
}  // namespace horovodlite
