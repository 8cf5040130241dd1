#include "cuda/device_executor.h"

#include "op_util.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>

#include "cuda/cuda_status.h"
#include "cuda/kernels.h"
#include "horovodlite/horovodlite.h"
#include "logging.h"

namespace horovodlite {
namespace cuda {

namespace {

// Tensors start at multiples of 64 bytes in the fusion buffer (vectorised copies).
constexpr int64_t kAlignBytes = 64;

int64_t align_elems(int64_t n, size_t elem) {
  const int64_t a = kAlignBytes / static_cast<int64_t>(elem);
  return (n + a - 1) / a * a;
}


char* at(void* p, int64_t bytes) { return static_cast<char*>(p) + bytes; }
const char* at(const void* p, int64_t bytes) { return static_cast<const char*>(p) + bytes; }

}  // namespace

DeviceExecutor::DeviceExecutor(MpiContext& mpi, const Config& config, HostExecuteFn host,
                               std::vector<std::unique_ptr<DeviceAllreduce>> allreduce)
    : mpi_(mpi), config_(config), host_(std::move(host)), allreduce_(std::move(allreduce)) {}

DeviceExecutor::~DeviceExecutor() {
  completions_.drain();
  if (ctx_.stream != nullptr) {
    cudaSetDevice(ctx_.device);
    fusion_.release();
    cudaStreamSynchronize(ctx_.stream);
    ctx_.comm.reset();
    cudaStreamDestroy(ctx_.stream);
    ctx_.stream = nullptr;
  }
}

Status DeviceExecutor::agree(const Status& local, const std::string& name) {
  return agree_across_ranks(mpi_.comm(), local, name,
                            "its output could not be allocated, or its GPU could not be set up");
}

Status DeviceExecutor::ensure_context(int device) {
  if (ctx_.stream != nullptr) {
    if (device != ctx_.device) {
      return Status::InvalidArgument("this rank's device collectives use cuda:" + std::to_string(ctx_.device) +
                                     "; a tensor on cuda:" + std::to_string(device) +
                                     " cannot join them (one GPU per rank)");
    }
    return cuda_status(cudaSetDevice(device), "cudaSetDevice");
  }
  if (!context_error_.ok()) return context_error_;
  // The first device response: every rank is here now. Agree that every rank
  // has its GPU before the collective NCCL set-up, so that a failure is an error
  // everywhere instead of a hang.
  Status local = cuda_status(cudaSetDevice(device), "cudaSetDevice");
  if (local.ok()) local = cuda_status(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking),
                                      "cudaStreamCreateWithFlags");
  Status s = agree(local, "device set-up");
  if (s.ok() && config_.gpu_operations == Config::GpuOperations::kNccl) {
    s = NcclComm::create(mpi_.comm(), device, &ctx_.comm);
  }
  if (!s.ok()) {
    if (ctx_.stream != nullptr) cudaStreamDestroy(ctx_.stream);
    ctx_.stream = nullptr;
    context_error_ = s;
    return s;
  }
  ctx_.device = device;
  HVL_LOG(kDebug, "device collectives on cuda:" << device << (ctx_.comm ? " with NCCL" : " through the host"));
  return Status::OK();
}

Status DeviceExecutor::wait_ready(const std::vector<TensorEntry*>& entries) {
  for (TensorEntry* e : entries) {
    if (e == nullptr || e->ready == nullptr) continue;
    if (void* ev = e->ready->cuda_event()) {
      HVL_CUDA_RETURN(cudaStreamWaitEvent(ctx_.stream, static_cast<cudaEvent_t>(ev), 0));
      continue;
    }
    // A ready event without a CUDA event: poll it, sleeping between polls.
    auto sleep = std::chrono::microseconds(5);
    while (!e->ready->ready()) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
  }
  return Status::OK();
}

void* DeviceExecutor::fusion(size_t bytes, Status* s) {
  cudaError_t err;
  void* p = fusion_.get(std::max<size_t>(bytes, 256), ctx_.stream, &err);
  if (p == nullptr) *s = cuda_status(err, "cudaMallocAsync (device fusion buffer)");
  return p;
}

Status DeviceExecutor::execute(const Response& r, const std::vector<TensorEntry*>& entries) {
  pending_.reset();
  int device = -1;
  for (TensorEntry* e : entries) {
    if (e == nullptr) continue;
    if (device >= 0 && e->input.device != device) {
      // Still take part (with this rank's first device) so that no rank is left waiting.
      HVL_LOG(kError, "fused tensors of one rank are on different GPUs");
    }
    if (device < 0) device = e->input.device;
  }
  if (device < 0) {
    // A joined rank: it contributes zeros on the GPU it used before (or its local one).
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) count = 1;
    device = ctx_.device >= 0 ? ctx_.device : mpi_.local_rank() % count;
  }
  HVL_RETURN_IF_ERROR(ensure_context(device));
  Status s = wait_ready(entries);
  if (s.ok()) s = run(r, entries);
  // Recorded after whatever was enqueued, even on failure: the entries (and the
  // buffers they keep alive) are released only once the device is done with them.
  std::shared_ptr<CudaEvent> event;
  Status es = CudaEvent::record(ctx_.stream, &event);
  if (es.ok()) pending_ = std::move(event);
  else if (s.ok()) s = es;
  return s;
}

