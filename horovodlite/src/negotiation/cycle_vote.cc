#include "negotiation/cycle_vote.h"

#include "kernels/reduce.h"

namespace horovodlite::negotiation {

CycleVote::CycleVote(size_t cache_capacity, int world_size)
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

void CycleVote::reset() {
  slots_.clear();
  slot_word_.clear();
  bits_.assign(bit_words_, 0);
}

void CycleVote::set_slots(const std::vector<Slot>& slots) {
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

void CycleVote::combine(const uint64_t* in, uint64_t* inout) const {
  for (size_t w = 0; w < bit_words_; ++w) inout[w] &= in[w];
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const size_t at = bit_words_ + slot_word_[i];
    kernels::reduce_into(inout + at, in + at, s.count, s.dtype, s.op == ReduceOp::kAverage ? ReduceOp::kSum : s.op);
  }
}

void CycleVote::record_shutdown(int rank) {
  set(kShouldShutDown);
  set_bit(requesters_, static_cast<uint32_t>(rank));
}

void CycleVote::record_exiting(int rank) { set_bit(exiters_, static_cast<uint32_t>(rank)); }

Status CycleVote::sync(RecursiveDoubling& exchange) {
  for (size_t w = 0; w < or_words_; ++w) bits_[w] = ~bits_[w];
  HVL_RETURN_IF_ERROR(
      exchange.run(bits_.data(), bits_.size(), [this](const uint64_t* in, uint64_t* inout) { combine(in, inout); }));
  for (size_t w = 0; w < or_words_; ++w) bits_[w] = ~bits_[w];
  return Status::OK();
}

std::vector<uint32_t> CycleVote::invalid() const {
  std::vector<uint32_t> out;
  for (size_t w = 0; w < words_; ++w) {
    for (uint64_t b = bits_[invalid_ + w]; b; b &= b - 1)
      out.push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(b)));
  }
  return out;
}

std::vector<uint32_t> CycleVote::hits() const {
  std::vector<uint32_t> out;
  for (size_t w = 0; w < words_; ++w) {
    for (uint64_t b = bits_[hits_ + w] & ~bits_[invalid_ + w]; b; b &= b - 1) {
      out.push_back(static_cast<uint32_t>(w * 64 + __builtin_ctzll(b)));
    }
  }
  return out;
}

std::vector<int> CycleVote::ranks_in(size_t word_offset) const {
  std::vector<int> out;
  for (int r = 0; r < world_size_; ++r)
    if (bits_[word_offset + r / 64] & (uint64_t(1) << (r % 64))) out.push_back(r);
  return out;
}

}  // namespace horovodlite::negotiation
