#include "ops/registry.h"

namespace horovodlite {

namespace {
const std::vector<std::unique_ptr<Algorithm>> kNone;
}  // namespace

void Registry::add(OpType op, Placement placement, std::unique_ptr<Algorithm> algorithm) {
  lists_.at(static_cast<size_t>(op)).at(static_cast<size_t>(placement)).push_back(std::move(algorithm));
}

const std::vector<std::unique_ptr<Algorithm>>& Registry::list(OpType op, Placement placement) const {
  const int i = static_cast<int>(op);
  return i < kDataOps ? lists_[i][static_cast<size_t>(placement)] : kNone;
}

Algorithm* Registry::choose(const Response& response) const {
  for (const auto& a : list(response.type, placement_of(response))) {
    if (a->enabled(response)) return a.get();
  }
  return nullptr;
}

void Registry::drain() {
  for (auto& r : resources_) r->drain();
}

}  // namespace horovodlite
