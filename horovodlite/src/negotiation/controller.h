// The controller of one communicator: turns "what this rank has pending" into
// "the list of responses every rank agrees on", once per cycle, collectively.
//
//   1. Requests drained from the runtime's queue are sorted: names the response
//      cache knows wait for a cache hit; the others (and join/barrier) go to full
//      negotiation.
//   2. One bit-vector allreduce (CycleVote) agrees on the cycle: shutdown,
//      whether anyone needs full negotiation, whether a rank has joined, and which
//      cached names every rank has pending (hits) or some rank saw change (invalid).
//      A group (Request::group_id) takes the cache path only when all its members
//      arrived here together and all hit; its hits count only when every member
//      hit on every rank. Otherwise the group goes to full negotiation, marking
//      its cached positions invalid so that every rank sends it there too.
//   3. If needed, full negotiation: every rank's requests are gathered to rank 0,
//      whose ReadinessTable declares names ready (or errors); the response list is
//      broadcast, and its responses enter the cache, in the same order everywhere.
//   4. Cache hits and negotiated responses are fused (fusion threshold).
// Eager allreduces (EAGER_ALLREDUCE_BYTES): when the last two cycles agreed on
// the same cache hits, all of them small host allreduces (no compression, not
// grouped), every rank predicts the same again and the bit-vector allreduce of
// step 2 also carries their data, one slot per position: a rank that votes a hit
// writes its input (prescaled), others zeros. Positions that every rank hit then
// hold the final sum (Response::reduced, run by ops/voted_allreduce.h: a copy
// with the postscale) and skip the second round; for the others the data is
// dropped and nothing changes. The prediction uses only what every rank agreed
// on (hits, the cache), so every rank sends the same layout.
// Rank 0 also runs the stall inspector here: it sees every name that waits in
// full negotiation, and turns names stalled past the shutdown time into errors
// that this cycle carries to every rank before it shuts down.
//
// One per communicator: the runtime owns the global one; a process set will own
// its own, built on the set's communicator. Background thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "horovodlite/config.h"
#include "message.h"
#include "negotiation/cycle_vote.h"
#include "negotiation/readiness_table.h"
#include "negotiation/recursive_doubling.h"
#include "negotiation/response_cache.h"
#include "negotiation/stall_inspector.h"
#include "timeline.h"
#include "transport/transport.h"
#include "watchdog.h"
#include "world.h"

namespace horovodlite::negotiation {

// This rank's own ops in flight on the controller's communicator, as the
// controller reads them: the owner's table (the runtime's ProcessSetTable), which
// is safe to read from the background thread while other threads enqueue. The
// controller takes no lock of its owner's and calls nothing else of it.
class LocalOps {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~LocalOps() = default;
  // This rank's request for `name` (copied to *request when not null) and when it
  // was enqueued (*enqueued when not null); false if this rank has none (it joined).
  virtual bool find(const std::string& name, Request* request, Clock::time_point* enqueued) const = 0;
  // This rank's input data for the host op `name` in flight; nullptr if none or
  // on a device. Valid until the op leaves the table, which happens only on the
  // background thread (the controller's).
  virtual const void* host_input(const std::string& name) const = 0;
};

class Controller {
 public:
  using Clock = std::chrono::steady_clock;

  // Which process set a controller negotiates for, as messages and the timeline
  // show it. Default: the global set.
  struct SetIdentity {
    std::vector<int> global_ranks;  // the global rank of each rank of comm (empty: the identity)
    std::string where;              // appended to tensors in errors: " in process set 2 (ranks [1, 3])"
    std::string timeline_prefix;    // the set's timeline rows: prefix + name ("process_set_2/")
  };

  // Negotiates on `comm` (which it does not own); `timeline`, `watchdog` and
  // `local` (this rank's ops in flight) outlive it. Not collective: nothing is
  // exchanged before the first cycle.
  Controller(const Communicator& comm, const Config& config, Timeline& timeline, Watchdog& watchdog,
             const LocalOps& local, SetIdentity identity = {});

