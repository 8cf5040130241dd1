// Where the background thread runs (HOROVODLITE_THREAD_AFFINITY, Horovod's
// HOROVOD_THREAD_AFFINITY; include/horovodlite/config.h).
//
// Why a default: where more ranks share a set of CPUs than it has (mpirun
// --oversubscribe --bind-to none, as the tests and small machines run), the
// kernel moves each rank's background thread between CPUs
// from one op to the next, and with it the working set that its collectives
// hand to peers through the cache. Pinned round-robin over the ranks that
// share the set, ranks r and r + n share a CPU for good (n CPUs): Adasum at
// np 4 on CPUs whose caches are far apart gained most
// (docs/results/2026-11-adasum.md, "Pinning the background thread", "Where
// the CPU goes"). Where every rank has a CPU of
// its own, or the launcher bound each rank to CPUs of its own (mpirun
// --bind-to core), nothing is pinned.
#pragma once

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "horovodlite/common.h"

namespace horovodlite {

struct ThreadAffinity {
  enum class Mode : uint8_t { kAuto = 0, kNone = 1, kList = 2 };
  Mode mode = Mode::kAuto;
  std::vector<int> cpus;  // kList: local rank i's CPU is cpus[i]
  std::string var;        // the variable it was read from (for errors); empty: unset
};

// Parses a value of `var`: "auto" (or empty), "none", or a comma-separated
// list of CPU ids ("0,1,1,0"; blanks around them allowed). InvalidArgument
// naming the variable otherwise.
Status parse_thread_affinity(const std::string& var, const std::string& value, ThreadAffinity* out);

// Who competes for this process's CPUs: `count` ranks of the job (this one
// included) run on this machine with the same allowed CPUs, and this one is
// the `index`-th of them in rank order.
struct CpuSharers {
  int index = 0;
  int count = 1;
};

// The CPU for this rank's background thread, given the CPUs this process may
// run on (`allowed`, ascending); -1: leave the thread to the kernel.
// auto: allowed[sharers.index mod n] where sharers.count > n (n =
// allowed.size()). A list: list[local_rank]; a listed CPU outside `allowed`,
// or a list shorter than local_size: InvalidArgument naming the variable and
// the local rank.
Status background_thread_cpu(const ThreadAffinity& a, int local_rank, int local_size, CpuSharers sharers,
                             const std::vector<int>& allowed, int* cpu);

// A key that two processes share exactly when they run under one kernel (its
// boot id; the host name where that cannot be read) with the same allowed
// CPUs: simulated hosts (network namespaces) of one machine share their CPUs.
uint64_t cpu_set_key(const std::vector<int>& allowed);

// This rank's CpuSharers from every rank's cpu_set_key (in rank order).
CpuSharers cpu_sharers(const std::vector<uint64_t>& keys, int rank);

// The CPUs this process may run on (sched_getaffinity), ascending; empty where
// that cannot be read.
std::vector<int> allowed_cpus();

// Pins `thread` to `cpu`; a failure is returned (the thread keeps running
// where it was).
Status pin_thread(std::thread& thread, int cpu);

}  // namespace horovodlite
