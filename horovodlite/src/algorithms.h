// What this build can run: every collective algorithm, in order of preference
// for each (op, placement), and the build's device facts. algorithms.cc is the
// one file that knows whether CUDA and NCCL are built in.
#pragma once

#include <memory>
#include <string>

#include "horovodlite/config.h"
#include "ops/registry.h"
#include "world.h"

namespace horovodlite {

// Collective over the world's ranks: every rank builds the same lists in the same order
// (some algorithms set up communicators). Device resources are created lazily,
// at the first device response.
std::unique_ptr<Registry> make_registry(const World& world, const Config& config);

// OK when `device` names a CUDA device this build and process can use; an error
// naming the tensor otherwise (Unimplemented in builds without CUDA).
Status check_device(const std::string& name, int device);

// Build facts for the public API.
bool device_backend_built();
int device_nccl_version();
int device_runtime_version();  // CUDART_VERSION the build compiled against; 0 without CUDA
int device_count();

}  // namespace horovodlite
