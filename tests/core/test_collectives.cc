// Every collective x every dtype x element counts {0, 1, odd, large}, checked
// against values every rank can compute for itself.
#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace hvl_test;

namespace {

const std::vector<int64_t> kCounts = {0, 1, 17, 100003};

bool op_valid(DataType d, ReduceOp op) { return !(d == DataType::kBool && op == ReduceOp::kAverage); }

// Small values so that sums and products are exact in every dtype at up to 8 ranks.
double value(DataType d, ReduceOp op, int rank, int64_t i) {
  if (d == DataType::kBool) return (rank + i) % 3 == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) return 1 + ((rank + i) % 2);
  double v = 1 + rank + (i % 5);
  return (d == DataType::kUInt8 || d == DataType::kBool) ? v : ((i % 2) ? -v : v);
}

double expected(DataType d, ReduceOp op, int size, int64_t i) {
  double acc = value(d, op, 0, i);
  for (int r = 1; r < size; ++r) {
    double v = value(d, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc = d == DataType::kBool ? (acc || v) : acc + v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc = d == DataType::kBool ? (acc && v) : acc * v;
        break;
      default:
        break;
    }
  }
  if (op == ReduceOp::kAverage) {
    acc /= size;
    if (!dtype_is_floating(d)) acc = std::trunc(acc);
  }
  return acc;
}

}  // namespace

class AllreduceAllDtypes : public ::testing::TestWithParam<DataType> {};

TEST_P(AllreduceAllDtypes, EveryOpAndCount) {
  const DataType d = GetParam();
  const int rank = horovodlite::rank(), size = horovodlite::size();
  struct Case {
    ReduceOp op;
    int64_t n;
    std::unique_ptr<Buffer> in, out;
    HandlePtr h;
  };
  std::vector<Case> cases;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    if (!op_valid(d, op)) continue;
    for (int64_t n : kCounts) {
      Case c{op, n, std::make_unique<Buffer>(d, Shape{n}), std::make_unique<Buffer>(d, Shape{n}), nullptr};
      for (int64_t i = 0; i < n; ++i) c.in->set(i, value(d, op, rank, i));
      cases.push_back(std::move(c));
    }
  }
  // All enqueued at once: they are negotiated together and fused where they can be.
  for (auto& c : cases) {
    AllreduceOptions o;
    o.op = c.op;
    std::string name = std::string("ar.") + dtype_name(d) + "." + reduce_op_name(c.op) + "." + std::to_string(c.n);
    c.h = allreduce_async(name, c.in->view(), c.out->view(), o);
  }
  for (auto& c : cases) {
    HVL_ASSERT_OK(c.h->wait());
    for (int64_t i = 0; i < c.n; ++i) {
      const double e = expected(d, c.op, size, i);
      ASSERT_NEAR(c.out->get(i), e, tolerance(d, e))
          << dtype_name(d) << " " << reduce_op_name(c.op) << " n=" << c.n << " i=" << i;
    }
  }
}

TEST_P(AllreduceAllDtypes, InPlaceTwoDimensional) {
  const DataType d = GetParam();
  const ReduceOp op = d == DataType::kBool ? ReduceOp::kMax : ReduceOp::kSum;
  Buffer t(d, {7, 3});
  for (int64_t i = 0; i < t.size(); ++i) t.set(i, value(d, op, horovodlite::rank(), i));
  HVL_ASSERT_OK(allreduce_async(std::string("inplace.") + dtype_name(d), t.view(), t.view(), {op}).get()->wait());
  for (int64_t i = 0; i < t.size(); ++i) {
    const double e = expected(d, op, horovodlite::size(), i);
    ASSERT_NEAR(t.get(i), e, tolerance(d, e));
  }
}

