#include "negotiation/stall_inspector.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace horovodlite::negotiation {

namespace {

StallInspector::Clock::duration seconds(double s) {
  return std::chrono::duration_cast<StallInspector::Clock::duration>(std::chrono::duration<double>(s));
}

std::string fmt_seconds(StallInspector::Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

StallInspector::StallInspector(const Config& config)
    : enabled_(!config.stall_check_disable),
      check_(seconds(config.stall_check_time_s)),
      shutdown_(seconds(config.stall_shutdown_time_s)) {
  Clock::duration first = check_;
  if (shutdown_ > Clock::duration::zero()) first = std::min(first, shutdown_);
  uncache_after_ = first / 2;
  // Check a few times per period, at least every second, at most every 10 ms.
  interval_ = std::clamp<Clock::duration>(first / 4, std::chrono::milliseconds(10), std::chrono::seconds(1));
}

bool StallInspector::should_uncache(Clock::time_point since, Clock::time_point now) const {
  return enabled_ && now - since >= uncache_after_;
}

bool StallInspector::due(Clock::time_point now) {
  if (!enabled_ || now < next_check_) return false;
  next_check_ = now + interval_;
  return true;
}

StallInspector::Report StallInspector::check(const std::vector<ReadinessTable::PendingInfo>& pending,
                                             const std::function<Clock::time_point(const std::string&)>& local_since,
                                             Clock::time_point now, const std::string& where) {
  Report report;
  if (!enabled_) return report;
  std::ostringstream warn;
  int stalled = 0;
  for (const auto& p : pending) {
    if (p.missing_ranks.empty()) continue;  // waiting only for joined ranks: not a stall
    const Clock::time_point since = std::min(p.first_seen, local_since(p.name));
    const Clock::duration waited = now - since;
    if (shutdown_ > Clock::duration::zero() && waited >= shutdown_) {
      Response r;
      r.type = OpType::kError;
      r.names = {p.name};
      r.error_code = StatusCode::kAborted;
      r.error_message = "stalled collective: tensor '" + p.name + "'" + where + " was submitted by ranks [" +
                        rank_list(p.ready_ranks) + "] but not by ranks [" + rank_list(p.missing_ranks) + "] for " +
                        fmt_seconds(waited) + " (HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS); horovodlite shuts down";
      report.failures.push_back(std::move(r));
      continue;
    }
    if (waited >= check_) {
      warn << "\n  tensor '" << p.name << "'" << where << ": submitted by ranks [" << rank_list(p.ready_ranks)
           << "], missing ranks [" << rank_list(p.missing_ranks) << "], waiting " << fmt_seconds(waited);
      ++stalled;
    }
  }
  if (stalled > 0 && (!warned_ || now - last_warning_ >= check_)) {
    warned_ = true;
    last_warning_ = now;
    report.warning = "Stalled collectives: " + std::to_string(stalled) +
                     " name(s) submitted by some ranks and not by others for more than " + fmt_seconds(check_) +
                     " (HOROVODLITE_STALL_CHECK_TIME_SECONDS). Ranks that submit different names, or only some "
                     "ranks reaching a collective, deadlock:" +
                     warn.str();
  }
  return report;
}

}  // namespace horovodlite::negotiation