bool DeviceExecutor::defer_completion(std::vector<std::unique_ptr<TensorEntry>>* done, const Status& status) {
  if (pending_ == nullptr) return false;
  for (auto& e : *done) e->handle->set_completion_event(pending_);
  completions_.push(std::move(pending_), std::move(*done), status);
  done->clear();
  pending_.reset();
  return true;
}

Status DeviceExecutor::run(const Response& r, const std::vector<TensorEntry*>& entries) {
  const bool nccl = ctx_.comm != nullptr;
  switch (r.type) {
    case OpType::kAllreduce:
      return allreduce(r, entries);
    case OpType::kAllgather:
      if (!nccl) break;
      last_algorithm_ = "NCCL_ALLGATHER";
      return allgather(r, *entries.at(0));
    case OpType::kBroadcast:
      if (!nccl) break;
      last_algorithm_ = "NCCL_BROADCAST";
      return broadcast(r, *entries.at(0));
    case OpType::kAlltoall:
      if (!nccl) break;
      last_algorithm_ = "NCCL_ALLTOALL";
      return alltoall(r, *entries.at(0));
    case OpType::kReducescatter: {
      ncclDataType_t t;
      ncclRedOp_t o;
      if (!nccl || !nccl_reduce_type(r.dtype, effective_op(r.reduce_op), &t, &o)) break;
      last_algorithm_ = "NCCL_REDUCESCATTER";
      return reducescatter(r, *entries.at(0));
    }
    default:
      return Status::Internal(std::string("not a device collective: ") + op_type_name(r.type));
  }
  last_algorithm_ = "HOST_STAGED";
  return host_staged(r, entries);
}

