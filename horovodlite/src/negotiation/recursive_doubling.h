// The negotiation's allreduce: a small vector of 64-bit words combined by the
// caller's function, by recursive doubling over point-to-point messages
// (log2(p) exchanges; for p not a power of two, MPICH's fold: the first
// 2 * (p - 2^k) ranks pair up, one of each pair hands its vector to the other
// before the exchanges and gets the result after).
//
// Why not MPI_Iallreduce: for small vectors Open MPI 4.1's non-blocking
// allreduce (libnbc) is a binomial reduce and then a broadcast, 2 log2(p) steps,
// each forwarded by a rank only when it next tests its request: a rank asleep in
// its wait's back-off holds up every rank behind it, and across hosts a
// negotiation then takes many times longer than these exchanges.
// On a communicator in host order (mpi::Comms::host_comm, the world's host
// wire: each host's ranks adjacent), the first log2(ranks per host) exchanges
// stay inside a host and each later one crosses hosts once.
//
// A vector longer than the transport's eager limit goes in pieces that each fit
// it, all in flight at once: a larger message waits for a rendezvous round trip
// (Open MPI's shared-memory eager limit is 4 KiB).
//
// Every rank ends with the same bits: each exchange combines the same two
// vectors on both partners (combine must be commutative, bit for bit: AND,
// integer and IEEE sums, min, max), and folded ranks get a copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "horovodlite/common.h"
#include "transport/transport.h"

namespace horovodlite {

class RecursiveDoubling {
 public:
  // inout = combine(in, inout), over the whole vector.
  using Combine = std::function<void(const uint64_t* in, uint64_t* inout)>;

  // The plan for this rank of `context` (point-to-point traffic on it uses
  // tags 0..63). message_bytes: the largest message to send (a multiple of 8,
  // the same on every rank; 0: no limit). Not collective.
  explicit RecursiveDoubling(transport::ContextPtr context, int64_t message_bytes = 0);

  // Collective over the communicator: every rank passes the same n.
  Status run(uint64_t* words, size_t n, const Combine& combine);

  // For tests: the ranks this rank exchanges with, in order.
  const std::vector<int>& peers() const { return peers_; }

 private:
  // Posts the sends or receives of n words in pieces of at most piece_words_.
  Status post(bool send, uint64_t* words, size_t n, int peer, int tag);
  // Completes everything posted.
  Status wait_posted();
  void plan();

  transport::ContextPtr context_;
  int rank_ = 0;
  int size_ = 1;
  // Fold: -1, or the partner this rank hands its vector to (folded_out_) or
  // takes one from before the exchanges.
  int fold_partner_ = -1;
  bool folded_out_ = false;
  std::vector<int> peers_;  // one per exchange
  size_t piece_words_;
  std::vector<uint64_t> scratch_;
  std::vector<transport::RequestPtr> requests_;
};

}  // namespace horovodlite
