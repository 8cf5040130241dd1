// The timeline as an observer of the runtime's executions: for each response it
// writes the op's row (ready to done), the QUEUE phase (ready to start), the
// executor's phases (fusion-buffer copies, the collective) as they are reported,
// or the algorithm's name when the executor reported none, and an ERROR mark for
// error responses. The runtime calls begin() before and end() after each
// execution; when the timeline is off, begin() returns null and end() does
// nothing. Background thread only.
#pragma once

#include <chrono>
#include <string>

#include "execution_observer.h"
#include "message.h"
#include "ops/algorithm.h"
#include "timeline.h"

namespace horovodlite {

class TimelineObserver : public ExecutionObserver {
 public:
  using Clock = std::chrono::steady_clock;
  explicit TimelineObserver(Timeline& timeline) : timeline_(timeline) {}

  // Starts one execution on the set whose rows have this prefix
  // (ProcessSetState::timeline_prefix); the executor's observer, or nullptr
  // when the timeline is off.
  ExecutionObserver* begin(const std::string& prefix);
  // The execution ran from `start` to `end`; its response was ready at `ready`.
  void end(const Response& response, const OpResult& result, Clock::time_point ready, Clock::time_point start,
           Clock::time_point end);

  void phase_start(const Response& response, const char* phase) override;
  void phase_end(const Response& response, const char* phase) override;

 private:
  Timeline& timeline_;
  bool active_ = false;     // the timeline was on at begin()
  bool saw_phase_ = false;  // the executor reported phases
  std::string prefix_;
  Clock::time_point phase_start_;
};

}  // namespace horovodlite
