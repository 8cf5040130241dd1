// ZeroRedundancyOptimizer (stages 1 and 2) against the replicated
// DistributedOptimizer on the same model and data: parameters equal after
// several steps (SGD with momentum, Adam, AdamW, RMSprop, Adagrad), identical on
// every rank; backward_passes_per_step 2; a parameter unused on one rank;
// clip_grad_norm equal to the replicated norm; fp16 compression; consolidated
// checkpoints equal to the replicated optimizer's state and resuming from either;
// a sharded checkpoint saved on a process set of size - 1 ranks and loaded on
// all; and the bad inputs (layouts that differ across ranks, non-contiguous or
// sparse parameters, the state of another model).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/compat.h"
#include "horovodlite/torch/error.h"
#include "horovodlite/torch/optimizer.h"
#include "horovodlite/torch/zero.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
using hvt::DistributedOptimizer;
using hvt::ZeroOptions;
using hvt::ZeroRedundancyOptimizer;
using ParamGroups = ZeroRedundancyOptimizer::ParamGroups;

// Odd sizes (padding at 2 and 3 ranks), a 0-dim parameter (fewer elements than
// ranks) and a branch that can be left unused.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int64_t hidden = 7) {
    fc1 = register_module("fc1", torch::nn::Linear(5, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 3));
    side = register_module("side", torch::nn::Linear(5, 3));
    scale = register_parameter("scale", torch::ones({}));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_side = true) {
    torch::Tensor y = fc2(torch::tanh(fc1(x))) * scale;
    return use_side ? y + side(x) : y;
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

// A net with the parameters of `from`.
Net copy_net(Net& from) {
  Net net = make_net();
  torch::NoGradGuard no_grad;
  auto dst = net->parameters();
  auto src = from->parameters();
  for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
  return net;
}

std::pair<torch::Tensor, torch::Tensor> batch(int r, int step, int micro) {
  auto gen = at::detail::createCPUGenerator(700 + 100 * r + 10 * step + micro);
  return {torch::randn({4, 5}, gen, torch::kDouble), torch::randn({4, 3}, gen, torch::kDouble)};
}

void backward(Net& net, int r, int step, int micro, bool use_side = true) {
  auto [x, y] = batch(r, step, micro);
  torch::mse_loss(net->forward(x, use_side), y).backward();
}

enum class Kind { kSGD, kAdam, kAdamW, kRMSprop, kAdagrad };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kSGD:
      return "SGD";
    case Kind::kAdam:
      return "Adam";
    case Kind::kAdamW:
      return "AdamW";
    case Kind::kRMSprop:
      return "RMSprop";
    case Kind::kAdagrad:
      return "Adagrad";
  }
  return "?";
}

