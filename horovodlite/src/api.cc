// The public API: validates arguments locally (a clear error naming the tensor,
// before anything reaches other ranks) and hands entries to the runtime.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <functional>
#include <mutex>

#include "algorithms.h"
#include "api_checks.h"
#include "horovodlite/horovodlite.h"
#include "job_failure.h"
#include "logging.h"
#include "op_util.h"
#include "ops/adasum_kernels.h"
#include "runtime.h"

namespace horovodlite {

namespace {

std::mutex g_mu;                     // guards g_runtime (init/shutdown vs. callers)
std::shared_ptr<Runtime> g_runtime;  // the one mutable global: the handle to the runtime
std::atomic<uint64_t> g_noname{0};   // unnamed ops before init

std::once_flag g_atexit_once;

// Runs at process exit (before MPI is finalized: registered after it, and atexit
// handlers run in reverse order). A process leaving while initialised would
// otherwise finalize MPI under the background thread, and the other ranks would
// wait for it for ever; instead its peers are told which rank left. After a
// failure that left the peers out of step, the job is ended instead (they may
// never reach another negotiation cycle).
void shutdown_at_exit() {
  abort_job_if_failed();
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    rt.swap(g_runtime);
  }
  if (!rt) return;
  if (rt->on_background_thread()) {
    // exit() from a completion callback: the thread cannot join itself. Leave the
    // runtime alone (and alive); MPI_Finalize then ends the job.
    new std::shared_ptr<Runtime>(std::move(rt));
    return;
  }
  if (!rt->stopped()) {
    HVL_LOG(kWarning, "exiting without horovodlite::shutdown(): shutting down and telling the other ranks");
  }
  // At exit nobody can act on the reason any more (a peer's shutdown or stall is
  // what ends most jobs that get here): log it for the record.
  const Status s = rt->stop(/*exiting=*/true);
  if (!s.ok()) HVL_LOG(kDebug, "stopped at exit: " << s.message());
}

HandlePtr failed(const std::string& name, Status s) {
  auto h = std::make_shared<Handle>(name);
  h->complete(std::move(s));
  return h;
}

// Unnamed ops are numbered per process set (names agree across a set's members
// whatever other sets they use).
std::string auto_name(const std::string& name, const char* op, const ProcessSet& set) {
  if (!name.empty()) return name;
  auto rt = current_runtime();
  const uint64_t n = rt ? rt->process_sets().next_serial(set.id(), false) : g_noname.fetch_add(1);
  return std::string(op) + ".noname." + std::to_string(n);
}

// What the argument checks need to know of the op's process set.
struct SetView {
  bool member = false;  // registered and this rank is in it (else enqueue reports why)
  std::vector<int> ranks;
  int rank = -1;
  int size() const { return static_cast<int>(ranks.size()); }
};

SetView view_of(const ProcessSet& set) {
  SetView v;
  auto rt = current_runtime();
  if (rt && rt->process_sets().set_info(set.id(), &v.ranks, &v.rank)) v.member = v.rank >= 0;
  return v;
}

// Adasum (ops/adasum.h): floating-point tensors, a power-of-two number of ranks.
Status check_adasum(const std::string& name, DataType dtype, const ProcessSet& process_set) {
  if (!adasum_dtype(dtype)) {
    return Status::InvalidArgument("tensor '" + name + "' is " + dtype_name(dtype) +
                                   ": Adasum reduces float16, bfloat16, float32 and float64 tensors only");
  }
  const SetView set = view_of(process_set);
  if (set.member && !is_power_of_two(set.size())) {
    const std::string where =
        process_set.id() == 0 ? "the world size is " : "process set " + std::to_string(process_set.id()) + " has ";
    return Status::InvalidArgument("tensor '" + name + "': Adasum needs a power-of-two number of ranks, but " + where +
                                   std::to_string(set.size()) + " (on rank " +
                                   std::to_string(current_runtime()->world().rank()) + ")");
  }
  return Status::OK();
}

// Builds and enqueues an entry, or returns a failed handle.
HandlePtr submit(std::unique_ptr<TensorEntry> e, const ProcessSet& set) {
  auto rt = current_runtime();
  if (!rt) {
    return failed(e->request.name, Status::Precondition("horovodlite is not initialized (call init() first, or "
                                                        "init() again after shutdown()); cannot run '" +
                                                        e->request.name + "'"));
  }
  return rt->enqueue(std::move(e), set.id());
}

std::unique_ptr<TensorEntry> make_entry(OpType type, const std::string& name, const TensorView& input,
                                        ReadyEventPtr ready = nullptr) {
  auto e = std::make_unique<TensorEntry>();
  e->request.type = type;
  e->request.name = name;
  e->request.dtype = input.dtype;
  e->request.device = input.device;
  e->request.shape = input.shape;
  e->input = input;
  e->output = input;
  e->handle = std::make_shared<Handle>(name);
  if (input.device != kCpuDevice) e->ready = std::move(ready);  // host tensors are ready when enqueued
  return e;
}

}  // namespace

