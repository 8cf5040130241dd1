#include "transport/gloo_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "transport/gloo_shm_channel.h"

namespace horovodlite {
namespace transport {

template class ChannelHub<ShmOp, ShmChannel>;

namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

class ShmRequest : public Request {
 public:
  ShmRequest(std::shared_ptr<ShmHub> hub, std::shared_ptr<ShmOp> op, int peer, int tag, bool send)
      : Request(peer, tag, send), hub_(std::move(hub)), op_(std::move(op)) {}
  ~ShmRequest() override {
    bool done = false;
    if (test(&done).ok() && done) return;
    // Still in flight: give it the hub's time, then let the hub stop using the buffer.
    Status s = wait(hub_->abandon_after());
    if (!s.ok()) hub_->abandon(op_);
  }
  // Polls yield instead of spinning, as an MPI job's do with the launcher's
  // flags (python/horovodlite/runner/mpi_flags.py): a busy spin would hold a
  // core the training threads of this host need (the same-host peers are on
  // the same cores).
  Backoff tune(const Backoff& b) const override { return yielding(b); }
  Status test(bool* done) override {
    if (finished_) {
      *done = true;
      return Status::OK();
    }
    Status s = hub_->test(op_.get(), done);
    if (!s.ok() || *done) {
      finished_ = true;
      return s;
    }
    // Whether the peer is gone takes the lock of its TCP pair's buffer: not
    // on every poll of a wait (a death is still seen within milliseconds).
    if (++polls_ % kPollsPerPeerCheck == 0 && hub_->peer_gone(op_->peer)) {
      // Whatever it wrote before it went is in the ring: take it first.
      s = hub_->test(op_.get(), done);
      if (!s.ok() || *done) {
        finished_ = true;
        return s;
      }
      hub_->abandon(op_);
      finished_ = true;
      return Status::Aborted("transport (gloo, shared memory): " + op_->describe() +
                             " failed: the peer's connection closed");
    }
    return Status::OK();
  }

 private:
  std::shared_ptr<ShmHub> hub_;
  static constexpr uint32_t kPollsPerPeerCheck = 16;
  std::shared_ptr<ShmOp> op_;
  bool finished_ = false;
  uint32_t polls_ = 0;
};

}  // namespace

ShmHub::ShmHub(int world_rank, bool single_copy, std::function<bool(int)> peer_gone,
               std::chrono::milliseconds abandon_after)
    : ChannelHub(world_rank, "gloo, shared memory"),
      single_copy_(single_copy),
      peer_gone_(std::move(peer_gone)),
      abandon_after_(abandon_after) {}

ShmHub::~ShmHub() = default;

Status ShmHub::create_channel(int world_peer, std::string* name) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  *name = "/hvl." + std::to_string(getpid()) + "." + std::to_string(world_rank_) + "." + std::to_string(world_peer) +
          "." + std::to_string(counter++) + "." + std::to_string(rd());
  const int fd = shm_open(name->c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status::Aborted(errno_text("transport (gloo, shared memory): shm_open " + *name));
  // Reserve the pages now: a /dev/shm too small for them (64 MiB in a default
  // Docker container) fails here, not with SIGBUS at the first message.
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(kFileBytes));
  if (rc != 0) {
    errno = rc;
    const Status s = Status::Aborted(
        errno_text("transport (gloo, shared memory): reserving " + std::to_string(kFileBytes) + " bytes for " + *name));
    close(fd);
    shm_unlink(name->c_str());
    return s;
  }
  void* m = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    shm_unlink(name->c_str());
    return Status::Aborted(errno_text("transport (gloo, shared memory): mmap " + *name));
  }
  auto* h = static_cast<FileHeader*>(m);
  h->capacity = kShmRingBytes;
  for (RingCtl& r : h->ring) {
    r.head.store(0, std::memory_order_relaxed);
    r.tail.store(0, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  add_channel(world_peer, m);
  return Status::OK();
}

Status ShmHub::open_channel(int world_peer, const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Status::Aborted(errno_text("transport (gloo, shared memory): shm_open " + name));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != kFileBytes) {
    close(fd);
    return Status::Aborted("transport (gloo, shared memory): " + name + " is not " + std::to_string(kFileBytes) +
                           " bytes");
  }
  void* m = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return Status::Aborted(errno_text("transport (gloo, shared memory): mmap " + name));
  std::atomic_thread_fence(std::memory_order_acquire);
  const auto* h = static_cast<const FileHeader*>(m);
  if (h->magic != kMagic || h->capacity != kShmRingBytes) {
    munmap(m, kFileBytes);
    return Status::Aborted("transport (gloo, shared memory): " + name + " has another layout");
  }
  add_channel(world_peer, m);
  return Status::OK();
}

