#include "ops/fusion.h"

#include <iterator>
#include <limits>
#include <unordered_map>
#include <utility>

#include "entry.h"
#include "message.h"

namespace horovodlite {

FusionLayout::FusionLayout(const Response& r, int64_t align, int64_t granularity)
    : sizes_(r.tensor_sizes), offsets_(r.tensor_sizes.size()) {
  for (size_t i = 0; i < sizes_.size(); ++i) {
    offsets_[i] = elements_;
    elements_ += (sizes_[i] + align - 1) / align * align;
  }
  elements_ = (elements_ + granularity - 1) / granularity * granularity;
}

std::vector<CopyTask> FusionLayout::pack(const std::vector<TensorEntry*>& entries, void* buffer, size_t elem,
                                         std::vector<std::pair<void*, int64_t>>* zeros) const {
  std::vector<CopyTask> out;
  out.reserve(entries.size());
  char* base = static_cast<char*>(buffer);
  for (size_t i = 0; i < entries.size(); ++i) {
    char* at = base + offsets_[i] * static_cast<int64_t>(elem);
    if (entries[i] != nullptr) {
      out.push_back(CopyTask{at, entries[i]->input.data, sizes_[i]});
    } else if (sizes_[i] > 0) {
      zeros->emplace_back(at, sizes_[i] * static_cast<int64_t>(elem));  // a joined rank contributes zeros
    }
  }
  return out;
}

std::vector<CopyTask> FusionLayout::unpack(const std::vector<TensorEntry*>& entries, const void* buffer,
                                           size_t elem) const {
  std::vector<CopyTask> out;
  out.reserve(entries.size());
  const char* base = static_cast<const char*>(buffer);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i] == nullptr) continue;
    out.push_back(CopyTask{entries[i]->output.data, base + offsets_[i] * static_cast<int64_t>(elem), sizes_[i]});
  }
  return out;
}

int64_t response_bytes(const Response& r) {
  const auto elem = static_cast<int64_t>(dtype_size(r.dtype));
  switch (r.type) {
    case OpType::kAllgather: {  // the gathered output: every rank's rows
      int64_t rows = 0;
      for (int64_t s : r.tensor_sizes) rows += s;
      int64_t row = 1;
      for (size_t i = 1; i < r.shape.size(); ++i) row *= r.shape[i];
      return rows * row * elem;
    }
    case OpType::kReducescatter:  // the input, which goes through the fusion buffer
      return num_elements(r.shape) * elem;
    default: {
      int64_t n = 0;
      for (int64_t s : r.tensor_sizes) n += s;
      return n * elem;
    }
  }
}

namespace {

// The responses with each group's members moved next to its first member.
std::vector<Response> group_adjacent(std::vector<Response> in) {
  std::unordered_map<uint64_t, std::vector<size_t>> members;
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].group_id != 0 && in[i].type != OpType::kError) {
      members[in[i].group_id].push_back(i);
      any = true;
    }
  }
  if (!any) return in;
  std::vector<Response> out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    Response& r = in[i];
    if (r.group_id == 0 || r.type == OpType::kError) {
      out.push_back(std::move(r));
      continue;
    }
    auto it = members.find(r.group_id);
    if (it == members.end()) continue;  // already placed with its group
    for (size_t j : it->second) out.push_back(std::move(in[j]));
    members.erase(it);
  }
  return out;
}

bool fusable(OpType t) { return t == OpType::kAllreduce || t == OpType::kAllgather || t == OpType::kReducescatter; }

// Whether r may join the fused response b (same op and parameters).
bool compatible(const Response& b, const Response& r) {
  if (b.type != r.type || b.dtype != r.dtype || b.device != r.device) return false;
  switch (r.type) {
    case OpType::kAllreduce:
      return b.reduce_op == r.reduce_op && b.prescale == r.prescale && b.postscale == r.postscale &&
             b.compression == r.compression;
    case OpType::kReducescatter:
      // The device algorithms run one tensor at a time: only host tensors fuse.
      return r.device == kCpuDevice && b.reduce_op == r.reduce_op && b.prescale == r.prescale &&
             b.postscale == r.postscale;
    case OpType::kAllgather:
      return r.device == kCpuDevice;
    default:
      return false;
  }
}

}  // namespace

std::vector<Response> fuse_responses(std::vector<Response> in_list, int64_t threshold_bytes,
                                     bool disable_group_fusion) {
  std::vector<Response> in = group_adjacent(std::move(in_list));
  std::vector<Response> out;
  out.reserve(in.size());
  int64_t back_bytes = 0;
  for (Response& r : in) {
    const int64_t bytes = fusable(r.type) ? response_bytes(r) : 0;
    if (bytes >= kFuseAloneBytes || r.reduced != nullptr) {
      // Large enough to amortise a collective's start-up on its own: run in
      // place, without the two copies through the fusion buffer. (An eager
      // allreduce is already reduced: it only needs its copy out.)
      out.push_back(std::move(r));
      back_bytes = std::numeric_limits<int64_t>::max() / 2;  // nothing joins it either
      continue;
    }
    if (!out.empty() && threshold_bytes > 0 && fusable(r.type)) {
      Response& b = out.back();
      // HOROVOD_DISABLE_GROUP_FUSION: a group's tensors fuse only with each other.
      const bool same_group = !disable_group_fusion || b.group_id == r.group_id;
      if (same_group && compatible(b, r) && back_bytes + bytes <= threshold_bytes) {
        b.names.insert(b.names.end(), std::make_move_iterator(r.names.begin()), std::make_move_iterator(r.names.end()));
        b.tensor_sizes.insert(b.tensor_sizes.end(), r.tensor_sizes.begin(), r.tensor_sizes.end());
        back_bytes += bytes;
        continue;
      }
    }
    out.push_back(std::move(r));
    back_bytes = bytes;
  }
  return out;
}

}  // namespace horovodlite
