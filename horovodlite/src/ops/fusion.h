// Packing fused tensors into a fusion buffer and unpacking them, for host and
// device algorithms alike: the layout and the list of copies are computed here;
// the placement only says how a batch of copies runs (host kernels, or one CUDA
// kernel launch per batch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace horovodlite {

struct Response;
struct TensorEntry;

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

// Hands each entry's output to its handle (after unpacking).
void publish_outputs(const std::vector<TensorEntry*>& entries);

}  // namespace horovodlite
