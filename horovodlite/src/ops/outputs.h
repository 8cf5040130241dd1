// The outputs an op returns in its result (OpResult::outputs), and those of the
// ops whose output size is known only after negotiation (allgather, alltoall,
// reducescatter), computed alike by host and device algorithms, and allocated
// so that a failure on one rank is an error on all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "entry.h"
#include "message.h"
#include "ops/algorithm.h"
#include "world.h"

namespace horovodlite {

// Each entry's output is the view it was enqueued with (allreduce, broadcast:
// the result is written there); an empty one where this rank has no entry.
OpOutputs outputs_in_place(const std::vector<TensorEntry*>& entries);

// allgather: the elements each rank contributes (its dim 0 times one row).
std::vector<int64_t> allgather_counts(const Response& r, const Shape& input_shape);
// reducescatter: the elements of each rank's block of rows.
std::vector<int64_t> reducescatter_counts(const Shape& shape, int size);
// alltoall: tells every rank how many rows this rank sends it (e.splits) and
// returns how many each rank sends this one.
Status exchange_splits(const TensorEntry& e, const World& comm, std::vector<int64_t>* received);

// Element counts and displacements as MPI ints, or an error naming the tensor.
Status to_int_counts(const std::string& name, const std::vector<int64_t>& counts, std::vector<int>* out,
                     std::vector<int>* displs);

// If `local` is OK, allocates e's output of `shape`; then agrees with every rank
// of `comm` (World::agree): a collective must not start on some ranks
// while it failed to start on others.
Status allocate_output(TensorEntry& e, const Shape& shape, const World& comm, Status local, TensorView* out);

}  // namespace horovodlite
