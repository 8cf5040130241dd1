#include "mpi_context.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "kernels/reduce.h"
#include "logging.h"
#include "recursive_doubling.h"
#include "transport/collectives.h"

namespace horovodlite {

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

Status mpi_status(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::OK();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::Internal(std::string(call) + " failed: " + std::string(msg, len));
}

Status mpi_call_status(int rc, const char* call_text) {
  if (rc == MPI_SUCCESS) return Status::OK();
  const std::string text(call_text);
  return mpi_status(rc, text.substr(0, text.find('(')).c_str());
}

namespace {
Status agree_across_ranks(MPI_Comm comm, const Status& local, const std::string& name, const char* elsewhere) {
  int ok = local.ok() ? 1 : 0;
  HVL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, comm));
  if (!local.ok()) return local;
  if (!ok) return Status::Aborted("collective on '" + name + "' failed on another rank (" + elsewhere + ")");
  return Status::OK();
}
}  // namespace

namespace {
template <typename T>
T read_as(const unsigned char* bytes) {
  T v;
  std::memcpy(&v, bytes, sizeof(T));
  return v;
}

int64_t read_control_variable(const char* name) {
  // Open MPI 4.1's MPI_T_init_thread stores the level it is asked for as the
  // library's thread level (ompi_mpi_thread_level): asking for less than
  // MPI_Init_thread provided would turn off its MPI_THREAD_MULTIPLE handling
  // for the rest of the job (MPI_Query_thread then says MPI_THREAD_SINGLE).
  // Ask for the level MPI already has.
  int level = MPI_THREAD_SINGLE;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Query_thread(&level);
  int provided = 0;
  if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return 0;
  int64_t out = 0;
  int index = -1;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS && index >= 0) {
    char cvar_name[256], desc[1024];
    int name_len = sizeof(cvar_name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype;
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_get_info(index, cvar_name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind,
                            &scope) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count == 1) {
        alignas(8) unsigned char value[16] = {};  // room for any integer type
        if (MPI_T_cvar_read(handle, value) == MPI_SUCCESS) {
          if (type == MPI_UNSIGNED_LONG) {
            out = static_cast<int64_t>(read_as<unsigned long>(value));
          } else if (type == MPI_UNSIGNED_LONG_LONG) {
            out = static_cast<int64_t>(read_as<unsigned long long>(value));
          } else if (type == MPI_INT) {
            out = read_as<int>(value);
          } else if (type == MPI_UNSIGNED) {
            out = read_as<unsigned>(value);
          }
        }
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return std::max<int64_t>(0, out);
}
}  // namespace

int64_t mpi_control_variable(const char* name) {
  // Read once per process and kept: MCA parameters are fixed once MPI is
  // initialised, and each MPI_T_init_thread of Open MPI 4.1 opens every
  // component of every framework to register its variables (dlopen, library
  // constructors and all; MPI_T_finalize closes them again). Every init of
  // horovodlite reads these limits: reading them anew each time took as many
  // loads, and one of them (libfabric's PSM2 provider, under mca_mtl_ofi)
  // sometimes sleeps in its constructor for tens of seconds, which stalled a
  // rank while its peers waited in the negotiation (docs/multihost.md).
  static std::mutex mu;
  static std::vector<std::pair<std::string, int64_t>> known;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [n, v] : known)
    if (n == name) return v;
  const int64_t v = read_control_variable(name);
  known.emplace_back(name, v);
  return v;
}

Status mpi_wait(MPI_Request* request, const char* what, int max_sleep_us) {
  int done = 0;
  int attempts = 0;
  int sleep_us = 2;
  while (true) {
    HVL_MPI_CHECK_AS(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
    if (done) return Status::OK();
    ++attempts;
    if (attempts < 32) continue;  // a few microseconds: the peer is usually close behind
    if (attempts < 64) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, max_sleep_us);
  }
}