void ShmHub::add_channel(int world_peer, void* mapped) {
  auto c = std::make_unique<ShmChannel>();
  c->peer = world_peer;
  c->attach(mapped, world_rank_ < world_peer);
  std::lock_guard<std::mutex> lock(mu_);
  channels_[world_peer] = std::move(c);
}

void ShmHub::probe_single_copy(int world_peer) {
  std::lock_guard<std::mutex> lock(mu_);
  ShmChannel* c = channel(world_peer);
  if (c == nullptr) return;
  c->peer_pid = static_cast<pid_t>(c->theirs->pid.load(std::memory_order_acquire));
  const uint64_t at = c->theirs->probe.load(std::memory_order_relaxed);
  uint64_t word = 0;
  const bool ok = single_copy_ && c->peer_pid > 0 && at != 0 &&
                  read_remote(c->peer_pid, at, &word, sizeof(word)) == 0 && word == kProbeWord;
  c->mine->reads_peer.store(ok ? 1 : -1, std::memory_order_release);
}

void ShmHub::unlink_name(const std::string& name) { shm_unlink(name.c_str()); }

bool ShmHub::has(int world_peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return channels_.count(world_peer) != 0;
}

Status ShmHub::post(bool send, void* buf, size_t bytes, int peer, int world_peer, uint64_t slot, int tag,
                    RequestPtr* request, bool eager) {
  auto op = std::make_shared<ShmOp>();
  op->send = send;
  op->eager = eager;
  op->peer = world_peer;
  op->tag = tag;
  op->slot = slot;
  op->buf = static_cast<uint8_t*>(buf);
  op->bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ShmChannel* c = channel(world_peer);
    if (c == nullptr)
      return Status::Internal("transport (gloo, shared memory): no channel to rank " + std::to_string(world_peer));
    if (send) {
      c->sends.push_back(op);
    } else {
      progress_channel(c);  // what arrived first, a descriptor's new address included
      if (std::shared_ptr<ShmEarly> early = pop_first(&c->early, slot)) {
        if (early->remote) {
          c->take(op, early->desc);
        } else {
          receive_early(op, early.get());
        }
      } else {
        c->recvs[slot].push_back(op);
      }
    }
    progress_locked();
  }
  *request = std::make_unique<ShmRequest>(shared_from_this(), std::move(op), peer, tag, send);
  return Status::OK();
}

void ShmHub::abandon_send(ShmChannel* c, const std::shared_ptr<ShmOp>& op) {
  if (op->remote && op->header_out) {
    // The peer has its address: revoke it, unless the peer is reading it
    // now (then wait for the read: it is short) or has read it.
    std::atomic<uint64_t>& m = c->my_taken[op->id % kTakenSlots];
    const auto deadline = std::chrono::steady_clock::now() + kDefaultTimeout;
    uint64_t cur = m.load(std::memory_order_acquire);
    while (cur == mark(op->id, kReading) && !peer_gone_(op->peer) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
      cur = m.load(std::memory_order_acquire);
    }
    if (cur >> 8 == op->id + 1 || !m.compare_exchange_strong(cur, mark(op->id, kRevoked), std::memory_order_acq_rel)) {
      c->check_taken();  // read (or being read by a peer that is gone or stuck): done with the buffer
      if (!op->complete) {
        c->remote_sends.erase(op->id);
        op->complete = true;
        op->error = Status::Aborted("transport (gloo, shared memory): " + op->describe() + " was abandoned");
      }
      return;
    }
    // Revoked: the peer reads a copy, whose address follows.
    op->owned.assign(op->buf, op->buf + op->bytes);
    op->buf = op->owned.data();
    c->moved.push_back(MsgHeader{op->slot, op->bytes, kMoved, op->id, reinterpret_cast<uint64_t>(op->buf)});
    progress_channel(c);
    return;
  }
  auto it = std::find(c->sends.begin(), c->sends.end(), op);
  if (it == c->sends.end()) return;
  if (!op->header_out) {
    c->sends.erase(it);
  } else {  // part of it is in the ring: the rest must follow, from a copy
    op->owned.assign(op->buf, op->buf + op->bytes);
    op->buf = op->owned.data();
  }
}