Status DeviceExecutor::allreduce(const Response& r, const std::vector<TensorEntry*>& entries) {
  const bool fp16 =
      r.compression == Compression::kFp16 && (r.dtype == DataType::kFloat32 || r.dtype == DataType::kFloat64);
  const DataType wire = fp16 ? DataType::kFloat16 : r.dtype;
  const size_t welem = dtype_size(wire), elem = dtype_size(r.dtype);
  const int64_t total = std::accumulate(r.tensor_sizes.begin(), r.tensor_sizes.end(), int64_t(0));
  const ReduceOp op = effective_op(r.reduce_op);
  const double pre = r.prescale, post = effective_postscale(r, mpi_.size());
  DeviceAllreduce* impl = allreduce_.back().get();
  for (auto& a : allreduce_) {
    if (a->enabled(ctx_, wire, op, total * static_cast<int64_t>(welem))) {
      impl = a.get();
      break;
    }
  }
  last_algorithm_ = impl->name();

  if (!fp16 && entries.size() == 1 && entries[0] != nullptr && impl->granularity() == 1) {
    // One tensor: reduce in the output itself, no trip through the fusion buffer.
    TensorEntry& e = *entries[0];
    void* out = e.output.data;
    if (pre != 1.0) {
      CopyTask t{out, e.input.data, total};
      HVL_CUDA_RETURN(batched_scale_copy(&t, 1, r.dtype, pre, ctx_.stream));
    } else if (out != e.input.data && total > 0) {
      HVL_CUDA_RETURN(cudaMemcpyAsync(out, e.input.data, total * elem, cudaMemcpyDeviceToDevice, ctx_.stream));
    }
    HVL_RETURN_IF_ERROR(impl->run(ctx_, out, total, r.dtype, op));
    HVL_CUDA_RETURN(scale(out, total, r.dtype, post, ctx_.stream));
    e.handle->set_output(e.output);
    return Status::OK();
  }

  // The fused layout: every tensor at an aligned offset, the whole padded to the
  // algorithm's granularity. The same on every rank (it depends on the response only).
  std::vector<int64_t> offsets(entries.size());
  int64_t padded = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    offsets[i] = padded;
    padded += align_elems(r.tensor_sizes[i], welem);
  }
  const int64_t g = impl->granularity();
  padded = (padded + g - 1) / g * g;
  Status s;
  char* buf = static_cast<char*>(fusion(padded * welem, &s));
  if (buf == nullptr) return s;

  std::vector<CopyTask> tasks;
  tasks.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const int64_t n = r.tensor_sizes[i];
    if (entries[i] != nullptr) {
      tasks.push_back(CopyTask{buf + offsets[i] * welem, entries[i]->input.data, n});
    } else if (n > 0) {  // a joined rank contributes zeros
      HVL_CUDA_RETURN(cudaMemsetAsync(buf + offsets[i] * welem, 0, n * welem, ctx_.stream));
    }
  }
  const int nt = static_cast<int>(tasks.size());
  HVL_CUDA_RETURN(fp16 ? batched_to_half(tasks.data(), nt, r.dtype, pre, ctx_.stream)
                       : batched_scale_copy(tasks.data(), nt, r.dtype, pre, ctx_.stream));
  HVL_RETURN_IF_ERROR(impl->run(ctx_, buf, padded, wire, op));
  tasks.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr) continue;
    tasks.push_back(CopyTask{entries[i]->output.data, buf + offsets[i] * welem, r.tensor_sizes[i]});
    entries[i]->handle->set_output(entries[i]->output);
  }
  HVL_CUDA_RETURN(fp16 ? batched_from_half(tasks.data(), nt, r.dtype, post, ctx_.stream)
                       : batched_scale_copy(tasks.data(), static_cast<int>(tasks.size()), r.dtype, post,
                                            ctx_.stream));
  return Status::OK();
}

Status DeviceExecutor::allgather(const Response& r, TensorEntry& e) {
  const int size = mpi_.size(), rank = mpi_.rank();
  const size_t row_bytes = static_cast<size_t>(row_elements(e.input.shape)) * dtype_size(r.dtype);
  std::vector<size_t> bytes(size), displ(size);
  int64_t rows = 0;
  size_t off = 0;
  for (int i = 0; i < size; ++i) {
    bytes[i] = static_cast<size_t>(r.tensor_sizes[i]) * row_bytes;
    displ[i] = off;
    off += bytes[i];
    rows += r.tensor_sizes[i];
  }
  TensorView out;
  HVL_RETURN_IF_ERROR(agree(e.allocate(with_dim0(e.input.shape, rows), &out), e.request.name));
  HVL_RETURN_IF_ERROR(wait_ready({&e}));  // the allocator may have re-recorded the ready event
  const bool even = std::all_of(bytes.begin(), bytes.end(), [&](size_t b) { return b == bytes[0]; });
  ncclComm_t comm = ctx_.comm->get();
  if (even) {
    if (bytes[0] > 0) HVL_NCCL_RETURN(ncclAllGather(e.input.data, out.data, bytes[0], ncclUint8, comm, ctx_.stream));
  } else {
    // Uneven dim 0: one broadcast per rank into its slice of the output, grouped.
    HVL_NCCL_RETURN(ncclGroupStart());
    Status s;
    for (int i = 0; i < size && s.ok(); ++i) {
      if (bytes[i] == 0) continue;
      const void* send = i == rank ? e.input.data : at(out.data, displ[i]);
      s = nccl_status(ncclBroadcast(send, at(out.data, displ[i]), bytes[i], ncclUint8, i, comm, ctx_.stream),
                      "ncclBroadcast (allgather)");
    }
    Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd");
    HVL_RETURN_IF_ERROR(s);
    HVL_RETURN_IF_ERROR(end);
  }
  e.handle->set_output(out);
  return Status::OK();
}

