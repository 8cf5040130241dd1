// Collectives over the transport's point-to-point messages, for a job without
// MPI (Gloo): broadcast, allgather, alltoall and reducescatter, simple and
// correct (the allreduce is RingAllreduce). Each is blocking and collective over
// the context; every rank passes the same sizes (checked by the negotiation
// before they run). Buffers are bytes except where an op reduces.
#pragma once

#include <cstdint>
#include <vector>

#include "horovodlite/common.h"
#include "transport/transport.h"

namespace horovodlite {
namespace transport_ops {

// Tags used: [kTagBase, kTagBase + 16). Distinct from the ring's default range
// only in case both share a context; give each its own (Context::dup) anyway.
constexpr int kTagBase = 8192;

// `bytes` bytes from `root` to every rank (a binomial tree).
// `backoff`: how its waits poll (kControlBackoff for the negotiation's messages).
Status broadcast(transport::Context& ctx, void* buf, size_t bytes, int root,
                 const transport::Backoff& backoff = transport::kStreamBackoff);

// Rank r contributes bytes[r] bytes from `in`; `out` receives every rank's
// block in rank order (a ring: size - 1 steps). `in` may alias out's own block.
Status allgatherv(transport::Context& ctx, const void* in, void* out, const std::vector<size_t>& bytes);

// send_bytes[j]: the bytes this rank sends to rank j, consecutive in `in` in
// rank order; recv_bytes[j]: the bytes it receives from rank j, consecutive in
// `out` (pairwise exchange: size - 1 steps, step s sends to rank + s and
// receives from rank - s).
Status alltoallv(transport::Context& ctx, const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes);

// `in` holds sum(counts) elements; rank r receives in `out` its counts[r]
// elements of the reduction (Average reduces as Sum: the caller divides). A
// ring of size - 1 steps over a scratch copy of `in`.
Status reducescatter(transport::Context& ctx, const void* in, void* out, const std::vector<int64_t>& counts,
                     DataType dtype, ReduceOp op);

}  // namespace transport_ops
}  // namespace horovodlite