Status MpiContext::init(const MPI_Comm* user_comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::Precondition("MPI has already been finalized; horovodlite cannot start");
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    HVL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::call_once(g_finalize_once, [] { std::atexit(finalize_at_exit); });
  }
  MPI_Query_thread(&thread_level_);
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    HVL_LOG(kWarning, "MPI provides thread level "
                          << thread_level_
                          << " (< MPI_THREAD_SERIALIZED); horovodlite's background thread makes all its MPI calls, "
                             "so the program must not call MPI concurrently. Initialise MPI with MPI_THREAD_MULTIPLE.");
  } else if (thread_level_ < MPI_THREAD_MULTIPLE) {
    HVL_LOG(kInfo,
            "MPI did not provide MPI_THREAD_MULTIPLE; the program must not call MPI concurrently with horovodlite");
  }

  MPI_Comm base = user_comm ? *user_comm : MPI_COMM_WORLD;
  HVL_MPI_CHECK(MPI_Comm_dup(base, &comm_));
  HVL_RETURN_IF_ERROR(init_communicators());
  HVL_RETURN_IF_ERROR(agree_eager_message_bytes());
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
  return Status::OK();
}

Status MpiContext::init_communicators() {
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

Status MpiContext::several_hosts_alike(bool* yes, bool* same_count) const {
  // min == max of the local sizes: every host has as many ranks. Then
  // cross_size (the number of hosts) is the same everywhere too.
  // (The control collective: MPI's, or the transport's in a job without MPI.)
  int64_t sizes[2] = {local_size_, -local_size_};  // max, -min
  HVL_RETURN_IF_ERROR(max_int64(sizes, 2));
  const bool same = sizes[0] == -sizes[1];
  if (same_count != nullptr) *same_count = same;
  *yes = same && local_size_ > 1 && cross_size_ > 1;
  return Status::OK();
}

Status MpiContext::agree_eager_message_bytes() {
  std::vector<const char*> limits = {"btl_vader_eager_limit"};  // shared memory
  if (local_size_ < size_) limits.push_back("btl_tcp_eager_limit");
  int64_t bytes = INT64_MAX;
  for (const char* name : limits) {
    // 0: not this MPI's, or the transport is not loaded here (a host with one
    // rank has no shared-memory peers). The limit includes Open MPI's headers:
    // keep 64 bytes for them.
    const int64_t limit = mpi_control_variable(name);
    if (limit > 128) bytes = std::min(bytes, (limit - 64) / 8 * 8);
  }
  HVL_MPI_CHECK_AS(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_INT64_T, MPI_MIN, comm_), "MPI_Allreduce (eager limit)");
  eager_message_bytes_ = bytes == INT64_MAX ? 0 : bytes;  // no limit known anywhere: 0
  return Status::OK();
}

Status MpiContext::init_subset(const MpiContext& parent, MPI_Comm comm) {
  comm_ = comm;
  owns_types_ = false;
  thread_level_ = parent.thread_level_;
  half_type_ = parent.half_type_;
  bf16_type_ = parent.bf16_type_;
  for (int row = 0; row < 2; ++row)
    for (int i = 0; i < 4; ++i) half_ops_[row][i] = parent.half_ops_[row][i];
  eager_message_bytes_ = parent.eager_message_bytes_;  // agreed by every rank, hence by the set's
  return init_communicators();
}

Status MpiContext::init_transport(transport::ContextPtr wire) {
  if (!wire) return Status::InvalidArgument("init_transport: no transport context");
  wire_ = std::move(wire);
  thread_level_ = MPI_THREAD_MULTIPLE;  // no MPI: nothing the program calls can collide with ours
  return init_transport_layout();
}

Status MpiContext::init_subset_transport(const MpiContext& parent, transport::ContextPtr wire) {
  if (!wire) return Status::InvalidArgument("init_subset_transport: no transport context");
  wire_ = std::move(wire);
  owns_types_ = false;
  thread_level_ = parent.thread_level_;
  return init_transport_layout();
}