std::shared_ptr<torch::optim::Optimizer> make_opt(Kind k, ParamGroups groups) {
  namespace optim = torch::optim;
  switch (k) {
    case Kind::kSGD:
      return std::make_shared<optim::SGD>(std::move(groups), optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
    case Kind::kAdam:
      return std::make_shared<optim::Adam>(std::move(groups), optim::AdamOptions(0.01).weight_decay(0.01));
    case Kind::kAdamW:
      return std::make_shared<optim::AdamW>(std::move(groups), optim::AdamWOptions(0.01).amsgrad(true));
    case Kind::kRMSprop:
      return std::make_shared<optim::RMSprop>(std::move(groups),
                                              optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
    case Kind::kAdagrad:
      return std::make_shared<optim::Adagrad>(std::move(groups), optim::AdagradOptions(0.05));
  }
  return nullptr;
}

ZeroRedundancyOptimizer::MakeOptimizer maker(Kind k) {
  return [k](ParamGroups groups) { return make_opt(k, std::move(groups)); };
}

// The same model twice: one stepped by a ZeroRedundancyOptimizer, one by the
// replicated DistributedOptimizer.
struct Pair {
  Net zero_net = make_net();
  Net ref_net = make_net();
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  std::unique_ptr<DistributedOptimizer> ref;
  int passes = 1;

  Pair(Kind k, const ZeroOptions& options, hvt::Compression ref_compression = hvt::Compression::kNone) {
    zero = std::make_unique<ZeroRedundancyOptimizer>(zero_net->named_parameters(), maker(k), options);
    hvt::DistributedOptimizerOptions d;
    d.backward_passes_per_step = options.backward_passes_per_step;
    d.compression = ref_compression;
    d.op = options.op;
    ParamGroups groups;
    groups.emplace_back(ref_net->parameters());
    ref = std::make_unique<DistributedOptimizer>(make_opt(k, std::move(groups)), ref_net->named_parameters(), d);
    passes = options.backward_passes_per_step;
  }

  // `unused_on_last`: the last rank never uses the side branch.
  void train(int steps, int first = 0, bool unused_on_last = false) {
    const bool use_side = !(unused_on_last && rank() == size() - 1);
    for (int step = first; step < first + steps; ++step) {
      for (int m = 0; m < passes; ++m) {
        backward(zero_net, rank(), step, m, use_side);
        backward(ref_net, rank(), step, m, use_side);
      }
      zero->step();
      ref->step();
      zero->zero_grad();
      ref->zero_grad();
    }
  }
};

void expect_close(Net& got, Net& want, double rtol = 1e-9, double atol = 1e-12) {
  auto g = got->named_parameters();
  auto w = want->named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_TRUE(torch::allclose(g[i].value(), w[i].value(), rtol, atol))
        << g[i].key() << ": max difference " << (g[i].value() - w[i].value()).abs().max().item<double>();
  }
}

void expect_same_on_all_ranks(Net& net, const std::string& what) {
  for (const auto& p : net->named_parameters()) EXPECT_TRUE(same_on_all_ranks(p.value(), what + "." + p.key()));
}

// The message of the HorovodError `fn` throws ("" if none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const hvt::HorovodError& e) {
    return e.what();
  }
  return "";
}

bool same_text_on_all_ranks(const std::string& text, const std::string& name) {
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  return same_on_all_ranks(bytes, name);
}

// A fresh directory, the same on every rank (removed by the destructor).
struct SharedDir {
  std::string path;
  explicit SharedDir(const std::string& name) {
    std::string mine;
    if (rank() == 0) {
      char tmpl[] = "/tmp/hvl_test_zero_XXXXXX";
      mine = mkdtemp(tmpl);
    }
    path = hvt::broadcast_bytes(mine, 0, "test_zero.dir." + name);
  }
  ~SharedDir() {
    hvt::barrier();
    if (rank() == 0) std::filesystem::remove_all(path);
  }
};

ZeroOptions zero_options(int stage, int passes = 1) {
  ZeroOptions o;
  o.stage = stage;
  o.backward_passes_per_step = passes;
  return o;
}

}  // namespace

TEST(ZeroRedundancyOptimizer, MatchesTheReplicatedOptimizer) {
  for (Kind k : {Kind::kSGD, Kind::kAdam}) {
    for (int stage : {1, 2}) {
      SCOPED_TRACE(std::string(kind_name(k)) + " stage " + std::to_string(stage));
      Pair s(k, zero_options(stage));
      s.train(4);
      expect_close(s.zero_net, s.ref_net);
      expect_same_on_all_ranks(s.zero_net, "match");
    }
  }
  for (Kind k : {Kind::kAdamW, Kind::kRMSprop, Kind::kAdagrad}) {
    SCOPED_TRACE(kind_name(k));
    Pair s(k, zero_options(2));
    s.train(3);
    expect_close(s.zero_net, s.ref_net);
  }
}

