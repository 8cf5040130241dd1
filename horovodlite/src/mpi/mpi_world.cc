#include "mpi/mpi_world.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "job_failure.h"
#include "kernels/reduce.h"
#include "logging.h"
#include "mpi/mpi_transport.h"
#include "world.h"

namespace horovodlite {
namespace mpi {

namespace {

// MPI must be finalized once, at process exit, and only if we initialised it:
// finalizing in shutdown() would make a later init() impossible. After a failure
// that left the other ranks out of step, MPI_Finalize would wait for them for
// ever: the job is ended instead (job_failure.h).
std::once_flag g_finalize_once;
void finalize_at_exit() {
  abort_job_if_failed();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

template <DataType D, ReduceOp O>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  kernels::reduce_into(inout, in, *len, D, O);
}

}  // namespace

Status Comms::adopt(MPI_Comm comm) {
  comm_ = comm;
  HVL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  HVL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  // Errors come back as codes, which become Status values, instead of aborting.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);

  HVL_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_comm_));
  HVL_MPI_CHECK(MPI_Comm_rank(local_comm_, &local_rank_));
  HVL_MPI_CHECK(MPI_Comm_size(local_comm_, &local_size_));
  HVL_MPI_CHECK(MPI_Comm_split(comm_, local_rank_, rank_, &cross_comm_));
  HVL_MPI_CHECK(MPI_Comm_rank(cross_comm_, &cross_rank_));
  HVL_MPI_CHECK(MPI_Comm_size(cross_comm_, &cross_size_));
  int leader = rank_;  // local rank 0 has the host's lowest rank (the local split is keyed by rank)
  HVL_MPI_CHECK_AS(MPI_Bcast(&leader, 1, MPI_INT, 0, local_comm_), "MPI_Bcast (host order)");
  // leader * size + rank fits an int up to 46340 ranks; beyond, rank order.
  const int key = size_ <= 46340 ? leader * size_ + rank_ : rank_;
  HVL_MPI_CHECK_AS(MPI_Comm_split(comm_, 0, key, &host_comm_), "MPI_Comm_split (host order)");
  MPI_Comm_set_errhandler(host_comm_, MPI_ERRORS_RETURN);
  return Status::OK();
}

void Comms::make_types() {
  owns_types_ = true;
  MPI_Type_contiguous(2, MPI_BYTE, &half_type_);
  MPI_Type_commit(&half_type_);
  MPI_Type_contiguous(2, MPI_BYTE, &bf16_type_);
  MPI_Type_commit(&bf16_type_);
  MPI_Op_create(&half_op<DataType::kFloat16, ReduceOp::kSum>, 1, &half_ops_[0][0]);
  MPI_Op_create(&half_op<DataType::kFloat16, ReduceOp::kMin>, 1, &half_ops_[0][1]);
  MPI_Op_create(&half_op<DataType::kFloat16, ReduceOp::kMax>, 1, &half_ops_[0][2]);
  MPI_Op_create(&half_op<DataType::kFloat16, ReduceOp::kProduct>, 1, &half_ops_[0][3]);
  MPI_Op_create(&half_op<DataType::kBFloat16, ReduceOp::kSum>, 1, &half_ops_[1][0]);
  MPI_Op_create(&half_op<DataType::kBFloat16, ReduceOp::kMin>, 1, &half_ops_[1][1]);
  MPI_Op_create(&half_op<DataType::kBFloat16, ReduceOp::kMax>, 1, &half_ops_[1][2]);
  MPI_Op_create(&half_op<DataType::kBFloat16, ReduceOp::kProduct>, 1, &half_ops_[1][3]);
}

void Comms::borrow_types(const Comms& parent) {
  owns_types_ = false;
  half_type_ = parent.half_type_;
  bf16_type_ = parent.bf16_type_;
  for (int row = 0; row < 2; ++row)
    for (int i = 0; i < 4; ++i) half_ops_[row][i] = parent.half_ops_[row][i];
}

Comms::~Comms() { free_all(); }

