#include "ops/transport_algorithms.h"

#include <cstring>
#include <string>

#include "enforce.h"
#include "transport/collectives.h"

namespace horovodlite {

namespace {

// A private channel for one algorithm (collective over every rank).
transport::ContextPtr channel(const World& world, const char* name) {
  transport::ContextPtr wire;
  const Status s = world.wire()->dup(name, &wire);
  // A failed dup means the transport itself is gone; the first op reports it.
  return s.ok() ? wire : nullptr;
}

Status no_channel(const char* what) {
  return Status::Aborted(std::string("transport: the ") + what + " has no channel (the transport failed at set-up)");
}

std::vector<size_t> bytes_of(const std::vector<int>& counts, size_t elem) {
  std::vector<size_t> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out[i] = static_cast<size_t>(counts[i]) * elem;
  return out;
}

}  // namespace

TransportAllgather::TransportAllgather(const World& world, std::shared_ptr<FusionBuffer> fusion)
    : HostAllgather(world, std::move(fusion)), wire_(channel(world, "allgather")) {}

Status TransportAllgather::exchange(const void* send, void* buf, const std::vector<int>& counts,
                                    const std::vector<int>& displs, DataType dtype) {
  if (!wire_) return no_channel("allgather");
  const size_t elem = dtype_size(dtype);
  const size_t me = static_cast<size_t>(world_.rank());
  // The blocks lie consecutively in rank order (to_int_counts' displacements),
  // as allgatherv puts them.
  int64_t at = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    HVL_ENFORCE_EQ(static_cast<int64_t>(displs[k]), at, "allgather block ", k);
    at += counts[k];
  }
  const void* mine = send ? send : static_cast<const char*>(buf) + static_cast<size_t>(displs[me]) * elem;
  return transport_ops::allgatherv(*wire_, mine, buf, bytes_of(counts, elem));
}

TransportBroadcast::TransportBroadcast(const World& world) : HostBroadcast(world), wire_(channel(world, "broadcast")) {}

Status TransportBroadcast::bcast(void* data, int64_t count, DataType dtype, int root) {
  if (!wire_) return no_channel("broadcast");
  return transport_ops::broadcast(*wire_, data, static_cast<size_t>(count) * dtype_size(dtype), root);
}

TransportAlltoall::TransportAlltoall(const World& world) : HostAlltoall(world), wire_(channel(world, "alltoall")) {}

Status TransportAlltoall::exchange(const void* in, const std::vector<int>& sc, const std::vector<int>& sd, void* out,
                                   const std::vector<int>& rc, const std::vector<int>& rd, DataType dtype) {
  if (!wire_) return no_channel("alltoall");
  // Consecutive blocks in rank order on both sides (to_int_counts), as alltoallv takes them.
  int64_t s_at = 0, r_at = 0;
  for (size_t k = 0; k < sc.size(); ++k) {
    HVL_ENFORCE_EQ(static_cast<int64_t>(sd[k]), s_at, "alltoall send block ", k);
    HVL_ENFORCE_EQ(static_cast<int64_t>(rd[k]), r_at, "alltoall receive block ", k);
    s_at += sc[k];
    r_at += rc[k];
  }
  const size_t elem = dtype_size(dtype);
  return transport_ops::alltoallv(*wire_, in, bytes_of(sc, elem), out, bytes_of(rc, elem));
}

TransportReducescatter::TransportReducescatter(const World& world, std::shared_ptr<FusionBuffer> fusion)
    : HostReducescatter(world, std::move(fusion)), wire_(channel(world, "reducescatter")) {}

Status TransportReducescatter::reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DataType dtype,
                                              ReduceOp op) {
  if (!wire_) return no_channel("reducescatter");
  const std::vector<int64_t> c(counts.begin(), counts.end());
  return transport_ops::reducescatter(*wire_, in, out, c, dtype, op);
}

OpResult UnavailableAllreduce::run(const OpArgs& args) {
  return OpResult(Status::Unimplemented("allreduce of '" + args.response.names[0] + "': " + why_), name());
}

}  // namespace horovodlite