Status DeviceExecutor::broadcast(const Response& r, TensorEntry& e) {
  const size_t bytes = e.input.byte_size();
  const void* send = mpi_.rank() == r.root ? e.input.data : e.output.data;
  if (bytes > 0) {
    HVL_NCCL_RETURN(ncclBroadcast(send, e.output.data, bytes, ncclUint8, r.root, ctx_.comm->get(), ctx_.stream));
  }
  e.handle->set_output(e.output);
  return Status::OK();
}

Status DeviceExecutor::alltoall(const Response& r, TensorEntry& e) {
  const int size = mpi_.size(), rank = mpi_.rank();
  std::vector<int64_t> recv_splits(size);
  HVL_RETURN_IF_ERROR(mpi_status(
      MPI_Alltoall(e.splits.data(), 1, MPI_INT64_T, recv_splits.data(), 1, MPI_INT64_T, mpi_.comm()), "MPI_Alltoall"));
  const size_t row_bytes = static_cast<size_t>(row_elements(e.input.shape)) * dtype_size(r.dtype);
  int64_t rows = 0;
  for (int64_t s : recv_splits) rows += s;
  TensorView out;
  HVL_RETURN_IF_ERROR(agree(e.allocate(with_dim0(e.input.shape, rows), &out), e.request.name));
  HVL_RETURN_IF_ERROR(wait_ready({&e}));
  ncclComm_t comm = ctx_.comm->get();
  size_t send_off = 0, recv_off = 0;
  HVL_NCCL_RETURN(ncclGroupStart());
  Status s;
  for (int p = 0; p < size && s.ok(); ++p) {
    const size_t sb = static_cast<size_t>(e.splits[p]) * row_bytes;
    const size_t rb = static_cast<size_t>(recv_splits[p]) * row_bytes;
    if (p == rank) {
      if (sb > 0) {
        s = cuda_status(cudaMemcpyAsync(at(out.data, recv_off), at(e.input.data, send_off), sb,
                                        cudaMemcpyDeviceToDevice, ctx_.stream),
                        "cudaMemcpyAsync (alltoall to self)");
      }
    } else {
      if (sb > 0) s = nccl_status(ncclSend(at(e.input.data, send_off), sb, ncclUint8, p, comm, ctx_.stream), "ncclSend");
      if (s.ok() && rb > 0) s = nccl_status(ncclRecv(at(out.data, recv_off), rb, ncclUint8, p, comm, ctx_.stream), "ncclRecv");
    }
    send_off += sb;
    recv_off += rb;
  }
  Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd");
  HVL_RETURN_IF_ERROR(s);
  HVL_RETURN_IF_ERROR(end);
  e.handle->set_output(out);
  e.handle->set_received_splits(std::move(recv_splits));
  return Status::OK();
}

