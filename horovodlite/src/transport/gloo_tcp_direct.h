// The cross-host path of the Gloo transport without Gloo's pairs for data
// (HOROVODLITE_GLOO_TCP=direct): one TCP connection of our own per pair of
// ranks on different hosts, on which messages are framed as a 16-byte header
// (slot, length) then their bytes, written and read by whichever thread tests
// a request (no loop thread, as Open MPI's TCP path), and sent eagerly: a
// send does not wait for its receive to be posted. Gloo's pairs send an
// unbound buffer only after the receiver's "ready" notice has come back
// through the same stream, behind whatever data is queued there, and do their
// I/O on a loop thread: per message a round trip and two wake-ups
// (docs/transport.md).
//
// Matching is the shared-memory path's (channel_hub.h): per peer and slot,
// messages meet receives in posting order. A message whose receive is posted
// is read straight into its buffer; one whose receive is not yet posted waits
// in the socket for a while (TcpHub::place_arriving: at most 200 us, and not
// when that could hold anything up), then is read into a heap copy (recycled
// buffers, no zero fill) that the next receive for its slot takes. A peer
// that closes its end (exits, is killed) fails every request on the channel
// naming it. Set-up
// (GlooTransport, collective over the world): the lower rank of a pair
// listens on the address of its Gloo device and sends the address and a
// random 128-bit nonce through the Gloo pair; the other connects and proves
// itself with HMAC-SHA256(job secret, nonce and both ranks) (transport/auth.h),
// or with the nonce itself where the job has no secret. A connection that
// cannot prove itself (someone outside the job) is closed, logged once, and
// the listener goes on waiting for its peer.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/channel_hub.h"
#include "transport/transport.h"

namespace horovodlite {
namespace transport {

struct TcpOp;
struct TcpChannel;

// Instantiated in gloo_tcp_direct.cc, where TcpOp and TcpChannel are defined.
extern template class ChannelHub<TcpOp, TcpChannel>;

class TcpHub : public ChannelHub<TcpOp, TcpChannel>, public std::enable_shared_from_this<TcpHub> {
 public:
  // `park_limit`: how long an arriving message may wait in the socket for its
  // receive while nothing else needs it read (place_arriving).
  static constexpr std::chrono::microseconds kDefaultParkLimit{200};
  // `secret`: the job's (raw bytes; may be empty, see above).
  explicit TcpHub(int world_rank, std::string secret = "", std::chrono::microseconds park_limit = kDefaultParkLimit);
  ~TcpHub();
  TcpHub(const TcpHub&) = delete;
  TcpHub& operator=(const TcpHub&) = delete;

  // What the lower rank of a pair sends the other (plain bytes).
  struct Endpoint {
    sockaddr_storage address;
    uint8_t nonce[16];
  };
  // How many connections were closed for lack of proof (tests).
  size_t refused_connections() const;
  // Lower rank: listens on `local` (any port) for `world_peer`.
  Status listen(int world_peer, const sockaddr_storage& local, Endpoint* out);
  // Lower rank: takes the peer's connection (within `timeout`).
  Status accept(int world_peer, std::chrono::milliseconds timeout);
  // Higher rank: connects to the lower one's endpoint.
  Status connect(int world_peer, const Endpoint& endpoint, std::chrono::milliseconds timeout);

  bool has(int world_peer) const;
  // Posts a send or receive of `bytes` at `buf` to/from `world_peer` (rank
  // `peer` of the caller's context) in `slot`.
  Status post(bool send, void* buf, size_t bytes, int peer, int world_peer, uint64_t slot, int tag,
              RequestPtr* request);
  // test(), poll(), abandon(), drop() and early_copies() are the hub's
  // (channel_hub.h). An abandoned send's unsent bytes are copied (they still
  // leave), an abandoned receive's are dropped when they come; early copies
  // are made where place_arriving says.

 private:
  // Only a connected channel that has not failed moves.
  void progress_channel(TcpChannel* c) override;
  void abandon_send(TcpChannel* c, const std::shared_ptr<TcpOp>& op) override;
  bool place_arriving(TcpChannel* c);
  void fail_channel(TcpChannel* c, const std::string& why);

  std::string secret_;
  std::chrono::microseconds park_limit_;
  std::atomic<size_t> refused_{0};
  // Spare buffers for early messages of up to kEarlyPooledBytes (under mu_;
  // the channels, whose early messages return theirs here, go first: see
  // ~TcpHub).
  std::vector<std::unique_ptr<uint8_t[]>> spare_;
};

}  // namespace transport
}  // namespace horovodlite