TEST(ZeroRedundancyOptimizer, StageTwoDropsGradientsStageOneKeepsThem) {
  for (int stage : {1, 2}) {
    Pair s(Kind::kAdam, zero_options(stage));
    backward(s.zero_net, rank(), 0, 0);
    for (const auto& p : s.zero_net->parameters()) EXPECT_EQ(p.grad().defined(), stage == 1) << "stage " << stage;
    s.zero->synchronize();
    // This rank's chunk of the averaged gradient, padded.
    backward(s.ref_net, rank(), 0, 0);
    s.ref->synchronize();
    auto params = s.ref_net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      at::Tensor shard = s.zero->shard(i);
      const int64_t numel = params[i].numel(), chunk = shard.numel();
      const int64_t start = std::min<int64_t>(rank() * chunk, numel), stop = std::min<int64_t>(start + chunk, numel);
      ASSERT_TRUE(shard.grad().defined());
      EXPECT_TRUE(torch::allclose(shard.grad().narrow(0, 0, stop - start),
                                  params[i].grad().reshape({-1}).narrow(0, start, stop - start), 1e-12, 1e-14));
      EXPECT_EQ(shard.grad().narrow(0, stop - start, chunk - (stop - start)).abs().sum().item<double>(), 0.0);
    }
    s.zero->step();
    s.ref->step();
    expect_close(s.zero_net, s.ref_net);
  }
}

TEST(ZeroRedundancyOptimizer, TwoBackwardPassesPerStep) {
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    Pair s(Kind::kAdam, zero_options(stage, 2));
    s.train(3);
    expect_close(s.zero_net, s.ref_net);
    expect_same_on_all_ranks(s.zero_net, "bpps");
  }
}

TEST(ZeroRedundancyOptimizer, BoundedGradientsInFlight) {
  for (int64_t bound : {int64_t{0}, int64_t{200}}) {  // every hook waits; some hooks wait
    SCOPED_TRACE("max_inflight_bytes " + std::to_string(bound));
    ZeroOptions o = zero_options(2);
    o.max_inflight_bytes = bound;
    Pair s(Kind::kAdam, o);
    s.train(3);
    expect_close(s.zero_net, s.ref_net);
  }
}

TEST(ZeroRedundancyOptimizer, ParameterUnusedOnOneRankCountsAsZeroGradient) {
  for (Kind k : {Kind::kSGD, Kind::kAdam}) {
    for (int stage : {1, 2}) {
      SCOPED_TRACE(std::string(kind_name(k)) + " stage " + std::to_string(stage));
      Pair s(k, zero_options(stage));
      s.train(3, 0, /*unused_on_last=*/true);
      expect_close(s.zero_net, s.ref_net);
      expect_same_on_all_ranks(s.zero_net, "unused");
    }
  }
}

TEST(ZeroRedundancyOptimizer, ClipGradNormEqualsTheReplicatedNorm) {
  for (int stage : {1, 2}) {
    for (double p : {2.0, 1.0, std::numeric_limits<double>::infinity()}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " norm " + std::to_string(p));
      Pair s(Kind::kAdam, zero_options(stage));
      for (int step = 0; step < 3; ++step) {
        backward(s.zero_net, rank(), step, 0);
        backward(s.ref_net, rank(), step, 0);
        const double got = s.zero->clip_grad_norm(0.05, p);
        s.ref->synchronize();
        const double want = torch::nn::utils::clip_grad_norm_(s.ref_net->parameters(), 0.05, p);
        EXPECT_GT(want, 0.05);  // it clips
        EXPECT_NEAR(got, want, 1e-10 * want);
        s.zero->step();
        s.ref->step();
        s.zero->zero_grad();
        s.ref->zero_grad();
      }
      expect_close(s.zero_net, s.ref_net);
    }
  }
}