std::shared_ptr<Runtime> current_runtime() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime;
}

Status init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime) return Status::OK();
  std::shared_ptr<Runtime> rt;
  HVL_RETURN_IF_ERROR(Runtime::start(options, &rt));
  clear_job_failure();  // init is collective: every rank is in step again
  // Generated names restart with the runtime (the per-set counters are new with
  // it), in step on every rank even if an op was abandoned or failed on some
  // ranks only before.
  g_noname = 0;
  g_runtime = std::move(rt);
  std::call_once(g_atexit_once, [] { std::atexit(shutdown_at_exit); });
  return Status::OK();
}

Status shutdown() {
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    rt.swap(g_runtime);
  }
  if (!rt) return Status::OK();
  return rt->stop();
}

void request_shutdown() {
  if (auto rt = current_runtime()) rt->request_stop();
}

bool is_initialized() { return current_runtime() != nullptr; }

namespace {
bool on_gloo() {
  if (auto rt = current_runtime()) return rt->world().mpi() == nullptr;
  Config c;
  return Config::from_env(&c).ok() && c.transport == Config::Transport::kGloo;
}
}  // namespace

bool mpi_enabled() { return mpi_built() && !on_gloo(); }
bool gloo_enabled() { return on_gloo(); }

bool cuda_built() { return device_backend_built(); }
int nccl_version() { return device_nccl_version(); }
int cuda_device_count() { return device_count(); }

#define HVL_WORLD_QUERY(fn, member)        \
  int fn() {                               \
    auto rt = current_runtime();           \
    return rt ? rt->world().member() : -1; \
  }
HVL_WORLD_QUERY(rank, rank)
HVL_WORLD_QUERY(size, size)
HVL_WORLD_QUERY(local_rank, local_rank)
HVL_WORLD_QUERY(local_size, local_size)
HVL_WORLD_QUERY(cross_rank, cross_rank)
HVL_WORLD_QUERY(cross_size, cross_size)
#undef HVL_WORLD_QUERY

bool mpi_threads_supported() {
  auto rt = current_runtime();
  return rt && rt->world().threads_multiple();
}

Stats stats() {
  auto rt = current_runtime();
  return rt ? rt->stats() : Stats{};
}

const Config& config() {
  static const Config kDefault;
  auto rt = current_runtime();
  return rt ? rt->config() : kDefault;
}

Status start_timeline(const std::string& path, bool mark_cycles) {
  auto rt = current_runtime();
  if (!rt) return Status::Precondition("horovodlite is not initialized; cannot start a timeline");
  return rt->start_timeline(path, mark_cycles);
}

Status stop_timeline() {
  auto rt = current_runtime();
  if (!rt) return Status::Precondition("horovodlite is not initialized; no timeline to stop");
  return rt->stop_timeline();
}

