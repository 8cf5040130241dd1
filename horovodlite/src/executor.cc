#include "executor.h"

#include "op_util.h"

#include <climits>
#include <cstring>
#include <numeric>

#include "horovodlite/horovodlite.h"
#include "kernels/reduce.h"

namespace horovodlite {

namespace {

// Element counts and displacements as MPI ints, or an error naming the tensor.
Status to_int_counts(const std::string& name, const std::vector<int64_t>& counts, std::vector<int>* out,
                     std::vector<int>* displs) {
  out->resize(counts.size());
  displs->resize(counts.size());
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > INT_MAX || off > INT_MAX) {
      return Status::InvalidArgument("tensor '" + name + "' is too large for this collective: MPI counts and offsets "
                                     "are limited to 2^31-1 elements per rank");
    }
    (*out)[i] = static_cast<int>(counts[i]);
    (*displs)[i] = static_cast<int>(off);
    off += counts[i];
  }
  return Status::OK();
}


// src (float32 or float64) * factor -> fp16. Scaling happens before the
// conversion, so that a predivide factor can keep large values within fp16 range.
void to_half(uint16_t* dst, const void* src, int64_t n, DataType dtype, double factor) {
  if (factor == 1.0) {
    if (dtype == DataType::kFloat32) kernels::float_to_half_n(dst, static_cast<const float*>(src), n);
    else kernels::double_to_half_n(dst, static_cast<const double*>(src), n);
    return;
  }
  constexpr int64_t kChunk = 2048;
  double scratch[kChunk];
  const size_t elem = dtype_size(dtype);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    kernels::scale_copy(scratch, static_cast<const char*>(src) + i * elem, m, dtype, factor);
    if (dtype == DataType::kFloat32) kernels::float_to_half_n(dst + i, reinterpret_cast<const float*>(scratch), m);
    else kernels::double_to_half_n(dst + i, scratch, m);
  }
}

// fp16 -> dst (float32 or float64), then * factor in the destination precision.
void from_half(void* dst, const uint16_t* src, int64_t n, DataType dtype, double factor) {
  if (dtype == DataType::kFloat32) kernels::half_to_float_n(static_cast<float*>(dst), src, n);
  else kernels::half_to_double_n(static_cast<double*>(dst), src, n);
  if (factor != 1.0) kernels::scale(dst, n, dtype, factor);
}

}  // namespace

Executor::Executor(MpiContext& mpi, const Config& config)
    : mpi_(mpi), config_(config), host_allreduce_(make_host_allreduce(mpi, config)) {
  device_ = make_device_ops(
      mpi, config, [this](const Response& r, const std::vector<TensorEntry*>& e) { return execute_host(r, e); },
      [this](void* buf, int64_t count, DataType dtype, ReduceOp op) {
        return choose(dtype, op, count * static_cast<int64_t>(dtype_size(dtype))).run(buf, buf, count, dtype, op, 1.0);
      });
}

bool Executor::defer_completion(std::vector<std::unique_ptr<TensorEntry>>* done, const Status& status) {
  return last_on_device_ && device_ != nullptr && device_->defer_completion(done, status);
}

void Executor::drain() {
  if (device_) device_->drain();
}

HostAllreduce& Executor::choose(DataType dtype, ReduceOp op, int64_t bytes) {
  for (auto& impl : host_allreduce_) {
    if (impl->enabled(dtype, op, bytes)) return *impl;
  }
  return *host_allreduce_.back();
}

Status Executor::agree(const Status& local, const std::string& name) {
  return agree_across_ranks(mpi_.comm(), local, name, "its output was too large or could not be allocated");
}

