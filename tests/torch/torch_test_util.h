// Helpers for the LibTorch adapter's multi-process tests.
#pragma once

#include <c10/util/accumulate.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/collectives.h"

namespace hvl_torch_test {

namespace hvt = horovodlite::torch;

inline int rank() { return hvt::rank(); }
inline int size() { return hvt::size(); }

// Every dtype the adapter supports.
inline std::vector<at::ScalarType> all_scalar_types() {
  return {at::kByte, at::kChar,     at::kShort, at::kInt,    at::kLong,
          at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kBool};
}
inline std::vector<at::ScalarType> numeric_scalar_types() {
  return {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};
}

// True on every rank iff `t` has the same shape, dtype and bytes on every rank.
inline bool same_on_all_ranks(const at::Tensor& t, const std::string& name) {
  at::Tensor c = t.detach().contiguous();
  const int64_t nbytes = c.numel() * static_cast<int64_t>(c.element_size());
  at::Tensor bytes = at::empty({nbytes}, at::kByte);
  if (nbytes > 0) std::memcpy(bytes.data_ptr(), c.data_ptr(), static_cast<size_t>(nbytes));
  // Shape and dtype travel as a small int64 header in front of the bytes' length.
  std::vector<int64_t> header = {c.dim(), static_cast<int64_t>(c.scalar_type()), nbytes};
  for (int64_t d : c.sizes()) header.push_back(d);
  header.resize(16, -1);
  at::Tensor h = at::tensor(header, at::kLong).reshape({1, 16});
  at::Tensor headers = hvt::allgather(h, name + ".header");
  if (!at::equal(headers, h.expand({size(), 16}))) return false;
  at::Tensor all = hvt::allgather(bytes.reshape({1, nbytes}), name + ".bytes");
  return at::equal(all, bytes.reshape({1, nbytes}).expand({size(), nbytes}));
}

// Deterministic values for rank r: small integers, exact in every dtype.
inline at::Tensor rank_values(at::IntArrayRef shape, int r, at::ScalarType type, int64_t modulus = 7) {
  at::Tensor idx = at::arange(c10::multiply_integers(shape), at::kLong).reshape(shape);
  at::Tensor v = (idx * 3 + r * 5 + 1).remainder(modulus);
  if (type == at::kBool) return (idx + r).remainder(3).eq(0);
  return v.to(type);
}

// A small double model with parameters and buffers (BatchNorm's running
// statistics), the same on every rank for the same seed.
inline torch::nn::Sequential make_model(int seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential m(torch::nn::Linear(4, 6), torch::nn::Tanh(), torch::nn::Linear(6, 3),
                          torch::nn::BatchNorm1d(3));
  m->to(torch::kDouble);
  return m;
}

}  // namespace hvl_torch_test