TEST_P(AllreduceAllDtypes, Allgather) {
  const DataType d = GetParam();
  const int rank = horovodlite::rank(), size = horovodlite::size();
  for (int64_t cols : {int64_t(1), int64_t(3)}) {
    // Rank r contributes r+1 rows (rank 1 contributes none, to cover empty inputs).
    const int64_t rows = rank == 1 ? 0 : rank + 1;
    Buffer in(d, {rows, cols});
    for (int64_t i = 0; i < in.size(); ++i) in.set(i, (rank * 7 + i) % 50);
    std::unique_ptr<Buffer> out;
    auto h = allgather_async(std::string("ag.") + dtype_name(d) + "." + std::to_string(cols), in.view(),
                             allocate_into(&out, d));
    HVL_ASSERT_OK(h->wait());
    int64_t total = 0;
    for (int r = 0; r < size; ++r) total += r == 1 ? 0 : r + 1;
    ASSERT_EQ(out->shape(), (Shape{total, cols}));
    int64_t off = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t n = (r == 1 ? 0 : r + 1) * cols;
      for (int64_t i = 0; i < n; ++i) {
        Buffer ref(d, {1});
        ref.set(0, (r * 7 + i) % 50);
        ASSERT_EQ(out->get(off + i), ref.get(0)) << "from rank " << r << " element " << i;
      }
      off += n;
    }
  }
}

TEST_P(AllreduceAllDtypes, BroadcastFromEveryRoot) {
  const DataType d = GetParam();
  const int rank = horovodlite::rank(), size = horovodlite::size();
  for (int root = 0; root < size; ++root) {
    for (int64_t n : kCounts) {
      Buffer t(d, {n});
      for (int64_t i = 0; i < n; ++i) t.set(i, (rank * 3 + i) % 17);
      auto h = broadcast_async(
          "bc." + std::string(dtype_name(d)) + "." + std::to_string(root) + "." + std::to_string(n), t.view(), root);
      HVL_ASSERT_OK(h->wait());
      for (int64_t i = 0; i < n; ++i) {
        Buffer ref(d, {1});
        ref.set(0, (root * 3 + i) % 17);
        ASSERT_EQ(t.get(i), ref.get(0)) << "root " << root << " n " << n << " i " << i;
      }
    }
  }
}

TEST_P(AllreduceAllDtypes, AlltoallUnevenSplits) {
  const DataType d = GetParam();
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int64_t cols = 2;
  // Rank r sends (r + j) % 3 rows to rank j; row content encodes (sender, receiver, row).
  std::vector<int64_t> splits(size);
  int64_t rows = 0;
  for (int j = 0; j < size; ++j) rows += splits[j] = (rank + j) % 3;
  Buffer in(d, {rows, cols});
  int64_t row = 0;
  for (int j = 0; j < size; ++j)
    for (int64_t k = 0; k < splits[j]; ++k, ++row)
      for (int64_t c = 0; c < cols; ++c) in.set(row * cols + c, (rank * 5 + j * 3 + k + c) % 40);
  std::unique_ptr<Buffer> out;
  auto h = alltoall_async(std::string("a2a.") + dtype_name(d), in.view(), splits, allocate_into(&out, d));
  HVL_ASSERT_OK(h->wait());
  const auto& got = h->received_splits();
  ASSERT_EQ(static_cast<int>(got.size()), size);
  int64_t off = 0;
  for (int s = 0; s < size; ++s) {
    ASSERT_EQ(got[s], (s + rank) % 3);
    for (int64_t k = 0; k < got[s]; ++k, ++off)
      for (int64_t c = 0; c < cols; ++c) {
        Buffer ref(d, {1});
        ref.set(0, (s * 5 + rank * 3 + k + c) % 40);
        ASSERT_EQ(out->get(off * cols + c), ref.get(0)) << "from " << s << " row " << k;
      }
  }
  ASSERT_EQ(out->shape()[0], off);
}

TEST_P(AllreduceAllDtypes, Reducescatter) {
  const DataType d = GetParam();
  const ReduceOp op = d == DataType::kBool ? ReduceOp::kMax : ReduceOp::kSum;
  const int rank = horovodlite::rank(), size = horovodlite::size();
  for (int64_t dim0 : {int64_t(1), int64_t(size), int64_t(2 * size + 1)}) {
    const int64_t cols = 3;
    Buffer in(d, {dim0, cols});
    for (int64_t i = 0; i < in.size(); ++i) in.set(i, value(d, op, rank, i));
    std::unique_ptr<Buffer> out;
    auto h = reducescatter_async("rs." + std::string(dtype_name(d)) + "." + std::to_string(dim0), in.view(),
                                 allocate_into(&out, d), {op});
    HVL_ASSERT_OK(h->wait());
    const int64_t my_rows = reducescatter_rows(dim0, size, rank);
    ASSERT_EQ(out->shape(), (Shape{my_rows, cols}));
    int64_t first_row = 0;
    for (int r = 0; r < rank; ++r) first_row += reducescatter_rows(dim0, size, r);
    for (int64_t i = 0; i < out->size(); ++i) {
      const double e = expected(d, op, size, first_row * cols + i);
      ASSERT_NEAR(out->get(i), e, tolerance(d, e)) << "dim0 " << dim0 << " i " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AllreduceAllDtypes, ::testing::ValuesIn(all_dtypes()),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Allreduce, PrescaleAndPostscale) {
  const int size = horovodlite::size();
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16}) {
    Buffer t(d, {5});
    for (int64_t i = 0; i < 5; ++i) t.set(i, 2 * (i + 1));
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.prescale_factor = 0.5;
    o.postscale_factor = 3.0;
    HVL_ASSERT_OK(allreduce_async(std::string("scaled.") + dtype_name(d), t.view(), t.view(), o)->wait());
    for (int64_t i = 0; i < 5; ++i) ASSERT_NEAR(t.get(i), 3.0 * size * (i + 1), tolerance(d, 3.0 * size * (i + 1)));
  }
}