  struct Input {
    std::vector<Request> requests;  // drained from the queue since the last cycle
    bool shutdown = false;          // this rank asks every rank to stop
    bool exiting = false;           // ... because its process exits without shutdown()
    // The autotuner's parameter words this rank adds to the vote (rank 0: the
    // parameters to apply; others: INT64_MAX, so the vote's min leaves rank 0's
    // words); empty: none this cycle. Every rank gives the same count.
    std::vector<int64_t> tuning;
  };
  struct Output {
    // Fused, and the same list in the same order on every rank.
    std::vector<Response> responses;
    // Every rank stops after running the responses; who asked, who exited.
    bool shutdown = false;
    std::vector<int> shutdown_ranks;
    std::vector<int> exiting_ranks;
    // The agreed tuning words (rank 0's), when Input::tuning was given.
    std::vector<int64_t> tuning;
  };
  // One cycle: collective over the communicator. An error (kAborted) means
  // contact with the other ranks was lost; the controller is then unusable.
  Status compute_responses(Input input, Output* out);
  // Forgets every pending request (the runtime has stopped).
  void clear();
  // At a global shutdown (collective over the communicator): the stall reason
  // that some ranks know (*reason not empty: members of a process set that
  // failed a stall) goes to every rank; *reason is left as it is where set.
  Status share_stall_reason(std::string* reason);

  uint64_t negotiations() const { return negotiations_; }
  uint64_t cache_hits() const { return cache_hits_; }
  uint64_t tensors_negotiated() const { return tensors_negotiated_; }
  uint64_t eager_allreduces() const { return eager_allreduces_; }

 private:
  struct Waiting {
    Request request;
    Clock::time_point since;  // when this rank's controller first saw it
  };
  // Sorts new requests into waiting-for-a-hit and full negotiation.
  void accept(std::vector<Request> requests, Clock::time_point now);
  // Fills in this rank's bits: cache hits and invalid positions, the status bits.
  void vote(const Input& input, Clock::time_point now);
  // After the vote: erases invalid positions, returns the agreed cache hits.
  std::vector<Response> take_cache_hits();
  // Gathers requests to rank 0 and broadcasts its response list.
  Status negotiate(std::vector<Response>* out);
  void cache_negotiated(const std::vector<Response>& negotiated);
  // Rank 0: warns about stalled names; queues errors for names past the shutdown time.
  void inspect_stalls(Clock::time_point now);
  void mark_ready(const Request& request, int rank, Clock::time_point t);  // rank: in comm_
  int global_rank(int rank) const {
    return identity_.global_ranks.empty() ? rank : identity_.global_ranks[static_cast<size_t>(rank)];
  }
  // Votes for the members of each complete group in pending_cached_ together, or
  // sends the group to full negotiation (any member missed the cache).
  void vote_groups(std::vector<Waiting>* grouped, Clock::time_point now);
  // The cycle's eager positions (from the hits of the last two cycles) and their
  // slots in the vote; empty when the prediction does not apply.
  // Returns the eager slots of the vote (empty: none).
  std::vector<CycleVote::Slot> plan_eager();
  // This rank votes a hit for `request` at `pos`: its data goes into the slot.
  void write_eager(const Request& request, uint32_t pos);

  const Communicator comm_;
  const SetIdentity identity_;
  const Config& config_;
  Timeline& timeline_;
  Watchdog& watchdog_;
  const LocalOps& local_;
  std::unique_ptr<ReadinessTable> readiness_;  // rank 0 only
  // comm_.wire: the request gather and the response
  // broadcast are point-to-point messages on it (tags kGatherTag.., distinct
  // from the vote's), so any transport can carry the negotiation.
  transport::ContextPtr wire_;
  RecursiveDoubling exchange_;  // the vote's allreduce
  ResponseCache cache_;
  CycleVote votes_;
  StallInspector stall_;

  std::vector<Waiting> pending_cached_;   // waiting for every rank's cache hit
  std::vector<Request> uncached_;         // for the next full negotiation
  std::vector<Response> stall_failures_;  // rank 0: errors to send with the next negotiation
  bool stall_shutdown_ = false;           // rank 0: stall errors go out, then every rank stops
  bool joined_ = false;                   // this rank has joined and awaits the join response
  // Groups whose members were not all enqueued together: group id -> members
  // still to come. Their members go to full negotiation (rank 0 holds them).
  std::unordered_map<uint64_t, int32_t> partial_groups_;
  std::string send_buf_, recv_buf_;
  // The cache positions agreed as hits in the last cycle and the one before (sorted).
  std::vector<uint32_t> hits_last_, hits_before_;
  std::vector<uint32_t> eager_;  // this cycle's eager positions; slot i is eager_[i]

  // Read by stats() on any thread.
  std::atomic<uint64_t> negotiations_{0}, cache_hits_{0}, tensors_negotiated_{0}, eager_allreduces_{0};
};

}  // namespace horovodlite::negotiation
