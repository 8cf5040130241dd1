// broadcast_parameters / broadcast_optimizer_state / broadcast_bytes leave every
// rank identical to root, from divergent starting points (including a rank whose
// optimizer has no state yet).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/error.h"
#include "horovodlite/torch/optimizer.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
namespace hvt = horovodlite::torch;
namespace optim = torch::optim;

constexpr int kEmptyRank = 1;  // this rank's optimizer never steps before the broadcast

using Factory = std::function<std::shared_ptr<optim::Optimizer>(const std::vector<torch::Tensor>&, int r)>;

struct Kind {
  std::string name;
  Factory make;
};

std::vector<Kind> kinds() {
  return {
      {"sgd",
       [](const std::vector<torch::Tensor>& p, int r) {
         return std::make_shared<optim::SGD>(
             p, optim::SGDOptions(0.1 * (r + 1)).momentum(0.5 + 0.1 * r).weight_decay(0.01 * r).nesterov(r % 2 == 0));
       }},
      {"adam",
       [](const std::vector<torch::Tensor>& p, int r) {
         return std::make_shared<optim::Adam>(p, optim::AdamOptions(0.01 * (r + 1))
                                                     .betas(std::make_tuple(0.9 - 0.01 * r, 0.999))
                                                     .weight_decay(0.001 * r)
                                                     .amsgrad(r == 0));
       }},
      {"adamw",
       [](const std::vector<torch::Tensor>& p, int r) {
         return std::make_shared<optim::AdamW>(
             p, optim::AdamWOptions(0.02 * (r + 1)).eps(1e-8 * (r + 1)).weight_decay(0.01 * (r + 1)).amsgrad(true));
       }},
      {"rmsprop",
       [](const std::vector<torch::Tensor>& p, int r) {
         return std::make_shared<optim::RMSprop>(
             p, optim::RMSpropOptions(0.01 * (r + 1)).alpha(0.9 + 0.01 * r).momentum(0.1 * r).centered(r % 2 == 1));
       }},
      {"adagrad",
       [](const std::vector<torch::Tensor>& p, int r) {
         return std::make_shared<optim::Adagrad>(
             p, optim::AdagradOptions(0.1 * (r + 1)).lr_decay(0.01 * r).initial_accumulator_value(0.1 * r));
       }},
  };
}

torch::Tensor defined_or_marker(const torch::Tensor& t) { return t.defined() ? t : at::full({1}, -1, at::kLong); }

// Every option and state value of `opt`, flattened into tensors for comparison.
std::vector<torch::Tensor> signature(const optim::Optimizer& opt) {
  std::vector<double> options;
  const optim::OptimizerOptions& o = opt.param_groups().at(0).options();
  if (auto* s = dynamic_cast<const optim::SGDOptions*>(&o)) {
    options = {s->lr(), s->momentum(), s->dampening(), s->weight_decay(), double(s->nesterov())};
  } else if (auto* a = dynamic_cast<const optim::AdamOptions*>(&o)) {
    options = {a->lr(),  std::get<0>(a->betas()), std::get<1>(a->betas()),
               a->eps(), a->weight_decay(),       double(a->amsgrad())};
  } else if (auto* w = dynamic_cast<const optim::AdamWOptions*>(&o)) {
    options = {w->lr(),  std::get<0>(w->betas()), std::get<1>(w->betas()),
               w->eps(), w->weight_decay(),       double(w->amsgrad())};
  } else if (auto* m = dynamic_cast<const optim::RMSpropOptions*>(&o)) {
    options = {m->lr(), m->alpha(), m->eps(), m->weight_decay(), m->momentum(), double(m->centered())};
  } else if (auto* g = dynamic_cast<const optim::AdagradOptions*>(&o)) {
    options = {g->lr(), g->lr_decay(), g->weight_decay(), g->initial_accumulator_value(), g->eps()};
  }
  std::vector<torch::Tensor> out = {at::tensor(options, at::kDouble),
                                    at::full({1}, static_cast<int64_t>(opt.state().size()), at::kLong)};
  auto step = [](int64_t s) { return at::full({1}, s, at::kLong); };
  for (const auto& p : opt.param_groups().at(0).params()) {
    auto it = opt.state().find(horovodlite::torch::compat::optimizer_state_key(p));
    if (it == opt.state().end()) {
      out.push_back(at::full({1}, -2, at::kLong));
      continue;
    }
    const optim::OptimizerParamState* st = it->second.get();
    if (auto* s = dynamic_cast<const optim::SGDParamState*>(st)) {
      out.push_back(defined_or_marker(s->momentum_buffer()));
    } else if (auto* a = dynamic_cast<const optim::AdamParamState*>(st)) {
      out.insert(out.end(), {step(a->step()), defined_or_marker(a->exp_avg()), defined_or_marker(a->exp_avg_sq()),
                             defined_or_marker(a->max_exp_avg_sq())});
    } else if (auto* w = dynamic_cast<const optim::AdamWParamState*>(st)) {
      out.insert(out.end(), {step(w->step()), defined_or_marker(w->exp_avg()), defined_or_marker(w->exp_avg_sq()),
                             defined_or_marker(w->max_exp_avg_sq())});
    } else if (auto* m = dynamic_cast<const optim::RMSpropParamState*>(st)) {
      out.insert(out.end(), {step(m->step()), defined_or_marker(m->square_avg()),
                             defined_or_marker(m->momentum_buffer()), defined_or_marker(m->grad_avg())});
    } else if (auto* g = dynamic_cast<const optim::AdagradParamState*>(st)) {
      out.insert(out.end(), {step(g->step()), defined_or_marker(g->sum())});
    } else {
      ADD_FAILURE() << "unknown state type";
    }
  }
  return out;
}