// Into a separate output: the input is only read, and Average with pre- and
// postscale is applied once, for a small tensor (MPI_Allreduce), one above the
// ring threshold (reduced straight from input to output), and both again with
// fp16 and bf16 compression (the values are small integers, exact in both).
TEST(Allreduce, OutOfPlaceAverageWithScalingLeavesTheInputAlone) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  for (int64_t n : {int64_t(5), int64_t(300001)}) {
    for (Compression c : {Compression::kNone, Compression::kFp16, Compression::kBf16}) {
      std::vector<float> in(n), out(n, -1.0f);
      for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((rank + 1) * (i % 7));
      const std::vector<float> original = in;
      AllreduceOptions o;
      o.op = ReduceOp::kAverage;
      o.prescale_factor = 0.5;
      o.postscale_factor = 4.0;
      o.compression = c;
      TensorView vi{in.data(), DataType::kFloat32, {n}}, vo{out.data(), DataType::kFloat32, {n}};
      const std::string name = "oop." + std::to_string(n) + "." + compression_name(c);
      HVL_ASSERT_OK(allreduce_async(name, vi, vo, o)->wait());
      ASSERT_EQ(in, original) << name;
      const double mean_factor = (size + 1) / 2.0;  // mean over ranks of (rank + 1)
      for (int64_t i = 0; i < n; i += (n > 100 ? 1009 : 1)) {
        ASSERT_FLOAT_EQ(out[i], static_cast<float>(2.0 * mean_factor * (i % 7))) << name << " i " << i;
      }
      ASSERT_FLOAT_EQ(out[n - 1], static_cast<float>(2.0 * mean_factor * ((n - 1) % 7))) << name;
    }
  }
}

TEST(Allreduce, LargeFloat32) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int64_t n = int64_t(1) << 22;  // 16 MiB
  std::vector<float> in(n), out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((rank + 1) * (i % 1000));
  TensorView vi{in.data(), DataType::kFloat32, {n}}, vo{out.data(), DataType::kFloat32, {n}};
  HVL_ASSERT_OK(allreduce_async("large", vi, vo, {ReduceOp::kSum})->wait());
  const float k = size * (size + 1) / 2.0f;
  for (int64_t i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(out[i], k * (i % 1000));
}

TEST(Allreduce, ZeroDimensionalTensor) {
  double x = horovodlite::rank() + 1.0;
  TensorView v{&x, DataType::kFloat64, {}};
  HVL_ASSERT_OK(allreduce_async("scalar", v, v, {ReduceOp::kSum})->wait());
  const int size = horovodlite::size();
  EXPECT_EQ(x, size * (size + 1) / 2.0);
}

TEST(Allgather, ZeroDimensionalTensorsGatherAsVector) {
  int32_t x = horovodlite::rank() * 10;
  std::unique_ptr<Buffer> out;
  auto h = allgather_async("ag.scalar", TensorView{&x, DataType::kInt32, {}}, allocate_into(&out, DataType::kInt32));
  HVL_ASSERT_OK(h->wait());
  ASSERT_EQ(out->shape(), Shape{horovodlite::size()});
  for (int r = 0; r < horovodlite::size(); ++r) EXPECT_EQ(out->get(r), r * 10);
}

TEST(Barrier, CompletesOnEveryRank) {
  for (int i = 0; i < 3; ++i) HVL_ASSERT_OK(barrier_async()->wait());
}

