#include "ops/fusion.h"

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

void publish_outputs(const std::vector<TensorEntry*>& entries) {
  for (TensorEntry* e : entries)
    if (e != nullptr) e->handle->set_output(e->output);
}

}  // namespace horovodlite
