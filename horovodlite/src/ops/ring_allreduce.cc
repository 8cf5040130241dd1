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
// The window of receives and the order of sends: see "The schedule" below.
#include "ops/ring_allreduce.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "kernels/reduce.h"
#include "op_util.h"
#include "watchdog.h"

namespace horovodlite {

namespace {
// The waits are the transport's (Request::wait, wait_all, wait_any): they poll
// for up to 200 us, then sleep in growing steps up to 100 us, never an unbounded
// busy poll. MPI's own wait spins for as long as the peer is behind: under a
// plain mpirun each rank is bound to one core, which this thread shares with the
// training thread, so while the peer is still in its backward pass the spinning
// took the core from this rank's backward pass. The 200 us cover a 256 KiB
// segment in flight (a sleep lasts >= 20 us): a shorter poll slowed the
// allreduce under binding; with 200 us it matches MPI_Wait, while the
// background thread uses less CPU per training step than with MPI's spin.

inline int mod(int a, int p) { return ((a % p) + p) % p; }

// The checks of the op and buffers, for both wire formats.
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

RingAllreduce::RingAllreduce(transport::ContextPtr context, RingAllreduceOptions options)
    : context_(std::move(context)), options_(options) {
  init();
}

void RingAllreduce::init() {
  options_.segment_bytes = std::clamp<int64_t>(options_.segment_bytes, 1, RingAllreduceOptions::kMaxSegmentBytes);
  options_.pipeline_depth = std::max(1, options_.pipeline_depth);
  if (!context_) {
    init_status_ = Status::InvalidArgument("RingAllreduce: no transport context");
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
  if (scratch_.data() != nullptr && slot_bytes <= scratch_slot_bytes_ && slots <= scratch_slots_) return Status::OK();
  slot_bytes = std::max(slot_bytes, scratch_slot_bytes_);
  const int64_t stride = (slot_bytes + 63) / 64 * 64;  // each slot cache-line aligned
  HostBuffer grown(static_cast<size_t>(stride * slots));
  if (grown.data() == nullptr) {
    return Status::Internal("RingAllreduce: cannot allocate " + std::to_string(stride * slots) + " bytes of scratch");
  }
  scratch_ = std::move(grown);
  scratch_slot_bytes_ = stride;
  scratch_slots_ = slots;
  return Status::OK();
}

// ---- The wire format ----
//
// What run() and run_16bit_wire() do differently, everything else being the one
// schedule below. Segment offsets and sizes count wire bytes; a segment's
// values in the buffer are at offset / wire_bytes * value_bytes.
//
// Native (run()): values travel in the buffer's own type. Sends leave straight
// from the buffer (`in` in the first step, `out` after that), allgather
// segments are received straight into it, and the owner of a reduced chunk
// scales it before passing it on, so scaled values travel.
//
// Staged (run_16bit_wire(): IEEE binary16 or bfloat16 on the wire for a float32/float64
// buffer, without whole-buffer conversion passes): each send is packed into a
// send slot just before it goes, receives land in receive slots, the
// reduce-scatter kernel also writes the half to forward when the send slot is
// free, and the owner of each reduced chunk rounds it to half (in the buffer
// too) before the allgather, so every rank ends with bitwise-identical values.
// Unscaled halves travel: every rank scales its values once their half has been
// made (sent on) or, for segments it does not pass on, once they are widened.
struct RingAllreduce::Wire {
  DataType dtype;
  ReduceOp op;
  double postscale;
  int64_t value_bytes;  // per element in the buffer
  int64_t wire_bytes;   // per element on the wire
  bool staged;          // through send and receive slots (the wire type is not the buffer's)
  DataType half_type;   // staged: kFloat16 or kBFloat16

  static Wire native(DataType dtype, ReduceOp op, double postscale) {
    const auto bytes = static_cast<int64_t>(dtype_size(dtype));
    return Wire{dtype, op, postscale, bytes, bytes, false, dtype};
  }
  static Wire half(DataType dtype, ReduceOp op, double postscale, DataType half_type) {
    return Wire{dtype, op, postscale, static_cast<int64_t>(dtype_size(dtype)), 2, true, half_type};
  }

  int64_t elements(const Segment& s) const { return s.bytes / wire_bytes; }
  template <typename T>
  T* values(T* base, const Segment& s) const {
    return base + s.byte_offset / wire_bytes * value_bytes;
  }

  // What one rank alone computes: the values as they would come off the wire.
  void single_rank(uint8_t* out, const uint8_t* in, int64_t count) const {
    if (!staged) {
      kernels::scale_copy(out, in, count, dtype, postscale);
      return;
    }
    uint16_t wire[1024];
    for (int64_t done = 0; done < count; done += 1024) {
      const int64_t n = std::min<int64_t>(1024, count - done);
      kernels::to_half_n(wire, in + done * value_bytes, n, dtype, half_type);
      kernels::from_half_n(out + done * value_bytes, wire, n, dtype, half_type);
      kernels::scale_as_half(out + done * value_bytes, n, dtype, postscale, half_type);
    }
  }
  // A reduce-scatter segment: values = in (op) received. `owned`: the last
  // step, which completes this rank's chunk: native scales it; staged rounds it
  // to half and, where `forward` is not null, writes the half to send there.
  void reduce(uint8_t* values, const uint8_t* in, const uint8_t* received, uint8_t* forward, int64_t n,
              bool owned) const {
    if (!staged) {
      kernels::reduce(values, in, received, n, dtype, op);
      if (owned) kernels::scale(values, n, dtype, postscale);
      return;
    }
    kernels::reduce_half(values, in, reinterpret_cast<const uint16_t*>(received), reinterpret_cast<uint16_t*>(forward),
                         n, dtype, op, owned, half_type);
  }
  // Staged only: the wire form of n values.
  void pack(uint8_t* wire, const uint8_t* values, int64_t n) const {
    kernels::to_half_n(reinterpret_cast<uint16_t*>(wire), values, n, dtype, half_type);
  }
  // Staged only: an allgather segment's values from the wire; `passed_on`: its
  // half goes on to the right (and it is scaled once that half has been made).
  void unpack(uint8_t* values, const uint8_t* received, int64_t n, bool passed_on) const {
    const auto* half = reinterpret_cast<const uint16_t*>(received);
    if (postscale == 1.0) {
      kernels::from_half_n_streaming(values, half, n, dtype, half_type);  // final values: not read again here
      return;
    }
    kernels::from_half_n(values, half, n, dtype, half_type);
    if (!passed_on) kernels::scale_as_half(values, n, dtype, postscale, half_type);
  }
  // Staged only: final values whose half has been made.
  void scale_sent(uint8_t* values, int64_t n) const { kernels::scale_as_half(values, n, dtype, postscale, half_type); }
};

Status RingAllreduce::run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale) {
  HVL_RETURN_IF_ERROR(init_status_);
  if (dtype_size(dtype) == 0) {
    return Status::InvalidArgument("RingAllreduce: invalid dtype " + std::to_string(static_cast<int>(dtype)));
  }
  return run_with(in, out, count, Wire::native(dtype, op, postscale));
}

Status RingAllreduce::run_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op,
                                     double postscale, DataType wire) {
  HVL_RETURN_IF_ERROR(init_status_);
  const char* wire_name = wire == DataType::kBFloat16 ? "bf16" : "fp16";
  if (wire != DataType::kFloat16 && wire != DataType::kBFloat16) {
    return Status::InvalidArgument("RingAllreduce: the 16-bit wire is float16 or bfloat16, got dtype " +
                                   std::to_string(static_cast<int>(wire)));
  }
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) {
    return Status::InvalidArgument(std::string("RingAllreduce: ") + wire_name +
                                   " wire needs float32 or float64, got dtype " +
                                   std::to_string(static_cast<int>(dtype)));
  }
  return run_with(in, out, count, Wire::half(dtype, op, postscale, wire));
}

