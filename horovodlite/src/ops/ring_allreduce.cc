// Pipelined ring allreduce; see ring_allreduce.h for the algorithm.
//
// Schedule. Step t in [0, 2(p-1)) sends chunk sc(t) to the right and receives
// chunk rc(t) from the left, where for the reduce-scatter (t < p-1)
// sc = r - t, rc = r - t - 1, and for the allgather (u = t - (p-1))
// sc = r + 1 - u, rc = r - u (all mod p). Since rc(t) == sc(t+1), segment j
// of step t+1 is sent as soon as segment j of step t has been received (and
// reduced). Every rank numbers its segments in the same order, so the i-th
// segment a rank sends is the i-th its right neighbour receives: the index
// (mod kTagSpan) is the tag.
//
// Receives are posted in order, at most pipeline_depth ahead of the one being
// processed. Reduce-scatter segments land in scratch slot (index mod depth).
// Allgather segments land directly in the buffer, in the region this rank sent
// during reduce-scatter step u; that send must have completed first (it is
// tested while topping up the window, and waited for only when the receive is
// the very next one needed: an earlier segment in the global order, so the
// wait cannot close a cycle around the ring).
#include "ops/ring_allreduce.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "kernels/reduce.h"
#include "mpi_context.h"
#include "op_util.h"
#include "transport/mpi_transport.h"
#include "watchdog.h"

namespace horovodlite {

namespace {
// The waits are the transport's (Request::wait, wait_all, wait_any): they poll
// for up to 200 us, then sleep in growing steps up to 100 us, never an unbounded
// busy poll. MPI's own wait spins for as long as the peer is behind: under a
// plain mpirun each rank is bound to one core, which this thread shares with the
// training thread, so while the peer is still in its backward pass the spinning
// took the core from this rank's backward pass. The 200 us cover a segment in
// flight: with 50 us the C++ allreduce at 4 MiB lost 25-30 % under binding (a
// 256 KiB segment takes about that long, and a sleep lasts >= 20 us); with 200 us
// it matches MPI_Wait, while ResNet-18's background thread used 100-120 instead
// of 134-152 ms CPU per step.

inline int mod(int a, int p) { return ((a % p) + p) % p; }

// The checks both run() and run_fp16_wire() make of their op and buffers.
Status check_op_and_buffers(const void* in, const void* out, int64_t count, int64_t esize, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kProduct:
      break;
    case ReduceOp::kAdasum:
      return Status::Unimplemented("RingAllreduce: Adasum is not implemented");
    default:
      return Status::InvalidArgument("RingAllreduce: invalid reduce op " + std::to_string(static_cast<int>(op)));
  }
  if (count > 0 && (in == nullptr || out == nullptr)) return Status::InvalidArgument("RingAllreduce: null buffer");
  if (overlap_partially(in, out, count * esize)) {
    return Status::InvalidArgument("RingAllreduce: input and output overlap without being the same buffer");
  }
  return Status::OK();
}

}  // namespace

void RingAllreduce::FreeDeleter::operator()(void* p) const { std::free(p); }

RingAllreduce::RingAllreduce(transport::ContextPtr context, RingAllreduceOptions options)
    : context_(std::move(context)), options_(options) {
  init();
}

RingAllreduce::RingAllreduce(MPI_Comm comm, RingAllreduceOptions options) : options_(options) {
  if (comm != MPI_COMM_NULL) context_ = std::make_shared<transport::MpiTransport>(comm);
  init();
}

void RingAllreduce::init() {
  options_.segment_bytes = std::clamp<int64_t>(options_.segment_bytes, 1, RingAllreduceOptions::kMaxSegmentBytes);
  options_.pipeline_depth = std::max(1, options_.pipeline_depth);
  if (!context_) {
    init_status_ = Status::InvalidArgument("RingAllreduce: no communicator (MPI_COMM_NULL or a null context)");
    return;
  }
  rank_ = context_->rank();
  size_ = context_->size();
  left_world_ = context_->world_rank(mod(rank_ - 1, size_));
  right_world_ = context_->world_rank(mod(rank_ + 1, size_));
  const int64_t max_tag = transport::kMaxTag;
  if (options_.tag_base < 0 || options_.tag_base + int64_t{RingAllreduceOptions::kTagSpan} - 1 > max_tag) {
    init_status_ = Status::InvalidArgument("RingAllreduce: tags [" + std::to_string(options_.tag_base) + ", " +
                                           std::to_string(options_.tag_base + RingAllreduceOptions::kTagSpan) +
                                           ") exceed the transport's largest tag " + std::to_string(max_tag));
  }
}

