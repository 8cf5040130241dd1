#include "negotiation/recursive_doubling.h"

#include <algorithm>
#include <climits>

namespace horovodlite {

namespace {
constexpr int kFoldTag = 0;
constexpr int kUnfoldTag = 1;
constexpr int kFirstExchangeTag = 2;  // + the exchange's index (< 32 for any int rank count)
}  // namespace

RecursiveDoubling::RecursiveDoubling(transport::ContextPtr context, int64_t message_bytes)
    : context_(std::move(context)),
      piece_words_(message_bytes >= 8 ? static_cast<size_t>(message_bytes / 8) : size_t(INT_MAX) / 8) {
  plan();
}

void RecursiveDoubling::plan() {
  rank_ = context_->rank();
  size_ = context_->size();
  int pof2 = 1;
  while (pof2 <= size_ / 2) pof2 *= 2;
  const int rem = size_ - pof2;
  int vrank = rank_ - rem;  // this rank's place among the pof2 that exchange
  if (rank_ < 2 * rem) {
    fold_partner_ = rank_ % 2 == 0 ? rank_ + 1 : rank_ - 1;
    folded_out_ = rank_ % 2 == 0;
    vrank = rank_ / 2;
  }
  if (folded_out_) return;
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int vpeer = vrank ^ mask;
    peers_.push_back(vpeer < rem ? vpeer * 2 + 1 : vpeer + rem);
  }
}

Status RecursiveDoubling::post(bool send, uint64_t* words, size_t n, int peer, int tag) {
  const size_t pieces = n == 0 ? 1 : (n + piece_words_ - 1) / piece_words_;
  for (size_t k = 0; k < pieces; ++k) {
    const size_t at = k * piece_words_;
    const size_t bytes = std::min(piece_words_, n - at) * sizeof(uint64_t);
    requests_.emplace_back();
    HVL_RETURN_IF_ERROR(send ? context_->isend(words + at, bytes, peer, tag, &requests_.back())
                             : context_->irecv(words + at, bytes, peer, tag, &requests_.back()));
  }
  return Status::OK();
}

Status RecursiveDoubling::wait_posted() {
  Status first;
  for (transport::RequestPtr& r : requests_) {  // every request completes (or fails) before the buffers are reused
    Status s = r->wait(transport::kNoTimeout, transport::kControlBackoff);
    if (first.ok() && !s.ok()) first = s;
  }
  requests_.clear();
  return first;
}

Status RecursiveDoubling::run(uint64_t* words, size_t n, const Combine& combine) {
  if (size_ == 1) return Status::OK();
  scratch_.resize(n);
  requests_.clear();
  if (folded_out_) {
    HVL_RETURN_IF_ERROR(post(true, words, n, fold_partner_, kFoldTag));
    HVL_RETURN_IF_ERROR(wait_posted());
    HVL_RETURN_IF_ERROR(post(false, words, n, fold_partner_, kUnfoldTag));
    return wait_posted();
  }
  if (fold_partner_ >= 0) {
    HVL_RETURN_IF_ERROR(post(false, scratch_.data(), n, fold_partner_, kFoldTag));
    HVL_RETURN_IF_ERROR(wait_posted());
    combine(scratch_.data(), words);
  }
  for (size_t i = 0; i < peers_.size(); ++i) {
    const int tag = kFirstExchangeTag + static_cast<int>(i);
    HVL_RETURN_IF_ERROR(post(false, scratch_.data(), n, peers_[i], tag));
    HVL_RETURN_IF_ERROR(post(true, words, n, peers_[i], tag));
    HVL_RETURN_IF_ERROR(wait_posted());
    combine(scratch_.data(), words);
  }
  if (fold_partner_ >= 0) {
    HVL_RETURN_IF_ERROR(post(true, words, n, fold_partner_, kUnfoldTag));
    HVL_RETURN_IF_ERROR(wait_posted());
  }
  return Status::OK();
}

}  // namespace horovodlite
