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

namespace horovodlite {
namespace transport {

namespace {

constexpr uint64_t kMagic = 0x68766c73686d3031ull;  // "hvlshm01"

// One direction: the producer owns `head` (bytes written so far), the consumer
// `tail` (bytes consumed); each on its own cache line.
struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;
  char pad0[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> tail;
  char pad1[64 - sizeof(std::atomic<uint64_t>)];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory rings need lock-free 64-bit atomics");

struct FileHeader {
  uint64_t magic;
  uint64_t capacity;
  RingCtl ring[2];  // [0]: lower rank -> higher rank, [1]: the other way
};
constexpr size_t kDataOffset = (sizeof(FileHeader) + 4095) / 4096 * 4096;
constexpr size_t kFileBytes = kDataOffset + 2 * kShmRingBytes;

struct MsgHeader {
  uint64_t slot;
  uint64_t bytes;
};

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

// One posted send or receive (fields guarded by the hub's mutex).
struct ShmOp {
  bool send = false;
  int peer = -1;
  int tag = 0;
  uint64_t slot = 0;
  uint8_t* buf = nullptr;
  size_t bytes = 0;
  size_t moved = 0;         // bytes written (send) so far
  bool header_out = false;  // send: its header is in the ring
  bool complete = false;
  Status error;
  std::vector<uint8_t> owned;  // a send whose request went away: its own copy
  std::string describe() const {
    return std::string(send ? "send to" : "receive from") + " rank " + std::to_string(peer) + " (tag " +
           std::to_string(tag) + ")";
  }
};

// A message that arrived before its receive was posted.
struct ShmEarly {
  std::vector<uint8_t> data;
  bool complete = false;
  std::shared_ptr<ShmOp> claimed;  // the receive that took it while it was still arriving
};

struct ShmChannel {
  int peer = -1;
  void* map = nullptr;
  RingCtl* out = nullptr;
  RingCtl* in = nullptr;
  uint8_t* out_data = nullptr;
  uint8_t* in_data = nullptr;
  uint64_t out_head = 0;  // this side's copy of what it owns
  uint64_t in_tail = 0;
  std::deque<std::shared_ptr<ShmOp>> sends;                         // in posting order
  std::map<uint64_t, std::deque<std::shared_ptr<ShmOp>>> recvs;     // posted, per slot
  std::map<uint64_t, std::deque<std::shared_ptr<ShmEarly>>> early;  // arrived first, per slot
  // The message being received: into `in_op`'s buffer, `in_early`'s, or dropped.
  bool in_msg = false;
  MsgHeader in_hdr{0, 0};
  uint64_t in_done = 0;
  std::shared_ptr<ShmOp> in_op;
  std::shared_ptr<ShmEarly> in_early;

  ~ShmChannel() {
    if (map != nullptr) munmap(map, kFileBytes);
  }
  void attach(void* m, bool lower) {
    map = m;
    auto* h = static_cast<FileHeader*>(m);
    auto* data = static_cast<uint8_t*>(m) + kDataOffset;
    out = &h->ring[lower ? 0 : 1];
    in = &h->ring[lower ? 1 : 0];
    out_data = data + (lower ? 0 : kShmRingBytes);
    in_data = data + (lower ? kShmRingBytes : 0);
    out_head = out->head.load(std::memory_order_relaxed);
    in_tail = in->tail.load(std::memory_order_relaxed);
  }
  size_t space() const { return kShmRingBytes - (out_head - out->tail.load(std::memory_order_acquire)); }
  size_t available() const { return in->head.load(std::memory_order_acquire) - in_tail; }
  // Copies n bytes (n <= space()) into the ring and publishes them.
  void write(const void* src, size_t n) {
    const size_t at = out_head % kShmRingBytes;
    const size_t first = std::min(n, kShmRingBytes - at);
    std::memcpy(out_data + at, src, first);
    if (n > first) std::memcpy(out_data, static_cast<const uint8_t*>(src) + first, n - first);
    out_head += n;
    out->head.store(out_head, std::memory_order_release);
  }
  // Copies n bytes (n <= available()) out of the ring (dst null: drops them).
  void read(void* dst, size_t n) {
    if (dst != nullptr) {
      const size_t at = in_tail % kShmRingBytes;
      const size_t first = std::min(n, kShmRingBytes - at);
      std::memcpy(dst, in_data + at, first);
      if (n > first) std::memcpy(static_cast<uint8_t*>(dst) + first, in_data, n - first);
    }
    in_tail += n;
    in->tail.store(in_tail, std::memory_order_release);
  }
};

namespace {

class ShmRequest : public Request {
 public:
  ShmRequest(std::shared_ptr<ShmHub> hub, std::shared_ptr<ShmOp> op, int peer, int tag, bool send)
      : Request(peer, tag, send), hub_(std::move(hub)), op_(std::move(op)) {}
  ~ShmRequest() override {
    bool done = false;
    if (test(&done).ok() && done) return;
    // Still in flight: give it the default time, then let the hub stop using the buffer.
    Status s = wait(kDefaultTimeout);
    if (!s.ok()) hub_->abandon(op_);
  }
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
    if (hub_->peer_gone(op_->peer)) {
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
  std::shared_ptr<ShmOp> op_;
  bool finished_ = false;
};

}  // namespace

ShmHub::ShmHub(int world_rank, std::function<bool(int)> peer_gone)
    : world_rank_(world_rank), peer_gone_(std::move(peer_gone)) {}

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

void ShmHub::unlink_name(const std::string& name) { shm_unlink(name.c_str()); }

void ShmHub::drop_channel(int world_peer) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.erase(world_peer);
}

bool ShmHub::has(int world_peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return channels_.count(world_peer) != 0;
}

ShmChannel* ShmHub::channel(int world_peer) const {
  auto it = channels_.find(world_peer);
  return it == channels_.end() ? nullptr : it->second.get();
}

Status ShmHub::post(bool send, void* buf, size_t bytes, int peer, int world_peer, uint64_t slot, int tag,
                    RequestPtr* request) {
  auto op = std::make_shared<ShmOp>();
  op->send = send;
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
      auto e = c->early.find(slot);
      if (e != c->early.end() && !e->second.empty()) {
        std::shared_ptr<ShmEarly> early = e->second.front();
        e->second.pop_front();
        if (e->second.empty()) c->early.erase(e);
        if (early->data.size() != bytes) {
          op->error = size_mismatch(early->data.size(), bytes);
          op->complete = true;
        } else if (early->complete) {
          if (bytes > 0) std::memcpy(op->buf, early->data.data(), bytes);
          op->complete = true;
        } else {
          early->claimed = op;
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

Status ShmHub::test(ShmOp* op, bool* done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!op->complete) progress_locked();
  *done = op->complete;
  return op->complete ? op->error : Status::OK();
}

void ShmHub::abandon(const std::shared_ptr<ShmOp>& op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (op->complete) return;
  ShmChannel* c = channel(op->peer);
  if (c == nullptr) return;
  if (op->send) {
    auto it = std::find(c->sends.begin(), c->sends.end(), op);
    if (it == c->sends.end()) return;
    if (!op->header_out) {
      c->sends.erase(it);
    } else {  // part of it is in the ring: the rest must follow, from a copy
      op->owned.assign(op->buf, op->buf + op->bytes);
      op->buf = op->owned.data();
    }
    return;
  }
  auto r = c->recvs.find(op->slot);
  if (r != c->recvs.end()) {
    auto it = std::find(r->second.begin(), r->second.end(), op);
    if (it != r->second.end()) r->second.erase(it);
  }
  if (c->in_op == op) c->in_op.reset();  // the rest of its message is dropped
  if (c->in_early && c->in_early->claimed == op) c->in_early->claimed.reset();
  op->complete = true;
  op->error = Status::Aborted("transport (gloo, shared memory): " + op->describe() + " was abandoned");
}

void ShmHub::progress_locked() {
  for (auto& kv : channels_) progress_channel(kv.second.get());
}

void ShmHub::progress_channel(ShmChannel* c) {
  // Sends, in posting order, as far as the ring has room.
  while (!c->sends.empty()) {
    ShmOp* op = c->sends.front().get();
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
      // No receive posted on this channel: leave the message in the ring,
      // where its receive, posted soon (the ring allreduce's next segment),
      // takes it from without a heap copy; unless something must get past it:
      // a receive posted for a later message (then there is one), or a sender
      // that the full ring holds up.
      if (c->recvs.empty() && c->available() + sizeof(MsgHeader) <= kShmRingBytes) break;
      c->read(&c->in_hdr, sizeof(MsgHeader));
      c->in_msg = true;
      c->in_done = 0;
      auto r = c->recvs.find(c->in_hdr.slot);
      if (r != c->recvs.end()) {
        c->in_op = r->second.front();
        r->second.pop_front();
        if (r->second.empty()) c->recvs.erase(r);
        if (c->in_op->bytes != c->in_hdr.bytes) {
          c->in_op->error = size_mismatch(c->in_hdr.bytes, c->in_op->bytes);
          c->in_op->complete = true;
          c->in_op.reset();  // drop the message
        }
      } else {
        c->in_early = std::make_shared<ShmEarly>();
        c->in_early->data.resize(c->in_hdr.bytes);
        c->early[c->in_hdr.slot].push_back(c->in_early);
      }
    }
    const size_t n = std::min<uint64_t>(c->in_hdr.bytes - c->in_done, c->available());
    if (n > 0) {
      uint8_t* dst = c->in_op ? c->in_op->buf : c->in_early ? c->in_early->data.data() : nullptr;
      c->read(dst ? dst + c->in_done : nullptr, n);
      c->in_done += n;
    }
    if (c->in_done < c->in_hdr.bytes) break;
    if (c->in_op) c->in_op->complete = true;
    if (c->in_early) {
      c->in_early->complete = true;
      if (std::shared_ptr<ShmOp> op = c->in_early->claimed) {
        if (op->bytes > 0) std::memcpy(op->buf, c->in_early->data.data(), op->bytes);
        op->complete = true;
        c->in_early->claimed.reset();
      }
    }
    c->in_op.reset();
    c->in_early.reset();
    c->in_msg = false;
  }
}

}  // namespace transport
}  // namespace horovodlite