namespace {

// The checked entries of the data ops (the single and the grouped forms share them).
Status allreduce_entry(const std::string& name, const TensorView& input, const TensorView& output,
                       const AllreduceOptions& options, ReadyEventPtr ready, std::unique_ptr<TensorEntry>* out) {
  Status s = check_tensor(name, input, "input");
  if (s.ok()) s = check_tensor(name, output, "output");
  if (s.ok()) s = check_scaling(name, input.dtype, options.op, options.prescale_factor, options.postscale_factor);
  if (s.ok()) s = check_allreduce_output(name, input, output);
  if (s.ok() && options.op == ReduceOp::kAdasum) s = check_adasum(name, input.dtype, options.process_set);
  if (s.ok() && options.compression == Compression::kBf16 && !dtype_is_floating(input.dtype)) {
    // fp16 lets other dtypes through uncompressed (Horovod's compressor does);
    // bf16 is new, so asking it to compress an integer tensor is refused.
    s = Status::InvalidArgument("tensor '" + name + "' is " + dtype_name(input.dtype) +
                                ": bf16 compression takes floating-point tensors only");
  }
  HVL_RETURN_IF_ERROR(s);
  auto e = make_entry(OpType::kAllreduce, name, input, std::move(ready));
  e->output = output;
  e->request.reduce_op = options.op;
  e->request.prescale = options.prescale_factor;
  e->request.postscale = options.postscale_factor;
  // Only floating-point tensors wider than 16 bits are compressed (fp16 or bf16); others travel as they are.
  const bool compressible = input.dtype == DataType::kFloat32 || input.dtype == DataType::kFloat64;
  e->request.compression = compressible ? options.compression : Compression::kNone;
  *out = std::move(e);
  return Status::OK();
}

Status allgather_entry(const std::string& name, const TensorView& input, OutputAllocator allocate, ReadyEventPtr ready,
                       std::unique_ptr<TensorEntry>* out) {
  Status s = check_tensor(name, input, "input");
  if (s.ok() && !allocate) s = Status::InvalidArgument("allgather '" + name + "' needs an output allocator");
  HVL_RETURN_IF_ERROR(s);
  auto e = make_entry(OpType::kAllgather, name, input, std::move(ready));
  e->allocate = std::move(allocate);
  *out = std::move(e);
  return Status::OK();
}

Status reducescatter_entry(const std::string& name, const TensorView& input, OutputAllocator allocate,
                           const ReducescatterOptions& options, ReadyEventPtr ready,
                           std::unique_ptr<TensorEntry>* out) {
  Status s = check_tensor(name, input, "input");
  if (s.ok()) s = check_scaling(name, input.dtype, options.op, options.prescale_factor, options.postscale_factor);
  if (s.ok() && options.op == ReduceOp::kAdasum) {
    s = Status::InvalidArgument("reducescatter '" + name + "': Adasum is an allreduce op (use Sum or Average)");
  }
  if (s.ok() && !allocate) s = Status::InvalidArgument("reducescatter '" + name + "' needs an output allocator");
  if (s.ok() && input.shape.empty()) {
    s = Status::InvalidArgument("reducescatter '" + name +
                                "' needs a tensor with at least one dimension (dim 0 is split across ranks)");
  }
  HVL_RETURN_IF_ERROR(s);
  auto e = make_entry(OpType::kReducescatter, name, input, std::move(ready));
  e->allocate = std::move(allocate);
  e->request.reduce_op = options.op;
  e->request.prescale = options.prescale_factor;
  e->request.postscale = options.postscale_factor;
  *out = std::move(e);
  return Status::OK();
}

std::string device_name(int device) {
  return device == kCpuDevice ? std::string("the CPU") : "cuda:" + std::to_string(device);
}

// The tensors of a grouped op run as one fused batch on one device kind: a group
// mixing host and device tensors (or two GPUs) is an error, as in Horovod, naming
// the first tensor and the first one on another device. Checked before the
// tensors themselves, so that it is the error reported.
Status check_group_device(const std::string& what, const std::vector<std::string>& names,
                          const std::vector<TensorView>& inputs, size_t i) {
  if (i == 0 || inputs[i].device == inputs[0].device) return Status::OK();
  return Status::InvalidArgument(what + ": all tensors must be on one device, but '" + names[0] + "' is on " +
                                 device_name(inputs[0].device) + " and '" + names[i] + "' on " +
                                 device_name(inputs[i].device) +
                                 " (move them to one device, or use one grouped op per device)");
}

HandlePtr submit_or_fail(const std::string& name, Status s, std::unique_ptr<TensorEntry> e, const ProcessSet& set) {
  return s.ok() ? submit(std::move(e), set) : failed(name, std::move(s));
}

// A grouped op: names (auto-named), the group's id, one entry per member from
// make(i, name, ready, &entry); every handle fails if one member is bad.
std::vector<HandlePtr> submit_group(
    const char* op, std::vector<std::string> names, const std::vector<TensorView>& inputs, size_t second_count,
    const char* second, const std::vector<ReadyEventPtr>& ready, const std::vector<std::string>& group,
    const ProcessSet& set,
    const std::function<Status(size_t, const std::string&, ReadyEventPtr, std::unique_ptr<TensorEntry>*)>& make) {
  const std::string what = std::string("grouped_") + op;
  const size_t count = inputs.size();
  auto fail_all = [&](const Status& s) {
    std::vector<HandlePtr> handles;
    for (size_t i = 0; i < std::max<size_t>(count, 1); ++i)
      handles.push_back(failed(i < names.size() ? names[i] : what, s));
    return handles;
  };
  if (count == 0) return fail_all(Status::InvalidArgument(what + ": the list of tensors is empty"));
  if (names.size() != count || second_count != count || (!ready.empty() && ready.size() != count)) {
    return fail_all(Status::InvalidArgument(what + ": " + std::to_string(names.size()) + " names, " +
                                            std::to_string(count) + " inputs, " + std::to_string(second_count) + " " +
                                            second + " and " + std::to_string(ready.size()) +
                                            " ready events; expected one of each per tensor (events: or none)"));
  }
  std::vector<std::string> members = group;
  if (members.empty()) {
    for (std::string& n : names) n = auto_name(n, op, set);
    members = names;
  } else {
    for (const std::string& n : names) {
      if (n.empty() || std::find(members.begin(), members.end(), n) == members.end()) {
        return fail_all(Status::InvalidArgument(what + ": tensor '" + n + "' is not a member of the group given"));
      }
    }
  }
  std::vector<std::string> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i] == sorted[i - 1]) {
      return fail_all(Status::InvalidArgument(what + ": the name '" + sorted[i] + "' appears twice in the group"));
    }
  }
  const uint64_t id = group_id_of(members);
  std::vector<std::unique_ptr<TensorEntry>> entries(count);
  for (size_t i = 0; i < count; ++i) {
    Status s = check_group_device(what, names, inputs, i);
    if (s.ok()) s = make(i, names[i], ready.empty() ? nullptr : ready[i], &entries[i]);
    if (!s.ok()) return fail_all(s);
    entries[i]->request.group_id = id;
    entries[i]->request.group_size = static_cast<int32_t>(members.size());
  }
  auto rt = current_runtime();
  if (!rt) {
    return fail_all(
        Status::Precondition("horovodlite is not initialized (call init() first, or init() again "
                             "after shutdown()); cannot run " +
                             what + " of '" + names[0] + "'"));
  }
  return rt->enqueue_group(std::move(entries), set.id());
}

}  // namespace

