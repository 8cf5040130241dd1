// The public API of the horovodlite core. Every function may be called from any
// thread. Collectives return a Handle at once; one background thread per process
// negotiates with the other ranks which named tensors are ready everywhere, fuses
// them and runs the collective. Nothing here throws: failures are Status values
// (on the handle for collectives). The framework adapters turn them into exceptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/config.h"
#include "horovodlite/handle.h"
#include "horovodlite/process_set.h"
#include "horovodlite/rendezvous.h"
#include "horovodlite/tensor.h"
#include "horovodlite/version.h"

namespace horovodlite {

// ---- lifecycle ----

struct InitOptions {
  // Ranks taking part; MPI_COMM_NULL (default) means MPI_COMM_WORLD. Kept as a
  // void* so that this header does not need mpi.h: pass &comm of an MPI_Comm.
  const void* mpi_comm = nullptr;
  // Process sets registered at init on every rank (every rank must pass the same
  // lists, in the same order): ranks of the global set. They get ids 1, 2, ...
  // in this order. No HOROVODLITE_DYNAMIC_PROCESS_SETS needed.
  std::vector<std::vector<int>> process_sets;
  // A Gloo world whose ranks meet in `store` (every rank passes its own view of
  // one store): this process is rank `store_rank` of `store_size`, on the node
  // named `store_node` (ranks of one node share memory; empty: this host's
  // name), with the job's `store_secret` (raw bytes, the same on every rank).
  // Instead of the environment's launcher; the LibTorch adapter's init() fills
  // these under torchrun and Slurm.
  std::shared_ptr<RendezvousStore> store;
  int store_rank = -1, store_size = -1;
  std::string store_node, store_secret;
};

// Initialises MPI if the program has not (then finalizes it at process exit,
// never earlier, so that init() after shutdown() works), reads and validates the
// configuration from the environment, and starts the background thread.
// A second init() while initialised is a no-op returning OK.
Status init(const InitOptions& options = {});
// Stops the background thread on every rank (collective: all ranks must call it).
// Ops still in flight complete with an "shut down" (kAborted) error.
// A process that exits (returns from main, calls exit()) while initialised is shut
// down at exit: its peers' ops then fail with a message naming the exiting rank
// instead of waiting for it for ever. See docs/reliability.md.
Status shutdown();
bool is_initialized();

// Asks every rank to shut down (through the next negotiation cycle) and returns
// at once: ops in flight then fail with kAborted on every rank. For a waiter that
// gives up on an op it cannot withdraw from the other ranks (Ctrl-C in Python);
// shutdown() still has to be called before init() can start afresh.
void request_shutdown();

// The exit code of a job ended by abort_job_if_failed().
constexpr int kJobFailureExitCode = 1;
// After a failure that leaves the other ranks out of step with this one (a stall
// shutdown: a peer is stuck in its own code; lost contact with a peer), exiting
// normally would wait for them in MPI_Finalize for ever. This then prints the
// reason on stderr and ends the whole job with MPI_Abort (mpirun exits non-zero);
// otherwise it returns at once. horovodlite calls it at process exit; a program
// that initialised MPI itself must call it before its own MPI_Finalize (horovodlite
// cannot run before that). A successful init() clears the failure. See
// docs/reliability.md.
void abort_job_if_failed();

// -1 when not initialised.
int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();
// Whether MPI provided MPI_THREAD_MULTIPLE (the program may then make its own MPI
// calls concurrently with the background thread).
bool mpi_threads_supported();

// ---- process sets (see process_set.h) ----

// Registers a process set of `ranks` (global ranks; any order, no duplicates).
// Collective over every rank of the global set, which must pass the same ranks;
// blocks until registered. Needs HOROVODLITE_DYNAMIC_PROCESS_SETS=1 (or
// HOROVOD_DYNAMIC_PROCESS_SETS=1), kPrecondition otherwise; kInvalidArgument for
// bad ranks, ranks that differ between ranks, or a set with the same ranks that
// exists already.
Status add_process_set(const std::vector<int>& ranks, ProcessSet* out);
// Removes a set registered at init or with add_process_set(). Collective over
// every rank; needs the dynamic variable as add_process_set(). An error on every
// rank (and the set stays) if any rank has an op on the set in flight. The global
// set cannot be removed.
Status remove_process_set(const ProcessSet& process_set);
// Every registered set, ascending by id (the global set first); empty when not initialised.
std::vector<ProcessSet> process_sets();

// ---- collectives ----
// Every collective runs on a process set (the options' process_set; the global
// set by default). On a set, sizes, ranks within the set, Average's division and
// the alltoall splits count are the set's; a broadcast's root_rank is a global
// rank (as Horovod). A rank outside the set gets an error naming the set.
//
// `name` identifies the op across ranks and must be unique among ops in flight;
// empty names get "<op>.noname.<n>" (same on every rank if all ranks enqueue
// unnamed ops in the same order).
//
// Device tensors (TensorView::device >= 0, builds with CUDA): `ready` is an event
// recorded on the producer's stream after it wrote the input (ReadyEvent::
// cuda_event()); the core's stream waits on it before reading. nullptr means the
// input is ready now (e.g. the producer stream has been synchronised). Host
// tensors ignore it. See docs/gpu.md.

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  Compression compression = Compression::kNone;
  ProcessSet process_set;
};

