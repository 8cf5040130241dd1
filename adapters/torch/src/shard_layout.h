// What the sharded optimizers (zero.cc, fully_shard.cc) share: gathering every
// rank's parameter signatures over the process set and failing alike on every
// rank when they differ, and the texts their errors use.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "horovodlite/common.h"
#include "horovodlite/process_set.h"

namespace horovodlite {
namespace torch {
namespace shard_layout {

// The dtype a floating gradient of `dtype` is reducescattered in under
// `compression` (the sharded optimizers cast it: the core compresses only
// allreduces): kHalf for kFp16, kBFloat16 for kBf16; `dtype` itself for kNone
// and for tensors that are not floating point.
inline at::ScalarType compression_wire_type(Compression compression, at::ScalarType dtype) {
  if (!at::isFloatingType(dtype)) return dtype;
  if (compression == Compression::kFp16) return at::kHalf;
  if (compression == Compression::kBf16) return at::kBFloat16;
  return dtype;
}

// Per set rank, its parameters' (signature, name), in order.
using Signatures = std::vector<std::vector<std::pair<std::string, std::string>>>;

std::string ranks_text(const std::vector<int>& ranks);
std::string shape_text(at::IntArrayRef shape);

// Allgathers `mine` (one "signature\tname" line per parameter) over `ps` as
// "<prefix>.layout.*" and returns every rank's lines. If the ranks hold different
// numbers of parameters or a parameter's signature differs, every rank throws the
// same HorovodError (InvalidArgument), naming the parameter and the ranks.
Signatures gather(const std::string& what, const std::string& mine, const std::string& prefix, const ProcessSet& ps,
                  const std::vector<int>& set_ranks);

// "parameter i ('name')", with set rank 0's name: the same text on every rank.
std::string param_text(const Signatures& sigs, size_t i);

}  // namespace shard_layout
}  // namespace torch
}  // namespace horovodlite