Status Executor::execute(const Response& r, const std::vector<TensorEntry*>& entries) {
  const bool data_op = r.type == OpType::kAllreduce || r.type == OpType::kAllgather ||
                       r.type == OpType::kBroadcast || r.type == OpType::kAlltoall ||
                       r.type == OpType::kReducescatter;
  last_on_device_ = data_op && r.device != kCpuDevice;
  if (!last_on_device_) return execute_host(r, entries);
  if (device_ == nullptr) return Status::Internal("a device collective reached a build without CUDA");
  Status s = device_->execute(r, entries);
  last_algorithm_ = device_->last_algorithm();
  return s;
}

Status Executor::execute_host(const Response& r, const std::vector<TensorEntry*>& entries) {
  switch (r.type) {
    case OpType::kAllreduce:
      return allreduce(r, entries);
    case OpType::kAllgather:
      return allgather(r, *entries.at(0));
    case OpType::kBroadcast:
      return broadcast(r, *entries.at(0));
    case OpType::kAlltoall:
      return alltoall(r, *entries.at(0));
    case OpType::kReducescatter:
      return reducescatter(r, *entries.at(0));
    case OpType::kBarrier:
    case OpType::kJoin:
      return Status::OK();  // negotiation itself was the synchronisation
    case OpType::kError:
      return Status(r.error_code, r.error_message);
  }
  return Status::Internal("unknown response type");
}

Status Executor::allreduce(const Response& r, const std::vector<TensorEntry*>& entries) {
  const size_t elem = dtype_size(r.dtype);
  const int64_t total = std::accumulate(r.tensor_sizes.begin(), r.tensor_sizes.end(), int64_t(0));
  const double pre = r.prescale;
  const double post = effective_postscale(r, mpi_.size());
  const ReduceOp op = effective_op(r.reduce_op);
  const bool compress =
      r.compression == Compression::kFp16 && (r.dtype == DataType::kFloat32 || r.dtype == DataType::kFloat64);
  HostAllreduce& impl = choose(r.dtype, op, total * static_cast<int64_t>(compress ? 2 : elem));
  // fp16 compression: an algorithm with an fp16-on-the-wire mode takes the
  // float32/float64 data as it is; otherwise the data is converted to an fp16
  // buffer and reduced as fp16.
  if (compress && !impl.fp16_wire()) return allreduce_fp16(r, entries);
  auto reduce = [&](const void* in, void* out, double postscale) {
    return compress ? impl.run_fp16_wire(in, out, total, r.dtype, op, postscale)
                    : impl.run(in, out, total, r.dtype, op, postscale);
  };
  last_algorithm_ = impl.name();

  if (r.tensor_sizes.size() == 1) {
    // One tensor: reduced from its input straight into its output (the
    // algorithm reads the input and writes the output once; the postscale is
    // applied on the way), no copy through the fusion buffer. Every rank takes
    // this path with the same postscale (an algorithm may apply it on one rank
    // for all): a joined rank reduces zeros in the fusion buffer.
    const void* in = nullptr;
    void* out = nullptr;
    TensorEntry* e = entries.empty() ? nullptr : entries[0];
    if (e != nullptr) {
      in = e->input.data;
      out = e->output.data;
    } else {
      out = fusion_.get(std::max<size_t>(total * elem, 1));
      if (out == nullptr) return Status::Internal("out of memory allocating a fusion buffer");
      std::memset(out, 0, total * elem);
      in = out;
    }
    if (overlap_partially(in, out, total * elem)) {  // views of one storage: reduce in place
      std::memmove(out, in, total * elem);
      in = out;
    }
    if (pre != 1.0) {
      kernels::scale_copy(out, in, total, r.dtype, pre);
      in = out;
    }
    {
      ObservedPhase phase(observer_, r, impl.name());
      HVL_RETURN_IF_ERROR(reduce(in, out, post));
    }
    if (e != nullptr) e->handle->set_output(e->output);
    return Status::OK();
  }

  char* buf = static_cast<char*>(fusion_.get(std::max<size_t>(total * elem, 1)));
  if (buf == nullptr) return Status::Internal("out of memory allocating a fusion buffer of " +
                                              std::to_string(total * elem) + " bytes");
  {
    ObservedPhase phase(observer_, r, "MEMCPY_IN_FUSION_BUFFER");
    int64_t off = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const int64_t n = r.tensor_sizes[i];
      if (entries[i] != nullptr) {
        kernels::scale_copy(buf + off * elem, entries[i]->input.data, n, r.dtype, pre);
      } else {
        std::memset(buf + off * elem, 0, n * elem);  // a joined rank contributes zeros
      }
      off += n;
    }
  }
  {
    ObservedPhase phase(observer_, r, impl.name());
    HVL_RETURN_IF_ERROR(reduce(buf, buf, 1.0));  // the postscale is applied while copying out
  }
  ObservedPhase phase(observer_, r, "MEMCPY_OUT_FUSION_BUFFER");
  int64_t off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const int64_t n = r.tensor_sizes[i];
    if (entries[i] != nullptr) {
      kernels::scale_copy(entries[i]->output.data, buf + off * elem, n, r.dtype, post);
      entries[i]->handle->set_output(entries[i]->output);
    }
    off += n;
  }
  return Status::OK();
}

