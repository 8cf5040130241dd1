// RingAllreduce against MPI_Allreduce on the same inputs: every dtype and op,
// awkward counts (0, 1, fewer than the ranks, odd, large), tiny segments that
// force deep pipelines, and repeated runs on one object. Integers and the
// 16-bit floats use inputs whose results are exact in any order (compared
// bitwise / exactly); float32/64 use random reals with a tolerance.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "ops/ring_allreduce.h"
#include "ring/ring_test_world.h"

namespace horovodlite {
namespace {

using kernels::bfloat16_to_float;
using kernels::float_to_bfloat16;
using kernels::float_to_half;
using kernels::half_to_float;

using ring_test::wire;
using ring_test::world;

std::string label(DataType t, ReduceOp op, int64_t count, int64_t seg) {
  static const char* kTypes[] = {"uint8",   "int8",     "int16",   "int32",   "int64",
                                 "float16", "bfloat16", "float32", "float64", "bool"};
  static const char* kOps[] = {"average", "sum", "min", "max", "product"};
  return std::string(kTypes[static_cast<int>(t)]) + "/" + kOps[static_cast<int>(op)] +
         " count=" + std::to_string(count) + " segment_bytes=" + std::to_string(seg);
}

// Per-rank inputs. Integers: small values so that sums and products of up to
// four ranks cannot overflow; 16-bit floats: small integers (exact results).
std::vector<uint8_t> make_input(DataType t, ReduceOp op, int64_t count, int rank) {
  std::mt19937_64 rng(1000003u * static_cast<unsigned>(rank + 1) + 7919u * static_cast<unsigned>(t) +
                      static_cast<uint64_t>(count));
  const bool product = op == ReduceOp::kProduct;
  std::uniform_int_distribution<int> small(product ? -3 : -30, product ? 3 : 30);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::vector<uint8_t> buf(count * dtype_size(t) + 1);
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* p = buf.data() + i * dtype_size(t);
    const int v = small(rng);
    switch (t) {
      case DataType::kUInt8: {
        const uint8_t x = static_cast<uint8_t>(std::abs(v) * (product ? 1 : 2));
        std::memcpy(p, &x, 1);
        break;
      }
      case DataType::kInt8: {
        const int8_t x = static_cast<int8_t>(v);
        std::memcpy(p, &x, 1);
        break;
      }
      case DataType::kInt16: {
        const int16_t x = static_cast<int16_t>(v * (product ? 1 : 100));
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kInt32: {
        const int32_t x = v * (product ? 1 : 1000000);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kInt64: {
        const int64_t x = static_cast<int64_t>(v) * (product ? 1 : (int64_t{1} << 40));
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::kFloat16: {
        const uint16_t x = float_to_half(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t x = float_to_bfloat16(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kFloat32: {
        const float x = static_cast<float>(real(rng));
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kFloat64: {
        const double x = real(rng);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::kBool:
        p[0] = static_cast<uint8_t>(rng() % 4 != 0);  // mostly true, so that "and" is not always false
        break;
    }
  }
  return buf;
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
    default:
      return MPI_FLOAT;  // float32, and fp16/bf16 widened to float
  }
}

MPI_Op mpi_op(DataType t, ReduceOp op) {
  if (t == DataType::kBool) return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? MPI_LAND : MPI_LOR;
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return MPI_SUM;
  }
}

// Reference: MPI_Allreduce on the same inputs (16-bit floats widened to
// float). `raw` holds the result bytes for the integer and bool types,
// `values` the result of the floating types as doubles.
struct Reference {
  std::vector<uint8_t> raw;
  std::vector<double> values;
};

Reference reference(const std::vector<uint8_t>& in, DataType t, ReduceOp op, int64_t count) {
  Reference ref;
  ref.values.resize(count);
  if (count == 0) return ref;
  const MPI_Comm comm = world().comm;
  if (t == DataType::kFloat16 || t == DataType::kBFloat16) {
    std::vector<float> f(count), r(count);
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, in.data() + 2 * i, 2);
      f[i] = t == DataType::kFloat16 ? half_to_float(h) : bfloat16_to_float(h);
    }
    MPI_Allreduce(f.data(), r.data(), static_cast<int>(count), MPI_FLOAT, mpi_op(t, op), comm);
    for (int64_t i = 0; i < count; ++i) ref.values[i] = r[i];
    return ref;
  }
  ref.raw.resize(in.size());
  MPI_Allreduce(in.data(), ref.raw.data(), static_cast<int>(count), mpi_type(t), mpi_op(t, op), comm);
  for (int64_t i = 0; i < count; ++i) {
    if (t == DataType::kFloat32) {
      float x;
      std::memcpy(&x, ref.raw.data() + 4 * i, 4);
      ref.values[i] = x;
    } else if (t == DataType::kFloat64) {
      std::memcpy(&ref.values[i], ref.raw.data() + 8 * i, 8);
    }
  }
  return ref;
}

double element_as_double(const uint8_t* p, DataType t) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return half_to_float(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bfloat16_to_float(h);
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

// Runs one case on every rank and checks it against MPI_Allreduce. Collective.
void check_case(RingAllreduce& ring, DataType t, ReduceOp op, int64_t count) {
  const std::string what = label(t, op, count, ring.options().segment_bytes);
  std::vector<uint8_t> buf = make_input(t, op, count, world().rank);
  const Reference ref = reference(buf, t, op, count);
  const std::vector<double>& expected = ref.values;
  buf.back() = 0x5a;  // guard byte after the data
  const Status s = ring.run(count ? buf.data() : nullptr, count, t, op);
  ASSERT_TRUE(s.ok()) << what << ": " << s.message();
  EXPECT_EQ(buf.back(), 0x5a) << what << ": wrote past the end";
  const bool is_float =
      t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
  if (!is_float) {
    const uint8_t* exp = ref.raw.data();
    int64_t first_bad = -1;
    for (int64_t i = 0; i < count * static_cast<int64_t>(dtype_size(t)) && first_bad < 0; ++i) {
      if (buf[i] != exp[i]) first_bad = i / static_cast<int64_t>(dtype_size(t));
    }
    EXPECT_EQ(first_bad, -1) << what << ": first differing element";
    return;
  }
  // Reduction order differs from MPI's: float32/64 sums and products get a
  // tolerance (inputs are in [-1, 1], so size * eps bounds the error); min,
  // max and the exact 16-bit cases must match exactly.
  const bool exact =
      op == ReduceOp::kMin || op == ReduceOp::kMax || t == DataType::kFloat16 || t == DataType::kBFloat16;
  const double eps = t == DataType::kFloat64 ? 1e-15 : 1e-6;
  const double tol = exact ? 0.0 : 4.0 * eps * world().size;
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < count; ++i) {
    const double got = element_as_double(buf.data() + i * dtype_size(t), t);
    if (!(std::fabs(got - expected[i]) <= tol)) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first at " << first_bad << " got "
                    << (first_bad >= 0 ? element_as_double(buf.data() + first_bad * dtype_size(t), t) : 0.0) << " want "
                    << (first_bad >= 0 ? expected[first_bad] : 0.0);
}

const DataType kTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,    DataType::kInt32,
                           DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                           DataType::kFloat64, DataType::kBool};
const ReduceOp kOps[] = {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

void sweep(RingAllreduce& ring, const std::vector<int64_t>& counts) {
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (int64_t count : counts) check_case(ring, t, op, count);
    }
  }
}

TEST(RingAllreduce, EveryTypeOpAndCountWithDefaultSegments) {
  RingAllreduce ring(wire(world().comm));
  sweep(ring, {0, 1, 2, 3, 5, 17, 1000, 65537});
}

TEST(RingAllreduce, TinySegmentsOfEightBytes) {
  RingAllreduceOptions options;
  options.segment_bytes = 8;
  RingAllreduce ring(wire(world().comm), options);
  sweep(ring, {0, 1, 2, 3, 5, 17, 1000});
}

TEST(RingAllreduce, SmallSegmentsOf64BytesAndShallowPipeline) {
  RingAllreduceOptions options;
  options.segment_bytes = 64;
  options.pipeline_depth = 1;
  RingAllreduce ring(wire(world().comm), options);
  sweep(ring, {0, 1, 2, 3, 5, 17, 1000});
}

TEST(RingAllreduce, LargeCountWithManySegmentsAndDeepPipeline) {
  RingAllreduceOptions options;
  options.segment_bytes = 4096;
  options.pipeline_depth = 16;
  RingAllreduce ring(wire(world().comm), options);
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kInt8}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) check_case(ring, t, op, 65537);
  }
  options.segment_bytes = 64;
  RingAllreduce tiny(wire(world().comm), options);
  check_case(tiny, DataType::kFloat32, ReduceOp::kSum, 65537);
}

TEST(RingAllreduce, ReusedObjectGrowsAndShrinks) {
  RingAllreduceOptions options;
  options.segment_bytes = 1000;  // not a multiple of most element sizes
  RingAllreduce ring(wire(world().comm), options);
  for (int64_t count : {10, 100000, 3, 100000, 0, 4097}) {
    check_case(ring, DataType::kFloat64, ReduceOp::kSum, count);
    check_case(ring, DataType::kInt32, ReduceOp::kProduct, count);
  }
}

// Out of place with a postscale: bitwise what reducing a copy in place and
// scaling every element afterwards gives (the owner of each chunk scales it
// before passing it on; with the fp16 wire the scaled values are rounded to fp16);
// the input is only read; nothing is written past the end. Also in place with a
// postscale, and the same for the fp16 wire.
void check_out_of_place(RingAllreduce& ring, DataType t, ReduceOp op, int64_t count, double post, bool fp16) {
  const std::string what = label(t, op, count, ring.options().segment_bytes) + " postscale=" + std::to_string(post) +
                           (fp16 ? " fp16 wire" : "");
  const size_t es = dtype_size(t);
  const std::vector<uint8_t> input = make_input(t, op, count, world().rank);
  auto run = [&](const void* in, void* out, double scale) {
    return fp16 ? ring.run_fp16_wire(in, out, count, t, op, scale) : ring.run(in, out, count, t, op, scale);
  };
  std::vector<uint8_t> expected = input;
  ASSERT_TRUE(run(expected.data(), expected.data(), 1.0).ok()) << what;
  // The fp16 wire's results are fp16 values, scaled ones too (as Horovod's).
  if (fp16)
    kernels::scale_as_half(expected.data(), count, t, post);
  else
    kernels::scale(expected.data(), count, t, post);

  std::vector<uint8_t> in = input;
  std::vector<uint8_t> out(count * es + 1, 0xcd);
  out.back() = 0x5a;
  const Status s = run(in.data(), out.data(), post);
  ASSERT_TRUE(s.ok()) << what << ": " << s.message();
  EXPECT_EQ(in, input) << what << ": the input was modified";
  EXPECT_EQ(out.back(), 0x5a) << what << ": wrote past the end";
  // (memcmp must not see the null data() of an empty vector, even for 0 bytes.)
  EXPECT_TRUE(count == 0 || std::memcmp(out.data(), expected.data(), count * es) == 0) << what << ": out of place";

  std::vector<uint8_t> same = input;
  ASSERT_TRUE(run(same.data(), same.data(), post).ok()) << what;
  EXPECT_TRUE(count == 0 || std::memcmp(same.data(), expected.data(), count * es) == 0)
      << what << ": in place with a postscale";
}

TEST(RingAllreduce, OutOfPlaceWithPostscaleEqualsInPlaceThenScale) {
  RingAllreduceOptions tiny;
  tiny.segment_bytes = 8;
  tiny.pipeline_depth = 1;
  RingAllreduceOptions small;
  small.segment_bytes = 1000;
  for (const RingAllreduceOptions& options : {RingAllreduceOptions{}, tiny, small}) {
    RingAllreduce ring(wire(world().comm), options);
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        for (int64_t count : {0, 1, 2, 3, 5, 17, 1000, 65537}) {
          if (options.segment_bytes < 64 && count > 1000) continue;  // keep tiny segments quick
          const double post = t == DataType::kBool ? 1.0 : 1.0 / 3.0;
          check_out_of_place(ring, t, op, count, post, false);
          check_out_of_place(ring, t, op, count, 0.5, false);
          if (t == DataType::kFloat32 || t == DataType::kFloat64) {
            check_out_of_place(ring, t, op, count, post, true);
            check_out_of_place(ring, t, op, count, 1.0, true);
          }
        }
      }
    }
  }
}

