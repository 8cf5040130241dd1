// The job's ranks and how to reach them. Under mpirun: everything MPI:
// initialisation (or adopting the program's own MPI), the communicators (global,
// local = same host, cross = same local rank across hosts), datatypes and
// reduction ops for every dtype (custom ones for fp16/bf16), and a wait that does
// not busy-spin. In a job without MPI (Gloo: init_transport) the same ranks,
// sizes and host layout come from a transport context (transport/transport.h)
// and there is no MPI communicator (comm() is MPI_COMM_NULL, uses_mpi() false).
// The control collectives below (agree, max_int64, allgather, broadcast) run on
// either, for the set-up steps that every algorithm and the runtime share.
#pragma once

#include <mpi.h>

#include <string>

#include "horovodlite/common.h"
#include "transport/transport.h"

namespace horovodlite {

// A communicator with this process's rank and size in it: what a Controller
// negotiates on (the global one, or a process set's).
struct Communicator {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  // comm's ranks in host order (MpiContext::host_comm), for the negotiation's
  // point-to-point exchanges; null: comm itself.
  MPI_Comm host_ordered = MPI_COMM_NULL;
  // MpiContext::eager_message_bytes (0: unknown).
  int64_t eager_message_bytes = 0;
  // A job without MPI: the set's transport context, and the same ranks in host
  // order (what host_ordered is for MPI); null under MPI.
  transport::ContextPtr wire;
  transport::ContextPtr host_wire;
};

class MpiContext {
 public:
  MpiContext() = default;
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;
  ~MpiContext();

  // comm: the communicator to duplicate (MPI_COMM_WORLD when null).
  Status init(const MPI_Comm* comm);
  // A process set's context: takes over `comm` (this process is a member), with
  // its own rank, size and local/cross communicators; the datatypes and
  // reduction ops are borrowed from `parent`, which must outlive this context.
  // Collective over `comm`.
  Status init_subset(const MpiContext& parent, MPI_Comm comm);
  // A job without MPI: the ranks of `wire` (the Gloo world), their host layout
  // from its topology. Collective over wire (splits private channels from it).
  Status init_transport(transport::ContextPtr wire);
  // A process set's context over `wire` (split from the parent's; this process
  // is a member). Collective over wire.
  Status init_subset_transport(const MpiContext& parent, transport::ContextPtr wire);
  void release();

  // false in a job without MPI (init_transport): comm() and the other
  // communicators are then MPI_COMM_NULL and wire() carries everything.
  bool uses_mpi() const { return wire_ == nullptr; }
  // The transport context of a job without MPI (null under MPI). Algorithms
  // take private channels from it (Context::dup) while every rank builds them.
  const transport::ContextPtr& wire() const { return wire_; }
  // wire()'s ranks in host order (host_comm's order), null under MPI.
  const transport::ContextPtr& host_wire() const { return host_wire_; }

  // ---- control collectives (MPI or the transport), over every rank here ----
  // For a collective whose preparation can fail on some ranks only (output
  // allocation, size limits, device set-up): every rank learns of a failure
  // before any enters the collective, or the others would wait in it forever.
  // Returns `local` if it failed here, kAborted naming `name` and `elsewhere` if
  // it failed on another rank, OK if it succeeded everywhere.
  Status agree(const Status& local, const std::string& name, const char* elsewhere) const;
  // v[i] = the maximum of v[i] over the ranks.
  Status max_int64(int64_t* v, int n) const;
  // Every rank's `bytes` bytes, in rank order, into `all` (size() * bytes).
  Status allgather(const void* mine, size_t bytes, void* all) const;
  // `bytes` bytes from `root` to every rank.
  Status broadcast(void* buf, size_t bytes, int root) const;
  // send[j]: what this rank tells rank j; recv[j]: what rank j told this one.
  Status alltoall_int64(const int64_t* send, int64_t* recv) const;