TEST(ZeroRedundancyOptimizer, Fp16CompressionAndSum) {
  ZeroOptions o = zero_options(2);
  o.compression = hvt::Compression::kFp16;
  Pair s(Kind::kSGD, o, hvt::Compression::kFp16);
  s.train(3);
  expect_close(s.zero_net, s.ref_net, 1e-3, 1e-3);
  expect_same_on_all_ranks(s.zero_net, "fp16");

  ZeroOptions sum = zero_options(1);
  sum.op = hvt::Sum;
  Pair t(Kind::kAdam, sum);
  t.train(3);
  expect_close(t.zero_net, t.ref_net);
}

// bf16: the reducescatter in bfloat16 against DistributedOptimizer's bf16
// allreduce (both 8 significant bits, rounded at different points): 2e-2.
TEST(ZeroRedundancyOptimizer, Bf16Compression) {
  for (int stage : {1, 2}) {
    ZeroOptions o = zero_options(stage);
    o.compression = hvt::Compression::kBf16;
    Pair s(Kind::kSGD, o, hvt::Compression::kBf16);
    s.train(3);
    expect_close(s.zero_net, s.ref_net, 2e-2, 2e-2);
    expect_same_on_all_ranks(s.zero_net, "bf16." + std::to_string(stage));
  }
}

TEST(ZeroRedundancyOptimizer, ParamGroupsKeepTheirOptions) {
  Net net = make_net(), ref_net = make_net();
  auto groups_of = [](Net& n) {
    ParamGroups g;
    g.emplace_back(n->fc1->parameters());
    std::vector<torch::Tensor> rest = n->fc2->parameters();
    for (const auto& t : n->side->parameters()) rest.push_back(t);
    rest.push_back(n->scale);
    g.emplace_back(rest, std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(0.002)));
    return g;
  };
  ZeroRedundancyOptimizer zero(groups_of(net), maker(Kind::kAdam), zero_options(2));
  ASSERT_EQ(zero.optimizer().param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(zero.optimizer().param_groups()[0].options().get_lr(), 0.01);
  EXPECT_DOUBLE_EQ(zero.optimizer().param_groups()[1].options().get_lr(), 0.002);
  DistributedOptimizer ref(make_opt(Kind::kAdam, groups_of(ref_net)), ref_net->named_parameters());
  for (int step = 0; step < 3; ++step) {
    if (step == 2) {  // an lr schedule: change the wrapped optimizer's options
      zero.optimizer().param_groups()[0].options().set_lr(0.03);
      ref.optimizer().param_groups()[0].options().set_lr(0.03);
    }
    backward(net, rank(), step, 0);
    backward(ref_net, rank(), step, 0);
    zero.step();
    ref.step();
    zero.zero_grad();
    ref.zero_grad();
  }
  expect_close(net, ref_net);
}