Status DeviceExecutor::reducescatter(const Response& r, TensorEntry& e) {
  const int size = mpi_.size(), rank = mpi_.rank();
  const Shape& shape = e.input.shape;
  const int64_t row = row_elements(shape);
  const size_t elem = dtype_size(r.dtype);
  std::vector<int64_t> counts(size), displ(size);
  int64_t off = 0;
  for (int i = 0; i < size; ++i) {
    counts[i] = reducescatter_rows(shape[0], size, i) * row;
    displ[i] = off;
    off += counts[i];
  }
  TensorView out;
  HVL_RETURN_IF_ERROR(agree(e.allocate(with_dim0(shape, reducescatter_rows(shape[0], size, rank)), &out),
                            e.request.name));
  HVL_RETURN_IF_ERROR(wait_ready({&e}));
  const void* send = e.input.data;
  if (r.prescale != 1.0 && off > 0) {
    Status s;
    void* buf = fusion(off * elem, &s);
    if (buf == nullptr) return s;
    CopyTask t{buf, e.input.data, off};
    HVL_CUDA_RETURN(batched_scale_copy(&t, 1, r.dtype, r.prescale, ctx_.stream));
    send = buf;
  }
  ncclDataType_t type;
  ncclRedOp_t op;
  nccl_reduce_type(r.dtype, effective_op(r.reduce_op), &type, &op);
  ncclComm_t comm = ctx_.comm->get();
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  if (even) {
    if (counts[0] > 0) {
      HVL_NCCL_RETURN(ncclReduceScatter(send, out.data, static_cast<size_t>(counts[0]), type, op, comm, ctx_.stream));
    }
  } else {
    // Uneven blocks (the first dim0 % size ranks get a row more): one reduce per rank, grouped.
    HVL_NCCL_RETURN(ncclGroupStart());
    Status s;
    for (int i = 0; i < size && s.ok(); ++i) {
      if (counts[i] == 0) continue;
      const void* src = at(send, displ[i] * static_cast<int64_t>(elem));
      void* dst = i == rank ? out.data : const_cast<void*>(src);  // ignored on the non-root ranks
      s = nccl_status(ncclReduce(src, dst, static_cast<size_t>(counts[i]), type, op, i, comm, ctx_.stream),
                      "ncclReduce (reducescatter)");
    }
    Status end = nccl_status(ncclGroupEnd(), "ncclGroupEnd");
    HVL_RETURN_IF_ERROR(s);
    HVL_RETURN_IF_ERROR(end);
  }
  HVL_CUDA_RETURN(scale(out.data, counts[rank], r.dtype, effective_postscale(r, size), ctx_.stream));
  e.handle->set_output(out);
  return Status::OK();
}

Status DeviceExecutor::host_staged(const Response& r, const std::vector<TensorEntry*>& entries) {
  const size_t elem = dtype_size(r.dtype);
  // 1. Inputs to pinned memory (one buffer, each at an aligned offset).
  std::vector<size_t> offsets(entries.size());
  size_t total = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    offsets[i] = total;
    if (entries[i] != nullptr) total += (entries[i]->input.byte_size() + 63) / 64 * 64;
  }
  cudaError_t err;
  char* in = static_cast<char*>(stage_in_.get(std::max<size_t>(total, 64), &err));
  if (in == nullptr) return cuda_status(err, "cudaMallocHost (host staging)");
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr || entries[i]->input.byte_size() == 0) continue;
    HVL_CUDA_RETURN(cudaMemcpyAsync(in + offsets[i], entries[i]->input.data, entries[i]->input.byte_size(),
                                    cudaMemcpyDeviceToHost, ctx_.stream));
  }
  HVL_CUDA_RETURN(cudaStreamSynchronize(ctx_.stream));  // the core's stream only

  // 2. The host path on host views of the same entries. Allreduce and broadcast
  //    work in place in the staging buffer; the allocating ops get the device
  //    output from the framework and a pinned buffer to fill.
  std::vector<TensorEntry> staged(entries.size());
  std::vector<TensorEntry*> ptrs(entries.size(), nullptr);
  std::vector<TensorView> device_out(entries.size());
  Status alloc_error;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr) continue;
    TensorEntry& s = staged[i];
    s = *entries[i];
    s.ready.reset();
    s.input.data = in + offsets[i];
    s.input.device = kCpuDevice;
    s.output = s.input;
    if (entries[i]->allocate) {
      s.allocate = [this, i, orig = entries[i]->allocate, &device_out](const Shape& shape, TensorView* out) {
        TensorView dev;
        HVL_RETURN_IF_ERROR(orig(shape, &dev));
        device_out[i] = dev;
        cudaError_t e2;
        void* host = stage_out_.get(std::max<size_t>(dev.byte_size(), 64), &e2);
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
  HVL_RETURN_IF_ERROR(host_(hr, ptrs));

  // 3. Results back to the device, after the allocators' ready events.
  HVL_RETURN_IF_ERROR(wait_ready(entries));
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    if (e == nullptr) continue;
    const TensorView& host_out = e->handle->output();  // what the host path produced
    TensorView dev = e->allocate ? device_out[i] : e->output;
    const size_t bytes = static_cast<size_t>(host_out.num_elements()) * elem;
    if (bytes > 0) {
      HVL_CUDA_RETURN(cudaMemcpyAsync(dev.data, host_out.data, bytes, cudaMemcpyHostToDevice, ctx_.stream));
    }
    e->handle->set_output(dev);
  }
  return Status::OK();
}

}  // namespace cuda
}  // namespace horovodlite