Status MpiContext::init_transport_layout() {
  const transport::Context& w = *wire_;
  rank_ = w.rank();
  size_ = w.size();
  local_rank_ = w.local_rank();
  local_size_ = w.local_size();
  cross_rank_ = w.cross_rank();
  cross_size_ = w.cross_size();
  eager_message_bytes_ = 0;  // no eager limit to respect: messages go as they are
  // Collective over the members, in the same order on every rank.
  HVL_RETURN_IF_ERROR(wire_->split(w.topology().host_order(), "host_order", &host_wire_));
  return wire_->dup("control", &control_);
}

Status MpiContext::agree(const Status& local, const std::string& name, const char* elsewhere) const {
  if (uses_mpi()) return agree_across_ranks(comm_, local, name, elsewhere);
  int64_t failed = local.ok() ? 0 : 1;
  HVL_RETURN_IF_ERROR(max_int64(&failed, 1));
  if (!local.ok()) return local;
  if (failed) return Status::Aborted("collective on '" + name + "' failed on another rank (" + elsewhere + ")");
  return Status::OK();
}

Status MpiContext::max_int64(int64_t* v, int n) const {
  if (uses_mpi()) {
    HVL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, comm_));
    return Status::OK();
  }
  std::vector<uint64_t> words(static_cast<size_t>(n));
  std::memcpy(words.data(), v, words.size() * sizeof(uint64_t));
  RecursiveDoubling exchange(control_);
  HVL_RETURN_IF_ERROR(exchange.run(words.data(), words.size(), [n](const uint64_t* in, uint64_t* inout) {
    for (int i = 0; i < n; ++i) {
      int64_t a = 0, b = 0;
      std::memcpy(&a, in + i, sizeof(a));
      std::memcpy(&b, inout + i, sizeof(b));
      if (a > b) inout[i] = in[i];
    }
  }));
  std::memcpy(v, words.data(), words.size() * sizeof(uint64_t));
  return Status::OK();
}

Status MpiContext::allgather(const void* mine, size_t bytes, void* all) const {
  if (uses_mpi()) {
    HVL_MPI_CHECK(
        MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, comm_));
    return Status::OK();
  }
  return transport_ops::allgatherv(*control_, mine, all, std::vector<size_t>(static_cast<size_t>(size_), bytes));
}

Status MpiContext::broadcast(void* buf, size_t bytes, int root) const {
  if (uses_mpi()) {
    HVL_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comm_));
    return Status::OK();
  }
  return transport_ops::broadcast(*control_, buf, bytes, root, transport::kControlBackoff);
}

Status MpiContext::alltoall_int64(const int64_t* send, int64_t* recv) const {
  if (uses_mpi()) {
    HVL_MPI_CHECK(MPI_Alltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, comm_));
    return Status::OK();
  }
  const std::vector<size_t> one(static_cast<size_t>(size_), sizeof(int64_t));
  return transport_ops::alltoallv(*control_, send, one, recv, one);
}

void MpiContext::release() {
  control_.reset();
  host_wire_.reset();
  wire_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (owns_types_) {
    for (auto& row : half_ops_)
      for (auto& op : row)
        if (op != MPI_OP_NULL) MPI_Op_free(&op);
    if (half_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_type_);
    if (bf16_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&bf16_type_);
  }
  for (auto& row : half_ops_)
    for (auto& op : row) op = MPI_OP_NULL;
  half_type_ = bf16_type_ = MPI_DATATYPE_NULL;
  for (MPI_Comm* c : {&host_comm_, &cross_comm_, &local_comm_, &comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

MpiContext::~MpiContext() { release(); }

MPI_Datatype MpiContext::reduce_type(DataType dtype) const {
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

MPI_Datatype MpiContext::move_type(DataType dtype) {
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

MPI_Op MpiContext::reduce_op(ReduceOp op, DataType dtype) const {
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

}  // namespace horovodlite
