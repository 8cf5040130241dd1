// horovodlite::torch::elastic outside an elastic job (under mpirun): a
// TorchState's commit/restore round trip for each built-in optimizer (and
// LBFGS), sync from rank 0, the
// host-update check that follows rank 0's view, and run()'s rollback after an
// internal error (the world re-initialized, the state restored and synced).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/elastic.h"
#include "horovodlite/torch/error.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
namespace hvt = horovodlite::torch;
namespace elastic = horovodlite::torch::elastic;
namespace optim = torch::optim;

std::shared_ptr<optim::Optimizer> make_optimizer(const std::string& kind, const std::vector<torch::Tensor>& p) {
  if (kind == "sgd") return std::make_shared<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9));
  if (kind == "adam") return std::make_shared<optim::Adam>(p, optim::AdamOptions(0.01).amsgrad(true));
  if (kind == "adamw") return std::make_shared<optim::AdamW>(p, optim::AdamWOptions(0.01));
  if (kind == "rmsprop")
    return std::make_shared<optim::RMSprop>(p, optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
  if (kind == "adagrad") return std::make_shared<optim::Adagrad>(p, optim::AdagradOptions(0.1));
  return std::make_shared<optim::LBFGS>(p, optim::LBFGSOptions(0.5).max_iter(3));
}

// One deterministic local step (no collectives).
void train_step(torch::nn::Sequential& model, optim::Optimizer& opt, int step) {
  torch::manual_seed(100 + step);
  const torch::Tensor x = torch::randn({8, 4}, torch::kDouble);
  const torch::Tensor y = torch::randn({8, 3}, torch::kDouble);
  auto closure = [&] {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    return loss;
  };
  opt.step(closure);
}

std::vector<torch::Tensor> snapshot(const torch::nn::Sequential& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  for (const auto& b : model->buffers()) out.push_back(b.detach().clone());
  return out;
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << what << " tensor " << i;
}

class ElasticStateTest : public ::testing::TestWithParam<std::string> {};

// restore() brings back the committed model, optimizer state and values: the
// step after a restore equals the step right after the commit, and training
// after a restore does not change the commit.
TEST_P(ElasticStateTest, RestoreReturnsToTheCommit) {
  auto model = make_model(1);
  auto opt = make_optimizer(GetParam(), model->parameters());
  elastic::TorchState state(*model, *opt, {{"step", 0}});
  for (int s = 0; s < 3; ++s) train_step(model, *opt, s);
  state["step"] = 3;
  state.commit();
  const auto committed = snapshot(model);
  train_step(model, *opt, 3);
  const auto after_one = snapshot(model);
  train_step(model, *opt, 4);
  state["step"] = 5;

  state.restore();
  EXPECT_EQ(state["step"], 3);
  expect_equal(snapshot(model), committed, "restored model");
  train_step(model, *opt, 3);
  expect_equal(snapshot(model), after_one, "a step after the restore (optimizer state restored)");
  train_step(model, *opt, 4);
  state.restore();
  expect_equal(snapshot(model), committed, "restored twice (the commit is not aliased)");
  train_step(model, *opt, 3);
  expect_equal(snapshot(model), after_one, "a step after the second restore");
}

