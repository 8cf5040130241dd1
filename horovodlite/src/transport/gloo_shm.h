// The same-host path of the Gloo transport: a Gloo job's ranks that share a
// host (the launcher's topology: equal host names) exchange their messages
// through shared memory instead of TCP over loopback and Gloo's loop thread.
//
// One file in /dev/shm per pair of same-host ranks, mapped by both and
// unlinked once both have it: two single-producer single-consumer byte rings
// (one per direction) of kShmRingBytes. A message is a 16-byte header (slot,
// length) then its bytes, streamed through the ring as space frees. Sends
// complete once their bytes are in the ring (eager, as MPI's shared-memory
// path does for small messages); a receive is copied straight from the ring
// into the posted buffer. A message with no receive posted yet stays in the
// ring while nothing needs to get past it; once a receive is posted for a
// later message, or the ring is full, it is copied into a heap buffer that the
// next receive for its slot takes (MPI's unexpected queue). Per peer,
// messages with one slot match receives in posting order.
//
// Single copy (as Open MPI's shared-memory path does with CMA): a message of
// kShmSingleCopyBytes or more, to a peer that has shown it can read this
// process's memory (process_vm_readv of a probe word, at set-up), goes as a
// descriptor (its address in the sender) instead of its bytes. The receive
// that matches it reads the bytes straight into its buffer and marks the send
// "taken" in the file (no message back: the receiver need not return to the
// rings); the send completes then, not before (a rendezvous, as MPI's and
// Gloo's TCP paths are for large messages). A descriptor with no receive
// posted waits in the unexpected queue without a copy. A send whose request
// goes away first revokes the descriptor (unless the peer is reading it or has
// read it: see the "taken" marks in gloo_shm_channel.h), copies its bytes and tells
// the peer their new address.
//
// Nothing moves on a thread of its own: every test() of a request moves what
// can move on every channel of the hub (all pending sends, all arrived bytes),
// so a rank waiting on any request also drains the rings its peers wait on.
// A peer that dies is noticed through its Gloo TCP pair (the caller's
// `peer_gone` callback: a receive posted on it that no one sends to fails when
// the socket closes), the same way the TCP path notices it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/channel_hub.h"
#include "transport/transport.h"

namespace horovodlite {
namespace transport {

constexpr size_t kShmRingBytes = size_t{4} << 20;  // per direction and pair
constexpr size_t kShmSingleCopyBytes = size_t{64} << 10;

struct ShmOp;
struct ShmEarly;
struct ShmChannel;

// Instantiated in gloo_shm.cc, where ShmOp and ShmChannel are complete.
extern template class ChannelHub<ShmOp, ShmChannel>;

class ShmHub : public ChannelHub<ShmOp, ShmChannel>, public std::enable_shared_from_this<ShmHub> {
 public:
  // `peer_gone(world_peer)`: whether the peer's process is known to be gone.
  // `single_copy`: large messages may go by descriptor (above). A request
  // destroyed before it completed waits `abandon_after` for it first.
  ShmHub(int world_rank, bool single_copy, std::function<bool(int)> peer_gone,
         std::chrono::milliseconds abandon_after = kDefaultTimeout);
  ~ShmHub();
  ShmHub(const ShmHub&) = delete;
  ShmHub& operator=(const ShmHub&) = delete;

  // Set-up, for a pair (this rank, peer): the lower rank creates the file and
  // passes its name (at most kNameBytes) to the peer, which opens it; once the
  // peer has answered, the creator unlinks it.
  static constexpr size_t kNameBytes = 96;
  Status create_channel(int world_peer, std::string* name);
  Status open_channel(int world_peer, const std::string& name);
  void unlink_name(const std::string& name);

  // Whether this process can read the peer's memory (once both sides are in
  // the file): the peer sends its large messages by descriptor once it sees yes.
  void probe_single_copy(int world_peer);

  bool has(int world_peer) const;
  // Posts a send or receive of `bytes` at `buf` to/from `world_peer` (rank
  // `peer` of the caller's context) in `slot`. An `eager` send goes through
  // the ring whatever its size (never by descriptor).
  Status post(bool send, void* buf, size_t bytes, int peer, int world_peer, uint64_t slot, int tag, RequestPtr* request,
              bool eager = false);

  // test(), poll(), abandon(), drop() and early_copies() are the hub's
  // (channel_hub.h); early copies are the messages read out of a ring because
  // their receive was not yet posted (the rest waited in the ring for it, or
  // had it posted).
  bool peer_gone(int world_peer) const { return peer_gone_(world_peer); }
  std::chrono::milliseconds abandon_after() const { return abandon_after_; }

 private:
  // Takes the mapped file of the pair (this rank, world_peer) as its channel.
  void add_channel(int world_peer, void* mapped);
  void progress_channel(ShmChannel* c) override;
  void abandon_send(ShmChannel* c, const std::shared_ptr<ShmOp>& op) override;
  void abandon_receive(ShmChannel* c, const std::shared_ptr<ShmOp>& op) override;

  bool single_copy_;
  std::function<bool(int)> peer_gone_;
  std::chrono::milliseconds abandon_after_;
};

}  // namespace transport
}  // namespace horovodlite
