#include "ops/host_allreduce.h"

#include <algorithm>
#include <cstring>

#include "enforce.h"
#include "host_memory.h"
#include "kernels/convert.h"
#include "kernels/reduce.h"
#include "op_util.h"
#include "ops/fusion.h"
#include "ops/outputs.h"

namespace horovodlite {

namespace {

void zero_fill(const std::vector<std::pair<void*, int64_t>>& zeros) {
  for (const auto& z : zeros) std::memset(z.first, 0, static_cast<size_t>(z.second));
}

}  // namespace

bool HostAllreduce::enabled(const Response& r) const {
  const DataType wire = wire_dtype(r);
  return accepts(wire, effective_op(r.reduce_op), total_elements(r) * static_cast<int64_t>(dtype_size(wire)));
}

OpResult HostAllreduce::run(const OpArgs& args) {
  // fp16/bf16 compression: an algorithm with a 16-bit-on-the-wire mode takes
  // the float32/float64 data as it is; otherwise the data is converted to an
  // fp16 (bf16) buffer and reduced as fp16 (bf16).
  const bool via_16bit_buffer = wire16_compressed(args.response) && !wire16();
  return OpResult{via_16bit_buffer ? allreduce_16bit(args) : allreduce(args), name(), outputs_in_place(args.entries)};
}

Status HostAllreduce::allreduce(const OpArgs& args) {
  const Response& r = args.response;
  const std::vector<TensorEntry*>& entries = args.entries;
  const size_t elem = dtype_size(r.dtype);
  const int64_t total = total_elements(r);
  const double pre = r.prescale;
  const double post = effective_postscale(r, world_.size());
  const ReduceOp op = effective_op(r.reduce_op);
  const bool compressed = wire16_compressed(r);
  auto reduce_buffer = [&](const void* in, void* out, double postscale) {
    return compressed ? reduce_16bit_wire(in, out, total, r.dtype, op, postscale, wire16_type(r))
                      : reduce(in, out, total, r.dtype, op, postscale);
  };

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
      out = fusion_->get(std::max<size_t>(total * elem, 1));
      if (out == nullptr) return Status::Internal("out of memory allocating a fusion buffer");
      std::memset(out, 0, total * elem);
      in = out;
    }
    if (pre != 1.0) {
      kernels::scale_copy(out, in, total, r.dtype, pre);
      in = out;
    }
    if (e != nullptr && world_.local_size() > 1) {
      // The peers on this host copy out of both (the input in the first step,
      // the output after it): on huge pages from the second op with them on.
      const size_t bytes = static_cast<size_t>(total) * elem;
      huge_pages_for_sending(in, bytes);
      if (out != in) huge_pages_for_sending(out, bytes);
    }
    {
      ObservedPhase phase(args.observer, r, name());
      HVL_RETURN_IF_ERROR(reduce_buffer(in, out, post));
    }
    return Status::OK();
  }

  HVL_ENFORCE_EQ(entries.size(), r.tensor_sizes.size(), "fused allreduce of '", r.names[0], "'");
  const FusionLayout layout(r);
  char* buf = static_cast<char*>(fusion_->get(std::max<size_t>(total * elem, 1)));
  if (buf == nullptr)
    return Status::Internal("out of memory allocating a fusion buffer of " + std::to_string(total * elem) + " bytes");
  {
    ObservedPhase phase(args.observer, r, "MEMCPY_IN_FUSION_BUFFER");
    std::vector<std::pair<void*, int64_t>> zeros;
    for (const CopyTask& t : layout.pack(entries, buf, elem, &zeros))
      kernels::scale_copy(t.dst, t.src, t.count, r.dtype, pre);
    zero_fill(zeros);
  }
  {
    ObservedPhase phase(args.observer, r, name());
    HVL_RETURN_IF_ERROR(reduce_buffer(buf, buf, 1.0));  // the postscale is applied while copying out
  }
  ObservedPhase phase(args.observer, r, "MEMCPY_OUT_FUSION_BUFFER");
  for (const CopyTask& t : layout.unpack(entries, buf, elem)) kernels::scale_copy(t.dst, t.src, t.count, r.dtype, post);
  return Status::OK();
}

Status HostAllreduce::allreduce_16bit(const OpArgs& args) {
  const Response& r = args.response;
  const int64_t total = total_elements(r);
  const ReduceOp op = effective_op(r.reduce_op);
  const DataType half_type = wire16_type(r);
  uint16_t* wire = static_cast<uint16_t*>(fusion_->get(std::max<size_t>(total * 2, 1)));
  if (wire == nullptr) return Status::Internal("out of memory allocating a 16-bit fusion buffer");
  const FusionLayout layout(r);
  {
    ObservedPhase phase(args.observer, r, "MEMCPY_IN_FUSION_BUFFER");  // with the conversion to fp16/bf16
    std::vector<std::pair<void*, int64_t>> zeros;
    for (const CopyTask& t : layout.pack(args.entries, wire, 2, &zeros))
      kernels::to_half_scaled_n(static_cast<uint16_t*>(t.dst), t.src, t.count, r.dtype, r.prescale, half_type);
    zero_fill(zeros);
  }
  {
    ObservedPhase phase(args.observer, r, name());
    HVL_RETURN_IF_ERROR(reduce(wire, wire, total, half_type, op, 1.0));
  }
  const double post = effective_postscale(r, world_.size());
  ObservedPhase phase(args.observer, r, "MEMCPY_OUT_FUSION_BUFFER");
  for (const CopyTask& t : layout.unpack(args.entries, wire, 2))
    kernels::from_half_scaled_n(t.dst, static_cast<const uint16_t*>(t.src), t.count, r.dtype, post, half_type);
  return Status::OK();
}

}  // namespace horovodlite
