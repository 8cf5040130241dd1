// Adasum; see adasum.h for the algorithm and why it cannot lose precision,
// ops/adasum_exchange.h for the point-to-point patterns it is made of. Three
// tags keep the phases apart: a rank that is done with one phase may already
// send the next phase's messages to a peer still in the previous one; within a
// tag, MPI's non-overtaking rule matches the segments in order.
#include "mpi/adasum.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <string>

#include "kernels/convert.h"
#include "kernels/reduce.h"
#include "mpi/adasum_exchange.h"
#include "op_util.h"
#include "ops/adasum_kernels.h"
#include "ops/fusion.h"
#include "ops/outputs.h"

namespace horovodlite {

namespace {

constexpr int kTagData = 1;     // reduce-scatter: the partner's half
constexpr int kTagScalars = 2;  // the group's dot products and norms
constexpr int kTagGather = 3;   // allgather: the pieces of the result
// Receives posted ahead in the reduce-scatter: each segment is copied in just
// before its dot products are computed, so it is read from cache.
constexpr size_t kWindow = 2;
// Send slots of the exchanges (adasum_exchange.h); as many for results.
constexpr int64_t kStagedSlots = 4;

using adasum_exchange::exchange;
using adasum_exchange::make_and_allgather;
using adasum_exchange::make_and_exchange;
using adasum_exchange::segments;
using adasum_exchange::staged_exchange;
using adasum_exchange::wait;
using adasum_kernels::combine;
using adasum_kernels::dispatch;
using adasum_kernels::dots;
using adasum_kernels::Scalar;

// A zero vector's coefficient is 1 (its term vanishes; no 0/0).
Scalar coefficient(Scalar dot, Scalar norm_sq) { return norm_sq > 0 ? 1 - dot / (2 * norm_sq) : Scalar(1); }

// [begin, end) of the tensors that overlap the element range [lo, hi), given
// the tensors' start offsets (offsets[i], with offsets.back() the total).
std::pair<size_t, size_t> tensors_in(const std::vector<int64_t>& offsets, int64_t lo, int64_t hi) {
  const size_t first = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), lo) - offsets.begin()) - 1;
  size_t last = first;
  while (last + 1 < offsets.size() && offsets[last] < hi) ++last;
  return {first, last};
}

// A level's split of the range [lo, hi) between a rank and its partner: the
// rank keeps the upper half if `upper`, else the lower, and sends the other.
struct Split {
  int64_t keep_lo, keep_hi, send_lo, send_hi;
};
Split split(int64_t lo, int64_t hi, bool upper) {
  const int64_t mid = lo + (hi - lo) / 2;
  return upper ? Split{mid, hi, lo, mid} : Split{lo, mid, mid, hi};
}

// At least `bytes` in *buf (its contents are not kept).
Status reserve(HostBuffer* buf, size_t bytes) {
  if (buf->size() >= bytes) return Status::OK();
  *buf = HostBuffer();  // the old one goes first
  *buf = HostBuffer(bytes);
  if (buf->data() == nullptr) return Status::Internal("Adasum: cannot allocate " + std::to_string(bytes) + " bytes");
  return Status::OK();
}

std::atomic<int> g_forced_slot_stores{-1};
std::atomic<bool> g_forced_pairwise_allgather{false};
std::atomic<int64_t> g_allgathers_from_every_rank{0};

}  // namespace

void Adasum::force_slot_stores_for_testing(int mode) { g_forced_slot_stores = mode; }
void Adasum::force_pairwise_allgather_for_testing(bool on) { g_forced_pairwise_allgather = on; }
int64_t Adasum::allgathers_from_every_rank() { return g_allgathers_from_every_rank.load(); }

int64_t Adasum::local_segment_bytes() {
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) return kSegmentBytes;
  return std::clamp<int64_t>(l2 / 4, kSegmentBytes, kMaxSegmentBytes);
}

Adasum::Adasum(MPI_Comm comm, bool peers_on_host, bool all_on_host, int64_t segment_bytes)
    : comm_(comm), peers_on_host_(peers_on_host), all_on_host_(all_on_host), segment_bytes_(segment_bytes) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

