// Configuration, read from the environment once at init and validated there.
// Every variable is HOROVODLITE_<NAME>; HOROVOD_<NAME> is accepted as an alias
// (HOROVODLITE_ wins when both are set).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "horovodlite/common.h"
#include "horovodlite/rendezvous.h"

namespace horovodlite {

enum class LogLevel : uint8_t { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

struct Config {
  // FUSION_THRESHOLD (bytes): the largest fused allreduce, allgather or
  // reducescatter batch; 0 disables fusion.
  int64_t fusion_threshold_bytes = 128ll * 1024 * 1024;
  // DISABLE_GROUP_FUSION (0/1): the tensors of a grouped op fuse only with each
  // other, never with tensors outside the group (Horovod's HOROVOD_DISABLE_GROUP_FUSION).
  bool disable_group_fusion = false;
  // CYCLE_TIME (milliseconds, fractional allowed): the longest the background
  // thread waits before a negotiation cycle; it wakes at once on new work.
  double cycle_time_ms = 1.0;
  // CACHE_CAPACITY (entries): response cache size; 0 disables the cache.
  int64_t cache_capacity = 1024;
  // EAGER_ALLREDUCE_BYTES: when the same cached host allreduces (no compression,
  // not grouped, at most this many bytes together) were agreed in each of the
  // last two cycles, the next cycle's negotiation carries their data: every
  // rank that has them pending adds its input to the negotiation's allreduce,
  // and where all ranks had them the result is final — one round instead of
  // two (controller.h). 0 turns it off. Must be the same on every rank
  // (checked at init). What it saves a small allreduce: docs/performance.md.
  int64_t eager_allreduce_bytes = 16384;
  // LOG_LEVEL: trace, debug, info, warning, error, fatal.
  LogLevel log_level = LogLevel::kWarning;
  // RING_THRESHOLD (bytes): host allreduces of at least this many bytes use our
  // pipelined ring instead of MPI_Allreduce (the default: about where the ring
  // starts to win on one host; below it the two are level). -1 never uses the
  // ring.
  int64_t ring_threshold_bytes = 1ll << 20;
  // RING_SEGMENT_BYTES: the ring's pipelining granularity.
  int64_t ring_segment_bytes = 256ll << 10;

  // STALL_CHECK_DISABLE (0/1, true/false, yes/no, on/off): turns the stall inspector off.
  bool stall_check_disable = false;
  // STALL_CHECK_TIME_SECONDS: rank 0 warns about names that some ranks submitted
  // and others have not for longer than this (naming the tensors and the ranks).
  double stall_check_time_s = 60.0;
  // STALL_SHUTDOWN_TIME_SECONDS: 0 (default) never; otherwise names stalled this
  // long fail on every rank with a stall error and horovodlite shuts down.
  double stall_shutdown_time_s = 0.0;
  // TIMELINE: path of a Chrome-trace JSON file written by rank 0; empty: off.
  std::string timeline_path;
  // TIMELINE_MARK_CYCLES (0/1): also mark the start of every busy cycle.
  bool timeline_mark_cycles = false;
  // PEER_TIMEOUT_SECONDS: the watchdog. When one negotiation or collective step
  // has not completed for this long, a peer is taken as dead or hung: pending ops
  // fail and the job is aborted (MPI_Abort). 0 disables the watchdog.
  double peer_timeout_s = 60.0;
  // DYNAMIC_PROCESS_SETS (0/1): allows add_process_set()/remove_process_set()
  // after init (as Horovod's HOROVOD_DYNAMIC_PROCESS_SETS). Sets given to init()
  // need no variable.
  bool dynamic_process_sets = false;

  // HIERARCHICAL_ALLREDUCE (0/1; unset: auto). Host allreduces on several hosts
  // with the same number of ranks each (local_size > 1) run as a reduce-scatter
  // inside each host, our ring across hosts on each shard (one ring per local
  // rank) and an allgather inside each host (ops/hierarchical_allreduce.h).
  // Auto: from RING_THRESHOLD bytes up (where the flat ring would run; it always
  // moves fewer bytes across hosts than the flat ring); 1: for every size; 0:
  // never. Device allreduces (CUDA builds) run NCCL's hierarchical form only with 1.
  enum class Hierarchical : uint8_t { kAuto = 0, kOff = 1, kOn = 2 };
  Hierarchical hierarchical_allreduce = Hierarchical::kAuto;
  // HIERARCHICAL_ALLGATHER (0/1; unset: auto), the same for host allgathers
  // (ops/hierarchical_allgather.h): each rank's block crosses to the other hosts
  // once, from its own rank (every local rank at once), then an allgather inside
  // each host per host. Auto: from RING_THRESHOLD bytes of output up.
  Hierarchical hierarchical_allgather = Hierarchical::kAuto;

  // KEEP_FREED_MEMORY (0/1, default 1): at init, glibc's malloc is told to keep
  // the memory a process frees for its next allocations (no mmap for large
  // blocks, no trimming: host_memory.h). A CPU training step frees and allocates
  // again the same activations every step; returned to the kernel, each comes
  // back as fresh pages (ResNet-50, batch 16: 0.4-0.8 million page faults a
  // step and rank, a third of its time). 0 leaves malloc as it is; so do
  // malloc settings of the user's own (GLIBC_TUNABLES glibc.malloc.*, MALLOC_*_).
  bool keep_freed_memory = true;

  // HUGE_PAGE_INPUTS (0/1, default 1): a large tensor that a host collective
  // sends from the user's own memory (a single tensor's input or output), seen
  // again in a later op, has its whole 2 MiB pages moved onto transparent huge
  // pages in place (madvise MADV_COLLAPSE), where the peers' single copies pin
  // them far faster (host_memory.h, huge_pages_for_sending). 0: left as it is.
  bool huge_page_inputs = true;

  // THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY): the CPU of each local
  // rank's background thread, where the collectives run. "auto" (the default,
  // also unset or empty): pinned only where more ranks of this machine share
  // the process's allowed CPUs than there are (n), the i-th of those ranks to
  // the (i mod n)-th CPU; "none": left to the kernel; a comma-separated list
  // ("0,1,1,0"): local rank i's to CPU list[i] (a list shorter than the local
  // ranks, or a CPU outside the process's affinity, fails init).
  // src/thread_affinity.h says why.
  std::string thread_affinity;
  std::string thread_affinity_var;  // the variable it came from (for errors)

  // ---- the autotuner (autotune/autotuner.h) ----
  // AUTOTUNE (0/1): Bayesian optimisation, during training, of FUSION_THRESHOLD,
  // CYCLE_TIME, EAGER_ALLREDUCE_BYTES and, on jobs over several hosts, the
  // HIERARCHICAL_ALLREDUCE/ALLGATHER switches, for the best throughput (bytes
  // reduced per second). A variable set in the environment is not tuned.
  bool autotune = false;
  // AUTOTUNE_LOG: CSV file (rank 0), one row per sample; empty: none.
  std::string autotune_log;
  int64_t autotune_warmup_samples = 3;           // AUTOTUNE_WARMUP_SAMPLES
  int64_t autotune_steps_per_sample = 10;        // AUTOTUNE_STEPS_PER_SAMPLE
  int64_t autotune_bayes_opt_max_samples = 20;   // AUTOTUNE_BAYES_OPT_MAX_SAMPLES
  double autotune_gaussian_process_noise = 0.8;  // AUTOTUNE_GAUSSIAN_PROCESS_NOISE
  // AUTOTUNE_START: "NAME=VALUE,..." with NAME among FUSION_THRESHOLD,
  // CYCLE_TIME, EAGER_ALLREDUCE_BYTES, HIERARCHICAL_ALLREDUCE and
  // HIERARCHICAL_ALLGATHER (0/1): where the tuning starts (its first samples),
  // while still tuning them (benchmarks start from a poor setting).
  std::string autotune_start;
  // Which tunable variables the user set (kept as they are).
  struct UserSet {
    bool fusion_threshold = false, cycle_time = false, eager_allreduce_bytes = false;
    bool hierarchical_allreduce = false, hierarchical_allgather = false;
  } user_set;

  // ---- device (CUDA) tensors; ignored by builds without CUDA ----
  // GPU_OPERATIONS: "nccl" (default) runs collectives on device tensors with NCCL;
  // "mpi" copies them to pinned host memory and uses the host (MPI) collectives.
  // Reductions NCCL cannot do (int16) always use the host path.
  enum class GpuOperations : uint8_t { kNccl = 0, kMpi = 1 };
  GpuOperations gpu_operations = GpuOperations::kNccl;

  // Reads the environment; returns InvalidArgument naming the variable and value
  // on anything malformed or out of range.
  // The transport the job runs on: MPI (mpirun), or Gloo TCP for a process
  // started without mpirun (the Gloo-launch contract,
  // docs/elastic.md#the-gloo-launch-contract):
  // HOROVOD_CONTROLLER=gloo or HOROVOD_CPU_OPERATIONS=gloo (mpi|gloo; they must
  // agree when both are set), or, when neither is set, Gloo whenever
  // HOROVOD_GLOO_RENDEZVOUS_ADDR is set and the process was not started by
  // mpirun (no OMPI_COMM_WORLD_RANK / PMI_RANK / PMIX_RANK).
  enum class Transport : uint8_t { kMpi = 0, kGloo = 1 };
  Transport transport = Transport::kMpi;
  // A Gloo job's place and rendezvous (read, and required, only for Gloo):
  // HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK/_SIZE, HOROVOD_CROSS_RANK/_SIZE
  // (-1: not given, derived from the hostnames), HOROVOD_HOSTNAME,
  // HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT, HOROVOD_GLOO_IFACE,
  // HOROVOD_GLOO_TIMEOUT_SECONDS (default 30), HOROVODLITE_GLOO_SCOPE (the
  // store's scope for this world's keys: "global", or one per elastic generation).
  struct GlooJob {
    int64_t rank = -1, size = -1;
    int64_t local_rank = -1, local_size = -1, cross_rank = -1, cross_size = -1;
    std::string hostname;
    std::string rendezvous_addr;
    int64_t rendezvous_port = 0;
    std::string iface;
    double timeout_s = 30.0;
    std::string scope = "global";
    // The job's secret (HOROVODLITE_SECRET_KEY, hex, from the launcher): the
    // raw key that signs every request to the rendezvous store and the direct
    // TCP handshake (transport/auth.h). Never logged.
    std::string secret;
    // GLOO_SHM (default 1): same-host ranks talk through shared memory, not TCP;
    // large messages are read straight from the sender's memory where the
    // kernel allows it. "copy": shared memory, every message through the rings.
    bool shared_memory = true;
    bool shm_single_copy = true;
    // GLOO_TCP: "direct" (default): ranks on different hosts talk over TCP
    // connections of our own, eager sends (transport/gloo_tcp_direct.h);
    // "gloo": over Gloo's TCP pairs.
    bool direct_tcp = true;
    // Where the ranks meet instead of the rendezvous server (InitOptions::store).
    std::shared_ptr<RendezvousStore> store;
  } gloo;
  // Set when another launcher started this process as one of several and no
  // horovodlite launcher or mpirun placed it: init() fails with it unless
  // InitOptions::store gives the world.
  std::string launcher_refusal;

  static Status from_env(Config* out);
};

const char* log_level_name(LogLevel level);

}  // namespace horovodlite