bool all_same(const std::vector<torch::Tensor>& tensors, const std::string& name) {
  // Ranks may hold different numbers of state tensors: compare the counts first.
  if (!same_on_all_ranks(at::full({1}, static_cast<int64_t>(tensors.size()), at::kLong), name + ".count")) {
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < tensors.size(); ++i) ok = same_on_all_ranks(tensors[i], name + "." + std::to_string(i)) && ok;
  return ok;
}

// Random gradients, seeded so that they are the same on every rank when `seed` is.
void step_with_random_grads(torch::nn::Sequential& model, optim::Optimizer& opt, int seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : model->parameters()) p.mutable_grad() = at::randn(p.sizes(), gen, at::kDouble);
  opt.step();
}

TEST(BroadcastState, EveryOptimizerFromDivergentStates) {
  for (const Kind& kind : kinds()) {
    for (int root : {0, size() - 1}) {
      const std::string tag = kind.name + ".root" + std::to_string(root);
      torch::nn::Sequential model = make_model(100 + rank());
      auto opt = kind.make(model->parameters(), rank());
      // A fresh optimizer has no state yet (Adagrad creates its state, from its
      // rank-dependent options, in its constructor).
      if (rank() != kEmptyRank) {
        for (int s = 0; s <= rank(); ++s) step_with_random_grads(model, *opt, 10 * rank() + s);
      }
      const std::vector<torch::Tensor> root_signature = signature(*opt);
      const bool differ_before = !all_same(root_signature, tag + ".before");
      EXPECT_TRUE(differ_before || size() == 1) << tag << ": the starting states should differ";

      hvt::broadcast_parameters(*model, root);
      hvt::broadcast_optimizer_state(*opt, root);

      for (const auto& item : model->named_parameters()) {
        EXPECT_TRUE(same_on_all_ranks(item.value(), tag + ".p." + item.key())) << tag << " " << item.key();
      }
      for (const auto& item : model->named_buffers()) {
        EXPECT_TRUE(same_on_all_ranks(item.value(), tag + ".b." + item.key())) << tag << " " << item.key();
      }
      EXPECT_TRUE(all_same(signature(*opt), tag + ".after")) << tag;
      EXPECT_DOUBLE_EQ(opt->param_groups()[0].options().get_lr(),
                       kind.make({torch::zeros({1})}, root)->defaults().get_lr())
          << tag << ": lr must be root's";
      if (root == kEmptyRank && kind.name != "adagrad") {
        EXPECT_EQ(opt->state().size(), 0u) << tag << ": root had no state";
      }

      // Identical steps from here on keep the ranks identical.
      step_with_random_grads(model, *opt, 999);
      step_with_random_grads(model, *opt, 1000);
      for (const auto& item : model->named_parameters()) {
        EXPECT_TRUE(same_on_all_ranks(item.value(), tag + ".step." + item.key())) << tag << " " << item.key();
      }
      EXPECT_TRUE(all_same(signature(*opt), tag + ".after_step")) << tag;
    }
  }
}

TEST(BroadcastState, ThroughDistributedOptimizer) {
  torch::nn::Sequential model = make_model(7 + rank());
  hvt::DistributedOptimizer opt(
      std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions(1e-3 * (rank() + 1))),
      model->named_parameters());
  if (rank() != kEmptyRank) step_with_random_grads(model, opt.optimizer(), rank());
  hvt::broadcast_optimizer_state(opt, 0);
  EXPECT_TRUE(all_same(signature(opt.optimizer()), "dopt"));
}

TEST(BroadcastState, NamedTensorsAndBytes) {
  hvt::NamedTensors tensors = {{"a", at::full({3}, double(rank()), at::kDouble)},
                               {"b", at::full({2, 2}, rank(), at::kInt).t()},
                               {"undefined", torch::Tensor()}};
  hvt::broadcast_parameters(tensors, size() - 1);
  EXPECT_TRUE(at::equal(tensors[0].second, at::full({3}, double(size() - 1), at::kDouble)));
  EXPECT_TRUE(at::equal(tensors[1].second, at::full({2, 2}, size() - 1, at::kInt)));
  hvt::NamedTensors dup = {{"x", at::ones({1})}, {"x", at::ones({1})}};
  EXPECT_THROW(hvt::broadcast_parameters(dup, 0), hvt::HorovodError);

  const std::string root_bytes(1000 + 37, '\0');
  std::string mine = rank() == 0 ? std::string("hello\0world", 11) + root_bytes : std::string(rank(), 'x');
  std::string got = hvt::broadcast_bytes(mine, 0);
  EXPECT_EQ(got, std::string("hello\0world", 11) + root_bytes);
  EXPECT_EQ(hvt::broadcast_bytes(rank() == 1 ? "" : "not root", 1 % size(), "empty"), size() == 1 ? "not root" : "");
}

}  // namespace