HandlePtr allreduce_async(const std::string& name_in, const TensorView& input, const TensorView& output,
                          const AllreduceOptions& options, ReadyEventPtr ready) {
  const std::string name = auto_name(name_in, "allreduce", options.process_set);
  std::unique_ptr<TensorEntry> e;
  Status s = allreduce_entry(name, input, output, options, std::move(ready), &e);
  return submit_or_fail(name, std::move(s), std::move(e), options.process_set);
}

HandlePtr allgather_async(const std::string& name, const TensorView& input, OutputAllocator allocate,
                          ReadyEventPtr ready) {
  return allgather_async(name, input, std::move(allocate), AllgatherOptions{}, std::move(ready));
}

HandlePtr allgather_async(const std::string& name_in, const TensorView& input, OutputAllocator allocate,
                          const AllgatherOptions& options, ReadyEventPtr ready) {
  const std::string name = auto_name(name_in, "allgather", options.process_set);
  std::unique_ptr<TensorEntry> e;
  Status s = allgather_entry(name, input, std::move(allocate), std::move(ready), &e);
  return submit_or_fail(name, std::move(s), std::move(e), options.process_set);
}

std::vector<HandlePtr> grouped_allreduce_async(const std::vector<std::string>& names,
                                               const std::vector<TensorView>& inputs,
                                               const std::vector<TensorView>& outputs, const AllreduceOptions& options,
                                               const std::vector<ReadyEventPtr>& ready,
                                               const std::vector<std::string>& group) {
  return submit_group("allreduce", names, inputs, outputs.size(), "outputs", ready, group, options.process_set,
                      [&](size_t i, const std::string& name, ReadyEventPtr r, std::unique_ptr<TensorEntry>* e) {
                        return allreduce_entry(name, inputs[i], outputs[i], options, std::move(r), e);
                      });
}

