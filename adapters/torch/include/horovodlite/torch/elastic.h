// Elastic training for LibTorch programs, with the semantics and names of
// Horovod 0.28's elastic mode (horovod.torch.elastic) and of our Python side
// (python/horovodlite/common/elastic.py):
//
//   horovodlite::torch::init();
//   horovodlite::torch::elastic::TorchState state(*model, optimizer, {{"step", 0}});
//   horovodlite::torch::elastic::run(state, [&] {
//     while (state["step"] < steps) {
//       ... forward, backward, optimizer.step() ...
//       ++state["step"];
//       state.commit();  // the step is done: a failure rolls back to here
//     }
//   });
//
// Launched with `horovodlite-run --min-np N --host-discovery-script S ...`
// (docs/elastic.md). run() synchronizes the state from rank 0 and calls fn;
// when a collective fails (a peer died: HorovodError other than a usage error)
// the state rolls back to its last commit; when the driver reports a host
// change, commit() throws HostsUpdatedInterrupt and the state is kept. Either
// way the world is re-formed (shutdown, rendezvous with the driver for the new
// rank and size, init), the reset callbacks run, the state is synchronized from
// rank 0 and fn is called again. A worker that has no place in the new world
// leaves with exit status 0. Outside an elastic job run() is the same loop
// without the driver: a failure re-initializes the same world.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "horovodlite/torch/optimizer.h"

namespace horovodlite {
namespace torch {
namespace detail {
class OptimizerSnapshot;
}  // namespace detail
namespace elastic {

// Bits of the driver's host update (runner/elastic/discovery.py HostUpdateResult).
enum HostUpdateResult : int { kNoUpdate = 0, kRemoved = 1, kAdded = 2, kMixed = 3 };

// Thrown by commit()/check_host_updates() on every rank at once when hosts were
// added or removed; run() re-forms the world without rolling back.
class HostsUpdatedInterrupt : public std::runtime_error {
 public:
  explicit HostsUpdatedInterrupt(bool skip_sync)
      : std::runtime_error("horovodlite: hosts updated"), skip_sync_(skip_sync) {}
  // Only hosts were removed: the survivors' state is current, no sync needed.
  bool skip_sync() const { return skip_sync_; }

 private:
  bool skip_sync_;
};

// True for the HorovodErrors that mean the world broke (a peer failed, the
// runtime shut down) rather than a usage error (kInvalidArgument,
// kDuplicateName, kUnimplemented): the ones Python raises as
// HorovodInternalError and run() recovers from.
bool is_internal_error(const std::exception& e);

// True in a worker started by horovodlite-run in elastic mode (HOROVOD_ELASTIC
// and the rendezvous address are set).
bool elastic_enabled();

class State {
 public:
  State() = default;
  virtual ~State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Saves the state in memory (the point a failure rolls back to), then checks
  // for host changes (a collective: every rank must commit together).
  void commit();
  // Throws HostsUpdatedInterrupt on every rank (rank 0's view is broadcast)
  // when the driver reported hosts added or removed since the last check.
  void check_host_updates();
  // Functions called after each reset, before the state is synchronized (e.g.
  // to scale the learning rate with the new size()).
  void register_reset_callbacks(const std::vector<std::function<void()>>& callbacks);

  virtual void save() = 0;
  virtual void restore() = 0;
  // Makes every rank's state rank 0's (collective).
  virtual void sync() = 0;
  // Called after a reset, before the callbacks and the sync.
  virtual void reset() {}

  // Used by run() and the notification poller.
  void on_reset();
  void on_hosts_updated(int64_t timestamp, int update);
  int64_t last_updated_timestamp() const { return last_updated_timestamp_; }

 private:
  std::mutex mu_;  // host_messages_
  std::deque<std::pair<int64_t, int>> host_messages_;
  int64_t last_updated_timestamp_ = 0;
  std::vector<std::function<void()>> reset_callbacks_;
};

// A module's parameters and buffers, an optimizer's state and param-group
// options, named int64 values and user objects given as bytes: saved by
// copying in host memory, restored by copying back, synchronized by
// broadcasting from rank 0.
class TorchState : public State {
 public:
  using Values = std::map<std::string, int64_t>;

  // `model` and `optimizer` must outlive the state; the optimizer may be null.
  TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer* optimizer, Values values = {});
  TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer, Values values = {})
      : TorchState(model, &optimizer, std::move(values)) {}
  TorchState(::torch::nn::Module& model, DistributedOptimizer& optimizer, Values values = {})
      : TorchState(model, &optimizer.optimizer(), std::move(values)) {}
  ~TorchState() override;

  // A named value (created as 0 if missing: name them all in the constructor,
  // the same on every rank).
  int64_t& operator[](const std::string& key) { return values_[key]; }
  int64_t value(const std::string& key) const;
  const Values& values() const { return values_; }

  // Any other state, as bytes: `get` returns it, `set` puts it back; saved,
  // restored and synchronized with the rest (e.g. a learning-rate schedule or
  // a data order). Register the same names on every rank.
  void add_object(const std::string& name, std::function<std::string()> get,
                  std::function<void(const std::string&)> set);

  void save() override;
  void restore() override;
  void sync() override;

 private:
  struct Object {
    std::string name;
    std::function<std::string()> get;
    std::function<void(const std::string&)> set;
    std::string saved;
  };

  ::torch::nn::Module& model_;
  ::torch::optim::Optimizer* optimizer_;
  Values values_;
  Values saved_values_;
  std::vector<std::pair<std::string, at::Tensor>> saved_tensors_;  // parameters and buffers, by name
  std::unique_ptr<::horovodlite::torch::detail::OptimizerSnapshot> saved_optimizer_;
  std::vector<Object> objects_;
};

// The elastic loop (Horovod's hvd.elastic.run): runs fn until it returns,
// re-forming the world after a failed collective (the state restored to its
// last commit) or a host change (the state kept). horovodlite must be
// initialized; fn must not run collectives before run() calls it. Exceptions
// other than internal HorovodErrors and HostsUpdatedInterrupt propagate.
void run(State& state, const std::function<void()>& fn);

}  // namespace elastic
}  // namespace torch
}  // namespace horovodlite
