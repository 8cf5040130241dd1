// Collectives on device (CUDA) tensors through the core API: inputs written on a
// stream of the test's own and handed over with a ready event, results read
// after the handle completes (and through its completion event). Runs with NCCL
// (NP 1) and host-staged through MPI (NP 2, HOROVODLITE_GPU_OPERATIONS=mpi).
// Every test skips without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "horovodlite/horovodlite.h"

namespace horovodlite {
namespace {

bool have_gpu() { return cuda_built() && cuda_device_count() > 0; }

// Tells CTest (SKIP_REGULAR_EXPRESSION) that the whole suite was skipped.
class NoGpuNotice : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!have_gpu() && rank() == 0) std::printf("HVL_GPU_TESTS_SKIPPED: no CUDA device\n");
  }
};
const auto* const kNotice = ::testing::AddGlobalTestEnvironment(new NoGpuNotice);

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// The event a framework would record on its stream after producing a tensor.
class StreamEvent : public ReadyEvent {
 public:
  explicit StreamEvent(cudaStream_t stream) {
    cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
    cudaEventRecord(event_, stream);
  }
  ~StreamEvent() override { cudaEventDestroy(event_); }
  bool ready() const override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  void* cuda_event() const override { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
    device_ = local_rank() % cuda_device_count();
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    for (void* p : allocations_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  // A device tensor filled (on the test's stream) from `values`.
  template <class T>
  TensorView upload(const std::vector<T>& values, DataType dtype, Shape shape) {
    TensorView v;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.device = device_;
    v.data = alloc(values.size() * sizeof(T));
    EXPECT_EQ(cudaMemcpyAsync(v.data, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    return v;
  }
  void* alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 1)), cudaSuccess);
    allocations_.push_back(p);
    return p;
  }
  template <class T>
  std::vector<T> download(const TensorView& v) {
    std::vector<T> out(v.num_elements());
    EXPECT_EQ(cudaMemcpy(out.data(), v.data, out.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  ReadyEventPtr ready() { return std::make_shared<StreamEvent>(stream_); }
  OutputAllocator allocator(TensorView* slot) {
    return [this, slot](const Shape& shape, TensorView* out) {
      slot->shape = shape;
      slot->device = device_;
      slot->data = alloc(static_cast<size_t>(num_elements(shape)) * 8 + 8);
      *out = *slot;
      out->dtype = slot->dtype;
      return Status::OK();
    };
  }
  // Waits for the handle, then orders the test's stream after the op's device work.
  void finish(const HandlePtr& h) {
    ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
    ASSERT_NE(h->completion_event(), nullptr);
    ASSERT_NE(h->completion_event()->cuda_event(), nullptr);
    EXPECT_TRUE(h->completion_event()->ready());
    ASSERT_EQ(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(h->completion_event()->cuda_event()), 0),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocations_;
};

TEST_F(Gpu, AllreduceSumAndAverageManySizes) {
  const int n = size(), r = rank();
  for (int64_t count : {0, 1, 17, 1000, 262147}) {
    std::vector<float> in(count);
    for (int64_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * (i % 97));
    TensorView x = upload(in, DataType::kFloat32, {count});
    TensorView out = x;
    out.data = alloc(count * 4);
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    HandlePtr h = allreduce_async("sum." + std::to_string(count), x, out, sum, ready());
    finish(h);
    std::vector<float> got = download<float>(out);
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(got[i], static_cast<float>(n * (n + 1) / 2 * (i % 97))) << i;
    // Average, in place.
    HandlePtr a = allreduce_async("avg." + std::to_string(count), x, x, AllreduceOptions{}, ready());
    finish(a);
    got = download<float>(x);
    for (int64_t i = 0; i < count; ++i) ASSERT_FLOAT_EQ(got[i], (n + 1) / 2.0f * (i % 97)) << i;
  }
}

TEST_F(Gpu, FusedAllreduceWithScalingAndFp16) {
  const int n = size(), r = rank();
  const std::vector<int64_t> counts = {3, 1, 4099, 0, 65536, 7};
  for (Compression c : {Compression::kNone, Compression::kFp16, Compression::kBf16}) {
    std::vector<TensorView> xs;
    std::vector<HandlePtr> hs;
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.prescale_factor = 0.5;
    o.postscale_factor = 4.0;
    o.compression = c;
    for (size_t t = 0; t < counts.size(); ++t) {
      std::vector<float> in(counts[t]);
      for (int64_t i = 0; i < counts[t]; ++i) in[i] = static_cast<float>(r + 1 + (i % 5) + t);
      xs.push_back(upload(in, DataType::kFloat32, {counts[t]}));
    }
    ReadyEventPtr ev = ready();
    for (size_t t = 0; t < counts.size(); ++t) {
      hs.push_back(allreduce_async("fused." + std::to_string(static_cast<int>(c)) + "." + std::to_string(t), xs[t],
                                   xs[t], o, ev));
    }
    for (auto& h : hs) finish(h);
    for (size_t t = 0; t < counts.size(); ++t) {
      std::vector<float> got = download<float>(xs[t]);
      for (int64_t i = 0; i < counts[t]; ++i) {
        // sum over ranks of (k + 1 + i%5 + t) * 0.5, times 4: small integers, exact in fp16
        // and bf16 too (below 256, partial sums of halves below 128).
        const float expect = 2.0f * (n * (n + 1) / 2 + n * ((i % 5) + static_cast<float>(t)));
        ASSERT_EQ(got[i], expect) << "tensor " << t << " element " << i;
      }
    }
  }
}

TEST_F(Gpu, AllreduceInt16AndBoolAndDouble) {
  const int n = size(), r = rank();
  std::vector<int16_t> a(1001, static_cast<int16_t>(r + 1));
  TensorView ta = upload(a, DataType::kInt16, {1001});
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  finish(allreduce_async("i16", ta, ta, sum, ready()));  // NCCL has no int16: host-staged
  for (int16_t v : download<int16_t>(ta)) ASSERT_EQ(v, n * (n + 1) / 2);

  std::vector<uint8_t> b(64, 0);
  b[r % 64] = 1;
  TensorView tb = upload(b, DataType::kBool, {64});
  AllreduceOptions max;
  max.op = ReduceOp::kMax;
  finish(allreduce_async("bool", tb, tb, max, ready()));
  std::vector<uint8_t> gb = download<uint8_t>(tb);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(gb[i], i < n ? 1 : 0) << i;

  std::vector<double> d(513, 1.5 * (r + 1));
  TensorView td = upload(d, DataType::kFloat64, {513});
  AllreduceOptions mn;
  mn.op = ReduceOp::kMin;
  finish(allreduce_async("f64min", td, td, mn, ready()));
  for (double v : download<double>(td)) ASSERT_EQ(v, 1.5);
}

TEST_F(Gpu, AllgatherUnevenRows) {
  const int n = size(), r = rank();
  const int64_t rows = r + 1, cols = 3;
  std::vector<int32_t> in(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) in[i] = r * 1000 + static_cast<int32_t>(i);
  TensorView x = upload(in, DataType::kInt32, {rows, cols});
  TensorView out;
  out.dtype = DataType::kInt32;
  HandlePtr h = allgather_async("gather", x, allocator(&out), ready());
  finish(h);
  const TensorView& res = h->output();
  ASSERT_EQ(res.shape, (Shape{n * (n + 1) / 2, cols}));
  std::vector<int32_t> got = download<int32_t>(res);
  size_t k = 0;
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < (q + 1) * cols; ++i) ASSERT_EQ(got[k++], q * 1000 + i);
}

TEST_F(Gpu, BroadcastFromLastRank) {
  const int n = size(), r = rank();
  std::vector<float> in(12345, static_cast<float>(r));
  TensorView x = upload(in, DataType::kFloat32, {12345});
  finish(broadcast_async("bcast", x, n - 1, ready()));
  for (float v : download<float>(x)) ASSERT_EQ(v, static_cast<float>(n - 1));
}

TEST_F(Gpu, AlltoallWithSplits) {
  const int n = size(), r = rank();
  // Rank r sends j + 1 rows to rank j; row values name sender and receiver.
  std::vector<int64_t> splits(n);
  std::vector<float> in;
  for (int j = 0; j < n; ++j) {
    splits[j] = j + 1;
    for (int k = 0; k < (j + 1) * 2; ++k) in.push_back(static_cast<float>(r * 100 + j));
  }
  TensorView x = upload(in, DataType::kFloat32, {static_cast<int64_t>(in.size() / 2), 2});
  TensorView out;
  out.dtype = DataType::kFloat32;
  HandlePtr h = alltoall_async("a2a", x, splits, allocator(&out), ready());
  finish(h);
  EXPECT_EQ(h->received_splits(), std::vector<int64_t>(n, r + 1));
  std::vector<float> got = download<float>(h->output());
  ASSERT_EQ(got.size(), static_cast<size_t>(n * (r + 1) * 2));
  for (int q = 0; q < n; ++q)
    for (int k = 0; k < (r + 1) * 2; ++k) ASSERT_EQ(got[q * (r + 1) * 2 + k], q * 100 + r);
}

TEST_F(Gpu, ReducescatterUnevenBlocks) {
  const int n = size(), r = rank();
  const int64_t dim0 = 2 * n + 1, cols = 5;
  std::vector<float> in(dim0 * cols);
  for (int64_t i = 0; i < dim0 * cols; ++i) in[i] = static_cast<float>(i);
  TensorView x = upload(in, DataType::kFloat32, {dim0, cols});
  TensorView out;
  out.dtype = DataType::kFloat32;
  ReducescatterOptions o;
  o.op = ReduceOp::kSum;
  HandlePtr h = reducescatter_async("rs", x, allocator(&out), o, ready());
  finish(h);
  const int64_t mine = reducescatter_rows(dim0, n, r);
  int64_t first = 0;
  for (int q = 0; q < r; ++q) first += reducescatter_rows(dim0, n, q);
  ASSERT_EQ(h->output().shape, (Shape{mine, cols}));
  std::vector<float> got = download<float>(h->output());
  for (int64_t i = 0; i < mine * cols; ++i) ASSERT_EQ(got[i], n * static_cast<float>(first * cols + i));
}

TEST_F(Gpu, MixedPlacementIsAnErrorEverywhere) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  std::vector<float> v(8, 1.0f);
  TensorView t;
  if (rank() == 0) {
    t.data = v.data();
    t.shape = {8};
  } else {
    t = upload(v, DataType::kFloat32, {8});
  }
  HandlePtr h = allreduce_async("mixed", t, t, AllreduceOptions{}, rank() == 0 ? nullptr : ready());
  Status s = h->wait();
  EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.to_string();
  EXPECT_NE(s.message().find("CPU"), std::string::npos) << s.message();
}

TEST_F(Gpu, InvalidDeviceIsRejectedLocally) {
  std::vector<float> v(4, 1.0f);
  TensorView t;
  t.data = v.data();
  t.shape = {4};
  t.device = cuda_device_count() + 3;
  Status s = allreduce_async("bad.device", t, t)->wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
}

}  // namespace
}  // namespace horovodlite
