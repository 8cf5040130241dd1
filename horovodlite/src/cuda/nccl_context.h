// An NCCL communicator over the ranks of an MPI communicator, created once from a
// unique id that the communicator's rank 0 makes and broadcasts over MPI. One per
// (communicator, device): the global one now; process sets will add their own.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <memory>

#include "horovodlite/common.h"

namespace horovodlite {
namespace cuda {

class NcclComm {
 public:
  // Collective over `comm`: every rank calls it, each with the device it uses.
  static Status create(MPI_Comm comm, int device, std::unique_ptr<NcclComm>* out);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

 private:
  NcclComm() = default;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = -1;
};

// Collective over `comm`, before an NCCL communicator is made: every rank tells
// the others which GPU (UUID, PCI bus id, host) it uses for `device`. NCCL needs
// one GPU per rank (two ranks on one GPU fail in ncclCommInitRank with "Duplicate
// GPU detected"); here every rank gets the same error, naming the GPU, the ranks
// sharing it and the two fixes. OK when every rank has its own GPU.
Status check_one_gpu_per_rank(MPI_Comm comm, int device);

// NCCL's type for reducing `dtype`; false where NCCL has none (int16). Bool
// reduces as uint8 with max (Sum, Max: logical or) or min (Min, Product: and).
bool nccl_reduce_type(DataType dtype, ReduceOp op, ncclDataType_t* type, ncclRedOp_t* nccl_op);

}  // namespace cuda
}  // namespace horovodlite
