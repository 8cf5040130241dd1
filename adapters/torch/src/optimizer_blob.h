// An optimizer's state and param-group options as bytes (a TorchScript
// archive), shared by broadcast_optimizer_state and the elastic state's commit.
// Private to the adapter.
#pragma once

#include <torch/optim/optimizer.h>

#include <string>

namespace horovodlite {
namespace torch {
namespace detail {

std::string serialize_optimizer(const ::torch::optim::Optimizer& optimizer);
// Replaces the optimizer's state and options with the blob's; throws
// HorovodError(kInvalidArgument) when the param-group structure differs.
void deserialize_optimizer(const std::string& blob, ::torch::optim::Optimizer& optimizer);

}  // namespace detail
}  // namespace torch
}  // namespace horovodlite
