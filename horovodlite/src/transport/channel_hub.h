// What the Gloo transport's two hubs share: ShmHub (gloo_shm.h, same-host
// peers through shared memory) and TcpHub (gloo_tcp_direct.h, other hosts on
// TCP connections of their own). A hub holds one channel per peer under one
// mutex and has no thread of its own: every test() of a request moves what can
// move on every channel. Messages meet receives per peer and slot, in posting
// order; one that arrives before its receive is kept as an "early" message
// that the receive takes when posted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "transport/transport.h"

namespace horovodlite {
namespace transport {

// "send to rank 3 (tag 7)": how errors name a posted operation.
inline std::string describe_op(bool send, int peer, int tag) {
  return std::string(send ? "send to" : "receive from") + " rank " + std::to_string(peer) + " (tag " +
         std::to_string(tag) + ")";
}

// The first of a slot's queued entries, taken off its queue (null: none). A
// slot's queue leaves the map when it empties.
template <typename T>
std::shared_ptr<T> pop_first(std::map<uint64_t, std::deque<std::shared_ptr<T>>>* queues, uint64_t slot) {
  auto it = queues->find(slot);
  if (it == queues->end() || it->second.empty()) return nullptr;
  std::shared_ptr<T> first = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues->erase(it);
  return first;
}

// Takes `entry` off its slot's queue, wherever it stands in it (a request
// abandoned before its turn). As pop_first, a queue that empties leaves the map:
// an empty map means nothing is posted.
template <typename T>
void remove_queued(std::map<uint64_t, std::deque<std::shared_ptr<T>>>* queues, uint64_t slot,
                   const std::shared_ptr<T>& entry) {
  auto it = queues->find(slot);
  if (it == queues->end()) return;
  auto at = std::find(it->second.begin(), it->second.end(), entry);
  if (at != it->second.end()) it->second.erase(at);
  if (it->second.empty()) queues->erase(it);
}

// An arriving message (slot, bytes) meets the first receive posted for its
// slot: true when there was one. *op is that receive, or null when its length
// differs (it fails naming both lengths, and the message is dropped).
template <typename Op>
bool meet_receive(std::map<uint64_t, std::deque<std::shared_ptr<Op>>>* recvs, uint64_t slot, uint64_t bytes,
                  std::shared_ptr<Op>* op) {
  *op = pop_first(recvs, slot);
  if (!*op) return false;
  if ((*op)->bytes != bytes) {
    (*op)->error = size_mismatch(bytes, (*op)->bytes);
    (*op)->complete = true;
    op->reset();
  }
  return true;
}

// A receive meets a message that arrived before it (Early: data, complete,
// claimed): a length mismatch fails it, a whole message is copied, one still
// arriving is claimed (finish_message completes it).
template <typename Op, typename Early>
void receive_early(const std::shared_ptr<Op>& op, Early* early) {
  if (early->data.size() != op->bytes) {
    op->error = size_mismatch(early->data.size(), op->bytes);
    op->complete = true;
  } else if (early->complete) {
    if (op->bytes > 0) std::memcpy(op->buf, early->data.data(), op->bytes);
    op->complete = true;
  } else {
    early->claimed = op;
  }
}

// The message being received has all its bytes: its receive completes, or,
// kept early, it is complete and goes to the receive that claimed it.
template <typename Op, typename Early>
void finish_message(std::shared_ptr<Op>* in_op, std::shared_ptr<Early>* in_early) {
  if (*in_op) (*in_op)->complete = true;
  if (*in_early) {
    (*in_early)->complete = true;
    if (std::shared_ptr<Op> op = (*in_early)->claimed) {
      if (op->bytes > 0) std::memcpy(op->buf, (*in_early)->data.data(), op->bytes);
      op->complete = true;
      (*in_early)->claimed.reset();
    }
  }
  in_op->reset();
  in_early->reset();
}

// The hubs' common part. Op: a posted send or receive (send, peer as a world
// rank, slot, complete, error, describe()). Channel: one peer's state (recvs,
// the receives posted per slot; in_op, the receive the arriving message goes
// into; in_early, the early message it goes into, with the receive that
// claimed it). Every field of both is guarded by mu_.
template <typename Op, typename Channel>
class ChannelHub {
 public:
  ChannelHub(const ChannelHub&) = delete;
  ChannelHub& operator=(const ChannelHub&) = delete;

  // Moves what can move on every channel, then says whether `op` has completed (or failed).
  Status test(Op* op, bool* done) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!op->complete) progress_locked();
    *done = op->complete;
    return op->complete ? op->error : Status::OK();
  }
  // Moves what can move on every channel (as test() does).
  void poll() {
    std::lock_guard<std::mutex> lock(mu_);
    progress_locked();
  }
  // A request destroyed before it completed: from now on its buffer is not the hub's to use.
  void abandon(const std::shared_ptr<Op>& op) {
    std::lock_guard<std::mutex> lock(mu_);
    if (op->complete) return;
    Channel* c = channel(op->peer);
    if (c == nullptr) return;
    if (op->send) {
      abandon_send(c, op);
    } else {
      abandon_receive(c, op);
    }
  }
  // Closes the channel to `world_peer` (outside the class: it destroys a
  // Channel, which only the hub's own .cc defines).
  void drop(int world_peer);
  // How many messages were read into a heap copy because their receive was
  // not posted yet (each hub says when that happens).
  size_t early_copies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return early_copies_;
  }

 protected:
  // `path`: how errors name the transport ("gloo, shared memory").
  ChannelHub(int world_rank, const char* path) : world_rank_(world_rank), path_(path) {}
  ~ChannelHub() = default;

  // Moves what can move on one channel (mu_ held).
  virtual void progress_channel(Channel* c) = 0;
  // An abandoned send that has not completed (mu_ held).
  virtual void abandon_send(Channel* c, const std::shared_ptr<Op>& op) = 0;
  // An abandoned receive that has not completed (mu_ held): off its queue (no
  // empty queue is left behind: an empty `recvs` means no receive is posted),
  // the rest of the message it was receiving dropped, and failed.
  virtual void abandon_receive(Channel* c, const std::shared_ptr<Op>& op) {
    remove_queued(&c->recvs, op->slot, op);
    if (c->in_op == op) c->in_op.reset();
    if (c->in_early && c->in_early->claimed == op) c->in_early->claimed.reset();
    op->complete = true;
    op->error = Status::Aborted(std::string("transport (") + path_ + "): " + op->describe() + " was abandoned");
  }

  void progress_locked() {
    for (auto& kv : channels_) progress_channel(kv.second.get());
  }
  Channel* channel(int world_peer) const {
    auto it = channels_.find(world_peer);
    return it == channels_.end() ? nullptr : it->second.get();
  }

  const int world_rank_;
  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<Channel>> channels_;
  size_t early_copies_ = 0;

 private:
  const char* path_;
};

template <typename Op, typename Channel>
void ChannelHub<Op, Channel>::drop(int world_peer) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.erase(world_peer);
}

}  // namespace transport
}  // namespace horovodlite
