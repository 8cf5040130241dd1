// fully_shard (ZeRO stage 3) against the replicated DistributedOptimizer on the
// same model and data: parameters equal after several Adam steps and identical
// on every rank, with reshard_after_forward true and false, with two backward
// passes per step, with a unit whose output one rank leaves unused (its
// backward gathers issued in one order on every rank); the parameters at rest
// (empty) and gathered; the layout mismatch error (the same on every rank); and
// full parameters saved on a process set of size - 1 ranks, loaded on all.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "horovodlite/torch/error.h"
#include "horovodlite/torch/fully_shard.h"
#include "horovodlite/torch/optimizer.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
using hvt::FullyShardedModule;
using hvt::FullyShardOptions;

// Odd sizes (padding at 2 and 3 ranks), a 0-dim parameter (fewer elements than
// ranks) and a unit that can be left unused.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t hidden = 7) {
    fc1 = register_module("fc1", torch::nn::Linear(5, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 3));
    side = register_module("side", torch::nn::Linear(5, 3));
    scale = register_parameter("scale", torch::ones({}));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, side{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Net);

Net make_net(int64_t hidden = 7) {
  torch::manual_seed(11);
  Net net(hidden);
  net->to(torch::kDouble);
  return net;
}

std::pair<torch::Tensor, torch::Tensor> batch(int r, int step, int micro) {
  auto gen = at::detail::createCPUGenerator(700 + 100 * r + 10 * step + micro);
  return {torch::randn({4, 5}, gen, torch::kDouble), torch::randn({4, 3}, gen, torch::kDouble)};
}

// The reference: the whole net replicated.
torch::Tensor reference_forward(Net& net, const torch::Tensor& x, bool use_side) {
  torch::Tensor y = net->fc2(torch::tanh(net->fc1(x))) * net->scale;
  return use_side ? y + net->side(x) : y;
}

// The same net sharded: fc1, fc2 and side each a unit, the root's scale one more
// (the parameters its submodules' units manage are left to them).
struct Sharded {
  Net net = make_net();
  std::shared_ptr<FullyShardedModule> fc1, fc2, side, root;
  std::unique_ptr<torch::optim::Adam> opt;

  explicit Sharded(const FullyShardOptions& o) {
    fc1 = hvt::fully_shard(net->fc1, o);
    fc2 = hvt::fully_shard(net->fc2, o);
    side = hvt::fully_shard(net->side, o);
    root = hvt::fully_shard(net.ptr(), o);
    std::vector<torch::Tensor> shards;
    for (auto* u : units()) {
      for (const auto& s : u->shards()) shards.push_back(s);
    }
    opt = std::make_unique<torch::optim::Adam>(shards, torch::optim::AdamOptions(0.01).weight_decay(0.01));
  }
  std::vector<FullyShardedModule*> units() { return {fc1.get(), fc2.get(), side.get(), root.get()}; }

  torch::Tensor forward(const torch::Tensor& x, bool use_side) {
    torch::Tensor h = fc1->forward(x);
    torch::Tensor y = fc2->forward(torch::tanh(h));
    y = root->run([&] { return y * net->scale; });
    torch::Tensor z = side->forward(x);  // every rank runs every unit's forward
    return use_side ? y + z : y;
  }
  void step() {
    for (auto* u : units()) u->synchronize();
    opt->step();
    opt->zero_grad();
  }
  torch::OrderedDict<std::string, torch::Tensor> full() {
    torch::OrderedDict<std::string, torch::Tensor> out;
    for (auto* u : units()) {
      const std::string prefix = u == root.get() ? "" : u == fc1.get() ? "fc1." : u == fc2.get() ? "fc2." : "side.";
      for (const auto& item : u->gather_full_parameters()) out.insert(prefix + item.key(), item.value());
    }
    return out;
  }
};

struct Reference {
  Net net = make_net();
  std::unique_ptr<hvt::DistributedOptimizer> opt;
  explicit Reference(int passes, hvt::Compression compression = hvt::Compression::kNone) {
    hvt::DistributedOptimizerOptions d;
    d.backward_passes_per_step = passes;
    d.compression = compression;
    opt = std::make_unique<hvt::DistributedOptimizer>(
        std::make_shared<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01).weight_decay(0.01)),
        net->named_parameters(), d);
  }
};

