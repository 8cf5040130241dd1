// Captures this process's stderr (fd 2) into a temporary file, so that a test can
// check what horovodlite logged. Used on rank 0 only.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace hvl_test {

class StderrCapture {
 public:
  StderrCapture() {
    char tmpl[] = "/tmp/hvl_stderr_XXXXXX";
    fd_ = mkstemp(tmpl);
    path_ = tmpl;
    std::fflush(stderr);
    saved_ = dup(2);
    dup2(fd_, 2);
  }
  ~StderrCapture() {
    restore();
    unlink(path_.c_str());
  }
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    close(fd_);
    saved_ = -1;
  }
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Polls (every 50 ms) until the captured text contains every needle, or the
  // deadline passes. A generous deadline: the test fails on the content, not on time.
  bool wait_for(const std::vector<std::string>& needles, std::chrono::seconds deadline) const {
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < end) {
      const std::string t = text();
      bool all = true;
      for (const auto& n : needles) all = all && t.find(n) != std::string::npos;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::string path_;
  int fd_ = -1;
  int saved_ = -1;
};

}  // namespace hvl_test
