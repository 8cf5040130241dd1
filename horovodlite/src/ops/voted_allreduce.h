// The allreduce whose data went with the cycle's negotiation (an eager
// allreduce: Controller, EAGER_ALLREDUCE_BYTES). The vote already holds the sum
// over every rank; this copies it into the output, applying the postscale. No
// communication. Enabled only for responses with Response::reduced set, which
// are the same on every rank.
#pragma once

#include "ops/algorithm.h"
#include "world.h"

namespace horovodlite {

class VotedAllreduce : public Algorithm {
 public:
  explicit VotedAllreduce(const World& world) : size_(world.size()) {}
  const char* name() const override { return "VOTED_ALLREDUCE"; }
  bool enabled(const Response& r) const override { return r.reduced != nullptr; }
  OpResult run(const OpArgs& args) override;

 private:
  const int size_;
};

}  // namespace horovodlite
