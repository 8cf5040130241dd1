// The MPI backend of a World (world.h): everything MPI under mpirun —
// initialisation (or adopting the program's own MPI), the communicators
// (global, local = same host, cross = same local rank across hosts, host
// order), datatypes and reduction ops for every dtype (custom ones for
// fp16/bf16), and the control collectives as MPI collectives. World::init_mpi
// makes one; the MPI-only algorithms (mpi/) read the communicators through
// World::mpi().
#pragma once

#include <mpi.h>

#include "horovodlite/common.h"
#include "mpi/mpi_util.h"

namespace horovodlite {
namespace mpi {

// A world's MPI communicators and types. Algorithms duplicate the
// communicators for their own traffic.
class Comms {
 public:
  Comms() = default;
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
  ~Comms();

  // Takes over `comm` (a duplicate, or a process set's split): rank, size and
  // the local, cross and host-ordered communicators. Collective over comm.
  Status adopt(MPI_Comm comm);
  // The datatypes and reduction ops: made here (the world's), or borrowed from
  // `parent` (a process set's), which must outlive this.
  void make_types();
  void borrow_types(const Comms& parent);

  MPI_Comm comm() const { return comm_; }
  // Ranks on this host (split by MPI_COMM_TYPE_SHARED, ordered by rank), and
  // the ranks with this local rank on every host (ordered by rank).
  MPI_Comm local_comm() const { return local_comm_; }
  MPI_Comm cross_comm() const { return cross_comm_; }
  // comm() with its ranks in host order (World::host_wire's order).
  MPI_Comm host_comm() const { return host_comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }

  // The MPI datatype for reductions of `dtype`.
  MPI_Datatype reduce_type(DataType dtype) const;
  // An MPI datatype of the same element size, for data movement only.
  static MPI_Datatype move_type(DataType dtype);
  MPI_Op reduce_op(ReduceOp op, DataType dtype) const;

 private:
  void free_all();

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_comm_ = MPI_COMM_NULL;
  MPI_Comm cross_comm_ = MPI_COMM_NULL;
  MPI_Comm host_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  bool owns_types_ = false;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Datatype bf16_type_ = MPI_DATATYPE_NULL;
  // [0]: fp16 {sum, min, max, prod}; [1]: bf16 {...}
  MPI_Op half_ops_[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                            {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
};

// The largest message (bytes, a multiple of 8) that Open MPI sends eagerly
// between any two ranks of `comms`, without a rendezvous round trip first: its
// shared-memory and (across hosts) TCP eager limits less 64 bytes of headers;
// the same on every rank (the least of theirs), 0 when unknown (not Open MPI).
// Collective over comms.comm().
Status agree_eager_message_bytes(const Comms& comms, int64_t* out);

}  // namespace mpi
}  // namespace horovodlite
