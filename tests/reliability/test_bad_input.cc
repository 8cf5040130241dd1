// Bad and extreme input: shapes whose sizes overflow, tensors beyond MPI's int
// counts, and empty and zero-dimensional tensors for every op.
#include <climits>
#include <cstdlib>

#include "test_util.h"

using namespace hvl_test;

namespace {

// A tensor view that claims `elements` uint8 elements but points at a small
// buffer: for cases that must be rejected before any data is touched.
TensorView huge_view(std::vector<uint8_t>& small, int64_t elements) {
  return TensorView{small.data(), DataType::kUInt8, {elements}};
}

void expect_error(const HandlePtr& h, StatusCode code, const std::string& text) {
  Status s = h->wait();
  EXPECT_EQ(s.code(), code) << h->name() << ": " << s.to_string();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(h->name()), std::string::npos) << s.message();
}

}  // namespace

TEST(BadInput, ShapesThatOverflowAreRejectedLocally) {
  std::vector<float> v(4, 1.0f);
  const int64_t big = int64_t(1) << 40;
  TensorView overflow{v.data(), DataType::kFloat32, {big, big}};
  TensorView bytes_overflow{v.data(), DataType::kFloat64, {int64_t(1) << 61}};
  TensorView too_many_dims{v.data(), DataType::kFloat32, Shape(65, 1)};
  std::unique_ptr<Buffer> out;
  expect_error(allreduce_async("bad.overflow", overflow, overflow), StatusCode::kInvalidArgument, "too large");
  expect_error(broadcast_async("bad.bytes", bytes_overflow, 0), StatusCode::kInvalidArgument, "too large");
  expect_error(allgather_async("bad.dims", too_many_dims, allocate_into(&out, DataType::kFloat32)),
               StatusCode::kInvalidArgument, "dimensions");
  const int n = horovodlite::size();
  TensorView rows{v.data(), DataType::kFloat32, {4}};
  std::vector<int64_t> splits(n, 0);
  splits[0] = INT64_MAX;
  if (n > 1) {
    splits[1] = INT64_MAX;
    expect_error(alltoall_async("bad.splits.overflow", rows, splits, allocate_into(&out, DataType::kFloat32)),
                 StatusCode::kInvalidArgument, "overflow");
  }
}

// One rule for an allreduce's output (the adapters apply the same function):
// another dtype, size or device, or a buffer that overlaps the input without
// being it, is rejected on this rank before anything reaches the others; the
// input itself (in place) and a disjoint buffer are fine.
TEST(BadInput, AllreduceOutputRule) {
  std::vector<double> wide(9, 1.0);
  TensorView in{wide.data(), DataType::kFloat64, {6}};
  TensorView shifted{wide.data() + 3, DataType::kFloat64, {6}};
  std::vector<float> other(6);
  TensorView wrong_dtype{other.data(), DataType::kFloat32, {6}};
  TensorView wrong_size{wide.data() + 3, DataType::kFloat64, {5}};
  expect_error(allreduce_async("rule.overlap", in, shifted, {ReduceOp::kSum}), StatusCode::kInvalidArgument,
               "overlaps its input");
  expect_error(allreduce_async("rule.dtype", in, wrong_dtype, {ReduceOp::kSum}), StatusCode::kInvalidArgument,
               "dtype and size");
  expect_error(allreduce_async("rule.size", in, wrong_size, {ReduceOp::kSum}), StatusCode::kInvalidArgument,
               "dtype and size");
  EXPECT_EQ(wide, std::vector<double>(9, 1.0)) << "a rejected allreduce wrote to its buffers";
  EXPECT_TRUE(check_allreduce_output("rule.same", in, in).ok());
  std::vector<double> disjoint(6);
  EXPECT_TRUE(check_allreduce_output("rule.disjoint", in, TensorView{disjoint.data(), DataType::kFloat64, {6}}).ok());
  TensorView elsewhere = in;
  elsewhere.device = 0;
  EXPECT_EQ(check_allreduce_output("rule.device", in, elsewhere).code(), StatusCode::kInvalidArgument);
}

TEST(BadInput, BeyondIntMaxElementsPerRankIsAClearErrorWhereMpiCountsAreInts) {
  std::vector<uint8_t> small(16, 1);
  std::unique_ptr<Buffer> out;
  const int64_t beyond = int64_t(INT_MAX) + 2;
  const int size = horovodlite::size();
  // alltoall: checked locally.
  expect_error(
      alltoall_async("big.alltoall", huge_view(small, beyond * size), {}, allocate_into(&out, DataType::kUInt8)),
      StatusCode::kInvalidArgument, "2^31-1");
  // allgather and reducescatter: every rank gets the same error from execution,
  // before any data is read or any output allocated.
  expect_error(allgather_async("big.allgather", huge_view(small, beyond), allocate_into(&out, DataType::kUInt8)),
               StatusCode::kInvalidArgument, "2^31-1");
  EXPECT_EQ(out, nullptr);
  expect_error(reducescatter_async("big.reducescatter", huge_view(small, beyond * size),
                                   allocate_into(&out, DataType::kUInt8), {ReduceOp::kSum}),
               StatusCode::kInvalidArgument, "2^31-1");
  EXPECT_EQ(out, nullptr);
  // The runtime still works.
  std::vector<float> v(3, 1.0f);
  TensorView t{v.data(), DataType::kFloat32, {3}};
  HVL_ASSERT_OK(allreduce_async("big.after", t, t, {ReduceOp::kSum})->wait());
  EXPECT_EQ(v[0], static_cast<float>(size));
}

