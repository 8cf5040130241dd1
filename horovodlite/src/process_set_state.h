// What the runtime keeps for one process set: its members, and on a member its
// communicator (MpiContext), its Executor (the set's algorithms and fusion
// buffer) and its Controller (negotiation, response cache, stall inspection),
// its queue of new requests and its table of ops in flight (names are per set).
// The global set (id 0) is one of them, on the runtime's own MpiContext.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "entry.h"
#include "executor.h"
#include "message.h"
#include "mpi_context.h"
#include "negotiation/controller.h"

namespace horovodlite {

struct ProcessSetState {
  int32_t id = 0;
  std::vector<int> ranks;  // global ranks, ascending
  int rank = -1;           // this process's rank in the set; -1: not a member

  // Members only (null elsewhere). Background thread (built before it runs).
  std::unique_ptr<MpiContext> own_mpi;  // process sets; the global set uses the runtime's
  MpiContext* mpi = nullptr;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<negotiation::Controller> controller;

  // Guarded by the runtime's mutex.
  std::vector<Request> queue;
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table;
  bool removing = false;  // a removal is being agreed: no new ops
  uint64_t barriers = 0;  // barrier names ("horovodlite.barrier.<n>") count per set
  uint64_t nonames = 0;   // unnamed ops likewise

  bool member() const { return rank >= 0; }
  int size() const { return static_cast<int>(ranks.size()); }
  // "process set 2 (ranks [0, 2])"
  std::string describe() const;
  // The set's rows in the timeline are its names with this prefix: "" for the
  // global set, "process_set_2/" for set 2 (the same name on two sets, two rows).
  std::string timeline_prefix() const;
};

}  // namespace horovodlite