// output may equal input (in place); otherwise it must not overlap the input.
// Average divides the sum by size().
HandlePtr allreduce_async(const std::string& name, const TensorView& input, const TensorView& output,
                          const AllreduceOptions& options = {}, ReadyEventPtr ready = nullptr);

// The rule for an allreduce's output, which allreduce_async checks: the input's
// dtype, element count and device, and either the input's own buffer (in place)
// or one that does not overlap it. Adapters call it too, to reject a bad output
// before anything is converted; InvalidArgument naming the tensor otherwise.
Status check_allreduce_output(const std::string& name, const TensorView& input, const TensorView& output);

// Concatenates every rank's input along dim 0 (dim 0 may differ; other dims must
// match). A 0-d input is gathered as shape [1].
struct AllgatherOptions {
  ProcessSet process_set;
};
HandlePtr allgather_async(const std::string& name, const TensorView& input, OutputAllocator allocate,
                          const AllgatherOptions& options, ReadyEventPtr ready = nullptr);
HandlePtr allgather_async(const std::string& name, const TensorView& input, OutputAllocator allocate,
                          ReadyEventPtr ready = nullptr);

// In place: root's tensor is copied into every rank's `tensor`.
struct BroadcastOptions {
  ProcessSet process_set;  // root_rank is a global rank, a member of the set
};
HandlePtr broadcast_async(const std::string& name, const TensorView& tensor, int root_rank,
                          const BroadcastOptions& options, ReadyEventPtr ready = nullptr);
HandlePtr broadcast_async(const std::string& name, const TensorView& tensor, int root_rank,
                          ReadyEventPtr ready = nullptr);

// Rank r sends rows [sum(splits[:j]), sum(splits[:j+1])) of dim 0 to rank j.
// Empty splits means dim 0 divided evenly (must be divisible by size()).
// The handle's received_splits() says how many rows came from each rank.
// On a process set, splits has one entry per rank of the set, in set-rank order.
struct AlltoallOptions {
  ProcessSet process_set;
};
HandlePtr alltoall_async(const std::string& name, const TensorView& input, const std::vector<int64_t>& splits,
                         OutputAllocator allocate, const AlltoallOptions& options, ReadyEventPtr ready = nullptr);
HandlePtr alltoall_async(const std::string& name, const TensorView& input, const std::vector<int64_t>& splits,
                         OutputAllocator allocate, ReadyEventPtr ready = nullptr);

// Reduces across ranks, then rank r keeps its block of dim 0: dim 0 is split into
// size() blocks, the first (dim0 % size) ranks getting one row more. Needs >= 1 dim.
struct ReducescatterOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  ProcessSet process_set;
};
HandlePtr reducescatter_async(const std::string& name, const TensorView& input, OutputAllocator allocate,
                              const ReducescatterOptions& options = {}, ReadyEventPtr ready = nullptr);