Status RingAllreduce::run_with(const void* in, void* out, int64_t count, const Wire& wire) {
  if (count < 0) return Status::InvalidArgument("RingAllreduce: negative count " + std::to_string(count));
  HVL_RETURN_IF_ERROR(check_op_and_buffers(in, out, count, wire.value_bytes, wire.op));
  if (count == 0) return Status::OK();
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (size_ == 1) {
    wire.single_rank(dst, src, count);
    return Status::OK();
  }
  HVL_RETURN_IF_ERROR(plan(count, wire.wire_bytes));
  op_bytes_ = static_cast<size_t>(count * wire.wire_bytes);
  const int64_t largest_chunk = (count + size_ - 1) / size_;
  const int64_t seg_elems = std::max<int64_t>(1, options_.segment_bytes / wire.wire_bytes);
  // Receive slots; staged sends have as many send slots after them.
  const int slots = (wire.staged ? 2 : 1) * options_.pipeline_depth;
  HVL_RETURN_IF_ERROR(ensure_scratch(std::min(largest_chunk, seg_elems) * wire.wire_bytes, slots));
  return execute(src, dst, wire);
}

// ---- The schedule ----
//
// Receives are posted in order, at most pipeline_depth ahead of the one being
// processed. Reduce-scatter segments land in receive slot (index mod depth),
// and so do allgather segments of a staged wire; a native allgather segment
// lands directly in the buffer, in the region this rank sent during
// reduce-scatter step u, so that send (its guard) must have completed first:
// it is tested while topping up the window, and waited for only when the
// receive is the very next one needed (an earlier segment in the global order,
// so the wait cannot close a cycle around the ring).
//
// Sends are posted in index order. Send i (i >= n0, the step-0 send count)
// forwards receive i - n0, so it is ready once that receive is processed.
// Native sends leave from the buffer and are posted as soon as they are ready.
// A staged send leaves from send slot (i mod depth), free once send i - depth
// has completed: when receive i - n0 is processed and send i is next in line
// with its slot free, the reduce kernel writes the half straight into the slot
// (an allgather segment's half is copied) and it is posted at once; otherwise
// the values wait in the buffer (rounded already where they must be) and are
// packed when the slot frees, which is also how the step-0 sends go out. A
// deferred send's region is not written again before it is packed: the only
// later write is the allgather receive of that region, whose data already
// includes this send's contribution. Out of place, the step-0 sends read `in`;
// everything else reads and writes `out`.
//
// The only blocking calls wait for the next receive *or* the send whose slot
// the next ready send needs (staged), and for a guard send (native, as above),
// so no rank sits on a receive while a send its neighbour needs is held back;
// receives are posted ahead as their slots free up in processing order, hence
// no cycle of waits.
// One execution of the schedule: the indices it walks, the slots, and the
// posting of receives and sends. Its methods are execute()'s steps.
struct RingAllreduce::Schedule {
  Schedule(RingAllreduce* ring, const uint8_t* in, uint8_t* out, const Wire& wire)
      : ring(*ring),
        in(in),
        out(out),
        wire(wire),
        staged(wire.staged),
        depth(ring->options_.pipeline_depth),
        nrecv(static_cast<int64_t>(ring->recv_segments_.size())),
        nsend(static_cast<int64_t>(ring->send_segments_.size())),
        n0(ring->send_step_start_[1]),
        last_scatter_begin(ring->recv_step_start_[ring->size_ - 2]),
        gather_begin(ring->recv_step_start_[ring->size_ - 1]),
        gather_sends_begin(ring->send_step_start_[ring->size_ - 1]),
        right(mod(ring->rank_ + 1, ring->size_)),
        left(mod(ring->rank_ - 1, ring->size_)),
        slots(reinterpret_cast<uint8_t*>(ring->scratch_.data())) {}

