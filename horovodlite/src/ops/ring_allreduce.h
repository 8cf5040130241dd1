// A pipelined ring allreduce over the transport's point-to-point messages
// (transport/transport.h: MPI, Gloo TCP, in-process), in the style of Gloo's
// AllreduceRing: set up once for a context, then run() again and again on
// host buffers.
//
// The buffer is cut into `size` chunks. A reduce-scatter (size - 1 steps: send
// a chunk to the right neighbour, receive one from the left and reduce it into
// the buffer) leaves every rank with one fully reduced chunk; an allgather
// (size - 1 steps, received directly into the buffer) passes those around.
// Chunks are cut into segments, and the 2 * (size - 1) steps run as one stream
// of segments: a segment is forwarded as soon as it has been reduced or
// received, while later segments are still in flight, so the reduction of one
// segment overlaps the transfer of the next and the steps overlap each other.
// Received reduce-scatter segments land in a few persistent scratch slots that
// stay in cache; nothing is allocated per call once the buffers have grown.
//
// run_fp16_wire() is the same schedule with IEEE binary16 on the wire for a
// float32/float64 buffer (fp16 compression without whole-buffer conversion
// passes). The schedule is written once; what differs with the wire format
// (element size on the wire, where sends leave from and receives land, the
// pack/unpack casts, the reduce kernel, where the postscale is applied) is the
// private Wire policy in ring_allreduce.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "horovodlite/common.h"
#include "host_memory.h"
#include "transport/transport.h"

namespace horovodlite {

struct RingAllreduceOptions {
  // Bytes per message (rounded down to whole elements, at least one element).
  // Values above kMaxSegmentBytes are clamped, so no message count overflows an int.
  int64_t segment_bytes = int64_t{256} << 10;
  // Received segments in flight (and scratch slots) per rank; at least 1.
  int pipeline_depth = 4;
  // Tags used are [tag_base, tag_base + kTagSpan).
  int tag_base = 0;

  static constexpr int64_t kMaxSegmentBytes = int64_t{1} << 30;
  static constexpr int kTagSpan = 4096;
};

class RingAllreduce {
 public:
  // Over the transport context `context`, which should carry only this
  // algorithm's traffic while run() is in progress (dup one for the data path).
  explicit RingAllreduce(transport::ContextPtr context, RingAllreduceOptions options = {});
  ~RingAllreduce();
  RingAllreduce(const RingAllreduce&) = delete;
  RingAllreduce& operator=(const RingAllreduce&) = delete;

  // In-place allreduce of `count` elements of `dtype` at `buf`. Every rank of
  // the communicator must call it with the same count, dtype and op. Average is
  // reduced as Sum (the caller divides). A world of one rank is a no-op.
  // Not thread-safe: one run() at a time per object. Returns the transport's
  // error if a message fails; requests may then be left outstanding, so the
  // context should not be used for further collectives.
  Status run(void* buf, int64_t count, DataType dtype, ReduceOp op) { return run(buf, buf, count, dtype, op); }

  // The same into `out`, scaled: out = (reduction of every rank's `in`) *
  // postscale. in == out is the in-place case; otherwise they must not
  // overlap, `in` is only read, and nothing is copied: the first step sends
  // from `in`, each reduction reads `in` and the received segment and writes
  // `out`, and the allgather receives into `out`. The postscale is applied by
  // the owner of each reduced chunk, segment by segment, before the chunk is
  // passed around: the values equal reducing first and scaling afterwards.
  Status run(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale = 1.0);

  // In-place allreduce of a float32 or float64 buffer with fp16 compression:
  // values travel as IEEE binary16 (segment_bytes counts wire bytes), partial
  // results accumulate in the buffer's type, and the result is rounded to
  // half: it equals the reduction within fp16 rounding (one rounding per hop),
  // values beyond the fp16 range become +-inf (kernels/reduce.h), and every
  // rank gets bitwise the same values. With one rank the buffer is just
  // rounded to half. Sum, Average (as Sum: the caller divides), Min, Max and
  // Product. Same contract as run() otherwise; other dtypes are rejected.
  Status run_fp16_wire(void* buf, int64_t count, DataType dtype, ReduceOp op) {
    return run_fp16_wire(buf, buf, count, dtype, op);
  }