// ---- grouped collectives (Horovod's grouped_allreduce, grouped_allgather,
// grouped_reducescatter) ----
// A group's tensors are negotiated and executed as one: none of them is ready
// until every member has been enqueued on every rank; then they are run in the
// same cycle, side by side, and a group's allreduces (and host allgathers and
// reducescatters) are fused together (up to the fusion threshold, as Horovod;
// DISABLE_GROUP_FUSION keeps them from fusing with tensors outside the group). If the ranks disagree about one member
// (shape, dtype, ...) or about the group itself, every member fails with a
// message naming that tensor and the ranks. A group is known by the set of its
// names (the order does not matter): every rank must group the same names.
// One handle per tensor, in the order given; bad arguments fail every handle.
//
// `group`: every member's name, when `names` is only part of the group and the
// rest is enqueued by later calls (e.g. as the tensors are produced); empty: the
// group is `names`. Empty names get automatic ones when `group` is empty.
// `ready`: empty, or one event per tensor (see above). The group runs on the
// options' process set (allreduce, reducescatter) or on `process_set` (allgather).
std::vector<HandlePtr> grouped_allreduce_async(const std::vector<std::string>& names,
                                               const std::vector<TensorView>& inputs,
                                               const std::vector<TensorView>& outputs,
                                               const AllreduceOptions& options = {},
                                               const std::vector<ReadyEventPtr>& ready = {},
                                               const std::vector<std::string>& group = {});
std::vector<HandlePtr> grouped_allgather_async(const std::vector<std::string>& names,
                                               const std::vector<TensorView>& inputs,
                                               const std::vector<OutputAllocator>& allocators,
                                               const std::vector<ReadyEventPtr>& ready = {},
                                               const std::vector<std::string>& group = {},
                                               const ProcessSet& process_set = {});
std::vector<HandlePtr> grouped_reducescatter_async(const std::vector<std::string>& names,
                                                   const std::vector<TensorView>& inputs,
                                                   const std::vector<OutputAllocator>& allocators,
                                                   const ReducescatterOptions& options = {},
                                                   const std::vector<ReadyEventPtr>& ready = {},
                                                   const std::vector<std::string>& group = {});

// Completes when every rank of the set has reached it.
struct BarrierOptions {
  ProcessSet process_set;
};
HandlePtr barrier_async(const BarrierOptions& options = {});

// This rank has no more data: until every rank has joined, the other ranks'
// allreduces complete with this rank contributing zeros (Average still divides by
// size()). Completes when all ranks have joined; last_joined_rank() is the last.
// The global set only (as Horovod's join).
HandlePtr join_async();

// Rows of dim 0 that `rank` keeps in a reducescatter of a tensor with `dim0` rows.
int64_t reducescatter_rows(int64_t dim0, int world_size, int rank);

// ---- build and devices ----

// Whether this build has the CUDA/NCCL backend, and NCCL's version code (e.g.
// 22809 for 2.28.9; 0 without NCCL).
bool cuda_built();
int nccl_version();
// Whether the Gloo TCP transport was built (Debian's libgloo-dev; HVL_WITH_GLOO).
bool gloo_built();
// Whether the MPI backend was built (HVL_WITH_MPI); without it every job runs on Gloo.
bool mpi_built();
// Which transport the job runs on: the running one after init(); before it,
// the one init() would choose from the environment (Config::transport).
bool mpi_enabled();
bool gloo_enabled();
// Number of CUDA devices this process can use (0 without CUDA or without a GPU).
int cuda_device_count();

// ---- introspection ----

struct Stats {
  uint64_t cycles = 0;              // background-loop cycles run
  uint64_t negotiations = 0;        // cycles that needed the gather/broadcast round trip
  uint64_t cache_hits = 0;          // tensors agreed through the response cache bit vector
  uint64_t tensors_negotiated = 0;  // tensors agreed through the full round trip
  uint64_t eager_allreduces = 0;    // allreduces whose data went with the negotiation (EAGER_ALLREDUCE_BYTES)
  uint64_t responses_executed = 0;  // collectives run (a fused batch counts once)
  uint64_t fused_tensors = 0;       // tensors that went through a fused batch of >= 2
  uint64_t errors = 0;              // error responses (mismatches etc.)
};
// This rank's counters since init.
Stats stats();

// The configuration in force (valid while initialised).
const Config& config();

// ---- timeline ----
// Starts writing a Chrome-trace JSON timeline (chrome://tracing, Perfetto) to
// `path`; rank 0 writes it, other ranks accept the call and do nothing. Also
// started at init by HOROVODLITE_TIMELINE=<path> (and _MARK_CYCLES=1). Starting
// while a timeline is active is OK with the same path, kPrecondition otherwise.
// kPrecondition when not initialised; kInvalidArgument if the file cannot be opened.
Status start_timeline(const std::string& path, bool mark_cycles = false);
// Completes the file (valid JSON) and stops writing. OK when none is active.
// shutdown() also stops the timeline.
Status stop_timeline();

}  // namespace horovodlite
