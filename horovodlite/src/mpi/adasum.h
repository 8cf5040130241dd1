// Adasum: adaptive summation of the ranks' vectors (Maleki et al., "Scaling
// Distributed Training with Adaptive Summation", MLSys 2021; Horovod's
// ReduceOp Adasum). Two vectors a and b combine into
//
//     a' = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
//
// (orthogonal vectors add, parallel ones average), and p = 2^k ranks combine
// recursively in pairs: rank r with r ^ 1, those results with the pair at
// distance 2, and so on.
//
// Vector halving, distance doubling (as Horovod's AdasumMPI). At level d = 1,
// 2, ..., p/2 rank r and its partner r ^ d hold the same range of the vector;
// each keeps one half (the lower-numbered rank the lower half) and sends the
// other half to the partner, receiving the partner's values of the half it
// keeps. Rank r then holds a piece of a (the combination so far of the
// half-group of ranks without bit d) and the same piece of b (the other
// half-group's). The 2d ranks that share a and b (r / 2d equal) hold disjoint
// pieces that cover the vector, so a.b, |a|^2 and |b|^2 are the sums of their
// partial sums: an allreduce of three scalars per tensor among those 2d ranks
// (recursive doubling, the same result bit for bit on each of them). Each rank
// then combines its piece. After log2(p) levels every rank holds 1/p of the
// result; the levels are walked back (distance halving) exchanging pieces
// until every rank holds the whole vector, the same on every rank. Where all
// ranks share this host and there are 4 or more, the last level instead sends
// each combined segment to every other rank at once (make_and_allgather): the
// same bytes, copied out of the producer's cache rather than out of memory an
// exchange later.
//
// Memory passes (the op is memory-bound on a host). The dot products must be
// complete before any element is combined, so the kept piece is read twice:
// once for the dot products, once for the combination. Everything else is
// arranged so that no third pass is needed. What is sent leaves from huge
// pages (a peer's single copy out of one pins one page, not 512): from the
// buffers where they are on huge pages already (the library's own, or the
// user's moved there from their second op on: host_memory.h,
// huge_pages_for_sending), else from huge-page slots (adasum_exchange.h),
// written with streaming stores where the peers' cores are far
// (measured op by op: SlotStores). The partner's segments are received two
// ahead (kWindow), each just before its dot products, so it is read from
// cache; out of place, the first
// level receives them straight into `out` (where the combination goes); the
// combination walks the piece the other way round from the dot-product pass
// (whose end is what the cache still holds); at the last level each combined
// segment is sent at once as the first allgather step, and at the other levels
// (np >= 4) the combination is fused with the next level's exchange: each
// segment of the half sent next is combined into a send slot and sent, each
// segment of the half kept is combined as the next partner's segment arrives
// and its dot products computed at once, all while in cache. The float32
// kernels prefetch ahead (adasum_kernels.cc): the combination into L1, the
// dot products this rank's piece into L2.
//
// Per tensor: a fused buffer holds several tensors back to back, and each
// tensor is combined with its own dot products (as Horovod does), so fusion
// changes nothing in the result.
//
// Numerics: the partial dot products and squared norms are accumulated in
// double for float16, bfloat16 and float32, and in long double (x87 80-bit on
// x86-64, binary128 on AArch64: exponent range 2^+-16383) for float64, so that
// inputs from the dtype's smallest normal number up to the square root of its
// largest neither flush to zero nor overflow; the combination is computed in
// the same width and rounded once to the dtype. Where long double is no wider
// than double, float64 uses double (the range is then double's: documented in
// docs/adasum.md). A zero vector has coefficient 1 (it is neutral: Adasum(0, b)
// = b), which is also what a rank that joined contributes.
//
// Only a power-of-two number of ranks is supported: api.cc refuses other sizes
// with an error naming the tensor and the number of ranks, before anything
// reaches other ranks (run() checks again).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "horovodlite/common.h"
#include "host_memory.h"
#include "mpi/adasum_exchange.h"
#include "mpi/mpi_world.h"
#include "ops/adasum_kernels.h"
#include "ops/algorithm.h"
#include "ops/fusion.h"
#include "world.h"