std::vector<std::pair<int64_t, int64_t>> Adasum::final_pieces(int64_t total) const {
  std::vector<std::pair<int64_t, int64_t>> pieces;
  for (int q = 0; q < size_; ++q) {
    int64_t lo = 0, hi = total;
    for (int d = 1; d < size_; d <<= 1) {  // as run() splits
      const Split s = split(lo, hi, (q & d) != 0);
      lo = s.keep_lo;
      hi = s.keep_hi;
    }
    pieces.emplace_back(lo, hi);
  }
  return pieces;
}

// One run()'s state: the buffers, where each tensor starts, and where the
// levels stand. Its methods are the phases of run().
struct Adasum::Reduction {
  // Partial (a.b, |a|^2, |b|^2) per tensor of each segment of the kept range,
  // kept per segment: they are computed in whichever order the segments come
  // and added up first to last, so the sums (and the result) do not depend on
  // that order.
  struct Partial {
    size_t tensor;
    Scalar v[3];
  };

  Reduction(Adasum* adasum, const void* in, void* out, const std::vector<int64_t>& counts, DataType dtype)
      : self(*adasum),
        in(in),
        out(out),
        dtype(dtype),
        elem(static_cast<int64_t>(dtype_size(dtype))),
        segment(std::max<int64_t>(self.segment_bytes_ / elem, 1) * elem),
        seg(segment / elem),
        offsets(counts.size() + 1, 0),
        ntensors(counts.size()),
        data(static_cast<char*>(out)),
        src(static_cast<const char*>(in)),
        sums(3 * ntensors),
        received(3 * ntensors),
        coefs(2 * ntensors),
        stores(g_forced_slot_stores.load(std::memory_order_relaxed), &self.placement_) {
    std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
    total = offsets.back();
    hi = total;
  }

  // The scratch buffers and the slots, and what is on huge pages already.
  //
  // What is sent leaves from a slot of ring_ (a huge page; see
  // adasum_exchange.h): copied there first, or combined straight into it,
  // unless it already sits on huge pages. The partner's values of the kept
  // range are stored: out of place, the first level receives them into `out`
  // (where the combination goes, in place); otherwise into scratch_, and at
  // levels received while the previous level's are still read (see
  // combine_into_next_level), into scratch_ and scratch2_ in turn.
  Status prepare() {
    const int64_t half = total - total / 2;
    HVL_RETURN_IF_ERROR(reserve(&self.ring_, static_cast<size_t>(2 * kStagedSlots * segment)));
    if (in == out || self.size_ > 2) HVL_RETURN_IF_ERROR(reserve(&self.scratch_, static_cast<size_t>(half * elem)));
    if (self.size_ > 2) HVL_RETURN_IF_ERROR(reserve(&self.scratch2_, static_cast<size_t>((half - half / 2) * elem)));
    // What of `in` and of `data` is on huge pages (sent as it is; the rest is
    // copied into slots): a HostBuffer, or the user's buffers moved there from
    // their second op on where the peers on this host copy out of them.
    const size_t bytes = static_cast<size_t>(total * elem);
    auto sendable = [&](const void* p) {
      if (self.peers_on_host_) return huge_pages_for_sending(p, bytes);
      const char* b = static_cast<const char*>(p);
      return on_huge_pages(p, bytes) ? ByteRange{b, b + bytes} : ByteRange{};
    };
    in_huge = sendable(in);
    data_huge = in == out ? in_huge : sendable(out);
    send_ring = self.ring_.data();  // kStagedSlots slots
    // The other kStagedSlots slots: the last level's results go from there,
    // unless `data` (the output, or in place the buffer) is on huge pages
    // already; and the allgather's sends (staged_exchange copies only where
    // `data` is not on huge pages either): the op's last slot writes, which a
    // peer may still cache when the next op's first exchange measures the send
    // slots (SlotStores).
    gather_ring = self.ring_.data() + kStagedSlots * segment;
    result_ring = data_huge.contains(data, bytes) ? nullptr : gather_ring;
    return Status::OK();
  }