// Trains both for `steps` steps of `passes` backward passes each; rank
// `unused_rank` leaves the side branch out. `tol`: relative and absolute (the
// reference allreduces with o.compression too).
void expect_matches_replicated(const FullyShardOptions& o, int passes, int steps, int unused_rank = -1,
                               double tol = 0.0) {
  Sharded s(o);
  Reference ref(passes, o.compression);
  for (int step = 0; step < steps; ++step) {
    for (int micro = 0; micro < passes; ++micro) {
      auto [x, y] = batch(rank(), step, micro);
      const bool use_side = rank() != unused_rank;
      torch::mse_loss(s.forward(x, use_side), y).backward();
      torch::mse_loss(reference_forward(ref.net, x, use_side), y).backward();
    }
    s.step();
    ref.opt->step();
    ref.opt->zero_grad();
  }
  // At rest: the parameters hold no data, the shards their chunks.
  EXPECT_EQ(s.net->fc1->weight.numel(), 0);
  EXPECT_EQ(s.net->scale.numel(), 0);
  auto full = s.full();
  for (const auto& item : ref.net->named_parameters()) {
    const torch::Tensor* got = full.find(item.key());
    ASSERT_NE(got, nullptr) << item.key();
    EXPECT_TRUE(torch::allclose(*got, item.value(), tol > 0 ? tol : 1e-9, tol > 0 ? tol : 1e-11))
        << item.key() << " max diff " << (*got - item.value()).abs().max().item<double>();
    EXPECT_TRUE(same_on_all_ranks(*got, "fsdp.check." + item.key())) << item.key();
  }
}

TEST(FullyShard, MatchesReplicatedAdamReshardAfterForward) {
  FullyShardOptions o;
  o.reshard_after_forward = true;
  expect_matches_replicated(o, 1, 4);
}

// fp16 / bf16 reducescatters against DistributedOptimizer's fp16 / bf16
// allreduce: rounded at different points; bf16 has 8 significant bits: 2e-2.
TEST(FullyShard, CompressedGradientsAreCloseToReplicated) {
  for (hvt::Compression c : {hvt::Compression::kFp16, hvt::Compression::kBf16}) {
    SCOPED_TRACE(compression_name(c));
    FullyShardOptions o;
    o.compression = c;
    expect_matches_replicated(o, 1, 3, -1, 2e-2);
  }
}

TEST(FullyShard, MatchesReplicatedAdamKeptUntilBackward) {
  FullyShardOptions o;
  o.reshard_after_forward = false;
  expect_matches_replicated(o, 1, 4);
}

TEST(FullyShard, TwoBackwardPassesPerStep) {
  for (bool reshard : {true, false}) {
    FullyShardOptions o;
    o.reshard_after_forward = reshard;
    expect_matches_replicated(o, 2, 3);
  }
}

TEST(FullyShard, UnitUnusedOnOneRankAndTinyInflightBound) {
  FullyShardOptions o;
  o.max_inflight_bytes = 0;  // every gradient waits (giving way) for the oldest
  expect_matches_replicated(o, 1, 3, size() - 1);
}

TEST(FullyShard, ForwardGathersAndReshards) {
  FullyShardOptions o;
  o.reshard_after_forward = false;
  Net net = make_net();
  Net ref = make_net();
  auto fc1 = hvt::fully_shard(net->fc1, o);
  EXPECT_EQ(net->fc1->weight.numel(), 0);
  const int64_t chunk = (35 + size() - 1) / size();
  EXPECT_EQ(fc1->shards()[0].numel(), std::max<int64_t>(0, std::min<int64_t>(chunk, 35 - rank() * chunk)));
  fc1->unshard();
  EXPECT_TRUE(torch::equal(net->fc1->weight, ref->fc1->weight));
  fc1->reshard();
  EXPECT_EQ(net->fc1->weight.numel(), 0);
  {
    torch::NoGradGuard no_grad;  // no backward to come: resharded at once
    torch::Tensor y = fc1->forward(torch::ones({2, 5}, torch::kDouble));
    EXPECT_TRUE(torch::allclose(y, ref->fc1->forward(torch::ones({2, 5}, torch::kDouble))));
  }
  EXPECT_EQ(net->fc1->weight.numel(), 0);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const hvt::HorovodError& e) {
    return e.what();
  }
  return "";
}

