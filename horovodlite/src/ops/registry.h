// The ordered lists of algorithms, one per (op, placement). Built once, by
// make_registry() (algorithms.cc, the one file that knows what this build has).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "ops/algorithm.h"

namespace horovodlite {

class Registry {
 public:
  // Appends to the list for (op, placement): earlier entries are preferred.
  void add(OpType op, Placement placement, std::unique_ptr<Algorithm> algorithm);
  // Keeps state that algorithms share, for drain().
  void keep(std::shared_ptr<SharedResource> resource) { resources_.push_back(std::move(resource)); }

  // The first enabled algorithm for the response's op and placement; nullptr if none is.
  Algorithm* choose(const Response& response) const;
  const std::vector<std::unique_ptr<Algorithm>>& list(OpType op, Placement placement) const;
  // Waits for every deferred completion (shutdown).
  void drain();

 private:
  static constexpr int kDataOps = static_cast<int>(OpType::kReducescatter) + 1;  // allreduce .. reducescatter
  std::array<std::array<std::vector<std::unique_ptr<Algorithm>>, 2>, kDataOps> lists_;
  std::vector<std::shared_ptr<SharedResource>> resources_;
};

}  // namespace horovodlite