std::vector<HandlePtr> grouped_allgather_async(const std::vector<std::string>& names,
                                               const std::vector<TensorView>& inputs,
                                               const std::vector<OutputAllocator>& allocators,
                                               const std::vector<ReadyEventPtr>& ready,
                                               const std::vector<std::string>& group, const ProcessSet& process_set) {
  return submit_group("allgather", names, inputs, allocators.size(), "allocators", ready, group, process_set,
                      [&](size_t i, const std::string& name, ReadyEventPtr r, std::unique_ptr<TensorEntry>* e) {
                        return allgather_entry(name, inputs[i], allocators[i], std::move(r), e);
                      });
}

std::vector<HandlePtr> grouped_reducescatter_async(const std::vector<std::string>& names,
                                                   const std::vector<TensorView>& inputs,
                                                   const std::vector<OutputAllocator>& allocators,
                                                   const ReducescatterOptions& options,
                                                   const std::vector<ReadyEventPtr>& ready,
                                                   const std::vector<std::string>& group) {
  return submit_group("reducescatter", names, inputs, allocators.size(), "allocators", ready, group,
                      options.process_set,
                      [&](size_t i, const std::string& name, ReadyEventPtr r, std::unique_ptr<TensorEntry>* e) {
                        return reducescatter_entry(name, inputs[i], allocators[i], options, std::move(r), e);
                      });
}

HandlePtr broadcast_async(const std::string& name, const TensorView& tensor, int root_rank, ReadyEventPtr ready) {
  return broadcast_async(name, tensor, root_rank, BroadcastOptions{}, std::move(ready));
}

HandlePtr broadcast_async(const std::string& name_in, const TensorView& tensor, int root_rank,
                          const BroadcastOptions& options, ReadyEventPtr ready) {
  const std::string name = auto_name(name_in, "broadcast", options.process_set);
  Status s = check_tensor(name, tensor, "tensor");
  const int n = size();
  if (s.ok() && n > 0 && (root_rank < 0 || root_rank >= n)) {
    s = Status::InvalidArgument("root rank " + std::to_string(root_rank) + " of broadcast '" + name +
                                "' is out of range: there are " + std::to_string(n) + " ranks");
  }
  // The root is a global rank (as Horovod); the set's communicator knows it by its rank in the set.
  int root = root_rank;
  const SetView set = view_of(options.process_set);
  if (s.ok() && set.member && !options.process_set.is_global()) {
    const auto it = std::find(set.ranks.begin(), set.ranks.end(), root_rank);
    if (it == set.ranks.end()) {
      s = Status::InvalidArgument("root rank " + std::to_string(root_rank) + " of broadcast '" + name +
                                  "' is not in process set " + std::to_string(options.process_set.id()) + " (ranks [" +
                                  rank_list(set.ranks) + "])");
    } else {
      root = static_cast<int>(it - set.ranks.begin());
    }
  }
  if (!s.ok()) return failed(name, s);
  auto e = make_entry(OpType::kBroadcast, name, tensor, std::move(ready));
  e->request.root = root;
  return submit(std::move(e), options.process_set);
}

