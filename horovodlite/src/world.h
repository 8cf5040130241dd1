// The job's ranks, whatever carries them: rank, size and host layout, the
// transport contexts our own algorithms run over (wire(), host_wire()), and the
// control collectives (agree, max_int64, allgather, broadcast, alltoall) that
// the runtime and every algorithm's set-up share. How the control collectives
// travel is the backend's business, chosen once when the world is made:
// init_transport (a job without MPI: Gloo, elastic, Spark, Ray) or init_mpi
// (under mpirun, mpi/mpi_world.h). Only the MPI backend has MPI communicators,
// and only MPI-only code (mpi/) asks for them, through mpi().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "horovodlite/common.h"
#include "transport/transport.h"

namespace horovodlite {

namespace mpi {
class Comms;
}  // namespace mpi

// What a Controller negotiates on: a world's (or process set's) ranks.
struct Communicator {
  int rank = 0;
  int size = 1;
  // World::eager_message_bytes (0: unknown).
  int64_t eager_message_bytes = 0;
  // The ranks, and the same ranks in host order (World::host_wire).
  transport::ContextPtr wire;
  transport::ContextPtr host_wire;
};

class WorldBackend;

// What a backend's init (or split) makes of a world: its layout, contexts and backend.
struct WorldParts {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  int64_t eager_message_bytes = 0;
  bool threads_multiple = true;
  transport::ContextPtr wire, host_wire;
  std::unique_ptr<WorldBackend> backend;
};

// How the control collectives travel; one per world (world.cc: the
// transport's; mpi/mpi_world.cc: MPI's).
class WorldBackend {
 public:
  virtual ~WorldBackend() = default;
  virtual Status max_int64(int64_t* v, int n) const = 0;
  virtual Status allgather(const void* mine, size_t bytes, void* all) const = 0;
  virtual Status broadcast(void* buf, size_t bytes, int root) const = 0;
  virtual Status alltoall_int64(const int64_t* send, int64_t* recv) const = 0;
  // The MPI communicators of an MPI world; null for any other.
  virtual const mpi::Comms* mpi() const { return nullptr; }
  // A process set's parts. Collective over every rank of this world (members
  // and not); `member`: this rank is in `ranks` (*out is then filled).
  virtual Status split(const std::vector<int>& ranks, bool member, const std::string& name, WorldParts* out) const = 0;
  // What the job does about a step that waited too long, for the watchdog's message.
  virtual const char* stalled_hint() const = 0;
  // Ends a wait the watchdog gave up on: interrupts the transport's waits (the
  // background thread's cycle then fails and the thread ends) or, where the
  // wait cannot be interrupted (inside MPI), ends the whole job.
  virtual void end_stalled_wait(const std::string& why) const = 0;
};

// Collective over `wire`'s ranks: a transport world's parts (layout from its
// topology, a host-ordered split and a control channel).
Status transport_world_parts(transport::ContextPtr wire, WorldParts* out);

class World {
 public:
  World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World();

  // A job without MPI: the ranks of `wire` (the Gloo world), their host layout
  // from its topology. Collective over wire (splits private channels from it).
  Status init_transport(transport::ContextPtr wire);
  // Under mpirun: MPI initialised (or the program's own adopted), `comm` (an
  // MPI_Comm*, MPI_COMM_WORLD when null) duplicated. Defined in
  // mpi/mpi_world.cc; Unimplemented in a build without MPI.
  Status init_mpi(const void* comm);
  // A process set's world: the ranks `ranks` (ascending world ranks) of this
  // one. Collective over every rank of this world; *out stays null on a rank
  // that is not a member.
  Status split(const std::vector<int>& ranks, const std::string& name, std::unique_ptr<World>* out) const;
  void release();

  // The transport the world's own algorithms run over, and its ranks in host
  // order: ordered by their host's lowest rank, then by rank, so that each
  // host's ranks are adjacent whatever the mapping of ranks to hosts (mpirun
  // --map-by node numbers them round robin). Algorithms take private channels
  // from them (Context::dup) while every rank builds them.
  const transport::ContextPtr& wire() const { return wire_; }
  const transport::ContextPtr& host_wire() const { return host_wire_; }
  // MPI's communicators, datatypes and ops (mpi/mpi_world.h) in an MPI world;
  // null in any other. Only mpi/ code uses them.
  const mpi::Comms* mpi() const { return backend_ ? backend_->mpi() : nullptr; }
  // "mpi" or the transport's kind ("gloo", ...).
  const char* kind() const;

  // ---- control collectives, over every rank here ----
  // For a collective whose preparation can fail on some ranks only (output
  // allocation, size limits, device set-up): every rank learns of a failure
  // before any enters the collective, or the others would wait in it forever.
  // Returns `local` if it failed here, kAborted naming `name` and `elsewhere` if
  // it failed on another rank, OK if it succeeded everywhere.
  Status agree(const Status& local, const std::string& name, const char* elsewhere) const;
  // v[i] = the maximum of v[i] over the ranks.
  Status max_int64(int64_t* v, int n) const { return backend_->max_int64(v, n); }
  // Every rank's `bytes` bytes, in rank order, into `all` (size() * bytes).
  Status allgather(const void* mine, size_t bytes, void* all) const { return backend_->allgather(mine, bytes, all); }
  // `bytes` bytes from `root` to every rank.
  Status broadcast(void* buf, size_t bytes, int root) const { return backend_->broadcast(buf, bytes, root); }
  // send[j]: what this rank tells rank j; recv[j]: what rank j told this one.
  Status alltoall_int64(const int64_t* send, int64_t* recv) const { return backend_->alltoall_int64(send, recv); }
  const char* stalled_hint() const { return backend_->stalled_hint(); }
  void end_stalled_wait(const std::string& why) const { backend_->end_stalled_wait(why); }

  Communicator global() const { return Communicator{rank_, size_, eager_message_bytes_, wire_, host_wire_}; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  // Collective: whether the job runs on several hosts with the same number
  // (> 1) of ranks each, where the hierarchical algorithms apply (the same
  // answer on every rank); *same_count: whether every host has the same number
  // of ranks.
  Status several_hosts_alike(bool* yes, bool* same_count = nullptr) const;
  // The largest message (bytes, a multiple of 8) that the wire sends without a
  // rendezvous round trip first, the same on every rank; 0 when unknown or
  // when there is no such limit (mpi/mpi_world.h).
  int64_t eager_message_bytes() const { return eager_message_bytes_; }
  // Whether the program may call the wire's library concurrently with ours
  // (MPI_THREAD_MULTIPLE; always true without MPI).
  bool threads_multiple() const { return threads_multiple_; }
  // Whether the launcher names each rank's host (HOROVOD_HOSTNAME): Gloo jobs.
  bool launcher_names_hosts() const { return mpi() == nullptr; }

  // For the backends' init: takes the parts of a new world.
  void assemble(WorldParts parts);

 private:
  std::unique_ptr<WorldBackend> backend_;
  transport::ContextPtr wire_, host_wire_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  int64_t eager_message_bytes_ = 0;
  bool threads_multiple_ = true;
};

}  // namespace horovodlite
