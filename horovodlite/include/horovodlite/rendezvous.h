// A key-value store that the ranks of a Gloo world meet in, for launchers whose
// rendezvous is not horovodlite's own server: the LibTorch adapter's init()
// gives one over torch.distributed's TCPStore under torchrun and Slurm
// (adapters/torch/src/launchers.cc). The transport keeps it for the world's
// lifetime (process sets meet in it too).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "horovodlite/common.h"

namespace horovodlite {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual Status set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits until `key` is set or `timeout` passes (kTimeout, naming the key).
  virtual Status get(const std::string& key, std::chrono::milliseconds timeout, std::vector<char>* value) = 0;
};

}  // namespace horovodlite