RingAllreduce::~RingAllreduce() = default;

void RingAllreduce::append_segments(std::vector<Segment>* out, int chunk, int64_t count, int64_t esize,
                                    int64_t seg_elems) const {
  const int64_t base = count / size_;
  const int64_t extra = count % size_;
  const int64_t begin = chunk * base + std::min<int64_t>(chunk, extra);
  const int64_t len = base + (chunk < extra ? 1 : 0);
  for (int64_t done = 0; done < len; done += seg_elems) {
    const int64_t n = std::min(seg_elems, len - done);
    Segment s;
    s.bytes = static_cast<int>(n * esize);
    s.byte_offset = (begin + done) * esize;
    out->push_back(s);
  }
}

Status RingAllreduce::plan(int64_t count, int64_t esize) {
  const int64_t seg_elems = std::max<int64_t>(1, options_.segment_bytes / esize);
  const int p = size_;
  const int steps = 2 * (p - 1);
  recv_segments_.clear();
  send_segments_.clear();
  send_step_start_.clear();
  recv_step_start_.clear();
  for (int t = 0; t < steps; ++t) {
    const bool scatter = t < p - 1;
    const int u = t - (p - 1);
    const int send_chunk = scatter ? mod(rank_ - t, p) : mod(rank_ + 1 - u, p);
    const int recv_chunk = scatter ? mod(rank_ - t - 1, p) : mod(rank_ - u, p);
    send_step_start_.push_back(static_cast<int64_t>(send_segments_.size()));
    recv_step_start_.push_back(static_cast<int64_t>(recv_segments_.size()));
    append_segments(&send_segments_, send_chunk, count, esize, seg_elems);
    append_segments(&recv_segments_, recv_chunk, count, esize, seg_elems);
  }
  send_step_start_.push_back(static_cast<int64_t>(send_segments_.size()));
  recv_step_start_.push_back(static_cast<int64_t>(recv_segments_.size()));
  // rc(t) == sc(t+1), and for the allgather rc(t) == sc(t - (p-1)): the same
  // chunk, hence the same segmentation, so segment j maps to segment j.
  for (int t = 0; t < steps; ++t) {
    for (int64_t k = recv_step_start_[t]; k < recv_step_start_[t + 1]; ++k) {
      const int64_t j = k - recv_step_start_[t];
      Segment& r = recv_segments_[k];
      if (t + 1 < steps) r.forward = send_step_start_[t + 1] + j;
      if (t >= p - 1) r.guard = send_step_start_[t - (p - 1)] + j;
    }
  }
  if (recv_segments_.size() > INT_MAX || send_segments_.size() > INT_MAX) {
    return Status::InvalidArgument("RingAllreduce: too many segments; raise segment_bytes");
  }
  recv_requests_.clear();
  send_requests_.clear();
  recv_requests_.resize(recv_segments_.size());
  send_requests_.resize(send_segments_.size());
  return Status::OK();
}

Status RingAllreduce::ensure_scratch(int64_t slot_bytes, int slots) {
  if (scratch_ && slot_bytes <= scratch_slot_bytes_ && slots <= scratch_slots_) return Status::OK();
  slot_bytes = std::max(slot_bytes, scratch_slot_bytes_);
  const int64_t stride = (slot_bytes + 63) / 64 * 64;  // each slot cache-line aligned
  void* p = nullptr;
  if (posix_memalign(&p, 64, static_cast<size_t>(stride * slots)) != 0) {
    return Status::Internal("RingAllreduce: cannot allocate " + std::to_string(stride * slots) + " bytes of scratch");
  }
  scratch_.reset(static_cast<uint8_t*>(p));
  scratch_slot_bytes_ = stride;
  scratch_slots_ = slots;
  return Status::OK();
}

Status RingAllreduce::run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
  HVL_RETURN_IF_ERROR(init_status_);
  if (count < 0) return Status::InvalidArgument("RingAllreduce: negative count " + std::to_string(count));
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  if (esize == 0) {
    return Status::InvalidArgument("RingAllreduce: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  HVL_RETURN_IF_ERROR(check_op_and_buffers(in, out, count, esize, op));
  if (count == 0) return Status::OK();
  if (size_ == 1) {
    kernels::scale_copy(out, in, count, dtype, postscale);
    return Status::OK();
  }
  HVL_RETURN_IF_ERROR(plan(count, esize));
  const int64_t largest_chunk = (count + size_ - 1) / size_;
  const int64_t seg_elems = std::max<int64_t>(1, options_.segment_bytes / esize);
  HVL_RETURN_IF_ERROR(ensure_scratch(std::min(largest_chunk, seg_elems) * esize, options_.pipeline_depth));
  return execute(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), dtype, op, postscale);
}

