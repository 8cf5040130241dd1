// Packing fused tensors into a fusion buffer and unpacking them, for host and
// device algorithms alike: the layout and the list of copies are computed here;
// the placement only says how a batch of copies runs (host kernels, or one CUDA
// kernel launch per batch).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "host_memory.h"
#include "message.h"

namespace horovodlite {

struct TensorEntry;

// A persistent host buffer that only grows: no allocation per operation in the
// steady state. Page aligned, and from 2 MiB up on transparent huge pages
// (HostBuffer, host_memory.h): the ring sends fused tensors out of it, and the
// peers' single copies pin its pages.
class FusionBuffer {
 public:
  void* get(size_t bytes) {
    if (bytes > buffer_.size()) {
      HostBuffer grown(std::max(bytes, buffer_.size() * 2));
      if (grown.data() == nullptr) return nullptr;
      buffer_ = std::move(grown);
    }
    return buffer_.data();
  }
  size_t capacity() const { return buffer_.size(); }

 private:
  HostBuffer buffer_;
};

// One tensor's copy into or out of a fusion buffer: `count` elements.
struct CopyTask {
  void* dst;
  const void* src;
  int64_t count;
};

// Where the tensors of a fused response sit in a fusion buffer. It depends on the
// response only, so it is the same on every rank.
class FusionLayout {
 public:
  // Tensor i starts at a multiple of `align` elements; the whole is padded to a
  // multiple of `granularity` elements (an algorithm that splits the buffer evenly).
  explicit FusionLayout(const Response& response, int64_t align = 1, int64_t granularity = 1);

  int64_t offset(size_t i) const { return offsets_[i]; }
  int64_t elements() const { return elements_; }

  // The copies that pack this rank's inputs into `buffer` (elements of `elem`
  // bytes), one per tensor this rank has; *zeros receives the (start, bytes) of
  // each tensor this rank does not have (it joined), to be filled with zeros.
  std::vector<CopyTask> pack(const std::vector<TensorEntry*>& entries, void* buffer, size_t elem,
                             std::vector<std::pair<void*, int64_t>>* zeros) const;
  // The copies that unpack `buffer` into this rank's outputs.
  std::vector<CopyTask> unpack(const std::vector<TensorEntry*>& entries, const void* buffer, size_t elem) const;

 private:
  std::vector<int64_t> sizes_;
  std::vector<int64_t> offsets_;
  int64_t elements_ = 0;
};

// Tensors of at least this many bytes are never fused: the copies into and out of
// the fusion buffer would cost more than a collective of their own.
constexpr int64_t kFuseAloneBytes = int64_t(1) << 20;

// First moves the responses of each group (Response::group_id) next to the
// group's first response, so a group is executed together (as Horovod, which
// puts a group's responses side by side before fusing). Then merges consecutive
// responses of the same op while the fused size stays <= threshold_bytes (0: no
// fusion): allreduces with the same dtype, device, reduce op, scale factors and
// compression; host allgathers with the same dtype; host reducescatters with the
// same dtype, reduce op and scale factors. Tensors of kFuseAloneBytes or more
// stay on their own. disable_group_fusion (HOROVOD_DISABLE_GROUP_FUSION): a
// group's tensors fuse only with each other, ungrouped ones only with ungrouped
// ones. Every rank applies it to the same list and gets the same result.
std::vector<Response> fuse_responses(std::vector<Response> in, int64_t threshold_bytes,
                                     bool disable_group_fusion = false);

// The bytes a single-tensor response puts through the fusion buffer (allgather:
// its gathered output; allreduce, reducescatter: its input).
int64_t response_bytes(const Response& r);

}  // namespace horovodlite