void Comms::free_all() {
  if (!mpi_running()) return;
  if (owns_types_) {
    for (auto& row : half_ops_)
      for (auto& op : row)
        if (op != MPI_OP_NULL) MPI_Op_free(&op);
    if (half_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_type_);
    if (bf16_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&bf16_type_);
  }
  for (MPI_Comm* c : {&host_comm_, &cross_comm_, &local_comm_, &comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

Status agree_eager_message_bytes(const Comms& comms, int64_t* out) {
  std::vector<const char*> limits = {"btl_vader_eager_limit"};  // shared memory
  if (comms.local_size() < comms.size()) limits.push_back("btl_tcp_eager_limit");
  int64_t bytes = INT64_MAX;
  for (const char* name : limits) {
    // 0: not this MPI's, or the transport is not loaded here (a host with one
    // rank has no shared-memory peers). The limit includes Open MPI's headers:
    // keep 64 bytes for them.
    const int64_t limit = mpi_control_variable(name);
    if (limit > 128) bytes = std::min(bytes, (limit - 64) / 8 * 8);
  }
  HVL_MPI_CHECK_AS(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_INT64_T, MPI_MIN, comms.comm()),
                   "MPI_Allreduce (eager limit)");
  *out = bytes == INT64_MAX ? 0 : bytes;  // no limit known anywhere: 0
  return Status::OK();
}

MPI_Datatype Comms::reduce_type(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
      return half_type_;
    case DataType::kBFloat16:
      return bf16_type_;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Datatype Comms::move_type(DataType dtype) {
  switch (dtype_size(dtype)) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    default:
      return MPI_UINT64_T;
  }
}

MPI_Op Comms::reduce_op(ReduceOp op, DataType dtype) const {
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    const int row = dtype == DataType::kFloat16 ? 0 : 1;
    switch (op) {
      case ReduceOp::kMin:
        return half_ops_[row][1];
      case ReduceOp::kMax:
        return half_ops_[row][2];
      case ReduceOp::kProduct:
        return half_ops_[row][3];
      default:
        return half_ops_[row][0];
    }
  }
  if (dtype == DataType::kBool) {
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? MPI_LAND : MPI_LOR;
  }
  switch (op) {
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    default:
      return MPI_SUM;
  }
}

namespace {

// The control collectives as MPI collectives over the world's communicator.
class MpiBackend : public WorldBackend {
 public:
  MpiBackend() = default;
  Comms& comms() { return comms_; }
  const mpi::Comms* mpi() const override { return &comms_; }

  Status max_int64(int64_t* v, int n) const override {
    HVL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, comms_.comm()));
    return Status::OK();
  }
  Status allgather(const void* mine, size_t bytes, void* all) const override {
    HVL_MPI_CHECK(
        MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comms_.comm()));
    return Status::OK();
  }
  Status broadcast(void* buf, size_t bytes, int root) const override {
    HVL_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comms_.comm()));
    return Status::OK();
  }
  Status alltoall_int64(const int64_t* send, int64_t* recv) const override {
    HVL_MPI_CHECK(MPI_Alltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, comms_.comm()));
    return Status::OK();
  }
  Status split(const std::vector<int>& ranks, bool member, const std::string& name, WorldParts* out) const override;
  const char* stalled_hint() const override {
    return "a peer rank has died or hung (mpirun's messages name a rank that exited); aborting the job";
  }
  // The background thread is stuck in MPI and cannot be joined: only ending the
  // job ends the wait. MPI_Abort makes mpirun stop every rank with a non-zero exit.
  void end_stalled_wait(const std::string&) const override { MPI_Abort(comms_.comm(), 1); }

  int thread_level = MPI_THREAD_SINGLE;
  int64_t eager_message_bytes = 0;

 private:
  Comms comms_;
};