TEST(Topology, RanksAndSizesAreConsistent) {
  const int size = horovodlite::size();
  EXPECT_GE(horovodlite::rank(), 0);
  EXPECT_LT(horovodlite::rank(), size);
  EXPECT_GE(local_rank(), 0);
  EXPECT_LT(local_rank(), local_size());
  EXPECT_EQ(local_size() * cross_size(), size);  // one host: local_size == size
  EXPECT_EQ(cross_rank(), 0);
  // Every rank agrees on the sum of local ranks.
  int32_t lr = local_rank();
  HVL_ASSERT_OK(allreduce_async("topo", TensorView{&lr, DataType::kInt32, {}}, TensorView{&lr, DataType::kInt32, {}},
                                {ReduceOp::kSum})
                    ->wait());
  EXPECT_EQ(lr, size * (size - 1) / 2);
}

TEST(Compression, Fp16AllreduceIsCloseForFloat32AndFloat64) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  for (DataType d : {DataType::kFloat32, DataType::kFloat64}) {
    // Several tensors at once (fused on the wire as fp16) and one on its own.
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<HandlePtr> hs;
    for (int64_t n : {int64_t(1), int64_t(33), int64_t(1000)}) {
      bufs.push_back(std::make_unique<Buffer>(d, Shape{n}));
      for (int64_t i = 0; i < n; ++i) bufs.back()->set(i, 0.01 * (i % 97) + 0.5 * rank);
      AllreduceOptions o;
      o.compression = Compression::kFp16;
      hs.push_back(allreduce_async("fp16." + std::string(dtype_name(d)) + "." + std::to_string(n), bufs.back()->view(),
                                   bufs.back()->view(), o));
    }
    for (size_t k = 0; k < hs.size(); ++k) {
      HVL_ASSERT_OK(hs[k]->wait());
      EXPECT_EQ(hs[k]->output().dtype, d);  // restored to the tensor's own dtype
      for (int64_t i = 0; i < bufs[k]->size(); ++i) {
        const double e = 0.01 * (i % 97) + 0.5 * (size - 1) / 2.0;  // the average
        ASSERT_NEAR(bufs[k]->get(i), e, 2e-3 * std::max(1.0, e)) << dtype_name(d) << " i=" << i;
      }
    }
  }
}

// bf16 on the wire: 8 significant bits, so each rounding is within 2^-9
// relative; a few hops (ring steps, the Average's scaling) stay within 1e-2.
// Small tensors (fused, through a bf16 fusion buffer reduced by MPI) and one
// above the ring threshold (bf16 on the ring's wire), float32 and float64.
TEST(Compression, Bf16AllreduceIsCloseForFloat32AndFloat64) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  for (ReduceOp op : {ReduceOp::kAverage, ReduceOp::kSum}) {
    for (DataType d : {DataType::kFloat32, DataType::kFloat64}) {
      std::vector<std::unique_ptr<Buffer>> bufs;
      std::vector<HandlePtr> hs;
      for (int64_t n : {int64_t(1), int64_t(33), int64_t(1000), int64_t(300001)}) {
        bufs.push_back(std::make_unique<Buffer>(d, Shape{n}));
        for (int64_t i = 0; i < n; ++i) bufs.back()->set(i, 0.01 * (i % 97) + 0.5 * rank + 1e4 * (i % 3));
        AllreduceOptions o;
        o.op = op;
        o.compression = Compression::kBf16;
        hs.push_back(
            allreduce_async("bf16." + std::string(reduce_op_name(op)) + "." + dtype_name(d) + "." + std::to_string(n),
                            bufs.back()->view(), bufs.back()->view(), o));
      }
      for (size_t k = 0; k < hs.size(); ++k) {
        HVL_ASSERT_OK(hs[k]->wait());
        EXPECT_EQ(hs[k]->output().dtype, d);  // restored to the tensor's own dtype
        for (int64_t i = 0; i < bufs[k]->size(); ++i) {
          double e = 0.01 * (i % 97) + 0.5 * (size - 1) / 2.0 + 1e4 * (i % 3);  // the average
          if (op == ReduceOp::kSum) e *= size;
          const double got = bufs[k]->get(i);
          ASSERT_NEAR(got, e, 1e-2 * std::max(1.0, std::abs(e))) << dtype_name(d) << " i=" << i;
          if (op != ReduceOp::kSum) continue;
          // The sum is a bf16 value widened (a float whose low 16 bits are
          // zero): bf16 was on the wire. (Average's division of fused tensors
          // is applied while unpacking, in the tensor's precision, as fp16's.)
          const float f = static_cast<float>(got);
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          ASSERT_EQ(static_cast<double>(f), got) << dtype_name(d) << " i=" << i;
          ASSERT_EQ(bits & 0xffffu, 0u) << dtype_name(d) << " n=" << bufs[k]->size() << " i=" << i
                                        << ": not a bf16 value";
        }
      }
    }
  }
}

