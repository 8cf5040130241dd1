#include "transport/collectives.h"

#include <cstring>
#include <numeric>
#include <string>

#include "kernels/reduce.h"

namespace horovodlite {
namespace transport_ops {

namespace {

constexpr int kBroadcastTag = kTagBase;
constexpr int kAllgatherTag = kTagBase + 1;
constexpr int kAlltoallTag = kTagBase + 2;
constexpr int kReducescatterTag = kTagBase + 3;

int mod(int a, int p) { return ((a % p) + p) % p; }

// One step of a ring or pairwise exchange: receive, send, wait for both.
Status exchange(transport::Context& ctx, const void* send_buf, size_t send_bytes, int to, void* recv_buf,
                size_t recv_bytes, int from, int tag) {
  transport::RequestPtr r, s;
  HVL_RETURN_IF_ERROR(ctx.irecv(recv_buf, recv_bytes, from, tag, &r));
  HVL_RETURN_IF_ERROR(ctx.isend(send_buf, send_bytes, to, tag, &s));
  HVL_RETURN_IF_ERROR(r->wait());
  return s->wait();
}

Status check_sizes(const transport::Context& ctx, size_t n, const char* what) {
  if (n != static_cast<size_t>(ctx.size())) {
    return Status::InvalidArgument(std::string(what) + ": " + std::to_string(n) + " sizes for " +
                                   std::to_string(ctx.size()) + " ranks");
  }
  return Status::OK();
}

}  // namespace

Status broadcast(transport::Context& ctx, void* buf, size_t bytes, int root, const transport::Backoff& backoff) {
  const int p = ctx.size();
  if (root < 0 || root >= p) {
    return Status::InvalidArgument("broadcast: root " + std::to_string(root) + " outside [0, " + std::to_string(p) +
                                   ")");
  }
  if (p == 1) return Status::OK();
  // Binomial tree on ranks relative to the root: receive from the parent (the
  // relative rank without its lowest set bit), then send to the children.
  const int rel = mod(ctx.rank() - root, p);
  int mask = 1;
  while (mask < p) {
    if (rel & mask) {
      transport::RequestPtr r;
      HVL_RETURN_IF_ERROR(ctx.irecv(buf, bytes, mod(rel - mask + root, p), kBroadcastTag, &r));
      HVL_RETURN_IF_ERROR(r->wait(transport::kNoTimeout, backoff));
      break;
    }
    mask <<= 1;
  }
  std::vector<transport::RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (rel + mask < p) {
      sends.emplace_back();
      HVL_RETURN_IF_ERROR(ctx.isend(buf, bytes, mod(rel + mask + root, p), kBroadcastTag, &sends.back()));
    }
  }
  return transport::wait_all(&sends, transport::kNoTimeout, backoff);
}

Status allgatherv(transport::Context& ctx, const void* in, void* out, const std::vector<size_t>& bytes) {
  HVL_RETURN_IF_ERROR(check_sizes(ctx, bytes.size(), "allgather"));
  const int p = ctx.size();
  const int r = ctx.rank();
  std::vector<size_t> offset(static_cast<size_t>(p) + 1, 0);
  for (int i = 0; i < p; ++i)
    offset[static_cast<size_t>(i) + 1] = offset[static_cast<size_t>(i)] + bytes[static_cast<size_t>(i)];
  uint8_t* o = static_cast<uint8_t*>(out);
  if (bytes[static_cast<size_t>(r)] > 0 && o + offset[static_cast<size_t>(r)] != in) {
    std::memmove(o + offset[static_cast<size_t>(r)], in, bytes[static_cast<size_t>(r)]);
  }
  // Step s: pass on block r - s to the right, receive block r - s - 1 from the left.
  for (int s = 0; s < p - 1; ++s) {
    const size_t send_block = static_cast<size_t>(mod(r - s, p));
    const size_t recv_block = static_cast<size_t>(mod(r - s - 1, p));
    HVL_RETURN_IF_ERROR(exchange(ctx, o + offset[send_block], bytes[send_block], mod(r + 1, p), o + offset[recv_block],
                                 bytes[recv_block], mod(r - 1, p), kAllgatherTag));
  }
  return Status::OK();
}

Status alltoallv(transport::Context& ctx, const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes) {
  HVL_RETURN_IF_ERROR(check_sizes(ctx, send_bytes.size(), "alltoall"));
  HVL_RETURN_IF_ERROR(check_sizes(ctx, recv_bytes.size(), "alltoall"));
  const int p = ctx.size();
  const int r = ctx.rank();
  std::vector<size_t> soff(static_cast<size_t>(p) + 1, 0), roff(static_cast<size_t>(p) + 1, 0);
  for (size_t i = 0; i < static_cast<size_t>(p); ++i) {
    soff[i + 1] = soff[i] + send_bytes[i];
    roff[i + 1] = roff[i] + recv_bytes[i];
  }
  const uint8_t* src = static_cast<const uint8_t*>(in);
  uint8_t* dst = static_cast<uint8_t*>(out);
  const size_t me = static_cast<size_t>(r);
  if (send_bytes[me] != recv_bytes[me]) {
    return Status::InvalidArgument("alltoall: rank " + std::to_string(r) + " sends itself " +
                                   std::to_string(send_bytes[me]) + " bytes but expects " +
                                   std::to_string(recv_bytes[me]));
  }
  if (send_bytes[me] > 0) std::memcpy(dst + roff[me], src + soff[me], send_bytes[me]);
  for (int s = 1; s < p; ++s) {
    const size_t to = static_cast<size_t>(mod(r + s, p));
    const size_t from = static_cast<size_t>(mod(r - s, p));
    HVL_RETURN_IF_ERROR(exchange(ctx, src + soff[to], send_bytes[to], static_cast<int>(to), dst + roff[from],
                                 recv_bytes[from], static_cast<int>(from), kAlltoallTag));
  }
  return Status::OK();
}

Status reducescatter(transport::Context& ctx, const void* in, void* out, const std::vector<int64_t>& counts,
                     DataType dtype, ReduceOp op) {
  HVL_RETURN_IF_ERROR(check_sizes(ctx, counts.size(), "reducescatter"));
  const size_t esize = dtype_size(dtype);
  if (esize == 0) return Status::InvalidArgument("reducescatter: invalid dtype");
  const int p = ctx.size();
  const int r = ctx.rank();
  std::vector<int64_t> offset(static_cast<size_t>(p) + 1, 0);
  for (size_t i = 0; i < static_cast<size_t>(p); ++i) {
    if (counts[i] < 0) return Status::InvalidArgument("reducescatter: negative count");
    offset[i + 1] = offset[i] + counts[i];
  }
  if (p == 1) {
    if (counts[0] > 0) std::memmove(out, in, static_cast<size_t>(counts[0]) * esize);
    return Status::OK();
  }
  // work: this rank's partial sums; a chunk received is reduced into it.
  std::vector<uint8_t> work(static_cast<const uint8_t*>(in),
                            static_cast<const uint8_t*>(in) + static_cast<size_t>(offset.back()) * esize);
  int64_t largest = 0;
  for (int64_t c : counts) largest = std::max(largest, c);
  std::vector<uint8_t> incoming(static_cast<size_t>(largest) * esize);
  // Step s: send chunk r - s - 1 (reduced by s + 1 ranks), receive chunk r - s - 2;
  // after size - 1 steps this rank holds chunk r reduced by everyone.
  for (int s = 0; s < p - 1; ++s) {
    const size_t send_chunk = static_cast<size_t>(mod(r - s - 1, p));
    const size_t recv_chunk = static_cast<size_t>(mod(r - s - 2, p));
    HVL_RETURN_IF_ERROR(exchange(ctx, work.data() + static_cast<size_t>(offset[send_chunk]) * esize,
                                 static_cast<size_t>(counts[send_chunk]) * esize, mod(r + 1, p), incoming.data(),
                                 static_cast<size_t>(counts[recv_chunk]) * esize, mod(r - 1, p), kReducescatterTag));
    uint8_t* acc = work.data() + static_cast<size_t>(offset[recv_chunk]) * esize;
    kernels::reduce_into(acc, incoming.data(), counts[recv_chunk], dtype, op);
  }
  const size_t mine = static_cast<size_t>(r);
  if (counts[mine] > 0) {
    std::memcpy(out, work.data() + static_cast<size_t>(offset[mine]) * esize,
                static_cast<size_t>(counts[mine]) * esize);
  }
  return Status::OK();
}

}  // namespace transport_ops
}  // namespace horovodlite
