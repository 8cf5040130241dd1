// Runs one (possibly fused) response on this rank: the same list of responses is
// executed in the same order on every rank. The algorithm is the first enabled
// one in the registry's list for the response's op and placement.
#pragma once

#include <memory>
#include <vector>

#include "entry.h"
#include "execution_observer.h"
#include "horovodlite/config.h"
#include "message.h"
#include "ops/algorithm.h"
#include "ops/registry.h"
#include "world.h"

namespace horovodlite {

class Executor {
 public:
  // Collective over the world's ranks: builds every algorithm of this build (algorithms.h).
  Executor(World& world, const Config& config);

  // entries[i] belongs to response.names[i]; nullptr where this rank has none
  // (it has joined). The result says how the entries complete.
  OpResult execute(const Response& response, const std::vector<TensorEntry*>& entries);
  // Waits until every deferred completion has been delivered (shutdown).
  void drain() { registry_->drain(); }

  // Receives the phases of each execution (the timeline's fusion-buffer copies
  // and collective); nullptr for none.
  void set_observer(ExecutionObserver* observer) { observer_ = observer; }

 private:
  std::unique_ptr<Registry> registry_;
  ExecutionObserver* observer_ = nullptr;
};

}  // namespace horovodlite
