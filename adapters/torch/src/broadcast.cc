#include "horovodlite/torch/broadcast.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <set>
#include <sstream>

#include "horovodlite/horovodlite.h"
#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "optimizer_blob.h"

namespace horovodlite {
namespace torch {
namespace {

// Waits for every handle, then throws the first failure (none stays in flight).
void synchronize_all(std::vector<AsyncHandle>& handles) {
  std::unique_ptr<HorovodError> first;
  for (AsyncHandle& h : handles) {
    try {
      h.synchronize();
    } catch (const HorovodError& e) {
      if (!first) first = std::make_unique<HorovodError>(e);
    }
  }
  if (first) throw *first;
}

}  // namespace

namespace detail {
namespace {

constexpr char kOptimizerKey[] = "optimizer";
constexpr char kGroupCountKey[] = "group_count";
constexpr char kGroupOptionsKey[] = "group_options/";

}  // namespace

std::string serialize_optimizer(const ::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::OutputArchive top;
  ::torch::serialize::OutputArchive state(top.compilation_unit());
  optimizer.save(state);
  top.write(kOptimizerKey, state);
  const auto& groups = optimizer.param_groups();
  top.write(kGroupCountKey, c10::IValue(static_cast<int64_t>(groups.size())));
  for (size_t i = 0; i < groups.size(); ++i) {
    ::torch::serialize::OutputArchive options(top.compilation_unit());
    groups[i].options().serialize(options);
    top.write(kGroupOptionsKey + std::to_string(i), options);
  }
  std::ostringstream out;
  top.save_to(out);
  return out.str();
}

void deserialize_optimizer(const std::string& blob, ::torch::optim::Optimizer& optimizer) {
  std::istringstream in(blob);
  ::torch::serialize::InputArchive top;
  top.load_from(in);
  c10::IValue count;
  top.read(kGroupCountKey, count);
  auto& groups = optimizer.param_groups();
  check_argument(count.toInt() == static_cast<int64_t>(groups.size()),
                 "broadcast_optimizer_state: the root rank's optimizer has " + std::to_string(count.toInt()) +
                     " param groups, this rank's has " + std::to_string(groups.size()));
  // State: replace this rank's entirely with root's (load() only adds entries).
  ::torch::serialize::InputArchive state;
  top.read(kOptimizerKey, state);
  optimizer.state().clear();
  optimizer.load(state);
  for (size_t i = 0; i < groups.size(); ++i) {
    ::torch::serialize::InputArchive options;
    top.read(kGroupOptionsKey + std::to_string(i), options);
    groups[i].options().serialize(options);
  }
}

}  // namespace detail

void broadcast_parameters(const NamedTensors& tensors, int root_rank, const std::string& prefix,
                          const ProcessSet& process_set) {
  std::set<std::string> names;
  for (const auto& item : tensors) {
    check_argument(names.insert(item.first).second,
                   "broadcast_parameters: names must be unique; '" + item.first + "' appears twice");
  }
  std::vector<AsyncHandle> handles;
  handles.reserve(tensors.size());
  for (const auto& item : tensors) {
    if (!item.second.defined()) continue;
    handles.push_back(broadcast_async_(item.second, root_rank, prefix + item.first, process_set));
  }
  synchronize_all(handles);
}

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& tensors, int root_rank,
                          const std::string& prefix, const ProcessSet& process_set) {
  broadcast_parameters(tensors.pairs(), root_rank, prefix, process_set);
}

void broadcast_parameters(const ::torch::nn::Module& module, int root_rank, const ProcessSet& process_set) {
  NamedTensors all;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    all.emplace_back("parameter." + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    all.emplace_back("buffer." + item.key(), item.value());
  broadcast_parameters(all, root_rank, "broadcast_parameters.", process_set);
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, const ProcessSet& process_set) {
  const bool is_root = rank() == root_rank;
  std::string blob = is_root ? detail::serialize_optimizer(optimizer) : std::string();
  blob = broadcast_bytes(blob, root_rank, "broadcast_optimizer_state", process_set);
  if (!is_root) detail::deserialize_optimizer(blob, optimizer);
}

std::string broadcast_bytes(const std::string& bytes, int root_rank, const std::string& name,
                            const ProcessSet& process_set) {
  const bool is_root = rank() == root_rank;
  at::Tensor length = at::full({1}, is_root ? static_cast<int64_t>(bytes.size()) : int64_t{0}, at::kLong);
  broadcast_(length, root_rank, name + ".size", process_set);
  const int64_t n = length.item<int64_t>();
  at::Tensor data = at::empty({n}, at::kByte);
  if (is_root && n > 0) std::memcpy(data.data_ptr(), bytes.data(), static_cast<size_t>(n));
  broadcast_(data, root_rank, name + ".data", process_set);
  return std::string(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
}

}  // namespace torch
}  // namespace horovodlite