  // The same into `out` (same rules as the out-of-place run()), then scaled:
  // out = widen(fp16 result) * postscale in the buffer's type, on every rank
  // (the half on the wire is never scaled).
  Status run_fp16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale = 1.0) {
    return run_16bit_wire(in, out, count, dtype, op, postscale, DataType::kFloat16);
  }

  // The same with bfloat16 on the wire (bf16 compression): float32's range, so
  // nothing overflows that float32 holds; 8 significant bits per hop.
  Status run_bf16_wire(void* buf, int64_t count, DataType dtype, ReduceOp op) {
    return run_bf16_wire(buf, buf, count, dtype, op);
  }
  Status run_bf16_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale = 1.0) {
    return run_16bit_wire(in, out, count, dtype, op, postscale, DataType::kBFloat16);
  }
  // Either: `wire` is kFloat16 or kBFloat16.
  Status run_16bit_wire(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op, double postscale,
                        DataType wire);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const RingAllreduceOptions& options() const { return options_; }

 private:
  struct Segment {
    int bytes;
    int64_t byte_offset;  // into the caller's buffer
    // Receive segments only: the send segment to post once this one has been
    // received (and reduced), and the send segment that must have completed
    // before this one may be received into the buffer; -1 for none.
    int64_t forward = -1;
    int64_t guard = -1;
  };

  // Appends the segments of chunk `chunk` to `out`.
  void append_segments(std::vector<Segment>* out, int chunk, int64_t count, int64_t esize, int64_t seg_elems) const;
  // Builds the segment schedule; fails if it needs more segments than an int counts.
  Status plan(int64_t count, int64_t esize);
  Status ensure_scratch(int64_t slot_bytes, int slots);
  // How values travel (the buffer's type, or fp16/bf16): the one parameter of the schedule.
  struct Wire;
  // Checks, the one-rank case, the plan and the scratch slots, then execute().
  Status run_with(const void* in, void* out, int64_t count, const Wire& wire);
  // The schedule, for both wire formats.
  Status execute(const uint8_t* in, uint8_t* out, const Wire& wire);
  // One execute()'s indices and posting state; its methods are the schedule's steps.
  struct Schedule;
  int tag_of(int64_t index) const {
    return options_.tag_base + static_cast<int>(index % RingAllreduceOptions::kTagSpan);
  }

  void init();

  transport::ContextPtr context_;
  RingAllreduceOptions options_;
  int rank_ = 0;
  int size_ = 1;
  int left_world_ = -1;  // the neighbours' world ranks, for the watchdog's message
  int right_world_ = -1;
  Status init_status_;

  // Persistent state, grown as needed and reused by every run().
  std::vector<Segment> recv_segments_;    // in the order they arrive from the left
  std::vector<Segment> send_segments_;    // in the order they leave to the right
  std::vector<int64_t> send_step_start_;  // index of each step's first send segment, plus the end
  std::vector<int64_t> recv_step_start_;  // likewise for the receive segments
  std::vector<transport::RequestPtr> recv_requests_;
  std::vector<transport::RequestPtr> send_requests_;
  int64_t sends_posted_ = 0;  // sends are posted in index order
  // The receive slots, then (staged) the send slots: a HostBuffer, so that
  // 2 MiB of slots sit on one huge page, which a peer's single copy pins at
  // once (host_memory.h).
  HostBuffer scratch_;
  int64_t scratch_slot_bytes_ = 0;
  size_t op_bytes_ = 0;  // this op's buffer on the wire, for the transport's choice of protocol
  int scratch_slots_ = 0;
};

}  // namespace horovodlite