  // The dot products of [plo, phi) of this rank's values at mine_base and the
  // partner's at theirs_base (its value of element theirs_lo), per tensor.
  void piece_dots(const char* mine_base, const char* theirs_base, int64_t theirs_lo, int64_t plo, int64_t phi,
                  std::vector<Partial>* into) const {
    const auto [first, last] = tensors_in(offsets, plo, phi);
    for (size_t t = first; t < last; ++t) {
      const int64_t a = std::max(plo, offsets[t]), b = std::min(phi, offsets[t + 1]);
      if (a >= b) continue;
      Partial p{t, {0, 0, 0}};
      const char* mine = mine_base + a * elem;
      const char* theirs = theirs_base + (a - theirs_lo) * elem;
      dispatch(dtype, [&](auto e) {
        using E = decltype(e);
        using T = typename E::T;
        dots<E>(reinterpret_cast<const T*>(mine), reinterpret_cast<const T*>(theirs), b - a, p.v);
      });
      into->push_back(p);
    }
  }

  // Sends the level's other half to the partner and receives its values of
  // the kept range, piece by piece, each piece's dot products computed as it
  // arrives (stored: the combination reads them again).
  Status exchange_halves(int partner, const Split& level) {
    theirs_base = src != data ? data + level.keep_lo * elem : self.scratch_.data();
    partials.assign(static_cast<size_t>((level.keep_hi - level.keep_lo + seg - 1) / seg), {});
    return staged_exchange(self.comm_, partner, kTagData, src, send_ring, kStagedSlots, &stores, elem, seg,
                           segments(level.send_lo, level.send_hi, seg, true),
                           segments(level.keep_lo, level.keep_hi, seg, true), theirs_base, level.keep_lo, kWindow,
                           src == data ? data_huge : in_huge, [&](int64_t plo, int64_t phi) {
                             piece_dots(src, theirs_base, level.keep_lo, plo, phi,
                                        &partials[static_cast<size_t>((plo - level.keep_lo) / seg)]);
                           });
  }

  // This rank's (a.b, |a|^2, |b|^2) per tensor, then the group's: the 2d
  // ranks that share a and b, by recursive doubling over ranks r ^ k, k = 1,
  // 2, ..., d. Both partners add the same two values (addition is
  // commutative), so every rank of the group ends with the same sums.
  Status group_sums(int d, bool upper) {
    std::fill(sums.begin(), sums.end(), Scalar(0));
    for (const auto& piece : partials) {
      for (const Partial& p : piece) {
        sums[3 * p.tensor] += p.v[0];
        sums[3 * p.tensor + 1] += upper ? p.v[2] : p.v[1];  // |a|^2
        sums[3 * p.tensor + 2] += upper ? p.v[1] : p.v[2];  // |b|^2
      }
    }
    for (int k = 1; k <= d; k <<= 1) {
      const int64_t bytes = static_cast<int64_t>(sums.size() * sizeof(Scalar));
      HVL_RETURN_IF_ERROR(exchange(self.comm_, self.rank_ ^ k, kTagScalars, reinterpret_cast<const char*>(sums.data()),
                                   bytes, reinterpret_cast<char*>(received.data()), bytes, bytes, 0,
                                   [](int64_t, int64_t) {}));
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += received[i];
    }
    return Status::OK();
  }

  // Each tensor's coefficients, final now: this rank's piece's, then the partner's.
  void set_coefficients(bool upper) {
    for (size_t t = 0; t < ntensors; ++t) {
      const Scalar ca = coefficient(sums[3 * t], sums[3 * t + 1]);
      const Scalar cb = coefficient(sums[3 * t], sums[3 * t + 2]);
      coefs[2 * t] = upper ? cb : ca;
      coefs[2 * t + 1] = upper ? ca : cb;
    }
  }

  // [rlo, rhi) combined into `at` (where element rlo goes), the partner's
  // values read from `theirs` (its value of element rlo).
  void combine_into(int64_t rlo, int64_t rhi, char* at, const char* theirs, bool stream) const {
    const auto [first, last] = tensors_in(offsets, rlo, rhi);
    for (size_t t = first; t < last; ++t) {
      const int64_t a = std::max(rlo, offsets[t]), b = std::min(rhi, offsets[t + 1]);
      if (a >= b) continue;
      dispatch(dtype, [&](auto e) {
        using E = decltype(e);
        using T = typename E::T;
        combine<E>(reinterpret_cast<T*>(at + (a - rlo) * elem), reinterpret_cast<const T*>(src + a * elem),
                   reinterpret_cast<const T*>(theirs + (a - rlo) * elem), b - a, coefs[2 * t], coefs[2 * t + 1],
                   stream);
      });
    }
  }
  // What the exchanges call to make a range of the level's kept half.
  auto combiner(const Split& level) {
    return [this, keep_lo = level.keep_lo](int64_t rlo, int64_t rhi, char* at, bool stream) {
      combine_into(rlo, rhi, at, theirs_base + (rlo - keep_lo) * elem, stream);
    };
  }

