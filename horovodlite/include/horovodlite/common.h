// Core value types shared by every layer: data types, reduce ops, devices and
// the Status value that the core returns instead of throwing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace horovodlite {

enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kFloat16 = 5,
  kBFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBool = 9,
};
constexpr int kNumDataTypes = 10;

// Size in bytes of one element; 0 for a value outside the enum.
size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);
bool dtype_valid(int value);
bool dtype_is_floating(DataType dtype);

enum class ReduceOp : uint8_t {
  kAverage = 0,
  kSum = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5,  // adaptive summation (ops/adasum.h): floating point, power-of-two rank counts
};
const char* reduce_op_name(ReduceOp op);

// How an allreduce travels on the wire. kFp16: float32/float64 tensors are
// converted to IEEE fp16 while being packed, reduced in fp16 and converted back
// while being unpacked (values beyond +-65504 become +-inf); other dtypes are sent
// as they are. kBf16: the same with bfloat16 (float32's range, 8 significant
// bits: about 3 decimal digits, no overflow where float32 has none); float16
// and bfloat16 tensors travel as they are, other dtypes are refused.
enum class Compression : uint8_t { kNone = 0, kFp16 = 1, kBf16 = 2 };
// "none", "fp16", "bf16".
const char* compression_name(Compression c);

// Where a tensor lives. device < 0 is host memory, >= 0 a CUDA device ordinal.
constexpr int kCpuDevice = -1;

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,  // bad input detected locally (dtype, root, splits, ...)
  kDuplicateName = 2,    // a name enqueued again while still in flight
  kMismatch = 3,         // ranks disagree about an operation (from negotiation)
  kPrecondition = 4,     // used before init / after shutdown
  kAborted = 5,          // shut down or a peer failed while the op was in flight
  kTimeout = 6,          // a wait ran out of time (the op is still in flight)
  kInternal = 7,         // MPI/NCCL/CUDA error
  kUnimplemented = 8,
  kInProgress = 9,  // handle not completed yet
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status DuplicateName(std::string m) { return {StatusCode::kDuplicateName, std::move(m)}; }
  static Status Mismatch(std::string m) { return {StatusCode::kMismatch, std::move(m)}; }
  static Status Precondition(std::string m) { return {StatusCode::kPrecondition, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status Timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status InProgress() { return {StatusCode::kInProgress, "operation still in progress"}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

const char* status_code_name(StatusCode code);

// Evaluates a Status expression and returns it from the enclosing function if it failed.
#define HVL_RETURN_IF_ERROR(expr)               \
  do {                                          \
    ::horovodlite::Status hvl_status_ = (expr); \
    if (!hvl_status_.ok()) return hvl_status_;  \
  } while (0)

using Shape = std::vector<int64_t>;
int64_t num_elements(const Shape& shape);
std::string shape_string(const Shape& shape);

}  // namespace horovodlite
