// The host collectives over the transport (a job without MPI: Gloo): the host
// algorithms' set-up, fusion and output handling (ops/host_*.h) with the
// transport's point-to-point collectives as the exchange (transport/collectives.h), each on a channel of
// its own. The allreduce is the ring (RingBackend serves every size there).
#pragma once

#include <memory>
#include <vector>

#include "ops/host_allgather.h"
#include "ops/host_alltoall.h"
#include "ops/host_broadcast.h"
#include "ops/host_reducescatter.h"
#include "transport/transport.h"
#include "world.h"

namespace horovodlite {

// Every constructor is collective over the world's ranks (takes a channel).
class TransportAllgather : public HostAllgather {
 public:
  TransportAllgather(const World& world, std::shared_ptr<FusionBuffer> fusion);
  const char* name() const override { return "TRANSPORT_ALLGATHERV"; }

 protected:
  Status exchange(const void* send, void* buf, const std::vector<int>& counts, const std::vector<int>& displs,
                  DataType dtype) override;

 private:
  transport::ContextPtr wire_;
};

class TransportBroadcast : public HostBroadcast {
 public:
  explicit TransportBroadcast(const World& world);
  const char* name() const override { return "TRANSPORT_BCAST"; }

 protected:
  Status bcast(void* data, int64_t count, DataType dtype, int root) override;

 private:
  transport::ContextPtr wire_;
};

class TransportAlltoall : public HostAlltoall {
 public:
  explicit TransportAlltoall(const World& world);
  const char* name() const override { return "TRANSPORT_ALLTOALLV"; }

 protected:
  Status exchange(const void* in, const std::vector<int>& sc, const std::vector<int>& sd, void* out,
                  const std::vector<int>& rc, const std::vector<int>& rd, DataType dtype) override;

 private:
  transport::ContextPtr wire_;
};

class TransportReducescatter : public HostReducescatter {
 public:
  TransportReducescatter(const World& world, std::shared_ptr<FusionBuffer> fusion);
  const char* name() const override { return "TRANSPORT_REDUCE_SCATTER"; }

 protected:
  Status reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DataType dtype,
                        ReduceOp op) override;

 private:
  transport::ContextPtr wire_;
};

// An op this kind of job cannot run (Adasum needs MPI today): every rank fails
// it with `why`, naming the tensor, instead of another algorithm running it wrongly.
class UnavailableAllreduce : public Algorithm {
 public:
  UnavailableAllreduce(ReduceOp op, std::string why) : op_(op), why_(std::move(why)) {}
  const char* name() const override { return "UNAVAILABLE"; }
  bool enabled(const Response& r) const override { return r.reduce_op == op_; }
  OpResult run(const OpArgs& args) override;

 private:
  ReduceOp op_;
  std::string why_;
};

}  // namespace horovodlite
