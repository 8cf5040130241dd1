// The transport over an MPI communicator: isend/irecv are MPI_Isend/MPI_Irecv
// of MPI_BYTE on it, test is MPI_Test, split is MPI_Comm_create_group.
#pragma once

#include <mpi.h>

#include "transport/transport.h"

namespace horovodlite {
namespace transport {

class MpiTransport : public Context {
 public:
  // Not collective: `comm` with every rank on one host (topology unknown)
  // unless `topology` says otherwise. Owns (frees) comm only if `owned`.
  explicit MpiTransport(MPI_Comm comm, bool owned = false, Topology topology = {});
  ~MpiTransport() override;

  // Collective over `comm`: learns which ranks share a host
  // (MPI_COMM_TYPE_SHARED) for the topology.
  static Status create(MPI_Comm comm, bool owned, std::shared_ptr<MpiTransport>* out);

  const char* kind() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }
  Status isend(const void* buf, size_t bytes, int peer, int tag, RequestPtr* request) override;
  Status irecv(void* buf, size_t bytes, int peer, int tag, RequestPtr* request) override;
  Status barrier(std::chrono::milliseconds timeout = kDefaultTimeout) override;
  Status split(const std::vector<int>& ranks, const std::string& name, std::shared_ptr<Context>* out) override;

 private:
  MPI_Comm comm_;
  bool owned_;
};

}  // namespace transport
}  // namespace horovodlite