Status RingAllreduce::post_send(const uint8_t* in, const uint8_t* out, int64_t i) {
  const Segment& s = send_segments_[i];
  const uint8_t* base = i < send_step_start_[1] ? in : out;
  HVL_RETURN_IF_ERROR(context_->isend(base + s.byte_offset, static_cast<size_t>(s.bytes), mod(rank_ + 1, size_),
                                      tag_of(i), &send_requests_[i]));
  sends_posted_ = i + 1;
  return Status::OK();
}

Status RingAllreduce::post_recv(uint8_t* out, int64_t k) {
  const Segment& r = recv_segments_[k];
  uint8_t* dst =
      r.guard < 0 ? scratch_.get() + (k % options_.pipeline_depth) * scratch_slot_bytes_ : out + r.byte_offset;
  HVL_RETURN_IF_ERROR(
      context_->irecv(dst, static_cast<size_t>(r.bytes), mod(rank_ - 1, size_), tag_of(k), &recv_requests_[k]));
  return Status::OK();
}

Status RingAllreduce::execute(const uint8_t* in, uint8_t* out, DataType dtype, ReduceOp op, double postscale) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t depth = options_.pipeline_depth;
  const int64_t nrecv = static_cast<int64_t>(recv_segments_.size());
  const int64_t last_scatter_begin = recv_step_start_[size_ - 2];
  sends_posted_ = 0;
  int64_t next_recv = 0;
  // Posts receives in order, up to `limit`, while they can be posted without
  // blocking: an allgather receive goes straight into the buffer, into the
  // region this rank sent from during the reduce-scatter, so that send must
  // have been posted and have completed.
  auto top_up = [&](int64_t limit) -> Status {
    for (; next_recv < std::min(limit, nrecv); ++next_recv) {
      const int64_t guard = recv_segments_[next_recv].guard;
      if (guard >= sends_posted_) break;
      if (guard >= 0) {
        bool done = false;
        HVL_RETURN_IF_ERROR(send_requests_[guard]->test(&done));
        if (!done) break;
      }
      HVL_RETURN_IF_ERROR(post_recv(out, next_recv));
    }
    return Status::OK();
  };
  HVL_RETURN_IF_ERROR(top_up(depth));
  for (int64_t i = send_step_start_[0]; i < send_step_start_[1]; ++i) HVL_RETURN_IF_ERROR(post_send(in, out, i));

  for (int64_t k = 0; k < nrecv; ++k) {
    if (k == next_recv) {
      // Not posted yet: its guard send was posted while processing an earlier
      // segment (or at the start) and is waited for here. That send matches a
      // receive the neighbour posts before it gets to segment k, so this wait
      // cannot close a cycle.
      const int64_t guard = recv_segments_[k].guard;
      if (guard >= sends_posted_) return Status::Internal("RingAllreduce: schedule error, guard send not posted");
      if (guard >= 0) {
        WaitingFor waiting(right_world_);
        HVL_RETURN_IF_ERROR(send_requests_[guard]->wait());
      }
      HVL_RETURN_IF_ERROR(post_recv(out, k));
      ++next_recv;
    }
    {
      WaitingFor waiting(left_world_);
      HVL_RETURN_IF_ERROR(recv_requests_[k]->wait());
    }
    const Segment& r = recv_segments_[k];
    if (r.guard < 0) {  // a reduce-scatter segment: out = in (op) received
      const uint8_t* slot = scratch_.get() + (k % depth) * scratch_slot_bytes_;
      kernels::reduce(out + r.byte_offset, in + r.byte_offset, slot, r.bytes / esize, dtype, op);
      // The last step completes a chunk this rank owns: scale it before it goes round.
      if (k >= last_scatter_begin) kernels::scale(out + r.byte_offset, r.bytes / esize, dtype, postscale);
    }
    if (r.forward >= 0) HVL_RETURN_IF_ERROR(post_send(in, out, r.forward));
    HVL_RETURN_IF_ERROR(top_up(k + 1 + depth));  // receive k's scratch slot is free now
  }
  {
    WaitingFor waiting(right_world_);
    HVL_RETURN_IF_ERROR(transport::wait_all(&send_requests_));
  }
  return Status::OK();
}