  MPI_Comm comm() const { return comm_; }
  Communicator global() const {
    return Communicator{comm_, rank_, size_, host_comm_, eager_message_bytes_, wire_, host_wire_};
  }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  // Collective over comm(): whether the job runs on several hosts with the same
  // number (> 1) of ranks each, where the hierarchical algorithms apply (the
  // same answer on every rank); *same_count: whether every host has the same
  // number of ranks.
  Status several_hosts_alike(bool* yes, bool* same_count = nullptr) const;
  // Ranks on this host (split by MPI_COMM_TYPE_SHARED, ordered by rank), and
  // the ranks with this local rank on every host (ordered by rank). Algorithms
  // duplicate them for their own traffic.
  MPI_Comm local_comm() const { return local_comm_; }
  MPI_Comm cross_comm() const { return cross_comm_; }
  // comm() with its ranks in host order: ordered by their host's lowest rank,
  // then by rank, so that each host's ranks are adjacent whatever the mapping
  // of ranks to hosts (mpirun --map-by node numbers them round robin). The
  // negotiation's own; algorithms duplicate it for their traffic.
  MPI_Comm host_comm() const { return host_comm_; }
  // The largest message (bytes, a multiple of 8) that Open MPI sends eagerly
  // between any two ranks here, without a rendezvous round trip first: its
  // shared-memory and (across hosts) TCP eager limits less 64 bytes of headers;
  // the same on every rank (the least of theirs), 0 when unknown (not Open MPI).
  int64_t eager_message_bytes() const { return eager_message_bytes_; }
  bool threads_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

  // The MPI datatype for reductions of `dtype`.
  MPI_Datatype reduce_type(DataType dtype) const;
  // An MPI datatype of the same element size, for data movement only.
  static MPI_Datatype move_type(DataType dtype);
  MPI_Op reduce_op(ReduceOp op, DataType dtype) const;

 private:
  // Rank, size and the local/cross communicators of comm_.
  Status init_communicators();
  // Collective: eager_message_bytes_.
  Status agree_eager_message_bytes();

  // A job without MPI: the world (or set), its host-ordered twin, and a private
  // channel for the control collectives.
  Status init_transport_layout();
  transport::ContextPtr wire_, host_wire_, control_;

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  MPI_Comm host_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  int64_t eager_message_bytes_ = 0;
  int thread_level_ = MPI_THREAD_SINGLE;
  bool owns_types_ = true;  // false for a process set's context (borrowed from the global one)
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  // [0]: fp16 {sum, min, max, prod}; [1]: bf16 {...}
  MPI_Op half_ops_[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                            {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
};

// An integer control variable of the MPI library (an Open MPI MCA parameter,
// e.g. "btl_tcp_eager_limit") read through the MPI tool interface; 0 when this
// MPI has no such variable or it is not an integer. Read once per process and
// name, then kept (each read through MPI_T loads every Open MPI component).
int64_t mpi_control_variable(const char* name);

// Completes a non-blocking MPI request without spinning a core: tests, then
// yields, then sleeps with a growing back-off (capped at max_sleep_us).
Status mpi_wait(MPI_Request* request, const char* what, int max_sleep_us = 200);

// MPI error code -> Status (kInternal) naming the call; OK for MPI_SUCCESS.
Status mpi_status(int rc, const char* call);
// The same for the text of a call expression: names the function only
// ("MPI_Isend(buf, n, ...)" -> "MPI_Isend").
Status mpi_call_status(int rc, const char* call_text);

}  // namespace horovodlite

// The one MPI error idiom (as NCCL's NCCLCHECK): evaluates an MPI call and, if it
// fails, returns a Status naming the call from the enclosing function.
//   HVL_MPI_CHECK(MPI_Bcast(...));                    // "MPI_Bcast failed: <MPI's message>"
//   HVL_MPI_CHECK_AS(MPI_Allreduce(...), "MPI_Allreduce (across nodes)");
// CUDA and NCCL calls have the same pair in cuda/cuda_status.h.
#define HVL_MPI_CHECK(call)                                                                    \
  do {                                                                                         \
    const int hvl_mpi_rc_ = (call);                                                            \
    if (hvl_mpi_rc_ != MPI_SUCCESS) return ::horovodlite::mpi_call_status(hvl_mpi_rc_, #call); \
  } while (0)
#define HVL_MPI_CHECK_AS(call, what) HVL_RETURN_IF_ERROR(::horovodlite::mpi_status((call), (what)))