  uint8_t* recv_slot(int64_t k) const { return slots + (k % depth) * ring.scratch_slot_bytes_; }
  uint8_t* send_slot(int64_t i) const { return slots + (depth + i % depth) * ring.scratch_slot_bytes_; }
  // Where receive k lands, and where send i leaves from.
  uint8_t* recv_dst(int64_t k) const {
    return staged || k < gather_begin ? recv_slot(k) : wire.values(out, ring.recv_segments_[k]);
  }
  const uint8_t* send_src(int64_t i) const {
    return staged ? send_slot(i) : wire.values(i < n0 ? in : out, ring.send_segments_[i]);
  }
  Status slot_free(int64_t i, bool* free) const {
    bool done = true;
    if (staged && i >= depth) HVL_RETURN_IF_ERROR(ring.send_requests_[i - depth]->test(&done));
    *free = done;
    return Status::OK();
  }
  Status post_recv(int64_t k) {
    return ring.context_->irecv(recv_dst(k), static_cast<size_t>(ring.recv_segments_[k].bytes), left, ring.tag_of(k),
                                &ring.recv_requests_[k]);
  }
  // Posts send i, whose wire bytes are ready; a staged allgather send's values
  // are scaled now that their half has been made.
  Status post_send(int64_t i) {
    const Segment& s = ring.send_segments_[i];
    HVL_RETURN_IF_ERROR(ring.context_->isend_in_op(send_src(i), static_cast<size_t>(s.bytes), right, ring.tag_of(i),
                                                   ring.op_bytes_, &ring.send_requests_[i]));
    ring.sends_posted_ = i + 1;
    if (staged && i >= gather_sends_begin) wire.scale_sent(wire.values(out, s), wire.elements(s));
    return Status::OK();
  }
  // Posts, in order, the sends that are ready once `processed` receives have
  // been processed, packing staged ones from the buffer, while slots are free.
  Status pump_sends(int64_t processed) {
    const int64_t ready = std::min(nsend, n0 + processed);
    while (ring.sends_posted_ < ready) {
      const int64_t i = ring.sends_posted_;
      bool free = false;
      HVL_RETURN_IF_ERROR(slot_free(i, &free));
      if (!free) break;
      const Segment& s = ring.send_segments_[i];
      if (staged) wire.pack(send_slot(i), wire.values(i < n0 ? in : out, s), wire.elements(s));
      HVL_RETURN_IF_ERROR(post_send(i));
    }
    return Status::OK();
  }
  // Posts receives in order, up to `limit`, while their destination is free
  // (a native allgather receive: once its guard send has completed).
  Status top_up(int64_t limit) {
    for (; next_recv < std::min(limit, nrecv); ++next_recv) {
      const int64_t guard = staged ? -1 : ring.recv_segments_[next_recv].guard;
      if (guard >= ring.sends_posted_) break;
      if (guard >= 0) {
        bool done = false;
        HVL_RETURN_IF_ERROR(ring.send_requests_[guard]->test(&done));
        if (!done) break;
      }
      HVL_RETURN_IF_ERROR(post_recv(next_recv));
    }
    return Status::OK();
  }

