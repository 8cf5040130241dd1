#include "world.h"

#include <cstring>
#include <utility>

#include "negotiation/recursive_doubling.h"
#include "transport/collectives.h"

namespace horovodlite {

namespace {

// The control collectives of a job without MPI: our own, over a private
// channel of the world's transport.
class TransportBackend : public WorldBackend {
 public:
  TransportBackend(transport::ContextPtr wire, transport::ContextPtr control)
      : wire_(std::move(wire)), control_(std::move(control)) {}

  Status max_int64(int64_t* v, int n) const override {
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

  Status allgather(const void* mine, size_t bytes, void* all) const override {
    return transport_ops::allgatherv(*control_, mine, all,
                                     std::vector<size_t>(static_cast<size_t>(control_->size()), bytes));
  }

  Status broadcast(void* buf, size_t bytes, int root) const override {
    return transport_ops::broadcast(*control_, buf, bytes, root, transport::kControlBackoff);
  }

  Status alltoall_int64(const int64_t* send, int64_t* recv) const override {
    const std::vector<size_t> one(static_cast<size_t>(control_->size()), sizeof(int64_t));
    return transport_ops::alltoallv(*control_, send, one, recv, one);
  }

  Status split(const std::vector<int>& ranks, bool member, const std::string& name, WorldParts* out) const override {
    if (!member) return Status::OK();  // the transport splits over the members only
    transport::ContextPtr wire;
    HVL_RETURN_IF_ERROR(wire_->split(ranks, name, &wire));
    return transport_world_parts(std::move(wire), out);
  }

  const char* stalled_hint() const override {
    return "a peer rank has died or hung, or its host is unreachable; failing every op in flight";
  }

  // The waits are ours: interrupt them. An elastic job then re-forms without the peer.
  void end_stalled_wait(const std::string& why) const override { transport::interrupt_waits(why); }

 private:
  transport::ContextPtr wire_, control_;
};

}  // namespace

Status transport_world_parts(transport::ContextPtr wire, WorldParts* out) {
  if (!wire) return Status::InvalidArgument("a transport world without a transport context");
  const transport::Context& w = *wire;
  out->rank = w.rank();
  out->size = w.size();
  out->local_rank = w.local_rank();
  out->local_size = w.local_size();
  out->cross_rank = w.cross_rank();
  out->cross_size = w.cross_size();
  out->eager_message_bytes = 0;  // no eager limit to respect: messages go as they are
  out->threads_multiple = true;  // no MPI: nothing the program calls can collide with ours
  // Collective over the members, in the same order on every rank.
  HVL_RETURN_IF_ERROR(wire->split(w.topology().host_order(), "host_order", &out->host_wire));
  transport::ContextPtr control;
  HVL_RETURN_IF_ERROR(wire->dup("control", &control));
  out->backend = std::make_unique<TransportBackend>(wire, std::move(control));
  out->wire = std::move(wire);
  return Status::OK();
}

World::World() = default;
World::~World() { release(); }

Status World::init_transport(transport::ContextPtr wire) {
  WorldParts parts;
  HVL_RETURN_IF_ERROR(transport_world_parts(std::move(wire), &parts));
  assemble(std::move(parts));
  return Status::OK();
}

void World::assemble(WorldParts p) {
  rank_ = p.rank;
  size_ = p.size;
  local_rank_ = p.local_rank;
  local_size_ = p.local_size;
  cross_rank_ = p.cross_rank;
  cross_size_ = p.cross_size;
  eager_message_bytes_ = p.eager_message_bytes;
  threads_multiple_ = p.threads_multiple;
  wire_ = std::move(p.wire);
  host_wire_ = std::move(p.host_wire);
  backend_ = std::move(p.backend);
}

Status World::split(const std::vector<int>& ranks, const std::string& name, std::unique_ptr<World>* out) const {
  bool member = false;
  for (int r : ranks) member = member || r == rank_;
  WorldParts parts;
  HVL_RETURN_IF_ERROR(backend_->split(ranks, member, name, &parts));
  out->reset();
  if (!member) return Status::OK();
  auto set = std::make_unique<World>();
  set->assemble(std::move(parts));
  *out = std::move(set);
  return Status::OK();
}

void World::release() {
  // The contexts first: under MPI they borrow the backend's communicators.
  host_wire_.reset();
  wire_.reset();
  backend_.reset();
}

const char* World::kind() const { return mpi() != nullptr ? "mpi" : wire_ ? wire_->kind() : "none"; }

Status World::agree(const Status& local, const std::string& name, const char* elsewhere) const {
  int64_t failed = local.ok() ? 0 : 1;
  HVL_RETURN_IF_ERROR(max_int64(&failed, 1));
  if (!local.ok()) return local;
  if (failed) return Status::Aborted("collective on '" + name + "' failed on another rank (" + elsewhere + ")");
  return Status::OK();
}

Status World::several_hosts_alike(bool* yes, bool* same_count) const {
  // min == max of the local sizes: every host has as many ranks. Then
  // cross_size (the number of hosts) is the same everywhere too.
  int64_t sizes[2] = {local_size_, -local_size_};  // max, -min
  HVL_RETURN_IF_ERROR(max_int64(sizes, 2));
  const bool same = sizes[0] == -sizes[1];
  if (same_count != nullptr) *same_count = same;
  *yes = same && local_size_ > 1 && cross_size_ > 1;
  return Status::OK();
}

}  // namespace horovodlite