  // Combined, fused with the next level's exchange (partner rank ^ 2d): the
  // half of the kept range that goes to it is sent segment by segment as it is
  // combined, and each segment of the other half is combined as the partner's
  // values of it arrive and its dot products computed at once: no second pass
  // over either half. The walk is the other way round from this level's
  // exchange (what the cache holds first).
  Status combine_into_next_level(int d, const Split& level) {
    const Split next = split(level.keep_lo, level.keep_hi, (self.rank_ & (2 * d)) != 0);
    char* theirs2 = theirs_base == self.scratch_.data() ? self.scratch2_.data() : self.scratch_.data();
    next_partials.assign(static_cast<size_t>((next.keep_hi - next.keep_lo + seg - 1) / seg), {});
    auto on_keep = [&](int64_t plo, int64_t phi) {
      piece_dots(data, theirs2, next.keep_lo, plo, phi,
                 &next_partials[static_cast<size_t>((plo - next.keep_lo) / seg)]);
    };
    HVL_RETURN_IF_ERROR(make_and_exchange(self.comm_, self.rank_ ^ (2 * d), kTagData, data, theirs2, elem, next.send_lo,
                                          next.send_hi, next.keep_lo, next.keep_hi, seg, !forward, kWindow,
                                          combiner(level), on_keep, &stores, send_ring, kStagedSlots));
    partials.swap(next_partials);
    theirs_base = theirs2;
    forward = !forward;
    return Status::OK();
  }

  // The last level and the whole allgather at once (every rank on this host):
  // each combined segment goes at once to every other rank, whose single
  // copies read it out of this core's cache, as Sum's ring's do, instead of
  // out of memory an exchange later (docs/results/2026-11-adasum.md, "The
  // allgather from every rank at once").
  Status combine_and_allgather(const Split& level) {
    return make_and_allgather(self.comm_, self.rank_, kTagGather, data, elem, self.final_pieces(total), seg, !forward,
                              combiner(level), &stores, result_ring, kStagedSlots, data_huge);
  }

  // The last level: each segment is combined and at once sent to the partner,
  // as the first step of the allgather (whose partner is this level's), while
  // it is still in cache.
  Status combine_last_level(int partner, const Split& level) {
    return make_and_exchange(
        self.comm_, partner, kTagGather, data, nullptr, elem, level.keep_lo, level.keep_hi, level.send_lo,
        level.send_hi, seg, !forward, 0, combiner(level), [](int64_t, int64_t) {}, &stores, result_ring, kStagedSlots,
        data_huge);
  }

  // The allgather's other steps: the levels walked back, distance halving
  // (the first step, with the last level's partner, was the last level's).
  Status allgather() {
    lo = parents.back().first;
    hi = parents.back().second;
    for (int level = static_cast<int>(parents.size()) - 2; level >= 0; --level) {
      const int partner = self.rank_ ^ (1 << level);
      const auto [plo, phi] = parents[static_cast<size_t>(level)];
      // The partner holds the other half of the parent range.
      const int64_t olo = lo == plo ? hi : plo, ohi = lo == plo ? phi : lo;
      HVL_RETURN_IF_ERROR(staged_exchange(self.comm_, partner, kTagGather, data, gather_ring, kStagedSlots, &stores,
                                          elem, seg, segments(lo, hi, seg, true), segments(olo, ohi, seg, true), data,
                                          0, 0, data_huge, [](int64_t, int64_t) {}));
      lo = plo;
      hi = phi;
    }
    return Status::OK();
  }