TEST(BadInput, EmptyAndZeroDimensionalTensorsForEveryOp) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  std::vector<float> none;
  TensorView empty{none.data(), DataType::kFloat32, {0}};
  TensorView empty2d{none.data(), DataType::kFloat32, {0, 5}};
  HVL_ASSERT_OK(allreduce_async("empty.allreduce", empty, empty)->wait());
  HVL_ASSERT_OK(allreduce_async("empty.allreduce2d", empty2d, empty2d)->wait());
  HVL_ASSERT_OK(broadcast_async("empty.broadcast", empty2d, size - 1)->wait());

  std::unique_ptr<Buffer> out;
  HVL_ASSERT_OK(allgather_async("empty.allgather", empty2d, allocate_into(&out, DataType::kFloat32))->wait());
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->shape(), (Shape{0, 5}));

  // Only some ranks have rows.
  std::vector<float> some(rank % 2 ? 0 : 10, static_cast<float>(rank));
  TensorView part{some.data(), DataType::kFloat32, {static_cast<int64_t>(some.size()) / 5, 5}};
  HVL_ASSERT_OK(allgather_async("empty.allgather.some", part, allocate_into(&out, DataType::kFloat32))->wait());
  int64_t rows = 0;
  for (int r = 0; r < size; ++r) rows += r % 2 ? 0 : 2;
  EXPECT_EQ(out->shape(), (Shape{rows, 5}));

  auto h =
      alltoall_async("empty.alltoall", empty2d, std::vector<int64_t>(size, 0), allocate_into(&out, DataType::kFloat32));
  HVL_ASSERT_OK(h->wait());
  EXPECT_EQ(out->shape(), (Shape{0, 5}));
  EXPECT_EQ(h->received_splits(), std::vector<int64_t>(size, 0));

  HVL_ASSERT_OK(reducescatter_async("empty.reducescatter", empty2d, allocate_into(&out, DataType::kFloat32))->wait());
  EXPECT_EQ(out->shape(), (Shape{0, 5}));

  // Zero-dimensional (scalar) tensors.
  float x = static_cast<float>(rank + 1);
  TensorView scalar{&x, DataType::kFloat32, {}};
  HVL_ASSERT_OK(allreduce_async("scalar.allreduce", scalar, scalar, {ReduceOp::kSum})->wait());
  EXPECT_EQ(x, size * (size + 1) / 2.0f);
  float y = static_cast<float>(rank);
  HVL_ASSERT_OK(broadcast_async("scalar.broadcast", TensorView{&y, DataType::kFloat32, {}}, size - 1)->wait());
  EXPECT_EQ(y, static_cast<float>(size - 1));
  HVL_ASSERT_OK(allgather_async("scalar.allgather", TensorView{&y, DataType::kFloat32, {}},
                                allocate_into(&out, DataType::kFloat32))
                    ->wait());
  EXPECT_EQ(out->shape(), Shape{size});
}

// More than 2^31 elements: allreduce and broadcast chunk at INT_MAX. Needs about
// 2 GiB per rank (plus MPI's buffers), so it runs only with HVL_TEST_LARGE=1
// (CTest: -DHVL_TEST_LARGE_TENSORS=ON adds reliability_large_np2).
TEST(LargeTensors, AllreduceAndBroadcastBeyondIntMaxElements) {
  const char* on = std::getenv("HVL_TEST_LARGE");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "set HVL_TEST_LARGE=1 (needs ~6 GiB per rank)";
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int64_t n = int64_t(INT_MAX) + 1025;
  std::vector<uint8_t> v(static_cast<size_t>(n), static_cast<uint8_t>(rank + 1));
  v[n - 1] = static_cast<uint8_t>(rank + 2);
  TensorView t{v.data(), DataType::kUInt8, {n}};
  HVL_ASSERT_OK(allreduce_async("large.allreduce", t, t, {ReduceOp::kSum})->wait());
  const uint8_t sum = static_cast<uint8_t>(size * (size + 1) / 2);
  EXPECT_EQ(v[0], sum);
  EXPECT_EQ(v[INT_MAX - 1], sum);
  EXPECT_EQ(v[INT_MAX], sum);
  EXPECT_EQ(v[n - 1], static_cast<uint8_t>(sum + size));
  std::fill(v.begin(), v.end(), static_cast<uint8_t>(rank));
  HVL_ASSERT_OK(broadcast_async("large.broadcast", t, size - 1)->wait());
  EXPECT_EQ(v[0], size - 1);
  EXPECT_EQ(v[n - 1], size - 1);
}
