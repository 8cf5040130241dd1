// The point-to-point patterns Adasum (ops/adasum.cc) is made of, internal to
// it. Every exchange is between a rank and one partner (r ^ d) on the
// algorithm's own communicator; both sides post their receives before their
// sends, and the waits poll (MPI_Test) and sleep rather than block, so no
// exchange waits on a third rank and ranks that share a core make progress.
// Buffers are split into segments of `seg` elements cut from a range's start.
//
// Sending: a peer on the same host copies a message straight out of the
// sender's memory (Open MPI's single copy, CMA), pinning its pages one at a
// time: out of 4 KiB pages that costs about as much as the copy, out of a
// huge page next to nothing (host_memory.h). So staged_exchange and
// make_and_exchange send from slots of a huge-page ring that the caller owns,
// copying into them first or writing the values there in the first place,
// except segments that lie on huge pages already (the caller's ByteRange),
// which go from where they are.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "horovodlite/common.h"
#include "host_memory.h"
#include "mpi/mpi_util.h"
#include "ops/adasum_kernels.h"

namespace horovodlite {
namespace adasum_exchange {

// Polling without a busy spin: after progress, polls freely for up to kSpin
// (a segment in flight), then sleeps in growing steps (ranks may share cores).
constexpr auto kSpin = std::chrono::microseconds(200);
constexpr int kMaxSleepUs = 100;

class Backoff {
 public:
  void progressed() {
    since_ = std::chrono::steady_clock::now();
    sleep_us_ = 2;
  }
  // Nothing to do this time round.
  void idle() {
    if (std::chrono::steady_clock::now() - since_ < kSpin) return;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(sleep_us_ * 2, kMaxSleepUs);
  }

 private:
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  int sleep_us_ = 2;
};

// How values are written into the send slots. Plain stores leave them in this
// core's cache, where the peer's copy reads them cheaply, and that is right
// while the peer's core is near (it shares this core's last-level cache). But a
// slot is written again a few segments later, and the peer's copy has left its
// lines in the peer core's cache: each store must first win its line back.
// Where that core is far (another chiplet or socket: a core-to-core round trip
// several times longer, bench/core_latency.cc measures it), that costs a far
// round trip per line, and a copy into a slot takes several times longer.
// Streaming (non-temporal) stores fetch no line and leave none in this cache;
// the peer then reads memory. So each op measures, in its first exchange with
// enough segments, the first writes of two slots (lines from memory either way)
// against the first rewrites of those slots (lines the peer's copy has read),
// the faster of each pair (a copy during which the rank was preempted does not
// count). The log of the ratio (clamped to [1/3, 3]) is averaged over the ops
// (Placement: ranks that share cores see a near and a far peer in turn, and a
// single op's ratio is noisy; a placement lasts minutes), and an average above
// log(kFarRatio) means a far peer: the op's later slot writes stream. Results
// are the same either way.
struct Placement {
  static constexpr double kFarRatio = 1.25;
  static constexpr double kWeight = 0.25;  // of the newest op
  static constexpr double kClamp = 3;      // one op moves the average by at most log(3) / 4
  double log_ratio = 0;
  bool seen = false;
  void add(double ratio) {
    const double x = std::log(std::min(std::max(ratio, 1 / kClamp), kClamp));
    log_ratio = seen ? (1 - kWeight) * log_ratio + kWeight * x : x;
    seen = true;
  }
  bool far() const { return seen && log_ratio > std::log(kFarRatio); }
};

class SlotStores {
 public:
  // forced: 1 streams every slot write, 0 none; -1 (the library's use)
  // measures, and decides with `placement` (the ops so far).
  SlotStores(int forced, Placement* placement)
      : placement_(placement), stream_(forced == 1 || (forced == -1 && placement->far())), probed_(forced != -1) {}
  bool streaming() const { return stream_; }
  // Copies `bytes` into `slot`, the k-th slot write of an exchange that cycles
  // through `slots` slots.
  void copy(char* slot, const char* from, size_t bytes, size_t k, size_t slots) {
    const bool first = k < 2, rewrite = k >= slots && k < slots + 2;
    if (probed_ || slots < 2 || !(first || rewrite)) {
      if (stream_) {
        adasum_kernels::stream_copy(slot, from, bytes);
      } else {
        std::memcpy(slot, from, bytes);
      }
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(slot, from, bytes);
    const double per_byte = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                            static_cast<double>(std::max<size_t>(bytes, 1));
    double& best = first ? first_ : rewrite_;
    best = k % slots == 0 ? per_byte : std::min(best, per_byte);
    if (k == slots + 1 && first_ > 0 && rewrite_ > 0) {
      placement_->add(rewrite_ / first_);
      stream_ = placement_->far();
      probed_ = true;
    }
  }

 private:
  Placement* placement_;
  bool stream_;
  bool probed_;
  double first_ = 0, rewrite_ = 0;  // seconds per byte, the faster of two
};

// The send slots of one exchange: taken in turn by the sends that need one
// (sends from huge pages go as they are and take none); a slot is free again
// once the send that last used it has completed.
class SlotRing {
 public:
  SlotRing(char* base, size_t slots, int64_t slot_bytes) : base_(base), slot_bytes_(slot_bytes), user_(slots, kNone) {}
  // The request of the send that last used the next slot (null: none).
  MPI_Request* last_user(std::vector<MPI_Request>* reqs) const {
    return user_[next_] == kNone ? nullptr : &(*reqs)[user_[next_]];
  }
  // Takes the next slot for the send with request index `req`; `k` (out): how
  // many slots this exchange took before (SlotStores::copy's k).
  char* take(size_t req, size_t* k) {
    char* slot = base_ + static_cast<int64_t>(next_) * slot_bytes_;
    user_[next_] = req;
    next_ = (next_ + 1) % user_.size();
    *k = taken_++;
    return slot;
  }