// Sums that overflow fp16 (65504) stay finite in bf16 (float32's range), and
// a result is the same on every rank (bitwise: each rank widens the same bf16).
TEST(Compression, Bf16HasFloat32RangeAndEveryRankGetsTheSameBits) {
  const int size = horovodlite::size();
  for (int64_t n : {int64_t(8), int64_t(300001)}) {
    std::vector<float> v(n, 60000.0f);
    for (int64_t i = 0; i < n; ++i) v[i] += static_cast<float>(i % 11) * 3.3f + horovodlite::rank();
    TensorView t{v.data(), DataType::kFloat32, {n}};
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.compression = Compression::kBf16;
    HVL_ASSERT_OK(allreduce_async("bf16.range." + std::to_string(n), t, t, o)->wait());
    for (int64_t i = 0; i < n; i += (n > 100 ? 997 : 1)) {
      ASSERT_TRUE(std::isfinite(v[i])) << i;
      ASSERT_NEAR(v[i], 60000.0 * size, 60000.0 * size * 1e-2) << i;
    }
    // Every rank's copy of the result, gathered: identical.
    std::unique_ptr<Buffer> all;
    HVL_ASSERT_OK(
        allgather_async("bf16.range.gather." + std::to_string(n), t, allocate_into(&all, DataType::kFloat32))->wait());
    for (int r = 1; r < size; ++r) {
      for (int64_t i = 0; i < n; i += (n > 100 ? 997 : 1)) ASSERT_EQ(all->get(r * n + i), all->get(i)) << r << " " << i;
    }
  }
}

TEST(Compression, Bf16RefusesAnIntegerTensorByName) {
  std::vector<int32_t> v(4, 1);
  TensorView t{v.data(), DataType::kInt32, {4}};
  AllreduceOptions o;
  o.compression = Compression::kBf16;
  Status s = allreduce_async("bf16.ints", t, t, o)->wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'bf16.ints'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
  EXPECT_EQ(v, std::vector<int32_t>(4, 1));
  // fp16 lets it through uncompressed (Horovod's behaviour), exactly.
  o.compression = Compression::kFp16;
  HVL_ASSERT_OK(allreduce_async("fp16.ints", t, t, o)->wait());
  EXPECT_EQ(v, std::vector<int32_t>(4, 1));  // Average of ones
}

TEST(Compression, Bf16AgainstFp16IsAMismatchNamingBoth) {
  const int rank = horovodlite::rank();
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> v(4, 1.0f);
  TensorView t{v.data(), DataType::kFloat32, {4}};
  AllreduceOptions o;
  o.compression = rank == 0 ? Compression::kBf16 : Compression::kFp16;
  Status s = allreduce_async("bf16.mismatch", t, t, o)->wait();
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fp16"), std::string::npos) << s.message();
}

TEST(Compression, PredivideKeepsLargeValuesInFp16Range) {
  // 60000 * size overflows fp16 (max 65504) unless scaled before conversion.
  const int size = horovodlite::size();
  std::vector<float> v(8, 60000.0f);
  TensorView t{v.data(), DataType::kFloat32, {8}};
  AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.compression = Compression::kFp16;
  o.prescale_factor = 1.0 / 16;
  o.postscale_factor = 16.0 / size;
  HVL_ASSERT_OK(allreduce_async("fp16.predivide", t, t, o)->wait());
  for (float x : v) EXPECT_NEAR(x, 60000.0f, 60.0f);
}

TEST(Compression, MismatchIsAnErrorOnEveryRank) {
  const int rank = horovodlite::rank();
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> v(4, 1.0f);
  TensorView t{v.data(), DataType::kFloat32, {4}};
  AllreduceOptions o;
  o.compression = rank == 0 ? Compression::kFp16 : Compression::kNone;
  Status s = allreduce_async("fp16.mismatch", t, t, o)->wait();
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_NE(s.message().find("Mismatched compression"), std::string::npos) << s.message();
}