TEST(RingAllreduce, OverlappingInputAndOutputAreRejected) {
  RingAllreduce ring(wire(world().comm));
  std::vector<float> v(16, 1.0f);
  EXPECT_EQ(ring.run(v.data(), v.data() + 1, 8, DataType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run_fp16_wire(v.data() + 2, v.data(), 8, DataType::kFloat32, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run(v.data(), nullptr, 8, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(v, std::vector<float>(16, 1.0f));
}

TEST(RingAllreduce, InvalidArguments) {
  RingAllreduce ring(wire(world().comm));
  float x = 1.0f;
  EXPECT_EQ(ring.run(&x, -1, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run(nullptr, 4, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run(&x, 1, static_cast<DataType>(42), ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ring.run(&x, 1, DataType::kFloat32, ReduceOp::kAdasum).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(ring.run(nullptr, 0, DataType::kFloat32, ReduceOp::kSum).ok());
  RingAllreduceOptions bad_tags;
  bad_tags.tag_base = -5;
  RingAllreduce bad(wire(world().comm), bad_tags);
  EXPECT_EQ(bad.run(&x, 1, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  RingAllreduce null_comm(wire(MPI_COMM_NULL));
  EXPECT_EQ(null_comm.run(&x, 1, DataType::kFloat32, ReduceOp::kSum).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(x, 1.0f);
}

TEST(RingAllreduce, SingleRankIsANoOp) {
  MPI_Comm self;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  RingAllreduce ring(wire(self));
  std::vector<int32_t> v = {1, 2, 3};
  ASSERT_TRUE(ring.run(v.data(), 3, DataType::kInt32, ReduceOp::kProduct).ok());
  EXPECT_EQ(v, (std::vector<int32_t>{1, 2, 3}));
  // Out of place, it copies (and scales).
  std::vector<float> in = {1.0f, -2.0f, 3.0f}, out(3, 0.0f);
  ASSERT_TRUE(ring.run(in.data(), out.data(), 3, DataType::kFloat32, ReduceOp::kSum, 0.5).ok());
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.0f, 1.5f}));
  EXPECT_EQ(in, (std::vector<float>{1.0f, -2.0f, 3.0f}));
  MPI_Comm_free(&self);
}

}  // namespace
}  // namespace horovodlite
