#include "timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "logging.h"

namespace horovodlite {

namespace {

// Writes all of `data` (retrying short writes and EINTR).
bool write_all(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

Timeline::~Timeline() {
  // Normally stopped already (Runtime::stop); a destructor cannot return the error.
  const Status s = stop();
  if (!s.ok()) HVL_LOG(kWarning, s.message());
}

std::string Timeline::escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // UTF-8 bytes pass through
        }
    }
  }
  return out;
}

Status Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) {
    if (path == path_) {
      mark_cycles_ = mark_cycles;
      return Status::OK();
    }
    return Status::Precondition("a timeline is already being written to '" + path_ +
                                "'; call stop_timeline() before starting one at '" + path + "'");
  }
  if (path.empty()) return Status::InvalidArgument("timeline path is empty");
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::InvalidArgument("cannot open timeline file '" + path + "': " + std::strerror(errno));
  }
  if (!write_all(fd, "[\n")) {
    ::close(fd);
    return Status::Internal("cannot write timeline file '" + path + "': " + std::strerror(errno));
  }
  fd_ = fd;
  path_ = path;
  origin_ = Clock::now();
  stopping_ = false;
  queue_.clear();
  pids_.clear();
  negotiating_.clear();
  write_error_ = Status::OK();
  mark_cycles_ = mark_cycles;
  // pid 0 is the runtime's own row (cycle marks).
  queue_.push_back("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"horovodlite\"}},\n");
  writer_ = std::thread([this] { writer_loop(); });
  active_.store(true, std::memory_order_release);
  return Status::OK();
}

Status Timeline::stop() {
  std::thread writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0) return Status::OK();
    active_.store(false, std::memory_order_release);
    stopping_ = true;
    writer.swap(writer_);
  }
  cv_.notify_all();
  if (writer.joinable()) writer.join();
  std::lock_guard<std::mutex> lock(mu_);
  // A last event without a trailing comma, then the bracket: the file is valid JSON.
  const std::string tail = "{\"name\":\"TIMELINE_END\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" +
                           std::to_string(micros(Clock::now())) + "}\n]\n";
  if (!write_all(fd_, tail) && write_error_.ok()) {
    write_error_ = Status::Internal("cannot write timeline file '" + path_ + "': " + std::strerror(errno));
  }
  ::close(fd_);
  fd_ = -1;
  return write_error_;
}

void Timeline::writer_loop() {
  std::vector<std::string> batch;
  std::string buf;
  while (true) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      batch.swap(queue_);
      stopping = stopping_;
    }
    buf.clear();
    for (const std::string& line : batch) buf += line;
    batch.clear();
    // One write() of whole lines: a killed process leaves a file cut at an event boundary.
    if (!buf.empty() && !write_all(fd_, buf)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (write_error_.ok()) {
        write_error_ = Status::Internal("cannot write timeline file '" + path_ + "': " + std::strerror(errno));
      }
    }
    if (stopping) {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
    }
  }
}

int64_t Timeline::micros(Clock::time_point t) const {
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
  return us < 0 ? 0 : us;
}

int Timeline::pid_for(const std::string& name) {
  auto it = pids_.find(name);
  if (it != pids_.end()) return it->second;
  const int pid = static_cast<int>(pids_.size()) + 1;
  pids_.emplace(name, pid);
  const std::string p = std::to_string(pid);
  queue_.push_back("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + p + ",\"args\":{\"name\":\"" + escape(name) +
                   "\"}},\n");
  queue_.push_back("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + p + ",\"args\":{\"sort_index\":" + p +
                   "}},\n");
  return pid;
}

void Timeline::push(std::string line) {
  queue_.push_back(std::move(line));
  cv_.notify_one();
}

std::string Timeline::upper(const char* s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void Timeline::negotiate_start(const std::string& name, const char* op, Clock::time_point t) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stopping_) return;
  negotiating_.emplace(name, Negotiation{t, op});
}

void Timeline::rank_ready(const std::string& name, int rank, Clock::time_point t) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stopping_) return;
  const int pid = pid_for(name);
  push("{\"name\":\"" + std::to_string(rank) + "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":" + std::to_string(pid) +
       ",\"tid\":0,\"ts\":" + std::to_string(micros(t)) + ",\"args\":{\"rank\":" + std::to_string(rank) + "}},\n");
}

void Timeline::negotiate_end(const std::string& name, Clock::time_point t) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stopping_) return;
  auto it = negotiating_.find(name);
  if (it == negotiating_.end()) return;
  const Negotiation n = it->second;
  negotiating_.erase(it);
  const int pid = pid_for(name);
  const int64_t ts = micros(n.start);
  push("{\"name\":\"NEGOTIATE_" + n.op + "\",\"ph\":\"X\",\"pid\":" + std::to_string(pid) + ",\"tid\":0,\"ts\":" +
       std::to_string(ts) + ",\"dur\":" + std::to_string(std::max<int64_t>(micros(t) - ts, 0)) + "},\n");
}

void Timeline::phase(const std::string& name, const std::string& phase, Clock::time_point start,
                     Clock::time_point end) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stopping_) return;
  const int pid = pid_for(name);
  const int64_t ts = micros(start);
  push("{\"name\":\"" + escape(phase) + "\",\"ph\":\"X\",\"pid\":" + std::to_string(pid) + ",\"tid\":0,\"ts\":" +
       std::to_string(ts) + ",\"dur\":" + std::to_string(std::max<int64_t>(micros(end) - ts, 0)) + "},\n");
}

void Timeline::instant(const std::string& name, const std::string& what, const std::string& message,
                       Clock::time_point t) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stopping_) return;
  const int pid = pid_for(name);
  push("{\"name\":\"" + escape(what) + "\",\"ph\":\"i\",\"s\":\"p\",\"pid\":" + std::to_string(pid) +
       ",\"tid\":0,\"ts\":" + std::to_string(micros(t)) + ",\"args\":{\"message\":\"" + escape(message) + "\"}},\n");
}

void Timeline::cycle_start(Clock::time_point t) {
  if (!active() || !mark_cycles()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || stopping_) return;
  push("{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" + std::to_string(micros(t)) +
       "},\n");
}

}  // namespace horovodlite
