#include "cuda/host_staged.h"

#include <algorithm>

#include "cuda/cuda_status.h"
#include "enforce.h"

namespace horovodlite {
namespace cuda {

Status HostStaged::enqueue(const OpArgs& args, OpOutputs* outputs) {
  const Response& r = args.response;
  const std::vector<TensorEntry*>& entries = args.entries;
  const size_t elem = dtype_size(r.dtype);
  cudaStream_t stream = ctx().stream();
  // 1. Inputs to pinned memory (one buffer, each at an aligned offset).
  std::vector<size_t> offsets(entries.size());
  size_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    offsets[i] = total;
    if (entries[i] != nullptr) total += (entries[i]->input.byte_size() + 63) / 64 * 64;
  }
  cudaError_t err;
  char* in = static_cast<char*>(ctx().stage_in().get(std::max<size_t>(total, 64), &err));
  if (in == nullptr) return cuda_status(err, "cudaMallocHost (host staging)");
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr || entries[i]->input.byte_size() == 0) continue;
    HVL_CUDA_CHECK(cudaMemcpyAsync(in + offsets[i], entries[i]->input.data, entries[i]->input.byte_size(),
                                   cudaMemcpyDeviceToHost, stream));
  }
  HVL_CUDA_CHECK(cudaStreamSynchronize(stream));  // the core's stream only

  // 2. The host path on host views of the same entries. Broadcast works in
  //    place in the staging buffer; the allocating ops get the device output
  //    from the framework and a pinned buffer to fill.
  std::vector<TensorEntry> staged(entries.size());
  std::vector<TensorEntry*> ptrs(entries.size(), nullptr);
  std::vector<TensorView> device_out(entries.size());
  PinnedBuffer& stage_out = ctx().stage_out();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr) continue;
    TensorEntry& s = staged[i];
    s = *entries[i];
    s.ready.reset();
    s.input.data = in + offsets[i];
    s.input.device = kCpuDevice;
    s.output = s.input;
    if (entries[i]->allocate) {
      s.allocate = [i, orig = entries[i]->allocate, &device_out, &stage_out](const Shape& shape, TensorView* out) {
        TensorView dev;
        HVL_RETURN_IF_ERROR(orig(shape, &dev));
        device_out[i] = dev;
        cudaError_t e2;
        void* host = stage_out.get(std::max<size_t>(dev.byte_size(), 64), &e2);
        if (host == nullptr) return cuda_status(e2, "cudaMallocHost (host staging of an output)");
        *out = dev;
        out->data = host;
        out->device = kCpuDevice;
        return Status::OK();
      };
    }
    ptrs[i] = &s;
  }
  Response hr = r;
  hr.device = kCpuDevice;
  // Its outputs: the staged output (broadcast, in place) or the pinned buffer
  // the allocator handed out (allgather, alltoall, reducescatter).
  OpResult host = host_(OpArgs{hr, ptrs, args.observer});
  HVL_RETURN_IF_ERROR(host.status);
  HVL_ENFORCE_EQ(host.outputs.size(), entries.size(), host.algorithm, " (host-staged) on '", r.names[0], "'");

  // 3. Results back to the device, after the allocators' ready events.
  HVL_RETURN_IF_ERROR(ctx().wait_ready(entries));
  outputs->resize(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    if (e == nullptr) continue;
    const TensorView& host_out = host.outputs[i].tensor;
    TensorView dev = e->allocate ? device_out[i] : e->output;
    const size_t bytes = static_cast<size_t>(host_out.num_elements()) * elem;
    if (bytes > 0) HVL_CUDA_CHECK(cudaMemcpyAsync(dev.data, host_out.data, bytes, cudaMemcpyHostToDevice, stream));
    (*outputs)[i] = OpOutput{dev, std::move(host.outputs[i].received_splits)};
  }
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
