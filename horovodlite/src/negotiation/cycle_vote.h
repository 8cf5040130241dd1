// CycleVote: the cycle's one agreement (Horovod's CacheCoordinator, response_cache.h): a
// bit vector that every rank fills in and that one bitwise-AND allreduce makes the
// same everywhere. It holds
//   - named status bits (word 0), true after sync() if any rank set them;
//   - two rank bitmaps: the ranks asking to shut down, the ranks exiting without
//     shutdown() (any rank's bit survives);
//   - per response-cache position, "invalid" (any rank: the name must go through
//     full negotiation) and "hit" (every rank has the cached request pending).
// "Any rank" bits are OR-reduced through the AND by sending them inverted:
// OR(x) = ~AND(~x). One collective per cycle, however many names are pending.
// It may also carry data: slots after the bits, each reduced with its own dtype
// and op in the same allreduce (eager allreduces, controller.h). The allreduce
// is our recursive doubling (recursive_doubling.h), which combines whole
// vectors: bits and slots in one pass, no MPI datatype or op to register.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "horovodlite/common.h"
#include "negotiation/recursive_doubling.h"

namespace horovodlite::negotiation {

class CycleVote {
 public:
  enum StatusBit : uint64_t {
    kShouldShutDown = uint64_t(1) << 0,   // some rank asks every rank to stop
    kUncachedInQueue = uint64_t(1) << 1,  // some rank has requests for full negotiation
    kJoined = uint64_t(1) << 2,           // some rank has joined: no hits this cycle
  };

  CycleVote(size_t cache_capacity, int world_size);
  CycleVote(const CycleVote&) = delete;
  CycleVote& operator=(const CycleVote&) = delete;

  // Clears every bit (the start of a cycle).
  void reset();
  void set(StatusBit bit) { bits_[0] |= bit; }
  // Sets kShouldShutDown and `rank`'s bit in the shutdown bitmap.
  void record_shutdown(int rank);
  void record_exiting(int rank);
  void record_hit(uint32_t position) { set_bit(hits_, position); }
  void record_invalid(uint32_t position) { set_bit(invalid_, position); }

  // Data slots for the next sync(), the same on every rank; zeroed. An empty
  // list: bits only (one MPI_BAND allreduce, as without slots).
  struct Slot {
    int64_t count = 0;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;  // Average is reduced as Sum
  };
  void set_slots(const std::vector<Slot>& slots);
  // Where this rank writes slot i's data before sync(), and its result after.
  void* slot_data(size_t i) { return bits_.data() + bit_words_ + slot_word_[i]; }
  const void* slot_result(size_t i) const { return bits_.data() + bit_words_ + slot_word_[i]; }

  // The collective: every rank of the exchange's communicator calls it once per
  // cycle with the same capacity, world size and slots.
  Status sync(RecursiveDoubling& exchange);

  // After sync():
  bool test(StatusBit bit) const { return (bits_[0] & bit) != 0; }
  // Positions some rank marked invalid, ascending.
  std::vector<uint32_t> invalid() const;
  // Positions every rank hit and none marked invalid, ascending.
  std::vector<uint32_t> hits() const;
  std::vector<int> shutdown_ranks() const { return ranks_in(requesters_); }
  std::vector<int> exiting_ranks() const { return ranks_in(exiters_); }

 private:
  void set_bit(size_t word_offset, uint32_t bit) { bits_[word_offset + bit / 64] |= uint64_t(1) << (bit % 64); }
  std::vector<int> ranks_in(size_t word_offset) const;

  // inout = AND over the bits, each slot's op over its data.
  void combine(const uint64_t* in, uint64_t* inout) const;

  const size_t words_;       // per position bitmap
  const size_t rank_words_;  // per rank bitmap
  const int world_size_;
  // Layout: [status][requesters][exiters][invalid] (inverted on the wire) [hits].
  const size_t requesters_, exiters_, invalid_, hits_, or_words_;
  const size_t bit_words_;  // the bits; data slots follow
  std::vector<uint64_t> bits_;
  std::vector<Slot> slots_;
  std::vector<size_t> slot_word_;  // each slot's first word after the bits
};

}  // namespace horovodlite::negotiation