HandlePtr alltoall_async(const std::string& name, const TensorView& input, const std::vector<int64_t>& splits,
                         OutputAllocator allocate, ReadyEventPtr ready) {
  return alltoall_async(name, input, splits, std::move(allocate), AlltoallOptions{}, std::move(ready));
}

HandlePtr alltoall_async(const std::string& name_in, const TensorView& input, const std::vector<int64_t>& splits,
                         OutputAllocator allocate, const AlltoallOptions& options, ReadyEventPtr ready) {
  const std::string name = auto_name(name_in, "alltoall", options.process_set);
  Status s = check_tensor(name, input, "input");
  if (s.ok() && !allocate) s = Status::InvalidArgument("alltoall '" + name + "' needs an output allocator");
  if (s.ok() && input.shape.empty()) {
    s = Status::InvalidArgument("alltoall '" + name + "' needs a tensor with at least one dimension");
  }
  const SetView set = view_of(options.process_set);
  const int n = set.member ? set.size() : 0;  // not a member: enqueue says so
  std::vector<int64_t> sp = splits;
  if (s.ok() && n > 0) {
    const int64_t dim0 = input.shape[0];
    if (sp.empty()) {
      if (dim0 % n != 0) {
        s = Status::InvalidArgument("alltoall '" + name + "': dim 0 (" + std::to_string(dim0) +
                                    ") is not divisible by the number of ranks (" + std::to_string(n) +
                                    "); pass splits");
      } else {
        sp.assign(n, dim0 / n);
      }
    } else if (static_cast<int>(sp.size()) != n) {
      s = Status::InvalidArgument("alltoall '" + name + "': splits has " + std::to_string(sp.size()) +
                                  " entries, expected one per rank (" + std::to_string(n) + ")");
    } else {
      int64_t sum = 0;
      for (int64_t x : sp) {
        if (x < 0)
          s = Status::InvalidArgument("alltoall '" + name + "': splits must not be negative");
        else if (x > INT64_MAX - sum)
          s = Status::InvalidArgument("alltoall '" + name + "': splits overflow");
        if (!s.ok()) break;
        sum += x;
      }
      if (s.ok() && sum != dim0) {
        s = Status::InvalidArgument("alltoall '" + name + "': splits sum to " + std::to_string(sum) +
                                    ", but dim 0 of the tensor is " + std::to_string(dim0));
      }
    }
  }
  if (s.ok() && input.num_elements() > INT_MAX) {
    // MPI_Alltoallv takes int counts and displacements into the input.
    s = Status::InvalidArgument("alltoall '" + name + "' has " + std::to_string(input.num_elements()) +
                                " elements; alltoall supports at most 2^31-1 (INT_MAX) elements per rank");
  }
  if (!s.ok()) return failed(name, s);
  auto e = make_entry(OpType::kAlltoall, name, input, std::move(ready));
  e->splits = std::move(sp);
  e->allocate = std::move(allocate);
  return submit(std::move(e), options.process_set);
}

HandlePtr reducescatter_async(const std::string& name_in, const TensorView& input, OutputAllocator allocate,
                              const ReducescatterOptions& options, ReadyEventPtr ready) {
  const std::string name = auto_name(name_in, "reducescatter", options.process_set);
  std::unique_ptr<TensorEntry> e;
  Status s = reducescatter_entry(name, input, std::move(allocate), options, std::move(ready), &e);
  return submit_or_fail(name, std::move(s), std::move(e), options.process_set);
}

HandlePtr barrier_async(const BarrierOptions& options) {
  TensorView none;
  none.dtype = DataType::kUInt8;
  none.shape = {0};
  auto rt = current_runtime();
  const uint64_t n = rt ? rt->process_sets().next_serial(options.process_set.id(), true) : 0;
  return submit(make_entry(OpType::kBarrier, "horovodlite.barrier." + std::to_string(n), none), options.process_set);
}

HandlePtr join_async() {
  TensorView none;
  none.dtype = DataType::kUInt8;
  none.shape = {0};
  return submit(make_entry(OpType::kJoin, kJoinName, none), kGlobalProcessSet);
}

}  // namespace horovodlite