TEST(ZeroRedundancyOptimizer, ConsolidatedCheckpointEqualsTheReplicatedStateAndResumes) {
  SharedDir dir("consolidated");
  const std::string zero_file = dir.path + "/zero.pt", ref_file = dir.path + "/ref.pt";
  const int to = size() - 1;
  Pair s(Kind::kAdam, zero_options(2));
  s.train(3);
  EXPECT_NE(error_of([&] { s.zero->save(zero_file); }).find("has not been consolidated"), std::string::npos);
  s.zero->consolidate_state_dict(to);
  if (rank() == to) {
    s.zero->save(zero_file);
  } else {
    EXPECT_NE(error_of([&] { s.zero->save(zero_file); }).find("consolidated on rank " + std::to_string(to)),
              std::string::npos);
  }
  if (rank() == 0) torch::save(s.ref->optimizer(), ref_file);
  hvt::barrier();

  if (rank() == to) {
    // The file is a plain Adam's over the full parameters: equal to the replicated state.
    std::vector<torch::Tensor> clones;
    for (const auto& p : s.ref_net->parameters()) clones.push_back(p.detach().clone());
    torch::optim::Adam plain(clones, torch::optim::AdamOptions(1.0));
    torch::load(plain, zero_file);
    // The options as torch::load restores them from torch::save's own file
    // (LibTorch 1.13 keeps the optimizer's: lr stays 1.0 there).
    std::vector<torch::Tensor> clones2;
    for (const auto& p : s.ref_net->parameters()) clones2.push_back(p.detach().clone());
    torch::optim::Adam plain_ref(clones2, torch::optim::AdamOptions(1.0));
    torch::load(plain_ref, ref_file);
    EXPECT_DOUBLE_EQ(plain.param_groups()[0].options().get_lr(), plain_ref.param_groups()[0].options().get_lr());
    auto refs = s.ref_net->parameters();
    for (size_t i = 0; i < refs.size(); ++i) {
      using horovodlite::torch::compat::optimizer_state_key;
      auto& got = static_cast<torch::optim::AdamParamState&>(*plain.state().at(optimizer_state_key(clones[i])));
      auto& want =
          static_cast<torch::optim::AdamParamState&>(*s.ref->optimizer().state().at(optimizer_state_key(refs[i])));
      EXPECT_EQ(got.step(), want.step());
      EXPECT_EQ(got.exp_avg().sizes(), refs[i].sizes());
      EXPECT_TRUE(torch::allclose(got.exp_avg(), want.exp_avg(), 1e-9, 1e-14)) << i;
      EXPECT_TRUE(torch::allclose(got.exp_avg_sq(), want.exp_avg_sq(), 1e-9, 1e-16)) << i;
    }
  }

  // Resume from either file (on every rank) and go on with the replicated optimizer.
  Net from_zero = copy_net(s.ref_net), from_ref = copy_net(s.ref_net);
  ZeroRedundancyOptimizer za(from_zero->named_parameters(), maker(Kind::kAdam), zero_options(2));
  ZeroRedundancyOptimizer zb(from_ref->named_parameters(), maker(Kind::kAdam), zero_options(1));
  za.load(zero_file);
  zb.load(ref_file);
  for (int step = 3; step < 5; ++step) {
    backward(from_zero, rank(), step, 0);
    backward(from_ref, rank(), step, 0);
    backward(s.ref_net, rank(), step, 0);
    backward(s.zero_net, rank(), step, 0);
    za.step();
    zb.step();
    s.ref->step();
    s.zero->step();
    za.zero_grad();
    zb.zero_grad();
    s.ref->zero_grad();
    s.zero->zero_grad();
  }
  expect_close(from_zero, s.ref_net);
  expect_close(from_ref, s.ref_net);
  expect_close(s.zero_net, s.ref_net);
  if (rank() == to) {
    EXPECT_NE(error_of([&] { s.zero->save(zero_file); }).find("2 step(s) old"), std::string::npos);
  }
}