namespace horovodlite {

// The buffer-level algorithm on a communicator it borrows (the caller keeps it
// alive and uses it for nothing else while run() is in progress).
class Adasum {
 public:
  // peers_on_host: some ranks of `comm` share this host (they copy what this
  // rank sends out of its memory: the user's buffers are then moved onto huge
  // pages from their second op on, host_memory.h, huge_pages_for_sending).
  // all_on_host: all of them do (from 4 ranks, the last level then sends each
  // result segment to every rank at once instead of the allgather's exchanges).
  // segment_bytes: bytes per message, the same on every rank (see
  // local_segment_bytes()).
  Adasum(MPI_Comm comm, bool peers_on_host, bool all_on_host = false, int64_t segment_bytes = kSegmentBytes);
  // `in` holds counts.size() tensors back to back, counts[i] elements each, of
  // `dtype`; `out` (== in: in place; else not overlapping it, and `in` is only
  // read) receives the Adasum of every rank's buffer, the same on every rank.
  // Every rank passes the same counts and dtype.
  Status run(const void* in, void* out, const std::vector<int64_t>& counts, DataType dtype);

  // For tests: how every op writes its send slots (adasum_exchange.h,
  // SlotStores): 1 streaming stores, 0 plain ones, -1 (the default) as each
  // op measures. Process-wide.
  static void force_slot_stores_for_testing(int mode);
  // For tests: the allgather by exchanges with the levels' partners even where
  // every rank shares this host (true), or as chosen (false, the default); and
  // how many ops so far sent their results to every rank at once. Process-wide.
  static void force_pairwise_allgather_for_testing(bool on);
  static int64_t allgathers_from_every_rank();

  // Bytes per point-to-point message (the exchange is split so that the dot
  // products of one piece are computed while the next is in flight): a quarter
  // of this core's L2 (the segment worked on, kWindow received ahead and one
  // more fit in it), between kSegmentBytes and kMaxSegmentBytes; kSegmentBytes
  // where the L2's size is unknown. Every rank must cut the same segments:
  // AdasumAllreduce agrees on one at set-up (the smallest of the ranks').
  static int64_t local_segment_bytes();
  static constexpr int64_t kSegmentBytes = 256 << 10;
  static constexpr int64_t kMaxSegmentBytes = 1 << 20;

 private:
  // [lo, hi) of the result that each rank holds after the last level (of a
  // buffer of `total` elements).
  std::vector<std::pair<int64_t, int64_t>> final_pieces(int64_t total) const;
  // One run()'s buffers and state; its methods are run()'s phases.
  struct Reduction;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  // HostBuffers (huge pages where large): the partner's values are copied
  // into them and read back, with fewer TLB misses than on 4 KiB pages.
  HostBuffer scratch_;                    // the partner's half at each level
  HostBuffer scratch2_;                   // and at every other level from the second (see run())
  HostBuffer ring_;                       // the slots what is sent leaves from (adasum_exchange.h)
  adasum_exchange::Placement placement_;  // how near the peers' cores are, measured op by op
  bool peers_on_host_ = false;
  bool all_on_host_ = false;
  int64_t segment_bytes_ = kSegmentBytes;
};

// Adasum as the allreduce algorithm for responses whose op is Adasum: packs
// fused tensors (with the prescale, or into fp16/bf16 with compression), runs
// Adasum on the buffer with the tensors' boundaries, unpacks with the
// postscale. Enabled for every Adasum response (on any number of ranks: run()
// fails with a clear error where the size is not a power of two).
class AdasumAllreduce : public Algorithm {
 public:
  // Collective over an MPI world's communicator (World::mpi()): duplicates it
  // for its own traffic.
  AdasumAllreduce(const World& world, std::shared_ptr<FusionBuffer> fusion);
  ~AdasumAllreduce() override;
  const char* name() const override { return "ADASUM_ALLREDUCE"; }
  bool enabled(const Response& response) const override;
  OpResult run(const OpArgs& args) override;

 private:
  Status allreduce(const OpArgs& args);

  const World& world_;
  std::shared_ptr<FusionBuffer> fusion_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Status init_status_;
  std::unique_ptr<Adasum> adasum_;
};

}  // namespace horovodlite
