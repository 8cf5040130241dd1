// The transport layer: what the negotiation and the project's own algorithms
// need from the wire, in the shape of Gloo's context (gloo/context.h): a
// context of ranks, tagged non-blocking send/recv of byte buffers between
// pairs that return requests to test or wait for, a barrier, and sub-contexts
// (process sets, the hierarchical algorithms' local and cross groups).
//
// Implementations: MPI (mpi_transport.h, over a communicator), in-process
// (inproc_transport.h: threads as ranks, for tests) and Gloo TCP
// (gloo_transport.h, when built with Gloo).
//
// Matching: a send to `peer` with `tag` matches the receive posted by `peer`
// for this rank with the same tag, in the order both were posted (MPI's rule
// for one communicator). A receive must be exactly as long as its send.
// Tags are in [0, kMaxTag]. Contexts split from one another do not match
// each other's messages.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "horovodlite/common.h"

namespace horovodlite {
namespace transport {

// The default time a wait gives a peer before it fails naming it.
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::seconds(30);
// No limit: wait for as long as it takes (the watchdog names a stalled peer).
constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();
constexpr int kMaxTag = 32767;  // MPI's guaranteed minimum of MPI_TAG_UB

// How a wait polls before it sleeps: polls for `spin` and at least `spin_tests`
// times, then yields `yield_tests` times, then sleeps 2 us, 4 us, ... up to
// max_sleep_us between tests. Never an unbounded busy spin.
struct Backoff {
  std::chrono::microseconds spin;
  int spin_tests;
  int yield_tests;
  int max_sleep_us;
};
// The data path (the ring): 200 us covers a 256 KiB segment in flight without a
// sleep's wake-up latency (ops/ring_allreduce.cc has the figures).
constexpr Backoff kStreamBackoff{std::chrono::microseconds(200), 0, 0, 100};
// Control messages (the negotiation): the peer is usually a few microseconds
// behind, or idle for a whole cycle (mpi_wait's policy).
constexpr Backoff kControlBackoff{std::chrono::microseconds(0), 32, 32, 200};
// `backoff` with its busy spin turned into yields (at most 8 polls without
// one, then at least 2000 that yield before the sleeps): for a transport whose
// messages need a core the spin would hold (a loop thread, same-host peers).
Backoff yielding(const Backoff& backoff);

// One posted send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // Completes it if it can without blocking (moving data as needed): *done is
  // true once it has completed. An error (a peer gone, a transport failure)
  // names the peer.
  virtual Status test(bool* done) = 0;
  // Blocks until it completes, polling then sleeping with a growing back-off
  // (no busy spin). Timeout (kTimeout, naming the peer and the tag) when it has
  // not completed within `timeout`; the request is then still in flight.
  Status wait(std::chrono::milliseconds timeout = kNoTimeout, const Backoff& backoff = kStreamBackoff);
  // The back-off this request's waits use, from the caller's: a transport whose
  // messages complete on a thread of its own (Gloo's TCP loop) polls longer
  // before it sleeps, or every message would wait out a sleep's wake-up.
  virtual Backoff tune(const Backoff& backoff) const { return backoff; }
  int peer() const { return peer_; }  // in the context's ranks
  int tag() const { return tag_; }
  bool is_send() const { return send_; }

 protected:
  Request(int peer, int tag, bool send) : peer_(peer), tag_(tag), send_(send) {}

 private:
  int peer_, tag_;
  bool send_;
};
using RequestPtr = std::unique_ptr<Request>;

// Where each rank of a context runs. host[r] numbers the hosts 0, 1, ... in
// order of their lowest rank; the local/cross ranks follow MpiContext's
// definition (local: the ranks on this host ordered by rank; cross: the ranks
// with this local rank on every host, ordered by rank).
struct Topology {
  std::vector<int> host;  // one per rank