TEST(FullyShard, LayoutMismatchIsTheSameErrorOnEveryRank) {
  Net net = make_net(rank() == size() - 1 ? 8 : 7);
  const std::string e = error_of([&] { hvt::fully_shard(net->fc1); });
  std::string expected = "parameter 0 ('weight') differs across ranks: shape [7, 5] Double on ";
  EXPECT_NE(e.find(expected), std::string::npos) << e;
  EXPECT_NE(e.find("shape [8, 5] Double on rank " + std::to_string(size() - 1)), std::string::npos) << e;
  at::Tensor bytes = at::empty({static_cast<int64_t>(e.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), e.data(), e.size());
  EXPECT_TRUE(same_on_all_ranks(bytes, "fsdp.layout_error"));
  // Unchanged by the failed call.
  EXPECT_GT(net->fc1->weight.numel(), 0);
}

TEST(FullyShard, FullParametersSavedOnASubsetLoadOnAllRanks) {
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/hvl_fsdp_" +
      std::to_string(hvt::broadcast(torch::tensor({static_cast<int64_t>(getpid())}), 0, "fsdp.dir").item<int64_t>());
  const std::string file = dir + "/full.pt";
  std::vector<int> ranks;
  for (int r = 0; r + 1 < size(); ++r) ranks.push_back(r);
  hvt::ProcessSet set = hvt::add_process_set(ranks);
  torch::OrderedDict<std::string, torch::Tensor> saved;
  if (set.included()) {
    FullyShardOptions o;
    o.process_set = set;
    Net net = make_net();
    auto unit = hvt::fully_shard(net.ptr(), o);  // the whole net, one unit
    torch::optim::Adam opt(unit->shards(), torch::optim::AdamOptions(0.01));
    for (int step = 0; step < 3; ++step) {
      auto [x, y] = batch(set.rank(), step, 0);
      torch::Tensor out = unit->run([&] { return reference_forward(net, x, true); });
      torch::mse_loss(out, y).backward();
      unit->step(opt);
      opt.zero_grad();
    }
    saved = unit->gather_full_parameters();
    if (rank() == 0) {
      std::filesystem::create_directories(dir);
      torch::serialize::OutputArchive archive;
      for (const auto& item : saved) archive.write(item.key(), item.value());
      archive.save_to(file);
    }
  }
  hvt::barrier();

  Net net = make_net();
  auto unit = hvt::fully_shard(net.ptr());
  torch::serialize::InputArchive archive;
  archive.load_from(file);
  torch::OrderedDict<std::string, torch::Tensor> loaded;
  for (const auto& item : make_net()->named_parameters()) {
    torch::Tensor t;
    archive.read(item.key(), t);
    loaded.insert(item.key(), t);
  }
  EXPECT_NE(loaded.size(), 0u);
  unit->load_full(loaded);
  auto back = unit->gather_full_parameters();
  for (const auto& item : loaded) {
    EXPECT_TRUE(torch::equal(back[item.key()], item.value())) << item.key();
    if (set.included()) {
      EXPECT_TRUE(torch::equal(saved[item.key()], item.value())) << item.key();
    }
    EXPECT_FALSE(torch::equal(item.value(), make_net()->named_parameters()[item.key()])) << item.key();
  }
  // Another model's parameters: the error names the parameter.
  Net other_net = make_net(8);
  torch::OrderedDict<std::string, torch::Tensor> other;
  for (const auto& item : other_net->named_parameters()) other.insert(item.key(), item.value().detach().clone());
  const std::string e = error_of([&] { unit->load_full(other); });
  EXPECT_NE(e.find("'fc1.weight' has shape [8, 5], the parameter [7, 5]"), std::string::npos) << e;
  hvt::barrier();
  if (rank() == 0) std::filesystem::remove_all(dir);
  hvt::remove_process_set(set);
}

}  // namespace
