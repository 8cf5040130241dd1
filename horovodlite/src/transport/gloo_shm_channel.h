// The same-host channel of the Gloo transport's shared-memory path
// (gloo_shm.h): the file's layout (two byte rings, each side's single-copy
// details, the "taken" marks), the messages in the rings, and one pair's
// state with what moves on it. Internal to the Gloo plugin: gloo_shm.cc's hub
// holds the channels and guards them with its mutex.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/gloo_shm.h"

namespace horovodlite {
namespace transport {

constexpr uint64_t kMagic = 0x68766c73686d3032ull;  // "hvlshm02"
// What a peer reads to show that it can read this process's memory.
extern const uint64_t kProbeWord;

// One direction: the producer owns `head` (bytes written so far), the consumer
// `tail` (bytes consumed); each on its own cache line.
struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;
  char pad0[64 - sizeof(std::atomic<uint64_t>)];
  std::atomic<uint64_t> tail;
  char pad1[64 - sizeof(std::atomic<uint64_t>)];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory rings need lock-free 64-bit atomics");

// What one side publishes for single copy (zero until it has mapped the file).
struct alignas(64) SideInfo {
  std::atomic<int64_t> pid;
  std::atomic<uint64_t> probe;      // the address of kProbeWord in that process
  std::atomic<int32_t> reads_peer;  // 1: that side can read the other's memory; -1: it cannot
};

// "Taken" marks of single-copy sends, per sending side, at [id % kTakenSlots]:
// mark(id, state). The receiver of send `id` claims it (kReading) before it
// reads the sender's buffer and then stores the errno of its read (0: read);
// a sender whose request goes away first claims it as kRevoked instead, and
// its bytes then come from a copy (kMoved). Whoever claims first decides, so
// no read of the sender's buffer happens after its request has gone. A sender
// keeps fewer than kTakenSlots sends by descriptor outstanding.
constexpr uint64_t kTakenSlots = 1024;
constexpr uint64_t kReading = 0xfe;
constexpr uint64_t kRevoked = 0xff;
constexpr uint64_t mark(uint64_t id, uint64_t state) { return (id + 1) << 8 | state; }

struct FileHeader {
  uint64_t magic;
  uint64_t capacity;
  RingCtl ring[2];                              // [0]: lower rank -> higher rank, [1]: the other way
  SideInfo side[2];                             // [0]: the lower rank's
  std::atomic<uint64_t> taken[2][kTakenSlots];  // [0]: the lower rank's sends
};
constexpr size_t kDataOffset = (sizeof(FileHeader) + 4095) / 4096 * 4096;
constexpr size_t kFileBytes = kDataOffset + 2 * kShmRingBytes;

// kBytes: the message's bytes follow. The others carry none: kRemote, a
// message whose bytes stay at `addr` in the sender (it learns that they were
// read from its "taken" mark, not from a message: the reader need not come
// back to the rings); kMoved, send `id`'s bytes are now at `addr` (its
// request went away).
enum MsgKind : uint64_t { kBytes = 0, kRemote = 1, kMoved = 2 };

struct MsgHeader {
  uint64_t slot;
  uint64_t bytes;
  uint64_t kind = kBytes;
  uint64_t id = 0;  // a single-copy send's number on its channel
  uint64_t addr = 0;
};

// Reads n bytes at `addr` in process `pid` into `dst`; 0 or an errno.
int read_remote(pid_t pid, uint64_t addr, void* dst, size_t n);

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
  bool remote = false;      // send: by descriptor (single copy), complete when taken
  bool eager = false;       // send: through the ring whatever its size
  uint64_t id = 0;          // its number on the channel
  bool complete = false;
  Status error;
  std::vector<uint8_t> owned;  // a send whose request went away: its own copy
  std::string describe() const { return describe_op(send, peer, tag); }
};

// A message that arrived before its receive was posted.
struct ShmEarly {
  std::vector<uint8_t> data;
  bool complete = false;
  std::shared_ptr<ShmOp> claimed;  // the receive that took it while it was still arriving
  bool remote = false;             // a descriptor: the bytes are in the sender
  MsgHeader desc{0, 0};
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
  SideInfo* mine = nullptr;
  SideInfo* theirs = nullptr;
  pid_t peer_pid = 0;
  std::atomic<uint64_t>* my_taken = nullptr;    // the peer marks this side's sends
  std::atomic<uint64_t>* peer_taken = nullptr;  // this side marks the peer's
  uint64_t next_id = 0;
  std::deque<std::shared_ptr<ShmOp>> sends;                         // in posting order
  std::map<uint64_t, std::shared_ptr<ShmOp>> remote_sends;          // descriptors out, by id, until taken
  std::deque<MsgHeader> moved;                                      // kMoved waiting for ring space
  std::map<uint64_t, std::shared_ptr<ShmOp>> revoked;               // receives waiting for a kMoved, by id
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
    mine = &h->side[lower ? 0 : 1];
    theirs = &h->side[lower ? 1 : 0];
    my_taken = h->taken[lower ? 0 : 1];
    peer_taken = h->taken[lower ? 1 : 0];
    mine->probe.store(reinterpret_cast<uint64_t>(&kProbeWord), std::memory_order_relaxed);
    mine->pid.store(getpid(), std::memory_order_release);
  }
  // Whether the next send may go by descriptor: the peer reads this process's
  // memory, and the id's "taken" mark is not still in use.
  bool can_send_remote() const {
    return theirs->reads_peer.load(std::memory_order_acquire) == 1 &&
           (remote_sends.empty() || remote_sends.begin()->first + kTakenSlots > next_id);
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
  // Copies n bytes (n <= available()) out of the ring without consuming them.
  void peek(void* dst, size_t n) const {
    const size_t at = in_tail % kShmRingBytes;
    const size_t first = std::min(n, kShmRingBytes - at);
    std::memcpy(dst, in_data + at, first);
    if (n > first) std::memcpy(static_cast<uint8_t*>(dst) + first, in_data, n - first);
  }
  // Copies n bytes (n <= available()) out of the ring (dst null: drops them).
  void read(void* dst, size_t n) {
    if (dst != nullptr) peek(dst, n);
    in_tail += n;
    in->tail.store(in_tail, std::memory_order_release);
  }
  // A descriptor met its receive: reads the bytes into it and marks the send
  // taken; or, if the sender has revoked it, waits for the copy's address
  // (desc.kind kMoved: the address is that copy's, kept until marked taken).
  void take(const std::shared_ptr<ShmOp>& op, const MsgHeader& desc);
  // Completes the sends by descriptor that the peer has taken.
  void check_taken();
  // A message without bytes (kRemote, kMoved) arrived.
  void control_message(const MsgHeader& h);
};

}  // namespace transport
}  // namespace horovodlite