  Adasum& self;
  const void* const in;
  void* const out;
  const DataType dtype;
  const int64_t elem;
  const int64_t segment;         // bytes per message
  const int64_t seg;             // the same in elements
  std::vector<int64_t> offsets;  // offsets[i]: where tensor i starts; offsets.back(): the total
  int64_t total = 0;
  const size_t ntensors;
  char* const data;
  // The first level reads the input (so that an out-of-place run copies
  // nothing); later levels read what the previous one wrote into `out`.
  const char* src;
  ByteRange in_huge, data_huge;
  char* send_ring = nullptr;
  char* gather_ring = nullptr;
  char* result_ring = nullptr;  // null: the results go from `data`
  std::vector<Scalar> sums, received, coefs;
  // Plain or streaming stores into the slots, as measured in this op.
  adasum_exchange::SlotStores stores;
  std::vector<std::vector<Partial>> partials, next_partials;
  std::vector<std::pair<int64_t, int64_t>> parents;  // the range held before each level
  int64_t lo = 0, hi = 0;                            // the range held now
  char* theirs_base = nullptr;                       // where the partner's values of the kept range are
  bool forward = true;                               // this level's exchange walked its segments first to last
};

Status Adasum::run(const void* in, void* out, const std::vector<int64_t>& counts, DataType dtype) {
  if (!adasum_dtype(dtype)) {
    return Status::InvalidArgument(std::string("Adasum reduces float16, bfloat16, float32 and float64 only, not ") +
                                   dtype_name(dtype));
  }
  if (!is_power_of_two(size_)) {
    return Status::InvalidArgument("Adasum needs a power-of-two number of ranks, not " + std::to_string(size_));
  }
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  const int64_t all = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  if (size_ == 1 || all == 0) {
    if (in != out && all > 0) std::memcpy(out, in, static_cast<size_t>(all * elem));
    return Status::OK();
  }
  Reduction r(this, in, out, counts, dtype);
  HVL_RETURN_IF_ERROR(r.prepare());

  // ---- reduce-scatter: vector halving, distance doubling ----
  bool exchanged = false;  // this level's exchange and dot products done with the previous level's combination
  for (int d = 1; d < size_; d <<= 1) {
    const int partner = rank_ ^ d;
    const bool upper = (rank_ & d) != 0;  // this rank holds b (the other half-group's vector is a)
    const Split level = split(r.lo, r.hi, upper);
    r.parents.emplace_back(r.lo, r.hi);
    // Exchange halves with the partner, unless the previous level's combination did.
    if (!exchanged) HVL_RETURN_IF_ERROR(r.exchange_halves(partner, level));
    // The group's dot products and norms make the coefficients.
    HVL_RETURN_IF_ERROR(r.group_sums(d, upper));
    r.set_coefficients(upper);
    // Combine, each segment sent on while in cache: to the next level's partner, ...
    if (2 * d < size_) {
      HVL_RETURN_IF_ERROR(r.combine_into_next_level(d, level));
      exchanged = true;
    } else if (all_on_host_ && size_ >= 4 && !g_forced_pairwise_allgather.load(std::memory_order_relaxed)) {
      // ... or, the last level, to every rank (which ends the op) ...
      HVL_RETURN_IF_ERROR(r.combine_and_allgather(level));
      g_allgathers_from_every_rank.fetch_add(1, std::memory_order_relaxed);
      return Status::OK();
    } else {
      // ... or to this level's partner, as the allgather's first step.
      HVL_RETURN_IF_ERROR(r.combine_last_level(partner, level));
    }
    r.src = r.data;
    r.lo = level.keep_lo;
    r.hi = level.keep_hi;
  }

  // ---- allgather: the levels walked back ----
  return r.allgather();
}

// ---- the algorithm behind the registry ----

namespace {

std::string names_of(const Response& r) {
  std::string s;
  for (size_t i = 0; i < r.names.size() && i < 4; ++i) s += (i ? ", '" : "'") + r.names[i] + "'";
  if (r.names.size() > 4) s += " and " + std::to_string(r.names.size() - 4) + " more";
  return s;
}

}  // namespace

AdasumAllreduce::AdasumAllreduce(const World& world, std::shared_ptr<FusionBuffer> fusion)
    : world_(world), fusion_(std::move(fusion)) {
  // Collective: every rank builds the same registry. A failed duplicate on any
  // rank makes every Adasum response fail on every rank (with this reason).
  Status dup = mpi_status(MPI_Comm_dup(world.mpi()->comm(), &comm_), "MPI_Comm_dup (Adasum)");
  init_status_ = world.agree(dup, "Adasum set-up", "making its communicator failed there");
  if (!init_status_.ok()) return;
  // One segment size for all (each rank's from its L2; the smallest).
  int64_t segment = Adasum::local_segment_bytes();
  init_status_ = mpi_status(MPI_Allreduce(MPI_IN_PLACE, &segment, 1, MPI_INT64_T, MPI_MIN, comm_),
                            "MPI_Allreduce (Adasum segment size)");
  if (init_status_.ok()) {
    adasum_ = std::make_unique<Adasum>(comm_, world.local_size() > 1, world.local_size() == world.size(), segment);
  }
}

