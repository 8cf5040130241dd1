#include "cache_coordinator.h"

#include "mpi_context.h"

namespace horovodlite {

CacheCoordinator::CacheCoordinator(size_t cache_capacity, int world_size)
    : words_((cache_capacity + 63) / 64),
      rank_words_((static_cast<size_t>(world_size) + 63) / 64),
      world_size_(world_size),
      requesters_(1),
      exiters_(requesters_ + rank_words_),
      invalid_(exiters_ + rank_words_),
      hits_(invalid_ + words_),
      or_words_(hits_),
      bits_(hits_ + words_, 0) {}

void CacheCoordinator::reset() { bits_.assign(bits_.size(), 0); }

void CacheCoordinator::record_shutdown(int rank) {
  set(kShouldShutDown);
  set_bit(requesters_, static_cast<uint32_t>(rank));
}

void CacheCoordinator::record_exiting(int rank) { set_bit(exiters_, static_cast<uint32_t>(rank)); }

Status CacheCoordinator::sync(MPI_Comm comm) {
  for (size_t w = 0; w < or_words_; ++w) bits_[w] = ~bits_[w];
  MPI_Request req;
  HVL_MPI_CHECK(
      MPI_Iallreduce(MPI_IN_PLACE, bits_.data(), static_cast<int>(bits_.size()), MPI_UINT64_T, MPI_BAND, comm, &req));
  HVL_RETURN_IF_ERROR(mpi_wait(&req, "MPI_Iallreduce (negotiation)"));
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
