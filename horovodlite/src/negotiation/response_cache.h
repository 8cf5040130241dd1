// The response cache: every rank holds the same cache (same names at the same
// positions), because every rank applies the same puts, gets and erases in the
// same order. A name found here with the same parameters is agreed on by setting
// its position's bit in one bitwise-AND allreduce instead of the full round trip.
#pragma once

#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace horovodlite::negotiation {

class ResponseCache {
 public:
  enum class Lookup { kMiss, kHit, kInvalid };

  explicit ResponseCache(size_t capacity = 0) { set_capacity(capacity); }
  void set_capacity(size_t capacity);
  size_t capacity() const { return slots_.size(); }
  size_t size() const { return index_.size(); }

  static bool cacheable(OpType type);

  // kHit: `request` matches the cached entry at *position. kInvalid: the name is
  // cached with other parameters (*position says where). kMiss: not cached.
  Lookup lookup(const Request& request, uint32_t* position) const;
  // Adds or replaces the single-tensor response for response.names[0]; `request`
  // is this rank's request for it (nullptr on a joined rank, which had none).
  // Evicts the least recently used entry when full.
  void put(const Response& response, const Request* request);
  // The response at a position (must be occupied); marks it most recently used.
  const Response& get(uint32_t position);
  // The response at a position (must be occupied), without touching the LRU order.
  const Response& peek(uint32_t position) const { return slots_[position].response; }
  bool occupied(uint32_t position) const { return position < slots_.size() && slots_[position].used; }
  void erase(uint32_t position);

 private:
  struct Slot {
    bool used = false;
    bool has_request = false;
    Response response;
    Request request;
    std::list<uint32_t>::iterator lru;
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, uint32_t> index_;
  std::list<uint32_t> lru_;  // front: most recently used
  std::set<uint32_t> free_;  // lowest free position first: deterministic on every rank
};

}  // namespace horovodlite::negotiation
