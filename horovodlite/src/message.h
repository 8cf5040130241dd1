// What ranks tell the coordinator (Request) and what it answers (Response), and
// their wire format. Decoding is defensive: every read is bounds-checked and every
// count is limited by the bytes that remain, so a corrupt or hostile buffer gives
// an error Status, never a crash or an unbounded allocation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "horovodlite/common.h"

namespace horovodlite {

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kError = 7,  // responses only
};
const char* op_type_name(OpType t);

struct Request {
  int32_t rank = 0;
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  int32_t device = kCpuDevice;
  Shape shape;
  int32_t root = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  Compression compression = Compression::kNone;
  // A grouped op (Horovod's group_id): group_id identifies the group's member
  // names (group_id_of), the same on every rank; group_size is how many there
  // are. 0/0: not grouped. Rank 0 declares a group's names ready together.
  uint64_t group_id = 0;
  int32_t group_size = 0;

  // Whether a and b ask for the same op with the same parameters (the response
  // cache's test; allgather/alltoall compare all dims, as the cache keeps them).
  bool same_params(const Request& other) const;
};

struct Response {
  OpType type = OpType::kAllreduce;
  std::vector<std::string> names;
  // kError: the message delivered to every rank, and its code.
  std::string error_message;
  StatusCode error_code = StatusCode::kOk;
  DataType dtype = DataType::kFloat32;
  int32_t device = kCpuDevice;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  Compression compression = Compression::kNone;
  int32_t root = 0;
  // allreduce: the element count of each name (so joined ranks can contribute
  // zeros and fused offsets agree everywhere). allgather: dim 0 of each rank.
  std::vector<int64_t> tensor_sizes;
  // Single-tensor ops: the shape (from the coordinator's view of rank 0's request
  // or the first rank that sent it).
  Shape shape;
  // join: the last rank to join.
  int32_t last_joined_rank = -1;
  // The group of a grouped op's single-tensor response (as in Request), so that
  // cached responses of a group hit together and fusion keeps a group adjacent.
  uint64_t group_id = 0;
  int32_t group_size = 0;
  // Local to this rank and cycle, never on the wire: an allreduce whose data went
  // with the cycle's negotiation (Controller, EAGER_ALLREDUCE_BYTES) points at the
  // result, already reduced over every rank (before the postscale); valid until
  // the next cycle. nullptr: the data still has to be reduced.
  const void* reduced = nullptr;
};

// The group id of a grouped op over `names`: a 64-bit hash of the sorted names
// (so every rank computes the same id whatever the order), never 0.
uint64_t group_id_of(const std::vector<std::string>& names);

// Encoders append to `out`. Decoders consume `data[0, size)` and return an error
// naming what was malformed.
void encode_requests(const std::vector<Request>& requests, std::string* out);
Status decode_requests(const uint8_t* data, size_t size, std::vector<Request>* out);
void encode_responses(const std::vector<Response>& responses, std::string* out);
Status decode_responses(const uint8_t* data, size_t size, std::vector<Response>* out);

// "0, 2, 5": ranks as error messages list them.
std::string rank_list(const std::vector<int>& ranks);

// Limits enforced on decode.
// The name every rank's join request carries (one per process set).
constexpr const char* kJoinName = "horovodlite.join";

constexpr size_t kMaxNameLength = 4096;
constexpr size_t kMaxDims = 64;

}  // namespace horovodlite
