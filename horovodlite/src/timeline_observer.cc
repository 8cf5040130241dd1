#include "timeline_observer.h"

namespace horovodlite {

ExecutionObserver* TimelineObserver::begin(const std::string& prefix) {
  active_ = timeline_.active();
  saw_phase_ = false;
  prefix_ = prefix;
  return active_ ? this : nullptr;
}

void TimelineObserver::phase_start(const Response&, const char*) {
  saw_phase_ = true;
  phase_start_ = Clock::now();
}

void TimelineObserver::phase_end(const Response& response, const char* phase) {
  const auto end = Clock::now();
  for (const std::string& name : response.names) timeline_.phase(prefix_ + name, phase, phase_start_, end);
}

void TimelineObserver::end(const Response& r, const OpResult& result, Clock::time_point ready, Clock::time_point start,
                           Clock::time_point end) {
  if (!active_) return;
  const std::string op = Timeline::upper(op_type_name(r.type));
  const std::string collective = result.algorithm;
  for (const std::string& tensor : r.names) {
    const std::string name = prefix_ + tensor;  // the set's own row
    if (r.type == OpType::kError) {
      timeline_.instant(name, "ERROR", r.error_message, start);
      continue;
    }
    timeline_.phase(name, op, ready, end);
    timeline_.phase(name, "QUEUE", ready, start);
    if (!saw_phase_ && !collective.empty()) timeline_.phase(name, collective, start, end);
  }
}

}  // namespace horovodlite