// ---- fp16 on the wire ----
//
// Same plan as run(), cut in wire (half) units, but nothing is sent from or
// received into the buffer: receives land in `depth` receive slots and are
// consumed when processed; sends leave from `depth` send slots, send i from
// slot i mod depth once send i - depth has completed. Sends are posted in
// index order. Send i (i >= n0, the step-0 send count) forwards receive
// i - n0: when that receive is processed and send i is next in line with its
// slot free, the fused kernel writes the half straight into the slot and it
// is posted at once; otherwise the reduced values wait in the buffer (rounded
// already where they must be) and are converted when the slot frees, which is
// also how the step-0 sends go out. A deferred send's region is not written
// again before it is converted: the only later write is the allgather receive
// of that region, whose data already includes this send's contribution.
// Out of place, the step-0 sends are converted from `in`, everything else
// reads and writes `out`. A postscale is applied to `out` only, to final
// values: to a segment that is passed on (the owned chunk, or an allgather
// segment forwarded) right after its half has been made, fused or deferred,
// and to a segment of the last allgather step right after it is widened.
//
// The only blocking call waits for the next receive *or* the send whose slot
// the next ready send needs, so no rank sits on a receive while a send its
// neighbour needs is held back for a slot; receives are always posted ahead
// (their slots free up in processing order), hence no cycle of waits.
Status RingAllreduce::run_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                    double postscale) {
  HVL_RETURN_IF_ERROR(init_status_);
  if (count < 0) return Status::InvalidArgument("RingAllreduce: negative count " + std::to_string(count));
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) {
    return Status::InvalidArgument("RingAllreduce: fp16 wire needs float32 or float64, got dtype " +
                                   std::to_string(static_cast<int>(dtype)));
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  HVL_RETURN_IF_ERROR(check_op_and_buffers(in, out, count, esize, op));
  if (count == 0) return Status::OK();
  const uint8_t* src = static_cast<const uint8_t*>(in);
  uint8_t* dst = static_cast<uint8_t*>(out);
  if (size_ == 1) {  // the result is still what the wire would carry
    uint16_t half[1024];
    for (int64_t done = 0; done < count; done += 1024) {
      const int64_t n = std::min<int64_t>(1024, count - done);
      kernels::to_half_n(half, src + done * esize, n, dtype);
      kernels::from_half_n(dst + done * esize, half, n, dtype);
      kernels::scale_as_half(dst + done * esize, n, dtype, postscale);
    }
    return Status::OK();
  }
  constexpr int64_t kWire = 2;
  HVL_RETURN_IF_ERROR(plan(count, kWire));
  const int64_t largest_chunk = (count + size_ - 1) / size_;
  const int64_t seg_elems = std::max<int64_t>(1, options_.segment_bytes / kWire);
  HVL_RETURN_IF_ERROR(ensure_scratch(std::min(largest_chunk, seg_elems) * kWire, 2 * options_.pipeline_depth));
  return execute_fp16_wire(src, dst, dtype, op, postscale);
}