TEST(ZeroRedundancyOptimizer, ShardedCheckpointSavedOnASubsetLoadsOnAllRanks) {
  SharedDir dir("sharded");
  const std::string sharded = dir.path + "/sharded", full_file = dir.path + "/subset.pt";
  std::vector<int> ranks;
  for (int r = 1; r < size(); ++r) ranks.push_back(r);
  hvt::ProcessSet set = hvt::add_process_set(ranks);
  Net trained = make_net();
  if (set.included()) {
    ZeroOptions o = zero_options(2);
    o.process_set = set;
    ZeroRedundancyOptimizer sub(trained->named_parameters(), maker(Kind::kAdam), o);
    for (int step = 0; step < 3; ++step) {
      backward(trained, set.rank(), step, 0);
      sub.step();
      sub.zero_grad();
    }
    sub.save_sharded(sharded);
    sub.consolidate_state_dict(ranks[0]);
    if (rank() == ranks[0]) sub.save(full_file);
  }
  hvt::barrier();
  hvt::broadcast_parameters(*trained, 1);

  // Loaded on every rank, from the sharded files and from the consolidated one.
  Net a = copy_net(trained), b = copy_net(trained);
  ZeroRedundancyOptimizer za(a->named_parameters(), maker(Kind::kAdam), zero_options(2));
  ZeroRedundancyOptimizer zb(b->named_parameters(), maker(Kind::kAdam), zero_options(2));
  za.load_sharded(sharded);
  zb.load(full_file);
  const size_t count = a->parameters().size();
  std::vector<int64_t> pa_numel;
  for (const auto& p : a->parameters()) pa_numel.push_back(p.numel());
  for (size_t i = 0; i < count; ++i) {
    auto& sa = static_cast<torch::optim::AdamParamState&>(
        *za.optimizer().state().at(hvt::compat::optimizer_state_key(za.shard(i))));
    auto& sb = static_cast<torch::optim::AdamParamState&>(
        *zb.optimizer().state().at(hvt::compat::optimizer_state_key(zb.shard(i))));
    EXPECT_EQ(sa.step(), 3);
    EXPECT_EQ(sa.step(), sb.step());
    EXPECT_TRUE(torch::equal(sa.exp_avg(), sb.exp_avg())) << i;
    EXPECT_TRUE(torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq())) << i;
    if (rank() * sb.exp_avg_sq().numel() < pa_numel[i]) {  // this rank's range is not all padding
      EXPECT_GT(sb.exp_avg_sq().abs().sum().item<double>(), 0.0) << i;
    }
  }
  for (int step = 3; step < 5; ++step) {
    backward(a, rank(), step, 0);
    backward(b, rank(), step, 0);
    za.step();
    zb.step();
    za.zero_grad();
    zb.zero_grad();
  }
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;

  // Another model's sharded checkpoint: the error names the parameter.
  Net other = make_net(8);
  ZeroRedundancyOptimizer zo(other->named_parameters(), maker(Kind::kAdam), zero_options(2));
  const std::string e = error_of([&] { zo.load_sharded(sharded); });
  EXPECT_NE(e.find("('fc1.weight') has shape [7, 5] in the checkpoint, [8, 5] here"), std::string::npos) << e;
  hvt::remove_process_set(set);
}

TEST(ZeroRedundancyOptimizer, LayoutsThatDifferAcrossRanksFailAlikeOnEveryRank) {
  const int last = size() - 1;
  auto t = [](at::IntArrayRef shape) { return torch::randn(shape, torch::kDouble).requires_grad_(true); };
  {
    hvt::NamedTensors params = {
        {"a", t({4, 5})}, {"b", t(rank() == last ? at::IntArrayRef{4, 6} : at::IntArrayRef{4, 5})}, {"c", t({3})}};
    const std::string e = error_of([&] { ZeroRedundancyOptimizer z(params, maker(Kind::kAdam)); });
    EXPECT_NE(e.find("parameter 1 ('b') differs across ranks: shape [4, 5] Double on rank"), std::string::npos) << e;
    EXPECT_NE(e.find("shape [4, 6] Double on rank " + std::to_string(last)), std::string::npos) << e;
    EXPECT_TRUE(same_text_on_all_ranks(e, "layout.shape"));
  }
  {
    std::vector<torch::Tensor> params = {t({4}), t({2})};
    if (rank() == last) params.push_back(t({3}));
    const std::string e = error_of([&] { ZeroRedundancyOptimizer z(params, maker(Kind::kSGD)); });
    EXPECT_NE(e.find("ranks hold different numbers of parameters"), std::string::npos) << e;
    EXPECT_NE(e.find("3 on rank " + std::to_string(last)), std::string::npos) << e;
    EXPECT_TRUE(same_text_on_all_ranks(e, "layout.count"));
  }
  {
    hvt::NamedTensors params = {{"w", t({3})}, {"wt", torch::randn({4, 3}, torch::kDouble).t().requires_grad_(true)}};
    const std::string e = error_of([&] { ZeroRedundancyOptimizer z(params, maker(Kind::kAdam)); });
    EXPECT_NE(e.find("parameter 1 ('wt') is not contiguous (on rank"), std::string::npos) << e;
    EXPECT_TRUE(same_text_on_all_ranks(e, "layout.contiguous"));
  }
  {
    at::Tensor sparse = torch::sparse_coo_tensor(torch::tensor({0, 1, 1, 0}, torch::kLong).reshape({2, 2}),
                                                 torch::tensor({1.0, 2.0}, torch::kDouble), {2, 2})
                            .requires_grad_(true);
    const std::string e =
        error_of([&] { ZeroRedundancyOptimizer z(std::vector<torch::Tensor>{sparse}, maker(Kind::kAdam)); });
    EXPECT_NE(e.find("parameter 0 is sparse (on rank"), std::string::npos) << e;
    EXPECT_TRUE(same_text_on_all_ranks(e, "layout.sparse"));
  }
}

