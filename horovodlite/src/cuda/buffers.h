// Persistent, grow-only buffers for the device path: the device fusion buffer
// (stream-ordered allocation, so growing it never synchronises the device) and
// pinned host staging buffers. Nothing is allocated per operation in the steady state.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

namespace horovodlite {
namespace cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // At least `bytes` of device memory usable by work enqueued on `stream` after
  // this call; nullptr if the allocation failed (*error says why).
  void* get(size_t bytes, cudaStream_t stream, cudaError_t* error) {
    *error = cudaSuccess;
    if (bytes <= capacity_ && data_ != nullptr) return data_;
    const size_t cap = (std::max(bytes, capacity_ * 2) + 255) / 256 * 256;
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);  // after the work already enqueued
    data_ = nullptr;
    capacity_ = 0;
    *error = cudaMallocAsync(&data_, cap, stream);
    if (*error != cudaSuccess) {
      data_ = nullptr;
      return nullptr;
    }
    capacity_ = cap;
    stream_ = stream;
    return data_;
  }
  size_t capacity() const { return capacity_; }
  void release() {
    if (data_ != nullptr) {
      cudaFreeAsync(data_, stream_);
      cudaStreamSynchronize(stream_);
    }
    data_ = nullptr;
    capacity_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

// Pinned host memory. Growing frees the old buffer, which waits for the device
// (cudaFreeHost), so callers grow it only where the stream has been synchronised
// anyway (host-staged collectives).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  void* get(size_t bytes, cudaError_t* error) {
    *error = cudaSuccess;
    if (bytes <= capacity_ && data_ != nullptr) return data_;
    const size_t cap = (std::max(bytes, capacity_ * 2) + 4095) / 4096 * 4096;
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
    *error = cudaMallocHost(&data_, cap);
    if (*error != cudaSuccess) {
      data_ = nullptr;
      return nullptr;
    }
    capacity_ = cap;
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace cuda
}  // namespace horovodlite
