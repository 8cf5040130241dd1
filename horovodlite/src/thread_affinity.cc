#include "thread_affinity.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

namespace horovodlite {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string list_of(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size(); ++i) s += (i ? "," : "") + std::to_string(cpus[i]);
  return s;
}

}  // namespace

Status parse_thread_affinity(const std::string& var, const std::string& value, ThreadAffinity* out) {
  ThreadAffinity a;
  a.var = var;
  const std::string v = trim(value);
  if (v.empty() || v == "auto") {
    *out = a;
    return Status::OK();
  }
  if (v == "none") {
    a.mode = ThreadAffinity::Mode::kNone;
    *out = a;
    return Status::OK();
  }
  a.mode = ThreadAffinity::Mode::kList;
  size_t begin = 0;
  while (begin <= v.size()) {
    size_t end = v.find(',', begin);
    if (end == std::string::npos) end = v.size();
    const std::string item = trim(v.substr(begin, end - begin));
    char* rest = nullptr;
    errno = 0;
    const long x = std::strtol(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || errno != 0 || x < 0 || x >= CPU_SETSIZE) {
      return Status::InvalidArgument("invalid value '" + value + "' for " + var +
                                     ": expected auto, none, or a comma-separated list of CPU ids (0.." +
                                     std::to_string(CPU_SETSIZE - 1) + "), one per local rank");
    }
    a.cpus.push_back(static_cast<int>(x));
    begin = end + 1;
  }
  *out = a;
  return Status::OK();
}

Status background_thread_cpu(const ThreadAffinity& a, int local_rank, int local_size, CpuSharers sharers,
                             const std::vector<int>& allowed, int* cpu) {
  *cpu = -1;
  switch (a.mode) {
    case ThreadAffinity::Mode::kNone:
      return Status::OK();
    case ThreadAffinity::Mode::kAuto:
      if (!allowed.empty() && sharers.count > static_cast<int>(allowed.size()))
        *cpu = allowed[static_cast<size_t>(sharers.index) % allowed.size()];
      return Status::OK();
    case ThreadAffinity::Mode::kList:
      break;
  }
  if (local_rank >= static_cast<int>(a.cpus.size())) {
    return Status::InvalidArgument(a.var + "=" + list_of(a.cpus) + " names " + std::to_string(a.cpus.size()) +
                                   " CPU(s), but this host has " + std::to_string(local_size) +
                                   " local ranks (no CPU for local rank " + std::to_string(local_rank) + ")");
  }
  const int want = a.cpus[static_cast<size_t>(local_rank)];
  // allowed empty (unknown): pthread_setaffinity_np judges.
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), want) == allowed.end()) {
    return Status::InvalidArgument(a.var + ": CPU " + std::to_string(want) + " (local rank " +
                                   std::to_string(local_rank) + "'s) is not one this process may run on (" +
                                   list_of(allowed) + ")");
  }
  *cpu = want;
  return Status::OK();
}

uint64_t cpu_set_key(const std::vector<int>& allowed) {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  if (!(boot >> id)) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) id = host;
  }
  // std::hash of a string is unseeded: the same on every rank of one build.
  return std::hash<std::string>{}(id + "/" + list_of(allowed));
}

CpuSharers cpu_sharers(const std::vector<uint64_t>& keys, int rank) {
  CpuSharers s;
  s.count = 0;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (keys[r] != keys[static_cast<size_t>(rank)]) continue;
    if (static_cast<int>(r) < rank) ++s.index;
    ++s.count;
  }
  return s;
}

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

Status pin_thread(std::thread& thread, int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  const int rc = pthread_setaffinity_np(thread.native_handle(), sizeof one, &one);
  if (rc != 0)
    return Status::Internal("pinning the background thread to CPU " + std::to_string(cpu) + ": " + std::strerror(rc));
  return Status::OK();
}

}  // namespace horovodlite