AdasumAllreduce::~AdasumAllreduce() {
  adasum_.reset();
  if (comm_ != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&comm_);
}

bool AdasumAllreduce::enabled(const Response& r) const { return r.reduce_op == ReduceOp::kAdasum; }

OpResult AdasumAllreduce::run(const OpArgs& args) {
  return OpResult{allreduce(args), name(), outputs_in_place(args.entries)};
}

Status AdasumAllreduce::allreduce(const OpArgs& args) {
  const Response& r = args.response;
  const std::vector<TensorEntry*>& entries = args.entries;
  HVL_RETURN_IF_ERROR(init_status_);
  if (!adasum_dtype(r.dtype)) {
    return Status::InvalidArgument("Adasum reduces float16, bfloat16, float32 and float64 tensors only; " +
                                   names_of(r) + " is " + dtype_name(r.dtype));
  }
  if (!is_power_of_two(world_.size())) {
    return Status::InvalidArgument("Adasum needs a power-of-two number of ranks; " + names_of(r) + " is reduced over " +
                                   std::to_string(world_.size()));
  }
  const double pre = r.prescale, post = r.postscale;

  if (r.tensor_sizes.size() == 1 && !wire16_compressed(r) && !entries.empty() && entries[0] != nullptr) {
    // One tensor: in its output buffer, no copy through the fusion buffer.
    TensorEntry* e = entries[0];
    const int64_t n = r.tensor_sizes[0];
    const void* in = e->input.data;
    if (pre != 1.0) {
      kernels::scale_copy(e->output.data, in, n, r.dtype, pre);
      in = e->output.data;
    }
    {
      ObservedPhase phase(args.observer, r, name());
      HVL_RETURN_IF_ERROR(adasum_->run(in, e->output.data, r.tensor_sizes, r.dtype));
    }
    kernels::scale(e->output.data, n, r.dtype, post);
    return Status::OK();
  }

  // Fused tensors (or fp16/bf16 compression, or a rank that joined): through
  // the fusion buffer, each tensor combined with its own dot products.
  const bool compressed = wire16_compressed(r);
  const DataType wire = wire_dtype(r);
  const size_t welem = dtype_size(wire);
  const FusionLayout layout(r);
  const int64_t total = layout.elements();
  void* buf = fusion_->get(std::max<size_t>(static_cast<size_t>(total) * welem, 1));
  if (buf == nullptr) {
    return Status::Internal("out of memory allocating a fusion buffer of " + std::to_string(total * welem) +
                            " bytes (Adasum)");
  }
  {
    ObservedPhase phase(args.observer, r, "MEMCPY_IN_FUSION_BUFFER");
    std::vector<std::pair<void*, int64_t>> zeros;
    for (const CopyTask& t : layout.pack(entries, buf, welem, &zeros)) {
      if (compressed)
        kernels::to_half_scaled_n(static_cast<uint16_t*>(t.dst), t.src, t.count, r.dtype, pre, wire);
      else
        kernels::scale_copy(t.dst, t.src, t.count, r.dtype, pre);
    }
    for (const auto& z : zeros) std::memset(z.first, 0, static_cast<size_t>(z.second));
  }
  {
    ObservedPhase phase(args.observer, r, name());
    HVL_RETURN_IF_ERROR(adasum_->run(buf, buf, r.tensor_sizes, wire));
  }
  ObservedPhase phase(args.observer, r, "MEMCPY_OUT_FUSION_BUFFER");
  for (const CopyTask& t : layout.unpack(entries, buf, welem)) {
    if (compressed)
      kernels::from_half_scaled_n(t.dst, static_cast<const uint16_t*>(t.src), t.count, r.dtype, post, wire);
    else
      kernels::scale_copy(t.dst, t.src, t.count, r.dtype, post);
  }
  return Status::OK();
}

}  // namespace horovodlite