  int local_rank(int rank) const;
  int local_size(int rank) const;
  int cross_rank(int rank) const;
  int cross_size(int rank) const;
  // The ranks of `rank`'s host, and those with its local rank on each host.
  std::vector<int> local_ranks(int rank) const;
  std::vector<int> cross_ranks(int rank) const;
  // All ranks ordered by their host's lowest rank, then by rank.
  std::vector<int> host_order() const;
  // Every rank on one host.
  static Topology single_host(int size) { return Topology{std::vector<int>(static_cast<size_t>(size), 0)}; }
  // Host numbers from one string per rank (hostnames): equal strings, one host.
  static Topology from_names(const std::vector<std::string>& names);
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  virtual ~Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Topology& topology() const { return topology_; }
  int local_rank() const { return topology_.local_rank(rank_); }
  int local_size() const { return topology_.local_size(rank_); }
  int cross_rank() const { return topology_.cross_rank(rank_); }
  int cross_size() const { return topology_.cross_size(rank_); }
  // "mpi", "gloo", "inproc".
  virtual const char* kind() const = 0;
  // The rank of the job's world that rank `r` of this context is (for messages).
  int world_rank(int r) const { return r >= 0 && r < size_ ? world_ranks_[static_cast<size_t>(r)] : -1; }

  // Non-blocking send/receive of `bytes` bytes. The buffer must stay valid
  // (and, for a send, unchanged) until the request has completed. A request
  // that is destroyed before it completes is waited for first.
  virtual Status isend(const void* buf, size_t bytes, int peer, int tag, RequestPtr* request) = 0;
  virtual Status irecv(void* buf, size_t bytes, int peer, int tag, RequestPtr* request) = 0;
  // isend() of one message of a collective that moves `op_bytes` in all (each
  // rank's buffer): a transport may choose its protocol by the op's size rather
  // than the message's. The Gloo transport's same-host path sends the messages
  // of an op that fits its rings through them (two copies, no rendezvous: the
  // faster way for small ops) and a large op's by single copy. By default isend().
  virtual Status isend_in_op(const void* buf, size_t bytes, int peer, int tag, size_t op_bytes, RequestPtr* request) {
    (void)op_bytes;
    return isend(buf, bytes, peer, tag, request);
  }

  // Blocking: every rank of the context.
  virtual Status barrier(std::chrono::milliseconds timeout = kDefaultTimeout);

  // A new context over `ranks` (ranks of this one, in the new context's rank
  // order; this rank must be among them), with its own message space: nothing
  // sent on one matches a receive on the other. Collective over the members
  // only; every member passes the same ranks and `name` (unique among the
  // splits of this context in flight at once: e.g. "ps.3", "local", "ring").
  virtual Status split(const std::vector<int>& ranks, const std::string& name, std::shared_ptr<Context>* out) = 0;
  // split() over every rank in the same order: a private channel for an algorithm.
  Status dup(const std::string& name, std::shared_ptr<Context>* out);

 protected:
  Context(int rank, int size, Topology topology, std::vector<int> world_ranks);
  // Blocking send/receive helpers for the base barrier.
  Status send_blocking(const void* buf, size_t bytes, int peer, int tag, std::chrono::milliseconds timeout);
  Status recv_blocking(void* buf, size_t bytes, int peer, int tag, std::chrono::milliseconds timeout);

  int rank_;
  int size_;
  Topology topology_;
  std::vector<int> world_ranks_;
};
using ContextPtr = std::shared_ptr<Context>;

// Makes every wait of this process (Request::wait, wait_all, wait_any) that is
// in progress or starts later fail with kAborted naming `why`, until
// clear_interrupt(): how the runtime leaves a wait on a peer that stopped
// answering (a host's link down) in a job without MPI, where nothing else would
// end it (the watchdog calls it; the next init() clears it).
void interrupt_waits(const std::string& why);
void clear_interrupt();

// Waits for every request (null entries are skipped), each in turn; the first
// error or timeout is returned (the deadline is for all of them together).
Status wait_all(std::vector<RequestPtr>* requests, std::chrono::milliseconds timeout = kNoTimeout,
                const Backoff& backoff = kStreamBackoff);
// Waits until one of `n` requests completes: *which is its index. Null
// entries are skipped; fails if all are null.
Status wait_any(Request* const* requests, int n, int* which, std::chrono::milliseconds timeout = kNoTimeout);

// The error of a send matched with a receive of another size (both fail with it).
Status size_mismatch(size_t sent, size_t received);

// The sub-topology of `ranks` (ranks of `parent`, in order).
Topology sub_topology(const Topology& parent, const std::vector<int>& ranks);

}  // namespace transport
}  // namespace horovodlite