TEST(ZeroRedundancyOptimizer, BadOptionsAndMisuse) {
  Net net = make_net();
  ZeroOptions three;
  three.stage = 3;
  EXPECT_NE(error_of([&] {
              ZeroRedundancyOptimizer z(net->parameters(), maker(Kind::kAdam), three);
            }).find("stage 3 is not built in C++ yet"),
            std::string::npos);
  ZeroOptions passes;
  passes.backward_passes_per_step = 0;
  EXPECT_NE(error_of([&] {
              ZeroRedundancyOptimizer z(net->parameters(), maker(Kind::kAdam), passes);
            }).find("backward_passes_per_step"),
            std::string::npos);
  auto lbfgs = [](ParamGroups g) { return std::make_shared<torch::optim::LBFGS>(std::move(g)); };
  EXPECT_NE(error_of([&] { ZeroRedundancyOptimizer z(net->parameters(), lbfgs); }).find("LBFGS is not elementwise"),
            std::string::npos);

  ZeroRedundancyOptimizer z(net->named_parameters(), maker(Kind::kAdam));
  backward(net, rank(), 0, 0);
  EXPECT_NE(error_of([&] { z.zero_grad(); }).find("before step() or synchronize()"), std::string::npos);
  EXPECT_ANY_THROW(backward(net, rank(), 0, 1));  // more passes than backward_passes_per_step
  z.synchronize();
  z.zero_grad();
  backward(net, rank(), 1, 0);
  z.step();
  z.zero_grad();
}

TEST(ZeroRedundancyOptimizer, StateOfAnotherModelIsRefused) {
  SharedDir dir("other");
  Net net = make_net();
  ZeroRedundancyOptimizer z(net->named_parameters(), maker(Kind::kAdam));
  backward(net, rank(), 0, 0);
  z.step();
  z.zero_grad();
  auto save_plain = [&](const std::string& name, std::vector<torch::Tensor> params, Kind k) {
    const std::string path = dir.path + "/" + name;
    if (rank() == 0) {
      ParamGroups g;
      g.emplace_back(params);
      auto opt = make_opt(k, std::move(g));
      for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
      opt->step();
      torch::save(*opt, path);
    }
    hvt::barrier();
    return path;
  };
  Net wider = make_net(8);
  std::string e = error_of([&] { z.load(save_plain("wider.pt", wider->parameters(), Kind::kAdam)); });
  EXPECT_NE(e.find("('fc1.weight') has shape [8, 5] in the checkpoint, the parameter [7, 5]"), std::string::npos) << e;
  Net two = make_net();
  e = error_of([&] { z.load(save_plain("two.pt", two->fc1->parameters(), Kind::kAdam)); });
  EXPECT_NE(e.find("param group 0 holds 2 parameter(s) in the checkpoint, 7 here"), std::string::npos) << e;
  Net same = make_net();
  e = error_of([&] { z.load(save_plain("sgd.pt", same->parameters(), Kind::kSGD)); });
  EXPECT_NE(e.find("cannot read the checkpoint as torch::optim::Adam's state"), std::string::npos) << e;
  // Still usable, with its own state.
  backward(net, rank(), 1, 0);
  z.step();
}
