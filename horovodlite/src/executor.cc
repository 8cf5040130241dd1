#include "executor.h"

#include "algorithms.h"

namespace horovodlite {

Executor::Executor(World& world, const Config& config) : registry_(make_registry(world, config)) {}

OpResult Executor::execute(const Response& r, const std::vector<TensorEntry*>& entries) {
  switch (r.type) {
    case OpType::kBarrier:
    case OpType::kJoin:
      return OpResult{};  // negotiation itself was the synchronisation
    case OpType::kError:
      return OpResult{Status(r.error_code, r.error_message)};
    default:
      break;
  }
  Algorithm* algorithm = registry_->choose(r);
  if (algorithm == nullptr) {
    return OpResult{Status::Internal(
        std::string("no algorithm for ") + op_type_name(r.type) + " of '" + r.names[0] +
        (placement_of(r) == Placement::kDevice ? "' on a device (a build without CUDA?)" : "' on the host"))};
  }
  return algorithm->run(OpArgs{r, entries, observer_});
}

}  // namespace horovodlite