// The parts of a world over `backend`'s (adopted) communicators: the wire is
// MPI's point-to-point messages over comm(), the host-ordered one over host_comm().
Status assemble_parts(std::unique_ptr<MpiBackend> backend, WorldParts* out) {
  const Comms& c = backend->comms();
  // Each rank's host, named by its lowest rank, for the transport's topology.
  int lowest = c.rank();
  HVL_MPI_CHECK_AS(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, c.local_comm()), "MPI_Allreduce (hosts)");
  std::vector<int> keys(static_cast<size_t>(c.size()));
  HVL_MPI_CHECK_AS(MPI_Allgather(&lowest, 1, MPI_INT, keys.data(), 1, MPI_INT, c.comm()), "MPI_Allgather (hosts)");
  std::vector<std::string> names;
  for (int k : keys) names.push_back(std::to_string(k));
  const transport::Topology topology = transport::Topology::from_names(names);
  out->rank = c.rank();
  out->size = c.size();
  out->local_rank = c.local_rank();
  out->local_size = c.local_size();
  out->cross_rank = c.cross_rank();
  out->cross_size = c.cross_size();
  out->eager_message_bytes = backend->eager_message_bytes;
  out->threads_multiple = backend->thread_level >= MPI_THREAD_MULTIPLE;
  out->wire = std::make_shared<transport::MpiTransport>(c.comm(), false, topology);
  out->host_wire = std::make_shared<transport::MpiTransport>(c.host_comm(), false,
                                                             transport::sub_topology(topology, topology.host_order()));
  out->backend = std::move(backend);
  return Status::OK();
}

Status MpiBackend::split(const std::vector<int>& ranks, bool member, const std::string&, WorldParts* out) const {
  int pos = 0;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == comms_.rank()) pos = static_cast<int>(i);
  MPI_Comm comm = MPI_COMM_NULL;
  // Collective over every rank of the world; non-members get MPI_COMM_NULL.
  HVL_MPI_CHECK(MPI_Comm_split(comms_.comm(), member ? 0 : MPI_UNDEFINED, pos, &comm));
  if (!member) return Status::OK();
  auto set = std::make_unique<MpiBackend>();
  set->thread_level = thread_level;
  set->eager_message_bytes = eager_message_bytes;  // agreed by every rank, hence by the set's
  set->comms().borrow_types(comms_);
  HVL_RETURN_IF_ERROR(set->comms().adopt(comm));
  return assemble_parts(std::move(set), out);
}

}  // namespace
}  // namespace mpi

Status World::init_mpi(const void* user_comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::Precondition("MPI has already been finalized; horovodlite cannot start");
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    HVL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::call_once(mpi::g_finalize_once, [] { std::atexit(mpi::finalize_at_exit); });
  }
  auto backend = std::make_unique<mpi::MpiBackend>();
  MPI_Query_thread(&backend->thread_level);
  if (backend->thread_level < MPI_THREAD_SERIALIZED) {
    HVL_LOG(kWarning, "MPI provides thread level "
                          << backend->thread_level
                          << " (< MPI_THREAD_SERIALIZED); horovodlite's background thread makes all its MPI calls, "
                             "so the program must not call MPI concurrently. Initialise MPI with MPI_THREAD_MULTIPLE.");
  } else if (backend->thread_level < MPI_THREAD_MULTIPLE) {
    HVL_LOG(kInfo,
            "MPI did not provide MPI_THREAD_MULTIPLE; the program must not call MPI concurrently with horovodlite");
  }
  const MPI_Comm base = user_comm ? *static_cast<const MPI_Comm*>(user_comm) : MPI_COMM_WORLD;
  MPI_Comm comm = MPI_COMM_NULL;
  HVL_MPI_CHECK(MPI_Comm_dup(base, &comm));
  HVL_RETURN_IF_ERROR(backend->comms().adopt(comm));
  HVL_RETURN_IF_ERROR(mpi::agree_eager_message_bytes(backend->comms(), &backend->eager_message_bytes));
  backend->comms().make_types();
  WorldParts parts;
  HVL_RETURN_IF_ERROR(mpi::assemble_parts(std::move(backend), &parts));
  assemble(std::move(parts));
  return Status::OK();
}

}  // namespace horovodlite