  // Waits for receive k: posted first if its guard held it back, and, staged,
  // pumping the sends whose slots free up meanwhile.
  Status receive(int64_t k) {
    if (k == next_recv) {
      // Native only: not posted yet, its guard send was posted while processing
      // an earlier segment (or at the start) and is waited for here. That send
      // matches a receive the neighbour posts before it gets to segment k, so
      // this wait cannot close a cycle.
      const int64_t guard = ring.recv_segments_[k].guard;
      if (guard >= ring.sends_posted_) return Status::Internal("RingAllreduce: schedule error, guard send not posted");
      if (guard >= 0) {
        WaitingFor waiting(ring.right_world_);
        HVL_RETURN_IF_ERROR(ring.send_requests_[guard]->wait());
      }
      HVL_RETURN_IF_ERROR(post_recv(k));
      ++next_recv;
    }
    // Staged: wait for receive k, or for the send whose slot the next ready send needs.
    while (ring.sends_posted_ < std::min(nsend, n0 + k)) {
      transport::Request* both[2] = {ring.recv_requests_[k].get(),
                                     ring.send_requests_[ring.sends_posted_ - depth].get()};
      int which = -1;
      {
        WaitingFor waiting(ring.left_world_);
        HVL_RETURN_IF_ERROR(transport::wait_any(both, 2, &which));
      }
      if (which == 0) break;
      HVL_RETURN_IF_ERROR(pump_sends(k));
    }
    WaitingFor waiting(ring.left_world_);
    return ring.recv_requests_[k]->wait();  // returns at once if done above
  }