// sync() makes every rank's model, optimizer (state and options) and values rank 0's.
TEST_P(ElasticStateTest, SyncMakesEveryRankRankZeros) {
  if (GetParam() == "lbfgs") {
    GTEST_SKIP() << "broadcast_optimizer_state cannot send LibTorch's LBFGS state (its archive holds undefined "
                    "tensors: 'Cannot access storage of UndefinedTensorImpl')";
  }
  auto model = make_model(10 + rank());
  auto opt = make_optimizer(GetParam(), model->parameters());
  for (int s = 0; s <= rank(); ++s) train_step(model, *opt, s + 10 * rank());
  elastic::TorchState state(*model, *opt, {{"epoch", 7 * rank()}});
  std::string object = "object of rank " + std::to_string(rank());
  state.add_object(
      "text", [&] { return object; }, [&](const std::string& s) { object = s; });
  state.sync();
  EXPECT_EQ(state["epoch"], 0);
  EXPECT_EQ(object, "object of rank 0");
  for (const auto& t : snapshot(model)) EXPECT_TRUE(same_on_all_ranks(t, "sync.model"));
  train_step(model, *opt, 99);  // the same optimizer state everywhere gives the same step
  for (const auto& t : snapshot(model)) EXPECT_TRUE(same_on_all_ranks(t, "sync.step"));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ElasticStateTest,
                         ::testing::Values("sgd", "adam", "adamw", "rmsprop", "adagrad", "lbfgs"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// A host update seen by rank 0 interrupts every rank at the same commit (only
// removed: skip_sync); one seen by another rank only interrupts nobody.
TEST(ElasticHostUpdates, RankZerosViewDecides) {
  auto model = make_model(3);
  elastic::TorchState state(*model, nullptr);
  if (rank() == 0) state.on_hosts_updated(5, elastic::kRemoved);
  bool interrupted = false, skip_sync = false;
  try {
    state.commit();
  } catch (const elastic::HostsUpdatedInterrupt& e) {
    interrupted = true;
    skip_sync = e.skip_sync();
  }
  EXPECT_TRUE(interrupted);
  EXPECT_TRUE(skip_sync);
  EXPECT_EQ(state.last_updated_timestamp(), 5);
  if (rank() == 0) state.on_hosts_updated(4, elastic::kAdded);  // older: not news
  if (rank() != 0) state.on_hosts_updated(9, elastic::kAdded);  // rank 0 did not see it
  EXPECT_NO_THROW(state.commit());
  if (rank() == 0) state.on_hosts_updated(12, elastic::kAdded);
  try {
    state.commit();
    ADD_FAILURE() << "no HostsUpdatedInterrupt";
  } catch (const elastic::HostsUpdatedInterrupt& e) {
    EXPECT_FALSE(e.skip_sync());
  }
}

TEST(ElasticRun, InternalErrorsOnly) {
  using horovodlite::StatusCode;
  EXPECT_TRUE(elastic::is_internal_error(hvt::HorovodError(StatusCode::kAborted, "peer lost")));
  EXPECT_TRUE(elastic::is_internal_error(hvt::HorovodError(StatusCode::kInternal, "transport")));
  EXPECT_FALSE(elastic::is_internal_error(hvt::HorovodError(StatusCode::kInvalidArgument, "bad dtype")));
  EXPECT_FALSE(elastic::is_internal_error(hvt::HorovodError(StatusCode::kDuplicateName, "twice")));
  EXPECT_FALSE(elastic::is_internal_error(std::runtime_error("user")));
}

// An internal error inside fn: the state rolls back to the last commit, the
// world is re-initialized (no driver outside an elastic job), the reset
// callbacks run, the state is synced and fn runs again. Other exceptions leave run().
TEST(ElasticRun, RollsBackAndRetriesAfterAnInternalError) {
  auto model = make_model(20);
  auto opt = make_optimizer("sgd", model->parameters());
  elastic::TorchState state(*model, *opt, {{"step", 0}});
  int resets = 0, calls = 0;
  state.register_reset_callbacks({[&] { ++resets; }});
  elastic::run(state, [&] {
    ++calls;
    while (state["step"] < 6) {
      if (calls == 1 && state["step"] == 4) {
        train_step(model, *opt, 1000);  // uncommitted work, then the failure
        state["step"] = 99;
        throw hvt::HorovodError(horovodlite::StatusCode::kAborted, "a peer failed (simulated)");
      }
      train_step(model, *opt, static_cast<int>(state["step"]));
      state["step"] += 1;
      torch::NoGradGuard no_grad;
      hvt::AllreduceOptions sum;
      sum.op = horovodlite::ReduceOp::kSum;
      model->parameters()[0].add_(hvt::allreduce(torch::ones({1}, torch::kDouble), "run.ones", sum));
      state.commit();
    }
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(resets, 1);
  EXPECT_EQ(state["step"], 6);
  EXPECT_TRUE(hvt::is_initialized());
  for (const auto& t : snapshot(model)) EXPECT_TRUE(same_on_all_ranks(t, "run.model"));

  // The same steps without the failure give the same model.
  auto reference = make_model(20);
  auto ref_opt = make_optimizer("sgd", reference->parameters());
  for (int s = 0; s < 6; ++s) {
    train_step(reference, *ref_opt, s);
    torch::NoGradGuard no_grad;
    reference->parameters()[0].add_(static_cast<double>(size()));
  }
  expect_equal(snapshot(model), snapshot(reference), "after the rollback");

  EXPECT_THROW(elastic::run(state, [] { throw std::runtime_error("user error"); }), std::runtime_error);
}

}  // namespace