Status RingAllreduce::execute_fp16_wire(const uint8_t* in, uint8_t* out, DataType dtype, ReduceOp op,
                                        double postscale) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t depth = options_.pipeline_depth;
  const int64_t nrecv = static_cast<int64_t>(recv_segments_.size());
  const int64_t nsend = static_cast<int64_t>(send_segments_.size());
  const int64_t n0 = send_step_start_[1];
  const int64_t last_scatter_begin = recv_step_start_[size_ - 2];
  const int64_t gather_begin = recv_step_start_[size_ - 1];
  const int right = mod(rank_ + 1, size_);
  const int left = mod(rank_ - 1, size_);
  auto recv_slot = [&](int64_t k) {
    return reinterpret_cast<uint16_t*>(scratch_.get() + (k % depth) * scratch_slot_bytes_);
  };
  auto send_slot = [&](int64_t i) {
    return reinterpret_cast<uint16_t*>(scratch_.get() + (depth + i % depth) * scratch_slot_bytes_);
  };
  auto at = [&](const uint8_t* base, const Segment& s) { return base + s.byte_offset / 2 * esize; };
  auto values = [&](const Segment& s) { return out + s.byte_offset / 2 * esize; };
  // Allgather sends carry final values: the chunk this rank owns, then chunks
  // received and passed on. Their values in `out` are scaled only once their
  // half has been made (a deferred send converts them later).
  const int64_t gather_sends_begin = send_step_start_[size_ - 1];
  auto scale_sent = [&](int64_t i) {
    if (i >= gather_sends_begin) {
      kernels::scale_as_half(values(send_segments_[i]), send_segments_[i].bytes / 2, dtype, postscale);
    }
  };
  auto slot_free = [&](int64_t i, bool* free) -> Status {
    bool done = true;
    if (i >= depth) HVL_RETURN_IF_ERROR(send_requests_[i - depth]->test(&done));
    *free = done;
    return Status::OK();
  };
  auto isend = [&](int64_t i) -> Status {
    HVL_RETURN_IF_ERROR(context_->isend(send_slot(i), static_cast<size_t>(send_segments_[i].bytes), right, tag_of(i),
                                        &send_requests_[i]));
    sends_posted_ = i + 1;
    return Status::OK();
  };
  // Posts, in order, the sends that are ready once `processed` receives have
  // been processed, converting each from the buffer, while slots are free.
  auto pump_sends = [&](int64_t processed) -> Status {
    const int64_t ready = std::min(nsend, n0 + processed);
    while (sends_posted_ < ready) {
      bool free = false;
      HVL_RETURN_IF_ERROR(slot_free(sends_posted_, &free));
      if (!free) break;
      const int64_t i = sends_posted_;
      const Segment& s = send_segments_[i];
      kernels::to_half_n(send_slot(i), at(i < n0 ? in : out, s), s.bytes / 2, dtype);
      HVL_RETURN_IF_ERROR(isend(i));
      scale_sent(i);
    }
    return Status::OK();
  };

  sends_posted_ = 0;
  int64_t next_recv = 0;
  for (int64_t k = 0; k < nrecv; ++k) {
    for (; next_recv < std::min(nrecv, k + depth); ++next_recv) {
      HVL_RETURN_IF_ERROR(context_->irecv(recv_slot(next_recv), static_cast<size_t>(recv_segments_[next_recv].bytes),
                                          left, tag_of(next_recv), &recv_requests_[next_recv]));
    }
    HVL_RETURN_IF_ERROR(pump_sends(k));
    // Wait for receive k, or for the send whose slot the next ready send needs.
    while (sends_posted_ < std::min(nsend, n0 + k)) {
      transport::Request* both[2] = {recv_requests_[k].get(), send_requests_[sends_posted_ - depth].get()};
      int which = -1;
      {
        WaitingFor waiting(left_world_);
        HVL_RETURN_IF_ERROR(transport::wait_any(both, 2, &which));
      }
      if (which == 0) break;
      HVL_RETURN_IF_ERROR(pump_sends(k));
    }
    {
      WaitingFor waiting(left_world_);
      HVL_RETURN_IF_ERROR(recv_requests_[k]->wait());  // returns at once if done above
    }

    const Segment& r = recv_segments_[k];
    const int64_t n = r.bytes / 2;
    uint16_t* received = recv_slot(k);
    uint16_t* forward = nullptr;
    if (r.forward >= 0 && r.forward == sends_posted_) {
      bool free = false;
      HVL_RETURN_IF_ERROR(slot_free(r.forward, &free));
      if (free) forward = send_slot(r.forward);
    }
    if (k < gather_begin) {  // reduce-scatter; the last step rounds the owned chunk to half
      kernels::reduce_half(values(r), at(in, r), received, forward, n, dtype, op, k >= last_scatter_begin);
    } else if (postscale == 1.0) {
      kernels::from_half_n_streaming(values(r), received, n, dtype);  // final values: not read again here
    } else {
      kernels::from_half_n(values(r), received, n, dtype);
      if (r.forward < 0) kernels::scale_as_half(values(r), n, dtype, postscale);  // else once its half has gone on
    }
    if (forward) {
      if (k >= gather_begin) std::memcpy(forward, received, static_cast<size_t>(r.bytes));
      HVL_RETURN_IF_ERROR(isend(r.forward));
      scale_sent(r.forward);
    }
  }
  while (sends_posted_ < nsend) {
    HVL_RETURN_IF_ERROR(pump_sends(nrecv));
    if (sends_posted_ < nsend) {
      WaitingFor waiting(right_world_);
      HVL_RETURN_IF_ERROR(send_requests_[sends_posted_ - depth]->wait());
    }
  }
  {
    WaitingFor waiting(right_world_);
    HVL_RETURN_IF_ERROR(transport::wait_all(&send_requests_));
  }
  return Status::OK();
}

}  // namespace horovodlite