 private:
  static constexpr size_t kNone = ~size_t{0};
  char* base_;
  int64_t slot_bytes_;
  std::vector<size_t> user_;  // request index of each slot's last send
  size_t next_ = 0, taken_ = 0;
};

// MPI_Test until done.
inline Status wait(MPI_Request* r, const char* what) {
  Backoff backoff;
  while (true) {
    int done = 0;
    HVL_MPI_CHECK_AS(MPI_Test(r, &done, MPI_STATUS_IGNORE), what);
    if (done) return Status::OK();
    backoff.idle();
  }
}

// Progress for the transfers in flight (MPI moves data inside its calls): tests
// (*reqs)[*next], (*reqs)[*next + 1], ... below `end` in order, moving *next
// past each one complete, until one is not.
inline Status test_in_order(std::vector<MPI_Request>* reqs, size_t* next, size_t end) {
  for (int done = 1; done && *next < end;) {
    HVL_MPI_CHECK(MPI_Test(&(*reqs)[*next], &done, MPI_STATUS_IGNORE));
    if (done) ++*next;
  }
  return Status::OK();
}

// Sends send_bytes from `send` to `peer` and receives recv_bytes from it into
// `recv`, both split into messages of at most `segment` bytes (a multiple of
// the element size); on_recv(offset, bytes) runs for each received piece in
// order while the later ones are still in flight.
template <typename OnRecv>
Status exchange(MPI_Comm comm, int peer, int tag, const char* send, int64_t send_bytes, char* recv, int64_t recv_bytes,
                int64_t segment, size_t window, OnRecv on_recv) {
  const size_t nrecv = static_cast<size_t>((recv_bytes + segment - 1) / segment);
  std::vector<MPI_Request> recvs(nrecv, MPI_REQUEST_NULL), sends;
  auto post_recv = [&](size_t i) {
    const int64_t off = static_cast<int64_t>(i) * segment;
    return mpi_status(MPI_Irecv(recv + off, static_cast<int>(std::min(segment, recv_bytes - off)), MPI_BYTE, peer, tag,
                                comm, &recvs[i]),
                      "MPI_Irecv (Adasum)");
  };
  const size_t ahead = window == 0 ? nrecv : std::min(window, nrecv);
  for (size_t i = 0; i < ahead; ++i) HVL_RETURN_IF_ERROR(post_recv(i));
  for (int64_t off = 0; off < send_bytes; off += segment) {
    sends.emplace_back();
    HVL_MPI_CHECK(MPI_Isend(send + off, static_cast<int>(std::min(segment, send_bytes - off)), MPI_BYTE, peer, tag,
                            comm, &sends.back()));
  }
  for (size_t i = 0; i < nrecv; ++i) {
    HVL_RETURN_IF_ERROR(wait(&recvs[i], "MPI_Irecv (Adasum)"));
    if (i + ahead < nrecv) HVL_RETURN_IF_ERROR(post_recv(i + ahead));
    const int64_t off = static_cast<int64_t>(i) * segment;
    on_recv(off, std::min(segment, recv_bytes - off));
  }
  for (MPI_Request& s : sends) HVL_RETURN_IF_ERROR(wait(&s, "MPI_Isend (Adasum)"));
  return Status::OK();
}

// Calls f(lo, hi) for the segments of [begin, end) (cut from `begin` every
// `seg` elements), first to last or last to first. A pass over a range is
// followed by one the other way round: what the first pass touched last is
// what the cache still holds.
template <typename F>
void for_each_segment(int64_t begin, int64_t end, int64_t seg, bool forward, F f) {
  if (end <= begin) return;
  const int64_t last = begin + (end - begin - 1) / seg * seg;
  if (forward) {
    for (int64_t lo = begin; lo <= last; lo += seg) f(lo, std::min(end, lo + seg));
  } else {
    for (int64_t lo = last; lo >= begin; lo -= seg) f(lo, std::min(end, lo + seg));
  }
}

// One level's combination fused with the next exchange with `peer`, which runs
// the same code: for each segment of [send_lo, send_hi) and of [keep_lo,
// keep_hi) (two adjacent halves; cut from their starts every `seg` elements;
// the half and segment order as `forward` says), make(lo, hi, at, stream)
// writes it at `at` (data + lo elements; a segment to send, into one of `slots`
// slots of send_ring where that is not null: it is not needed here afterwards,
// and the peer's single copy out of a huge page pins one page; `stream`: with
// streaming stores where it can, as *stores says for slot writes),
// and then at once, while it is in cache, a segment to send goes to
// the peer and for a segment to keep the peer's values are received into
// recv + (lo - keep_lo) elements and on_keep(lo, hi) runs. Receives are posted
// `window` ahead, in the order the peer sends. recv == nullptr: the last
// level's first allgather step (the segments sent are results, made into
// `data` and, with a send_ring, copied into a slot by *stores to go from there; the
// received segments are the peer's results, into `data`; they are not waited
// for one by one).
template <typename Make, typename OnKeep>
Status make_and_exchange(MPI_Comm comm, int peer, int tag, char* data, char* recv, int64_t elem, int64_t send_lo,
                         int64_t send_hi, int64_t keep_lo, int64_t keep_hi, int64_t seg, bool forward, size_t window,
                         Make make, OnKeep on_keep, SlotStores* stores, char* send_ring = nullptr, size_t slots = 0,
                         const ByteRange& huge = {}) {
  struct Piece {
    int64_t lo, hi;
    bool keep;
  };
  std::vector<Piece> order, keeps;
  auto add = [&](int64_t b, int64_t e, bool keep) {
    for_each_segment(b, e, seg, forward, [&](int64_t lo, int64_t hi) { order.push_back({lo, hi, keep}); });
  };
  const bool keep_first = recv != nullptr && forward == (keep_lo < send_lo);
  add(keep_first ? keep_lo : send_lo, keep_first ? keep_hi : send_hi, keep_first);
  add(keep_first ? send_lo : keep_lo, keep_first ? send_hi : keep_hi, !keep_first);
  for (const Piece& p : order)
    if (p.keep) keeps.push_back(p);
  if (recv == nullptr) window = keeps.size();
  std::vector<MPI_Request> recvs(keeps.size(), MPI_REQUEST_NULL), sends;
  auto post_recv = [&](size_t i) {
    char* at = recv != nullptr ? recv + (keeps[i].lo - keep_lo) * elem : data + keeps[i].lo * elem;
    return mpi_status(
        MPI_Irecv(at, static_cast<int>((keeps[i].hi - keeps[i].lo) * elem), MPI_BYTE, peer, tag, comm, &recvs[i]),
        "MPI_Irecv (Adasum)");
  };
  size_t posted = 0, next_recv = 0, kept = 0;  // next_recv: the first receive not seen complete
  for (; posted < std::min(window, keeps.size()); ++posted) HVL_RETURN_IF_ERROR(post_recv(posted));
  SlotRing ring(send_ring, slots, seg * elem);
  sends.reserve(order.size());
  for (const Piece& p : order) {
    if (p.keep) {
      if (recv == nullptr) break;  // the peer's results: waited for below
      HVL_RETURN_IF_ERROR(wait(&recvs[kept++], "MPI_Irecv (Adasum)"));
      next_recv = std::max(next_recv, kept);
      if (posted < keeps.size()) HVL_RETURN_IF_ERROR(post_recv(posted++));
      make(p.lo, p.hi, data + p.lo * elem, false);
      on_keep(p.lo, p.hi);
      continue;
    }
    const size_t bytes = static_cast<size_t>((p.hi - p.lo) * elem);
    char* at = data + p.lo * elem;
    char* slot = nullptr;
    size_t k = 0;  // the slot write's index
    // A result on huge pages already is sent from where it is made.
    if (send_ring != nullptr && (recv != nullptr || !huge.contains(at, bytes))) {
      if (MPI_Request* last = ring.last_user(&sends)) HVL_RETURN_IF_ERROR(wait(last, "MPI_Isend (Adasum)"));
      slot = ring.take(sends.size(), &k);
      if (recv != nullptr) at = slot;  // only sent
    }
    make(p.lo, p.hi, at, at == slot && stores->streaming());
    if (slot != nullptr && slot != at)
      stores->copy(slot, at, bytes, k, slots);  // a result: kept, and sent from the slot
    sends.emplace_back(MPI_REQUEST_NULL);
    HVL_MPI_CHECK(
        MPI_Isend(slot != nullptr ? slot : at, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm, &sends.back()));
    HVL_RETURN_IF_ERROR(test_in_order(&recvs, &next_recv, posted));
  }
  for (MPI_Request& r : recvs) HVL_RETURN_IF_ERROR(wait(&r, "MPI_Irecv (Adasum)"));
  for (MPI_Request& s : sends) HVL_RETURN_IF_ERROR(wait(&s, "MPI_Isend (Adasum)"));
  return Status::OK();
}

// A pair's exchange of segments: this rank sends the segments `sends` of src
// (in that order), each copied first (by *stores) into one of `slots` slots of send_ring
// (the peer's single copy then pins one page and reads from cache, where a copy
// out of 4 KiB pages pins each and reads memory; a segment on huge pages
// already, inside `huge`, is sent as it is), and receives the peer's segments `recvs`
// into recv_base + (lo - recv_lo) elements, `window` of them in flight (0:
// all), calling on_recv(lo, hi) on each in order as it arrives. One loop that
// only tests drives both directions, so neither side waits on the other.
template <typename OnRecv>
Status staged_exchange(MPI_Comm comm, int peer, int tag, const char* src, char* send_ring, size_t slots,
                       SlotStores* stores, int64_t elem, int64_t seg,
                       const std::vector<std::pair<int64_t, int64_t>>& sends,
                       const std::vector<std::pair<int64_t, int64_t>>& recvs, char* recv_base, int64_t recv_lo,
                       size_t window, const ByteRange& huge, OnRecv on_recv) {
  const size_t nsend = sends.size(), nrecv = recvs.size();
  auto bytes_of = [&](const std::pair<int64_t, int64_t>& p) { return static_cast<int>((p.second - p.first) * elem); };
  std::vector<MPI_Request> send_reqs(nsend, MPI_REQUEST_NULL), recv_reqs(nrecv, MPI_REQUEST_NULL);
  SlotRing ring(send_ring, slots, seg * elem);
  if (window == 0) window = nrecv;
  size_t posted = 0, sent = 0, done = 0;
  auto post_recv = [&]() {
    HVL_MPI_CHECK(MPI_Irecv(recv_base + (recvs[posted].first - recv_lo) * elem, bytes_of(recvs[posted]), MPI_BYTE, peer,
                            tag, comm, &recv_reqs[posted]));
    ++posted;
    return Status::OK();
  };
  while (posted < std::min(window, nrecv)) HVL_RETURN_IF_ERROR(post_recv());
  Backoff backoff;
  while (sent < nsend || done < nrecv) {
    bool progress = false;
    if (sent < nsend) {
      const char* from = src + sends[sent].first * elem;
      const bool copy = !huge.contains(from, static_cast<size_t>(bytes_of(sends[sent])));
      int free_slot = 1;
      MPI_Request* last = copy ? ring.last_user(&send_reqs) : nullptr;
      if (last != nullptr) HVL_MPI_CHECK(MPI_Test(last, &free_slot, MPI_STATUS_IGNORE));
      if (free_slot) {
        if (copy) {
          size_t k = 0;
          char* slot = ring.take(sent, &k);
          stores->copy(slot, from, static_cast<size_t>(bytes_of(sends[sent])), k, slots);
          from = slot;
        }
        HVL_MPI_CHECK(MPI_Isend(from, bytes_of(sends[sent]), MPI_BYTE, peer, tag, comm, &send_reqs[sent]));
        ++sent;
        progress = true;
      }
    }
    if (done < nrecv) {
      int ready = 0;
      HVL_MPI_CHECK(MPI_Test(&recv_reqs[done], &ready, MPI_STATUS_IGNORE));
      if (ready) {
        on_recv(recvs[done].first, recvs[done].second);
        ++done;
        while (posted < std::min(done + window, nrecv)) HVL_RETURN_IF_ERROR(post_recv());
        progress = true;
      }
    }
    if (progress) {
      backoff.progressed();
    } else {
      backoff.idle();
    }
  }
  for (MPI_Request& r : send_reqs) HVL_RETURN_IF_ERROR(wait(&r, "MPI_Isend (Adasum)"));
  return Status::OK();
}

inline std::vector<std::pair<int64_t, int64_t>> segments(int64_t begin, int64_t end, int64_t seg, bool forward) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for_each_segment(begin, end, seg, forward, [&](int64_t lo, int64_t hi) { out.emplace_back(lo, hi); });
  return out;
}

// The last level and the whole allgather at once, for ranks that all share a
// host: each segment of this rank's piece pieces[rank] is made into `data`
// (make(lo, hi, at, false)) and sent at once to every other rank, while it is
// in this core's cache, and every other rank q's piece pieces[q] is received
// into `data` as q makes it (all receives posted first). A segment outside
// `huge` (not on huge pages) goes from one of `slots` slots of send_ring,
// copied there by *stores, free again once its sends to every peer completed.
// Every rank cuts each piece into segments of `seg` from its start, in the
// order `forward` says, so the receives match the sends.
template <typename Make>
Status make_and_allgather(MPI_Comm comm, int rank, int tag, char* data, int64_t elem,
                          const std::vector<std::pair<int64_t, int64_t>>& pieces, int64_t seg, bool forward, Make make,
                          SlotStores* stores, char* send_ring, size_t slots, const ByteRange& huge) {
  const int size = static_cast<int>(pieces.size());
  std::vector<MPI_Request> recvs, sends;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    for (const auto& [lo, hi] : segments(pieces[q].first, pieces[q].second, seg, forward)) {
      recvs.emplace_back(MPI_REQUEST_NULL);
      HVL_RETURN_IF_ERROR(mpi_status(
          MPI_Irecv(data + lo * elem, static_cast<int>((hi - lo) * elem), MPI_BYTE, q, tag, comm, &recvs.back()),
          "MPI_Irecv (Adasum)"));
    }
  }
  const auto mine = segments(pieces[rank].first, pieces[rank].second, seg, forward);
  sends.reserve(mine.size() * static_cast<size_t>(size - 1));
  constexpr size_t kNone = ~size_t{0};
  std::vector<size_t> slot_sends(slots, kNone);  // the first of each slot's last size - 1 sends
  size_t next_slot = 0, taken = 0, next_recv = 0;
  for (const auto& [lo, hi] : mine) {
    const size_t bytes = static_cast<size_t>((hi - lo) * elem);
    char* at = data + lo * elem;
    make(lo, hi, at, false);
    const char* from = at;
    if (send_ring != nullptr && slots > 0 && !huge.contains(at, bytes)) {
      if (slot_sends[next_slot] != kNone) {
        for (int k = 0; k < size - 1; ++k)
          HVL_RETURN_IF_ERROR(wait(&sends[slot_sends[next_slot] + static_cast<size_t>(k)], "MPI_Isend (Adasum)"));
      }
      char* slot = send_ring + static_cast<int64_t>(next_slot) * seg * elem;
      stores->copy(slot, at, bytes, taken++, slots);
      slot_sends[next_slot] = sends.size();
      next_slot = (next_slot + 1) % slots;
      from = slot;
    }
    for (int k = 1; k < size; ++k) {
      sends.emplace_back(MPI_REQUEST_NULL);
      HVL_MPI_CHECK(MPI_Isend(from, static_cast<int>(bytes), MPI_BYTE, rank ^ k, tag, comm, &sends.back()));
    }
    HVL_RETURN_IF_ERROR(test_in_order(&recvs, &next_recv, recvs.size()));
  }
  for (MPI_Request& r : recvs) HVL_RETURN_IF_ERROR(wait(&r, "MPI_Irecv (Adasum)"));
  for (MPI_Request& s : sends) HVL_RETURN_IF_ERROR(wait(&s, "MPI_Isend (Adasum)"));
  return Status::OK();
}

}  // namespace adasum_exchange
}  // namespace horovodlite
