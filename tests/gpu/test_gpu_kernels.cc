// The device kernels against the host kernels (kernels/reduce.h): batched copies
// with and without scaling for every dtype, fp16 casts with pre/post scale, odd
// counts, misaligned pointers and more tasks than one launch carries.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/kernels.h"
#include "kernels/half.h"
#include "kernels/reduce.h"

namespace horovodlite {
namespace {

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

// Tells CTest (SKIP_REGULAR_EXPRESSION) that the whole suite was skipped.
class NoGpuNotice : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!have_gpu()) std::printf("HVL_GPU_TESTS_SKIPPED: no CUDA device\n");
  }
};
const auto* const kNotice = ::testing::AddGlobalTestEnvironment(new NoGpuNotice);

// Random bytes that are valid values of `dtype` (finite floats, 0/1 bools).
std::vector<uint8_t> random_values(DataType dtype, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  std::vector<uint8_t> out(n * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const double v = u(rng);
    void* p = out.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DataType::kUInt8:
        *static_cast<uint8_t*>(p) = static_cast<uint8_t>(rng());
        break;
      case DataType::kInt8:
        *static_cast<int8_t*>(p) = static_cast<int8_t>(rng());
        break;
      case DataType::kInt16:
        *static_cast<int16_t*>(p) = static_cast<int16_t>(rng());
        break;
      case DataType::kInt32:
        *static_cast<int32_t*>(p) = static_cast<int32_t>(rng());
        break;
      case DataType::kInt64:
        *static_cast<int64_t*>(p) = (static_cast<int64_t>(rng()) << 32) | rng();
        break;
      case DataType::kFloat16:
        *static_cast<uint16_t*>(p) = kernels::float_to_half(static_cast<float>(v));
        break;
      case DataType::kBFloat16:
        *static_cast<uint16_t*>(p) = kernels::float_to_bfloat16(static_cast<float>(v));
        break;
      case DataType::kFloat32:
        *static_cast<float*>(p) = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        *static_cast<double*>(p) = v;
        break;
      case DataType::kBool:
        *static_cast<uint8_t*>(p) = rng() & 1;
        break;
    }
  }
  return out;
}

struct DeviceMem {
  explicit DeviceMem(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes + 64), cudaSuccess); }
  ~DeviceMem() { cudaFree(p); }
  char* get() { return static_cast<char*>(p); }
  void* p = nullptr;
};

class BatchedScaleCopy : public ::testing::TestWithParam<std::tuple<int, double>> {};

