// ReadinessTable (Horovod's Controller/MessageTable on the coordinator): rank 0's
// side of full negotiation. It collects the requests every rank sends, declares a
// name ready once every rank (or every rank that has not joined) asked for it,
// checks that the ranks agree, and turns a disagreement into an error response
// for that name only. A grouped op's names (Request::group_id) are declared ready
// together, once every member is ready on every rank; if one member fails the
// agreement checks, the whole group fails with its message. (Fusing the ready responses is
// ops/fusion.h's fuse_responses, which every rank applies to the same list.)
#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace horovodlite::negotiation {

class ReadinessTable {
 public:
  // `global_ranks`: the global rank of each rank of the set (empty: the
  // identity), so that messages name global ranks; `where`: appended to the
  // tensor in messages (" in process set 2 (ranks [1, 3])"; empty: the global set).
  explicit ReadinessTable(int size, std::vector<int> global_ranks = {}, std::string where = "");

  // Records the requests `rank` sent this cycle.
  void add(int rank, const std::vector<Request>& requests);
  // Single-tensor responses for every name that became ready, in the order the
  // names first arrived; a join response (when every rank has joined) comes last.
  std::vector<Response> take_ready();

  // Names some ranks asked for and others not yet, for the stall inspector
  // (ranks as global ranks).
  struct PendingInfo {
    std::string name;
    std::vector<int> ready_ranks;
    std::vector<int> missing_ranks;
    std::chrono::steady_clock::time_point first_seen;
  };
  std::vector<PendingInfo> pending() const;
  // Forgets a pending name (after the stall inspector failed it everywhere).
  void drop(const std::string& name);

 private:
  struct Pending {
    std::vector<Request> by_rank;  // size_ entries; valid where has[r]
    std::vector<bool> has;
    int count = 0;
    std::chrono::steady_clock::time_point first_seen;
  };
  struct Group {
    int32_t size = 0;
    std::vector<std::string> members;  // distinct names seen with this group id, in arrival order
  };
  bool ready(const Pending& p) const;
  Response build(const std::string& name, const Pending& p) const;
  // Whether the ranks that sent the name disagree on the op or the tensor
  // (q0: the first rank's request); *message then says on what.
  bool mismatched(const std::string& name, const Pending& p, const Request& q0, std::string* message) const;
  // The response of a name every rank agrees on (q0: the first rank's request).
  Response agreed(const std::string& name, const Pending& p, const Request& q0) const;
  // The group every rank that sent the name agrees on (0: none), or an error
  // response when ranks disagree.
  bool agreed_group(const std::string& name, const Pending& p, uint64_t* group, Response* err) const;
  // Whether every member of `group` is ready and agreed on (then the group goes out as one).
  bool group_complete(const Group& group, uint64_t id) const;
  // Builds every member; if one is an error, the whole group is one error response.
  void emit_group(uint64_t id, std::vector<Response>* out);
  void forget(const std::string& name);  // erases a name and its group membership

  int size_;
  std::vector<int> global_;  // global rank of each rank of the set
  std::string where_;
  std::unordered_map<std::string, Pending> table_;
  std::unordered_map<uint64_t, Group> groups_;
  std::vector<std::string> arrival_;
  std::vector<bool> joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
};

}  // namespace horovodlite::negotiation