Status Executor::allreduce_fp16(const Response& r, const std::vector<TensorEntry*>& entries) {
  const int64_t total = std::accumulate(r.tensor_sizes.begin(), r.tensor_sizes.end(), int64_t(0));
  const ReduceOp op = effective_op(r.reduce_op);
  uint16_t* wire = static_cast<uint16_t*>(fusion_.get(std::max<size_t>(total * 2, 1)));
  if (wire == nullptr) return Status::Internal("out of memory allocating an fp16 fusion buffer");
  HostAllreduce& impl = choose(DataType::kFloat16, op, total * 2);
  last_algorithm_ = impl.name();
  {
    ObservedPhase phase(observer_, r, "MEMCPY_IN_FUSION_BUFFER");  // with the conversion to fp16
    int64_t off = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const int64_t n = r.tensor_sizes[i];
      if (entries[i] != nullptr) to_half(wire + off, entries[i]->input.data, n, r.dtype, r.prescale);
      else std::memset(wire + off, 0, n * 2);  // a joined rank contributes zeros
      off += n;
    }
  }
  {
    ObservedPhase phase(observer_, r, impl.name());
    HVL_RETURN_IF_ERROR(impl.run(wire, wire, total, DataType::kFloat16, op, 1.0));
  }
  const double post = effective_postscale(r, mpi_.size());
  ObservedPhase phase(observer_, r, "MEMCPY_OUT_FUSION_BUFFER");
  int64_t off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const int64_t n = r.tensor_sizes[i];
    if (entries[i] != nullptr) {
      from_half(entries[i]->output.data, wire + off, n, r.dtype, post);
      entries[i]->handle->set_output(entries[i]->output);
    }
    off += n;
  }
  return Status::OK();
}

Status Executor::allgather(const Response& r, TensorEntry& e) {
  const Shape& in_shape = e.input.shape;
  const int64_t row = row_elements(in_shape);
  int64_t rows = 0;
  std::vector<int64_t> counts(r.tensor_sizes.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    rows += r.tensor_sizes[i];
    counts[i] = r.tensor_sizes[i] * row;
  }
  std::vector<int> icounts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(e.request.name, counts, &icounts, &displs));  // the same on every rank
  TensorView out;
  HVL_RETURN_IF_ERROR(agree(e.allocate(with_dim0(in_shape, rows), &out), e.request.name));
  MPI_Datatype t = MpiContext::move_type(r.dtype);
  int rc = MPI_Allgatherv(e.input.data, icounts[mpi_.rank()], t, out.data, icounts.data(), displs.data(), t,
                          mpi_.comm());
  HVL_RETURN_IF_ERROR(mpi_status(rc, "MPI_Allgatherv"));
  e.handle->set_output(out);
  return Status::OK();
}

