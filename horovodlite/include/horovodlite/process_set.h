// Process sets (Horovod 0.28's): a subset of the ranks that runs collectives
// among itself, with its own communicator and its own negotiation (its rank 0
// coordinates; its own response cache, fusion buffer and stall inspection).
// Ops on different sets may be in flight at once, and a name may be in flight on
// two sets at once. The global set (id 0) holds every rank.
//
// A ProcessSet is a handle: the id of a set registered on every rank, at init()
// (InitOptions::process_sets) or with add_process_set() (horovodlite.h).
#pragma once

#include <cstdint>
#include <vector>

namespace horovodlite {

class ProcessSet {
 public:
  // The global process set.
  constexpr ProcessSet() = default;
  explicit constexpr ProcessSet(int32_t id) : id_(id) {}

  int32_t id() const { return id_; }
  bool is_global() const { return id_ == 0; }

  // Valid while initialised and the set is registered:
  // whether this process is a member (false if not registered);
  bool included() const;
  // this process's rank within the set (-1 if not a member or not registered);
  int rank() const;
  // the number of ranks in the set (-1 if not registered);
  int size() const;
  // the members' ranks in the global set, ascending (empty if not registered).
  std::vector<int> ranks() const;

  bool operator==(const ProcessSet& other) const { return id_ == other.id_; }
  bool operator!=(const ProcessSet& other) const { return id_ != other.id_; }

 private:
  int32_t id_ = 0;
};

constexpr ProcessSet kGlobalProcessSet{};

}  // namespace horovodlite
