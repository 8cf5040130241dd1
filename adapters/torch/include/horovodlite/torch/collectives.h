// Collectives on at::Tensors (CPU, every dtype the core supports: uint8, int8,
// int16, int32, int64, float16, bfloat16, float32, float64, bool).
//
// - `name` identifies the op across ranks; empty names get automatic ones (the
//   same on every rank if all ranks issue unnamed ops in the same order).
// - Non-contiguous inputs are handled: they are copied to contiguous memory, and
//   in-place results are copied back on synchronize().
// - *_async functions return at once; the AsyncHandle keeps the tensors alive.
//   The synchronous forms wait and throw HorovodError on failure.
// - Every collective runs on a process set: AllreduceOptions/ReducescatterOptions
//   ::process_set, or the trailing `process_set` argument (the global set by
//   default). A broadcast's root_rank is a global rank; sizes are the set's.
// - Trailing-underscore functions work in place and return the tensor itself.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "horovodlite/torch/async_handle.h"

namespace horovodlite {
namespace torch {

using horovodlite::AllreduceOptions;
using horovodlite::ProcessSet;
using horovodlite::ReduceOp;
using horovodlite::ReducescatterOptions;

// Horovod's names for the reduce ops.
constexpr ReduceOp Average = ReduceOp::kAverage;
constexpr ReduceOp Sum = ReduceOp::kSum;
constexpr ReduceOp Min = ReduceOp::kMin;
constexpr ReduceOp Max = ReduceOp::kMax;
constexpr ReduceOp Product = ReduceOp::kProduct;

// ---- allreduce (op Average by default; prescale/postscale factors) ----
AsyncHandle allreduce_async(const at::Tensor& tensor, const std::string& name = "",
                            const AllreduceOptions& options = {});
AsyncHandle allreduce_async_(const at::Tensor& tensor, const std::string& name = "",
                             const AllreduceOptions& options = {});
// Into a given `output`: same dtype, numel and device as `input`, contiguous, and
// either `input` itself (in place) or not overlapping it. synchronize() returns
// `output`. Lets callers reuse result buffers instead of allocating one per call.
AsyncHandle allreduce_async(const at::Tensor& input, const at::Tensor& output, const std::string& name,
                            const AllreduceOptions& options = {});
at::Tensor allreduce(const at::Tensor& tensor, const std::string& name = "", const AllreduceOptions& options = {});
at::Tensor allreduce_(const at::Tensor& tensor, const std::string& name = "", const AllreduceOptions& options = {});

// ---- allgather: concatenation along dim 0 (dim 0 may differ between ranks) ----
AsyncHandle allgather_async(const at::Tensor& tensor, const std::string& name = "", const ProcessSet& process_set = {});
at::Tensor allgather(const at::Tensor& tensor, const std::string& name = "", const ProcessSet& process_set = {});

// ---- broadcast from root_rank ----
AsyncHandle broadcast_async(const at::Tensor& tensor, int root_rank, const std::string& name = "",
                            const ProcessSet& process_set = {});
AsyncHandle broadcast_async_(const at::Tensor& tensor, int root_rank, const std::string& name = "",
                             const ProcessSet& process_set = {});
at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const std::string& name = "",
                     const ProcessSet& process_set = {});
at::Tensor broadcast_(const at::Tensor& tensor, int root_rank, const std::string& name = "",
                      const ProcessSet& process_set = {});

// ---- alltoall: rows [sum(splits[:j]), sum(splits[:j+1])) of dim 0 go to rank j;
// empty splits divide dim 0 evenly ----
struct AlltoallResult {
  at::Tensor output;
  std::vector<int64_t> received_splits;  // rows received from each rank
};
AsyncHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits = {},
                           const std::string& name = "", const ProcessSet& process_set = {});
AlltoallResult alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits = {}, const std::string& name = "",
                        const ProcessSet& process_set = {});

// ---- reducescatter: reduce, then rank r keeps its block of dim 0 ----
AsyncHandle reducescatter_async(const at::Tensor& tensor, const std::string& name = "",
                                const ReducescatterOptions& options = {});
at::Tensor reducescatter(const at::Tensor& tensor, const std::string& name = "",
                         const ReducescatterOptions& options = {});

// ---- grouped (Horovod's grouped_allreduce etc.): the tensors are negotiated and
// executed as one group (none is ready until all are enqueued on every rank; an
// allreduce group is fused together). `names`: one per tensor, or empty for
// automatic names. One handle per tensor, in order; an empty list throws
// HorovodError(kInvalidArgument). ----
std::vector<AsyncHandle> grouped_allreduce_async(const std::vector<at::Tensor>& tensors,
                                                 const std::vector<std::string>& names = {},
                                                 const AllreduceOptions& options = {});
std::vector<AsyncHandle> grouped_allreduce_async_(const std::vector<at::Tensor>& tensors,
                                                  const std::vector<std::string>& names = {},
                                                  const AllreduceOptions& options = {});
std::vector<AsyncHandle> grouped_allgather_async(const std::vector<at::Tensor>& tensors,
                                                 const std::vector<std::string>& names = {},
                                                 const ProcessSet& process_set = {});
std::vector<AsyncHandle> grouped_reducescatter_async(const std::vector<at::Tensor>& tensors,
                                                     const std::vector<std::string>& names = {},
                                                     const ReducescatterOptions& options = {});

// ---- join / barrier ----
// This rank has no more data; returns the last rank to join once all have
// (the global set only, as Horovod).
AsyncHandle join_async();
int join();
void barrier(const ProcessSet& process_set = {});

// ---- process sets (horovodlite/process_set.h) ----
// Collective over every rank; need HOROVODLITE_DYNAMIC_PROCESS_SETS=1. Throw
// HorovodError on failure (a duplicate set, bad ranks, ops in flight on removal).
ProcessSet add_process_set(const std::vector<int>& ranks);
void remove_process_set(const ProcessSet& process_set);

}  // namespace torch
}  // namespace horovodlite