Status Executor::broadcast(const Response& r, TensorEntry& e) {
  const size_t elem = dtype_size(r.dtype);
  const int64_t count = e.input.num_elements();
  char* data = static_cast<char*>(e.output.data);
  if (mpi_.rank() == r.root && e.output.data != e.input.data && count > 0) {
    std::memcpy(e.output.data, e.input.data, count * elem);
  }
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    int rc = MPI_Bcast(data + done * elem, n, MpiContext::move_type(r.dtype), r.root, mpi_.comm());
    HVL_RETURN_IF_ERROR(mpi_status(rc, "MPI_Bcast"));
    done += n;
  }
  e.handle->set_output(e.output);
  return Status::OK();
}

Status Executor::alltoall(const Response& r, TensorEntry& e) {
  const int size = mpi_.size();
  std::vector<int64_t> recv_splits(size);
  int rc = MPI_Alltoall(e.splits.data(), 1, MPI_INT64_T, recv_splits.data(), 1, MPI_INT64_T, mpi_.comm());
  HVL_RETURN_IF_ERROR(mpi_status(rc, "MPI_Alltoall"));
  const int64_t row = row_elements(e.input.shape);
  std::vector<int64_t> send_counts(size), recv_counts(size);
  int64_t rows = 0;
  for (int i = 0; i < size; ++i) {
    send_counts[i] = e.splits[i] * row;
    recv_counts[i] = recv_splits[i] * row;
    rows += recv_splits[i];
  }
  std::vector<int> sc, sd, rcnt, rd;
  Status local = to_int_counts(e.request.name, send_counts, &sc, &sd);
  if (local.ok()) local = to_int_counts(e.request.name, recv_counts, &rcnt, &rd);
  TensorView out;
  if (local.ok()) local = e.allocate(with_dim0(e.input.shape, rows), &out);
  HVL_RETURN_IF_ERROR(agree(local, e.request.name));
  MPI_Datatype t = MpiContext::move_type(r.dtype);
  rc = MPI_Alltoallv(e.input.data, sc.data(), sd.data(), t, out.data, rcnt.data(), rd.data(), t, mpi_.comm());
  HVL_RETURN_IF_ERROR(mpi_status(rc, "MPI_Alltoallv"));
  e.handle->set_output(out);
  e.handle->set_received_splits(std::move(recv_splits));
  return Status::OK();
}

Status Executor::reducescatter(const Response& r, TensorEntry& e) {
  const int size = mpi_.size();
  const Shape& shape = e.input.shape;
  const int64_t row = row_elements(shape);
  const int64_t total = e.input.num_elements();
  const size_t elem = dtype_size(r.dtype);
  std::vector<int64_t> counts(size);
  for (int i = 0; i < size; ++i) counts[i] = reducescatter_rows(shape[0], size, i) * row;
  std::vector<int> icounts, displs;
  HVL_RETURN_IF_ERROR(to_int_counts(e.request.name, counts, &icounts, &displs));
  TensorView out;
  HVL_RETURN_IF_ERROR(
      agree(e.allocate(with_dim0(shape, reducescatter_rows(shape[0], size, mpi_.rank())), &out), e.request.name));
  char* tmp = static_cast<char*>(fusion_.get(std::max<size_t>(total * elem, 1)));
  if (tmp == nullptr) return Status::Internal("out of memory allocating a reducescatter buffer");
  kernels::scale_copy(tmp, e.input.data, total, r.dtype, r.prescale);
  int rc = MPI_Reduce_scatter(tmp, out.data, icounts.data(), mpi_.reduce_type(r.dtype),
                              mpi_.reduce_op(effective_op(r.reduce_op), r.dtype), mpi_.comm());
  HVL_RETURN_IF_ERROR(mpi_status(rc, "MPI_Reduce_scatter"));
  const double post = effective_postscale(r, size);
  if (post != 1.0) kernels::scale(out.data, counts[mpi_.rank()], r.dtype, post);
  e.handle->set_output(out);
  return Status::OK();
}

}  // namespace horovodlite
