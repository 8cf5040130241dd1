// Optional hooks through which the executor reports the phases of one execution
// (the timeline shows them as rows under the tensor). The runtime installs an
// observer when the timeline is on; with none installed, the executor pays one
// null-pointer test per phase.
#pragma once

#include "message.h"

namespace horovodlite {

class ExecutionObserver {
 public:
  virtual ~ExecutionObserver() = default;
  // `phase`: "MEMCPY_IN_FUSION_BUFFER", the algorithm's name() (e.g. "MPI_ALLREDUCE"),
  // "MEMCPY_OUT_FUSION_BUFFER". Calls come in start/end pairs on the background thread.
  virtual void phase_start(const Response& response, const char* phase) = 0;
  virtual void phase_end(const Response& response, const char* phase) = 0;
};

// RAII: reports [construction, destruction] as `phase` when an observer is set.
class ObservedPhase {
 public:
  ObservedPhase(ExecutionObserver* observer, const Response& response, const char* phase)
      : observer_(observer), response_(response), phase_(phase) {
    if (observer_) observer_->phase_start(response_, phase_);
  }
  ~ObservedPhase() {
    if (observer_) observer_->phase_end(response_, phase_);
  }
  ObservedPhase(const ObservedPhase&) = delete;
  ObservedPhase& operator=(const ObservedPhase&) = delete;

 private:
  ExecutionObserver* observer_;
  const Response& response_;
  const char* phase_;
};

}  // namespace horovodlite