TEST_P(BatchedScaleCopy, MatchesHostKernel) {
  SKIP_WITHOUT_GPU();
  const DataType dtype = static_cast<DataType>(std::get<0>(GetParam()));
  const double factor = std::get<1>(GetParam());
  if (dtype == DataType::kBool && factor != 1.0) GTEST_SKIP() << "bool is never scaled";
  const size_t elem = dtype_size(dtype);
  // 70 tasks (more than one launch), counts 0, 1, odd and large; offsets misaligned by one element.
  std::vector<int64_t> counts;
  for (int i = 0; i < 70; ++i) counts.push_back(i == 0 ? 0 : i == 1 ? 1 : (i * 37) % 1000 + (i == 69 ? 300000 : 0));
  int64_t total = 0;
  for (int64_t c : counts) total += c + 1;
  std::vector<uint8_t> src = random_values(dtype, total, 7);
  DeviceMem dsrc(total * elem), ddst(total * elem);
  ASSERT_EQ(cudaMemcpy(dsrc.get(), src.data(), total * elem, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(ddst.get(), 0, total * elem), cudaSuccess);
  std::vector<cuda::CopyTask> tasks;
  std::vector<uint8_t> expect(total * elem, 0);
  int64_t off = 0;
  for (int64_t c : counts) {
    const int64_t o = off + 1;  // misaligned
    tasks.push_back(cuda::CopyTask{ddst.get() + o * elem, dsrc.get() + o * elem, c});
    kernels::scale_copy(expect.data() + o * elem, src.data() + o * elem, c, dtype, factor);
    off += c + 1;
  }
  ASSERT_EQ(cuda::batched_scale_copy(tasks.data(), static_cast<int>(tasks.size()), dtype, factor, nullptr),
            cudaSuccess);
  std::vector<uint8_t> got(total * elem);
  ASSERT_EQ(cudaMemcpy(got.data(), ddst.get(), total * elem, cudaMemcpyDeviceToHost), cudaSuccess);
  if (dtype == DataType::kFloat32 || dtype == DataType::kFloat64 || dtype == DataType::kFloat16 ||
      dtype == DataType::kBFloat16) {
    // The same arithmetic in the same precision: equal up to the last bit, except
    // where the host used fused multiply-add paths. Compare as floats with a tight bound.
    for (int64_t i = 0; i < total; ++i) {
      double a, b;
      auto val = [&](const uint8_t* p) {
        switch (dtype) {
          case DataType::kFloat16:
            return static_cast<double>(kernels::half_to_float(*reinterpret_cast<const uint16_t*>(p)));
          case DataType::kBFloat16:
            return static_cast<double>(kernels::bfloat16_to_float(*reinterpret_cast<const uint16_t*>(p)));
          case DataType::kFloat32:
            return static_cast<double>(*reinterpret_cast<const float*>(p));
          default:
            return *reinterpret_cast<const double*>(p);
        }
      };
      a = val(got.data() + i * elem);
      b = val(expect.data() + i * elem);
      ASSERT_NEAR(a, b, std::abs(b) * 1e-6 + 1e-12) << "element " << i;
    }
  } else {
    ASSERT_EQ(0, std::memcmp(got.data(), expect.data(), got.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, BatchedScaleCopy,
                         ::testing::Combine(::testing::Range(0, kNumDataTypes), ::testing::Values(1.0, 0.25, -3.5)));

TEST(Fp16Cast, RoundTripWithScalingMatchesHost) {
  SKIP_WITHOUT_GPU();
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64}) {
    const size_t elem = dtype_size(dtype);
    const int64_t n = 100003;
    std::vector<uint8_t> src = random_values(dtype, n, 11);
    // A few values beyond fp16's range become inf, as on the host.
    if (dtype == DataType::kFloat32) reinterpret_cast<float*>(src.data())[5] = 1e6f;
    DeviceMem dsrc(n * elem), dhalf(n * 2), dout(n * elem);
    ASSERT_EQ(cudaMemcpy(dsrc.get(), src.data(), n * elem, cudaMemcpyHostToDevice), cudaSuccess);
    cuda::CopyTask to{dhalf.get(), dsrc.get(), n};
    ASSERT_EQ(cuda::batched_to_half(&to, 1, dtype, 0.5, nullptr), cudaSuccess);
    std::vector<uint16_t> half(n);
    ASSERT_EQ(cudaMemcpy(half.data(), dhalf.get(), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    std::vector<uint8_t> scaled(n * elem);
    kernels::scale_copy(scaled.data(), src.data(), n, dtype, 0.5);
    std::vector<uint16_t> expect_half(n);
    if (dtype == DataType::kFloat32)
      kernels::float_to_half_n(expect_half.data(), reinterpret_cast<float*>(scaled.data()), n);
    else
      kernels::double_to_half_n(expect_half.data(), reinterpret_cast<double*>(scaled.data()), n);
    ASSERT_EQ(0, std::memcmp(half.data(), expect_half.data(), n * 2)) << dtype_name(dtype);

    cuda::CopyTask from{dout.get(), dhalf.get(), n};
    ASSERT_EQ(cuda::batched_from_half(&from, 1, dtype, 4.0, nullptr), cudaSuccess);
    std::vector<uint8_t> out(n * elem), expect(n * elem);
    ASSERT_EQ(cudaMemcpy(out.data(), dout.get(), n * elem, cudaMemcpyDeviceToHost), cudaSuccess);
    if (dtype == DataType::kFloat32)
      kernels::half_to_float_n(reinterpret_cast<float*>(expect.data()), expect_half.data(), n);
    else
      kernels::half_to_double_n(reinterpret_cast<double*>(expect.data()), expect_half.data(), n);
    kernels::scale(expect.data(), n, dtype, 4.0);
    ASSERT_EQ(0, std::memcmp(out.data(), expect.data(), n * elem)) << dtype_name(dtype);
  }
}

// float16/bfloat16 scaled on the device as Horovod's CUDA kernels do (issue 29):
// the factor rounded to the tensor's type first, the product computed in float32
// and rounded once. 0.3 and 1/3 are not representable in either type.
TEST(Scale, HalfFactorsRoundedAsHorovod) {
  SKIP_WITHOUT_GPU();
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    for (double factor : {0.3, 1.0 / 3.0, 12.7}) {
      const int64_t n = 65536;  // every fp16 bit pattern (NaN/inf included)
      std::vector<uint16_t> src(n);
      for (int64_t i = 0; i < n; ++i) src[i] = static_cast<uint16_t>(i);
      const float f =
          dtype == DataType::kFloat16 ? kernels::device_half_factor(factor) : kernels::device_bfloat16_factor(factor);
      std::vector<uint16_t> expect(n);
      for (int64_t i = 0; i < n; ++i) {
        expect[i] = dtype == DataType::kFloat16 ? kernels::float_to_half(kernels::half_to_float(src[i]) * f)
                                                : kernels::float_to_bfloat16(kernels::bfloat16_to_float(src[i]) * f);
      }
      DeviceMem d(n * 2);
      ASSERT_EQ(cudaMemcpy(d.get(), src.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cuda::scale(d.get(), n, dtype, factor, nullptr), cudaSuccess);
      std::vector<uint16_t> got(n);
      ASSERT_EQ(cudaMemcpy(got.data(), d.get(), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t i = 0; i < n; ++i) {
        const bool nan =
            dtype == DataType::kFloat16 ? (expect[i] & 0x7fffu) > 0x7c00u : (expect[i] & 0x7fffu) > 0x7f80u;
        if (nan) continue;  // NaN payloads may differ
        ASSERT_EQ(got[i], expect[i]) << dtype_name(dtype) << " factor " << factor << " element " << i;
      }
    }
  }
}

TEST(Scale, InPlace) {
  SKIP_WITHOUT_GPU();
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 500.0f;
  DeviceMem d(v.size() * 4);
  ASSERT_EQ(cudaMemcpy(d.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cuda::scale(d.get(), static_cast<int64_t>(v.size()), DataType::kFloat32, 0.5, nullptr), cudaSuccess);
  std::vector<float> got(v.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d.get(), v.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], v[i] * 0.5f);
}

}  // namespace
}  // namespace horovodlite
