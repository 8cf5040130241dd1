#include "cache_coordinator.h"

#include <atomic>
#include <cstring>

#include "kernels/reduce.h"
#include "mpi_context.h"

namespace horovodlite {

namespace {
// The vector reduce_vote_entry() works on: set for the one sync() with slots in flight
// (the background thread runs one cycle at a time, for every process set), read
// by whichever thread MPI's progress calls reduce_vote_entry() on.
std::atomic<const CacheCoordinator*> g_syncing{nullptr};

MPI_Op vote_op() {
  static MPI_Op op = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_Op_create(&CacheCoordinator::reduce_vote_entry, /*commute=*/1, &o);
    return o;
  }();
  return op;
}
}  // namespace

CacheCoordinator::CacheCoordinator(size_t cache_capacity, int world_size)
    : words_((cache_capacity + 63) / 64),
      rank_words_((static_cast<size_t>(world_size) + 63) / 64),
      world_size_(world_size),
      requesters_(1),
      exiters_(requesters_ + rank_words_),
      invalid_(exiters_ + rank_words_),
      hits_(invalid_ + words_),
      or_words_(hits_),
      bit_words_(hits_ + words_),
      bits_(bit_words_, 0) {}

CacheCoordinator::~CacheCoordinator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (whole_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&whole_);
}

void CacheCoordinator::reset() {
  slots_.clear();
  slot_word_.clear();
  bits_.assign(bit_words_, 0);
}

void CacheCoordinator::set_slots(const std::vector<Slot>& slots) {
  slots_ = slots;
  slot_word_.clear();
  size_t words = 0;
  for (const Slot& s : slots_) {
    slot_word_.push_back(words);
    words += (static_cast<size_t>(s.count) * dtype_size(s.dtype) + 7) / 8;
  }
  bits_.resize(bit_words_);
  bits_.resize(bit_words_ + words, 0);
}

void CacheCoordinator::reduce_vote_entry(void* in, void* inout, int* len, MPI_Datatype*) {
  const CacheCoordinator* c = g_syncing.load(std::memory_order_acquire);
  if (c == nullptr) return;  // cannot happen: only sync() with slots uses this op
  const size_t total = c->bits_.size();
  for (int e = 0; e < *len; ++e) {
    const uint64_t* a = static_cast<const uint64_t*>(in) + e * total;
    uint64_t* b = static_cast<uint64_t*>(inout) + e * total;
    for (size_t w = 0; w < c->bit_words_; ++w) b[w] &= a[w];
    for (size_t i = 0; i < c->slots_.size(); ++i) {
      const Slot& s = c->slots_[i];
      const size_t at = c->bit_words_ + c->slot_word_[i];
      kernels::reduce_into(b + at, a + at, s.count, s.dtype, s.op == ReduceOp::kAverage ? ReduceOp::kSum : s.op);
    }
  }
}

void CacheCoordinator::record_shutdown(int rank) {
  set(kShouldShutDown);
  set_bit(requesters_, static_cast<uint32_t>(rank));
}

void CacheCoordinator::record_exiting(int rank) { set_bit(exiters_, static_cast<uint32_t>(rank)); }

Status CacheCoordinator::sync(MPI_Comm comm) {
  for (size_t w = 0; w < or_words_; ++w) bits_[w] = ~bits_[w];
  MPI_Request req;
  if (slots_.empty()) {
    HVL_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, bits_.data(), static_cast<int>(bits_.size()), MPI_UINT64_T, MPI_BAND, comm, &req));
    HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Iallreduce (negotiation)"));
  } else {
    if (whole_words_ != bits_.size()) {  // the same layout cycle after cycle: keep the type
      if (whole_ != MPI_DATATYPE_NULL) MPI_Type_free(&whole_);
      whole_words_ = 0;
      HVL_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(bits_.size()), MPI_UINT64_T, &whole_));
      HVL_MPI_CHECK(MPI_Type_commit(&whole_));
      whole_words_ = bits_.size();
    }
    struct Done {
      ~Done() { g_syncing.store(nullptr, std::memory_order_release); }
    } done;
    g_syncing.store(this, std::memory_order_release);
    HVL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bits_.data(), 1, whole_, vote_op(), comm, &req));
    HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Iallreduce (negotiation with data)"));
  }
  for (size_t w = 0; w < or_words_; ++w) bits_[w] = ~bits_[w];
  return Status::OK();
}

std::vector<uint32_t> CacheCoordinator::invalid() const {
  std::vector<uint32_t> out;
  for (size_t w = 0; w < words_; ++w) {
    for (uint64_t b = bits_[invalid_ + w]; b; b &= b - 1)
      out.push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(b)));
  }
  return out;
}

std::vector<uint32_t> CacheCoordinator::hits() const {
  std::vector<uint32_t> out;
  for (size_t w = 0; w < words_; ++w) {
    for (uint64_t b = bits_[hits_ + w] & ~bits_[invalid_ + w]; b; b &= b - 1) {
      out.push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(b)));
    }
  }
  return out;
}

std::vector<int> CacheCoordinator::ranks_in(size_t word_offset) const {
  std::vector<int> out;
  for (int r = 0; r < world_size_; ++r)
    if (bits_[word_offset + r / 64] & (uint64_t(1) << (r % 64))) out.push_back(r);
  return out;
}

}  // namespace horovodlite
