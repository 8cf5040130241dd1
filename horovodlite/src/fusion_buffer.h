// A persistent, 64-byte aligned host buffer that only grows: no allocation per
// operation in the steady state.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace horovodlite {

class FusionBuffer {
 public:
  void* get(size_t bytes) {
    if (bytes > capacity_) {
      size_t cap = std::max(bytes, capacity_ * 2);
      cap = (cap + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, cap);
      if (p == nullptr) return nullptr;
      data_.reset(static_cast<char*>(p));
      capacity_ = cap;
    }
    return data_.get();
  }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace horovodlite
