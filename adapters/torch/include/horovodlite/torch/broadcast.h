// Start-of-training (and resume) helpers: make every rank's model, optimizer
// and arbitrary serialized state identical to the root rank's.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include <string>

#include "horovodlite/torch/optimizer.h"

namespace horovodlite {
namespace torch {

// Every function takes a process set (the global set by default): the ranks of
// the set take part, root_rank is a global rank in it.

// Broadcasts each named tensor in place from root_rank (op names
// "<prefix><name>"). Names must be unique and the same on every rank.
void broadcast_parameters(const NamedTensors& tensors, int root_rank,
                          const std::string& prefix = "broadcast_parameters.", const ProcessSet& process_set = {});
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& tensors, int root_rank,
                          const std::string& prefix = "broadcast_parameters.", const ProcessSet& process_set = {});
// A module's parameters and buffers (e.g. batch-norm running statistics).
void broadcast_parameters(const ::torch::nn::Module& module, int root_rank, const ProcessSet& process_set = {});

// Makes every rank's optimizer equal to root's: each param group's options (lr,
// betas, momentum, ...) and every parameter's state (step counts, momentum
// buffers, moment estimates, ...). Ranks whose optimizer has no state yet get
// it created; state that root lacks is removed. Works for the built-in
// optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS) and for user
// optimizers that implement save()/load() and OptimizerOptions::serialize().
// All ranks' optimizers must have the same param-group structure.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, const ProcessSet& process_set = {});
inline void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root_rank,
                                      const ProcessSet& process_set = {}) {
  broadcast_optimizer_state(optimizer.optimizer(), root_rank, process_set);
}

// Returns root_rank's `bytes` on every rank (other ranks' input is ignored).
std::string broadcast_bytes(const std::string& bytes, int root_rank, const std::string& name = "broadcast_bytes",
                            const ProcessSet& process_set = {});

}  // namespace torch
}  // namespace horovodlite
