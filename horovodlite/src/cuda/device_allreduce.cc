#include "cuda/device_allreduce.h"

#include "cuda/cuda_status.h"
#include "cuda/kernels.h"
#include "op_util.h"
#include "ops/fusion.h"
#include "ops/outputs.h"

namespace horovodlite {
namespace cuda {

namespace {

// Tensors start at multiples of 64 bytes in the fusion buffer (vectorised copies).
constexpr int64_t kAlignBytes = 64;

}  // namespace

Status DeviceAllreduce::reduce_into(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) {
  HVL_CUDA_CHECK(cudaMemcpyAsync(recv, send, static_cast<size_t>(count) * dtype_size(dtype), cudaMemcpyDeviceToDevice,
                                 ctx().stream()));
  return reduce(recv, count, dtype, op);
}

bool DeviceAllreduce::enabled(const Response& r) const {
  const DataType wire = wire_dtype(r);
  return accepts(wire, effective_op(r.reduce_op), total_elements(r) * static_cast<int64_t>(dtype_size(wire)));
}

Status DeviceAllreduce::enqueue(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  const std::vector<TensorEntry*>& entries = args.entries;
  const bool compressed = wire16_compressed(r);
  const DataType wire = wire_dtype(r);
  const size_t welem = dtype_size(wire);
  const int64_t total = total_elements(r);
  const ReduceOp op = effective_op(r.reduce_op);
  const double pre = r.prescale, post = effective_postscale(r, ctx().world().size());
  cudaStream_t stream = ctx().stream();

  if (!compressed && entries.size() == 1 && entries[0] != nullptr && granularity() == 1) {
    // One tensor: reduce in the output itself, no trip through the fusion buffer.
    TensorEntry& e = *entries[0];
    void* out = e.output.data;
    if (pre != 1.0) {
      CopyTask t{out, e.input.data, total};
      HVL_CUDA_CHECK(batched_scale_copy(&t, 1, r.dtype, pre, stream));
      HVL_RETURN_IF_ERROR(reduce(out, total, r.dtype, op));
    } else if (out != e.input.data && total > 0) {
      // Out of place: the algorithm reads the input and writes the output (no copy first).
      HVL_RETURN_IF_ERROR(reduce_into(e.input.data, out, total, r.dtype, op));
    } else {
      HVL_RETURN_IF_ERROR(reduce(out, total, r.dtype, op));
    }
    HVL_CUDA_CHECK(scale(out, total, r.dtype, post, stream));
    *outputs = outputs_in_place(entries);
    return Status::OK();
  }

  // The fused layout: every tensor at an aligned offset, the whole padded to the
  // algorithm's granularity (the same on every rank).
  const FusionLayout layout(r, kAlignBytes / static_cast<int64_t>(welem), granularity());
  Status s;
  char* buf = static_cast<char*>(ctx().fusion(layout.elements() * welem, &s));
  if (buf == nullptr) return s;
  std::vector<std::pair<void*, int64_t>> zeros;
  const std::vector<CopyTask> in = layout.pack(entries, buf, welem, &zeros);
  for (const auto& z : zeros) HVL_CUDA_CHECK(cudaMemsetAsync(z.first, 0, z.second, stream));
  const int nin = static_cast<int>(in.size());
  HVL_CUDA_CHECK(compressed ? batched_to_half(in.data(), nin, r.dtype, pre, stream, wire)
                            : batched_scale_copy(in.data(), nin, r.dtype, pre, stream));
  HVL_RETURN_IF_ERROR(reduce(buf, layout.elements(), wire, op));
  const std::vector<CopyTask> out = layout.unpack(entries, buf, welem);
  const int nout = static_cast<int>(out.size());
  HVL_CUDA_CHECK(compressed ? batched_from_half(out.data(), nout, r.dtype, post, stream, wire)
                            : batched_scale_copy(out.data(), nout, r.dtype, post, stream));
  *outputs = outputs_in_place(entries);
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