  // Reduces (reduce-scatter) or unpacks (staged allgather) receive k, and
  // posts the send that passes it on where its slot is free already.
  Status process(int64_t k) {
    const Segment& r = ring.recv_segments_[k];
    const int64_t n = wire.elements(r);
    const uint8_t* received = recv_slot(k);
    uint8_t* forward = nullptr;  // staged: the free slot of the send that passes this segment on
    if (staged && r.forward >= 0 && r.forward == ring.sends_posted_) {
      bool free = false;
      HVL_RETURN_IF_ERROR(slot_free(r.forward, &free));
      if (free) forward = send_slot(r.forward);
    }
    if (k < gather_begin) {
      wire.reduce(wire.values(out, r), wire.values(in, r), received, forward, n, k >= last_scatter_begin);
    } else if (staged) {
      wire.unpack(wire.values(out, r), received, n, r.forward >= 0);
      if (forward) std::memcpy(forward, received, static_cast<size_t>(r.bytes));
    }
    if (forward) HVL_RETURN_IF_ERROR(post_send(r.forward));
    return Status::OK();
  }

  // Posts the staged sends still waiting for a slot, then waits for every send.
  Status finish() {
    while (ring.sends_posted_ < nsend) {
      HVL_RETURN_IF_ERROR(pump_sends(nrecv));
      if (ring.sends_posted_ < nsend) {
        WaitingFor waiting(ring.right_world_);
        HVL_RETURN_IF_ERROR(ring.send_requests_[ring.sends_posted_ - depth]->wait());
      }
    }
    WaitingFor waiting(ring.right_world_);
    return transport::wait_all(&ring.send_requests_);
  }

  RingAllreduce& ring;
  const uint8_t* const in;
  uint8_t* const out;
  const Wire& wire;
  const bool staged;
  const int64_t depth;
  const int64_t nrecv;
  const int64_t nsend;
  const int64_t n0;  // the step-0 sends
  const int64_t last_scatter_begin;
  const int64_t gather_begin;
  const int64_t gather_sends_begin;
  const int right;
  const int left;
  uint8_t* const slots;   // the receive slots, then (staged) the send slots
  int64_t next_recv = 0;  // receives are posted in order
};

Status RingAllreduce::execute(const uint8_t* in, uint8_t* out, const Wire& wire) {
  Schedule s(this, in, out, wire);
  sends_posted_ = 0;
  // The first window of receives, and the step-0 sends.
  HVL_RETURN_IF_ERROR(s.top_up(s.depth));
  HVL_RETURN_IF_ERROR(s.pump_sends(0));
  for (int64_t k = 0; k < s.nrecv; ++k) {
    HVL_RETURN_IF_ERROR(s.receive(k));
    HVL_RETURN_IF_ERROR(s.process(k));
    // What receive k made ready goes out, and its slot takes the next receive.
    HVL_RETURN_IF_ERROR(s.pump_sends(k + 1));
    HVL_RETURN_IF_ERROR(s.top_up(k + 1 + s.depth));  // receive k's slot is free now
  }
  return s.finish();
}

}  // namespace horovodlite
