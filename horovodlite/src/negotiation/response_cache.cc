#include "negotiation/response_cache.h"

namespace horovodlite::negotiation {

void ResponseCache::set_capacity(size_t capacity) {
  slots_.assign(capacity, Slot{});
  index_.clear();
  lru_.clear();
  free_.clear();
  for (uint32_t i = 0; i < capacity; ++i) free_.insert(free_.end(), i);
}

bool ResponseCache::cacheable(OpType type) {
  return type == OpType::kAllreduce || type == OpType::kAllgather || type == OpType::kBroadcast ||
         type == OpType::kReducescatter;
}

ResponseCache::Lookup ResponseCache::lookup(const Request& request, uint32_t* position) const {
  auto it = index_.find(request.name);
  if (it == index_.end()) return Lookup::kMiss;
  *position = it->second;
  const Slot& slot = slots_[it->second];
  if (slot.has_request && slot.request.same_params(request)) return Lookup::kHit;
  return Lookup::kInvalid;
}

void ResponseCache::put(const Response& response, const Request* request) {
  if (slots_.empty() || response.names.size() != 1) return;
  const std::string& name = response.names[0];
  uint32_t pos;
  auto it = index_.find(name);
  if (it != index_.end()) {
    pos = it->second;
    lru_.erase(slots_[pos].lru);
  } else {
    if (free_.empty()) erase(lru_.back());
    pos = *free_.begin();
    free_.erase(free_.begin());
    index_[name] = pos;
  }
  Slot& slot = slots_[pos];
  slot.used = true;
  slot.response = response;
  slot.has_request = request != nullptr;
  if (request) slot.request = *request;
  lru_.push_front(pos);
  slot.lru = lru_.begin();
}

const Response& ResponseCache::get(uint32_t position) {
  Slot& slot = slots_[position];
  lru_.erase(slot.lru);
  lru_.push_front(position);
  slot.lru = lru_.begin();
  return slot.response;
}

void ResponseCache::erase(uint32_t position) {
  if (position >= slots_.size() || !slots_[position].used) return;
  Slot& slot = slots_[position];
  index_.erase(slot.response.names[0]);
  lru_.erase(slot.lru);
  slot = Slot{};
  free_.insert(position);
}

}  // namespace horovodlite::negotiation