// A receive waiting for a revoked descriptor's new address waits no more;
// the rest is the hub's (progress_channel reads "no receive posted" as
// recvs.empty() and then leaves arriving messages in the ring).
void ShmHub::abandon_receive(ShmChannel* c, const std::shared_ptr<ShmOp>& op) {
  for (auto it = c->revoked.begin(); it != c->revoked.end(); ++it) {
    if (it->second == op) {
      c->revoked.erase(it);
      break;
    }
  }
  ChannelHub::abandon_receive(c, op);
}

void ShmHub::progress_channel(ShmChannel* c) {
  c->check_taken();
  while (!c->moved.empty() && c->space() >= sizeof(MsgHeader)) {
    c->write(&c->moved.front(), sizeof(MsgHeader));
    c->moved.pop_front();
  }
  // Sends, in posting order, as far as the ring has room; large ones by
  // descriptor where they can.
  while (!c->sends.empty()) {
    ShmOp* op = c->sends.front().get();
    if (!op->header_out && single_copy_ && !op->eager && op->bytes >= kShmSingleCopyBytes && c->can_send_remote()) {
      op->remote = true;
      op->id = c->next_id++;
    }
    if (op->remote) {
      if (c->space() < sizeof(MsgHeader)) break;
      const MsgHeader h{op->slot, op->bytes, kRemote, op->id, reinterpret_cast<uint64_t>(op->buf)};
      c->write(&h, sizeof(h));
      op->header_out = true;
      c->remote_sends[op->id] = std::move(c->sends.front());
      c->sends.pop_front();
      continue;
    }
    if (!op->header_out) {
      if (c->space() < sizeof(MsgHeader)) break;
      const MsgHeader h{op->slot, op->bytes};
      c->write(&h, sizeof(h));
      op->header_out = true;
    }
    const size_t n = std::min(op->bytes - op->moved, c->space());
    if (n > 0) c->write(op->buf + op->moved, n);
    op->moved += n;
    if (op->moved < op->bytes) break;
    op->complete = true;
    c->sends.pop_front();
  }
  // Arrived bytes, message by message.
  while (true) {
    if (!c->in_msg) {
      if (c->available() < sizeof(MsgHeader)) break;
      MsgHeader h;
      c->peek(&h, sizeof(h));
      if (h.kind != kBytes) {
        c->read(nullptr, sizeof(h));
        c->control_message(h);
        continue;
      }
      // No receive posted on this channel: leave the message in the ring,
      // where its receive, posted soon (the ring allreduce's next segment),
      // takes it from without a heap copy; unless something must get past it:
      // a receive posted for a later message (then there is one), a message
      // behind it (it may be an answer this rank waits for), or a sender that
      // the full ring holds up.
      const size_t avail = c->available();
      if (c->recvs.empty() && avail <= sizeof(MsgHeader) + h.bytes && avail + sizeof(MsgHeader) <= kShmRingBytes) {
        break;
      }
      c->read(&c->in_hdr, sizeof(MsgHeader));
      c->in_msg = true;
      c->in_done = 0;
      if (!meet_receive(&c->recvs, c->in_hdr.slot, c->in_hdr.bytes, &c->in_op)) {
        c->in_early = std::make_shared<ShmEarly>();
        c->in_early->data.resize(c->in_hdr.bytes);
        c->early[c->in_hdr.slot].push_back(c->in_early);
        ++early_copies_;
      }
    }
    const size_t n = std::min<uint64_t>(c->in_hdr.bytes - c->in_done, c->available());
    if (n > 0) {
      uint8_t* dst = c->in_op ? c->in_op->buf : c->in_early ? c->in_early->data.data() : nullptr;
      c->read(dst ? dst + c->in_done : nullptr, n);
      c->in_done += n;
    }
    if (c->in_done < c->in_hdr.bytes) break;
    finish_message(&c->in_op, &c->in_early);
    c->in_msg = false;
  }
}

}  // namespace transport
}  // namespace horovodlite
