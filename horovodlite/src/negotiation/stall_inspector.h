// The stall inspector. A name that some ranks have submitted and others have not
// is "stalled" (ranks submitting different names, or only some ranks reaching a
// collective, deadlock). Rank 0 sees every name that goes through full
// negotiation; it warns about names stalled longer than the check time, naming the
// tensor, the ranks that submitted it and the ranks that are missing, and after
// the shutdown time (if set) turns them into errors that every rank receives.
//
// Names agreed through the response cache never reach the coordinator while they
// wait (a rank with a cache hit sets its bit and waits for the others). So every
// rank asks should_uncache() about its own cached requests: once one has waited
// for half the check time, the rank marks its cache position invalid, which sends
// that name through full negotiation on every rank, where rank 0 can see it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "horovodlite/config.h"
#include "message.h"
#include "negotiation/readiness_table.h"

namespace horovodlite::negotiation {

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StallInspector(const Config& config);

  bool enabled() const { return enabled_; }
  // Every rank: a request waiting for a cache hit since `since` should go through
  // full negotiation now.
  bool should_uncache(Clock::time_point since, Clock::time_point now) const;
  // Rank 0: whether check() is due (at most a few times per check period).
  bool due(Clock::time_point now);

  struct Report {
    std::string warning;             // empty: nothing to warn about now
    std::vector<Response> failures;  // kError/kAborted responses for names past the shutdown time
  };
  // Rank 0. `local_since` gives the time rank 0 itself submitted a name (or
  // Clock::time_point::max() when it has not), so that names that waited in the
  // response cache first are aged from their real start.
  // `where` follows each tensor's name (" in process set 2 (ranks [1, 3])"; empty: the global set).
  Report check(const std::vector<ReadinessTable::PendingInfo>& pending,
               const std::function<Clock::time_point(const std::string&)>& local_since, Clock::time_point now,
               const std::string& where = "");

 private:
  bool enabled_;
  Clock::duration check_;
  Clock::duration shutdown_;  // zero: never
  Clock::duration uncache_after_;
  Clock::duration interval_;
  Clock::time_point next_check_{};
  Clock::time_point last_warning_{};
  bool warned_ = false;
};

}  // namespace horovodlite::negotiation
