// Data-parallel training with horovodlite and LibTorch:
//
//   mpirun -np 4 ./train --epochs 5 --optimizer adam
//
// Every rank builds the same deterministic synthetic data set (10 classes, each a
// mixture of two Gaussian clusters in 32 dimensions, so that the classes are not
// linearly separable), trains an MLP on its shard (DistributedRandomSampler), and
// averages gradients with a DistributedOptimizer. Rank 0 reports the loss,
// held-out accuracy and throughput per epoch, and can save a checkpoint that a
// later run resumes from (--save / --resume).
#include <cxxopts.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "horovodlite/torch.h"

namespace hvd = horovodlite::torch;

namespace {

constexpr int64_t kFeatures = 32;
constexpr int64_t kClasses = 10;
constexpr int64_t kClustersPerClass = 2;

struct Flags {
  int epochs = 5;
  int64_t batch_size = 32;
  double lr = 0.0;  // 0: the optimizer's default
  std::string optimizer = "sgd";
  bool fp16 = false;
  int accumulation_steps = 1;
  int checkpoint_segments = 0;
  std::string save_path;
  std::string resume_path;
  int threads = 0;
  uint64_t seed = 42;
  int64_t train_samples = 16384;
  int64_t test_samples = 4096;
  double noise = 1.3;
};

// A labelled data set held in memory.
struct Dataset {
  torch::Tensor x;  // [n, kFeatures] float32
  torch::Tensor y;  // [n] int64
  int64_t size() const { return x.size(0); }
  std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<size_t>& indices) const {
    torch::Tensor idx = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kLong);
    return {x.index_select(0, idx), y.index_select(0, idx)};
  }
};

// The same on every rank for the same seed (an explicit generator, no global RNG).
std::pair<Dataset, Dataset> make_datasets(const Flags& f) {
  auto gen = at::detail::createCPUGenerator(f.seed * 7919 + 17);
  torch::Tensor centers = at::randn({kClasses * kClustersPerClass, kFeatures}, gen, at::kFloat) * 0.9;
  auto sample = [&](int64_t n) {
    torch::Tensor cluster = at::randint(kClasses * kClustersPerClass, {n}, gen, at::kLong);
    torch::Tensor x = centers.index_select(0, cluster) + at::randn({n, kFeatures}, gen, at::kFloat) * f.noise;
    return Dataset{x, cluster.remainder(kClasses)};
  };
  Dataset train = sample(f.train_samples);
  Dataset test = sample(f.test_samples);
  return {train, test};
}

// An MLP, 32 -> 128 -> 64 -> 10, as a Sequential so that activation
// checkpointing can split it into segments.
struct NetImpl : torch::nn::Module {
  explicit NetImpl(int checkpoint_segments = 0) : checkpoint_segments(checkpoint_segments) {
    layers = register_module("layers", torch::nn::Sequential(torch::nn::Linear(kFeatures, 128), torch::nn::ReLU(),
                                                             torch::nn::Linear(128, 64), torch::nn::ReLU(),
                                                             torch::nn::Linear(64, kClasses)));
  }
  torch::Tensor forward(torch::Tensor x) {
    // Training with --checkpoint-segments N: keep only the segments' inputs and
    // recompute the rest during backward (each parameter's gradient still
    // accumulates once, so the DistributedOptimizer's hooks fire once).
    if (checkpoint_segments > 0 && is_training() && torch::GradMode::is_enabled()) {
      return hvd::checkpoint_sequential(layers, checkpoint_segments, x);
    }
    return layers->forward(x);
  }
  torch::nn::Sequential layers{nullptr};
  int checkpoint_segments;
};
TORCH_MODULE(Net);

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name, const std::vector<torch::Tensor>& params,
                                                        double lr) {
  namespace optim = torch::optim;
  if (name == "sgd") return std::make_shared<optim::SGD>(params, optim::SGDOptions(lr > 0 ? lr : 0.02).momentum(0.9));
  if (name == "adam") return std::make_shared<optim::Adam>(params, optim::AdamOptions(lr > 0 ? lr : 1e-3));
  if (name == "adamw") return std::make_shared<optim::AdamW>(params, optim::AdamWOptions(lr > 0 ? lr : 1e-3));
  if (name == "rmsprop") return std::make_shared<optim::RMSprop>(params, optim::RMSpropOptions(lr > 0 ? lr : 1e-3));
  if (name == "adagrad") return std::make_shared<optim::Adagrad>(params, optim::AdagradOptions(lr > 0 ? lr : 0.02));
  throw std::invalid_argument("--optimizer must be one of sgd, adam, adamw, rmsprop, adagrad (got '" + name + "')");
}

Flags parse_flags(int argc, char** argv) {
  cxxopts::Options options("train", "Data-parallel training of an MLP on synthetic data with horovodlite");
  Flags f;
  // clang-format off
  options.add_options()
    ("epochs", "Epochs to train (in total, counting those of a resumed checkpoint)", cxxopts::value<int>()->default_value("5"))
    ("batch-size", "Batch size per rank", cxxopts::value<int64_t>()->default_value("32"))
    ("lr", "Learning rate per rank; multiplied by the number of ranks (0: the optimizer's default)", cxxopts::value<double>()->default_value("0"))
    ("optimizer", "sgd (momentum 0.9), adam, adamw, rmsprop or adagrad", cxxopts::value<std::string>()->default_value("sgd"))
    ("fp16", "Send gradients as float16 (compression)", cxxopts::value<bool>()->default_value("false"))
    ("accumulation-steps", "Backward passes per optimizer step (backward_passes_per_step)", cxxopts::value<int>()->default_value("1"))
    ("checkpoint-segments", "Activation checkpointing: run the MLP as N checkpointed segments (0: off; at most 5)", cxxopts::value<int>()->default_value("0"))
    ("save", "Rank 0 saves model and optimizer here after each epoch", cxxopts::value<std::string>()->default_value(""))
    ("resume", "Rank 0 loads a checkpoint saved with --save and broadcasts it", cxxopts::value<std::string>()->default_value(""))
    ("threads", "Intra-op threads per rank (default: hardware threads / ranks on this node)", cxxopts::value<int>()->default_value("0"))
    ("seed", "Seed of the data set, the model and the shuffling", cxxopts::value<uint64_t>()->default_value("42"))
    ("train-samples", "Training set size", cxxopts::value<int64_t>()->default_value("16384"))
    ("test-samples", "Held-out test set size", cxxopts::value<int64_t>()->default_value("4096"))
    ("h,help", "Print usage");
  // clang-format on
  auto r = options.parse(argc, argv);
  if (r.count("help")) {
    std::cout << options.help() << std::endl;
    std::exit(0);
  }
  f.epochs = r["epochs"].as<int>();
  f.batch_size = r["batch-size"].as<int64_t>();
  f.lr = r["lr"].as<double>();
  f.optimizer = r["optimizer"].as<std::string>();
  f.fp16 = r["fp16"].as<bool>();
  f.accumulation_steps = r["accumulation-steps"].as<int>();
  f.checkpoint_segments = r["checkpoint-segments"].as<int>();
  f.save_path = r["save"].as<std::string>();
  f.resume_path = r["resume"].as<std::string>();
  f.threads = r["threads"].as<int>();
  f.seed = r["seed"].as<uint64_t>();
  f.train_samples = r["train-samples"].as<int64_t>();
  f.test_samples = r["test-samples"].as<int64_t>();
  if (f.checkpoint_segments < 0 || f.checkpoint_segments > 5) {
    throw std::invalid_argument("--checkpoint-segments must be between 0 and 5 (the MLP has 5 modules)");
  }
  if (f.epochs < 0 || f.batch_size < 1 || f.accumulation_steps < 1 || f.train_samples < 1 || f.test_samples < 1) {
    throw std::invalid_argument("--epochs must be >= 0; --batch-size, --accumulation-steps and the sample counts >= 1");
  }
  return f;
}

void save_checkpoint(const std::string& path, Net& model, torch::optim::Optimizer& opt, const Flags& f, int epoch) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  model->save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive opt_archive(archive.compilation_unit());
  opt.save(opt_archive);
  archive.write("optimizer", opt_archive);
  archive.write("optimizer_name", c10::IValue(f.optimizer));
  archive.write("epoch", c10::IValue(static_cast<int64_t>(epoch)));
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write checkpoint " + path);
}

// Rank 0 loads the checkpoint, then everything is broadcast from it. Returns the
// number of epochs already done.
int resume(const std::string& path, Net& model, hvd::DistributedOptimizer& opt, const Flags& f) {
  std::string error;
  int64_t epoch = 0;
  if (hvd::rank() == 0) {
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(path);
      c10::IValue name, done;
      archive.read("optimizer_name", name);
      if (name.toStringRef() != f.optimizer) {
        throw std::runtime_error("the checkpoint was written with --optimizer " + name.toStringRef());
      }
      torch::serialize::InputArchive model_archive, opt_archive;
      archive.read("model", model_archive);
      model->load(model_archive);
      archive.read("optimizer", opt_archive);
      opt.optimizer().load(opt_archive);
      archive.read("epoch", done);
      epoch = done.toInt();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = hvd::broadcast_bytes(error, 0, "resume.error");
  if (!error.empty()) throw std::runtime_error("cannot resume from " + path + ": " + error);
  hvd::broadcast_parameters(*model, 0);
  hvd::broadcast_optimizer_state(opt, 0);
  return static_cast<int>(hvd::broadcast(torch::full({1}, epoch, torch::kLong), 0, "resume.epoch").item<int64_t>());
}

struct EvalResult {
  double loss;
  double accuracy;
};

// Each rank evaluates every size()-th test sample; the sums are allreduced.
EvalResult evaluate(Net& model, const Dataset& test) {
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor idx = torch::arange(hvd::rank(), test.size(), hvd::size(), torch::kLong);
  torch::Tensor logits = model->forward(test.x.index_select(0, idx));
  torch::Tensor y = test.y.index_select(0, idx);
  torch::Tensor sums = torch::stack({torch::cross_entropy_loss(logits, y, {}, at::Reduction::Sum).to(torch::kDouble),
                                     logits.argmax(1).eq(y).sum().to(torch::kDouble),
                                     torch::scalar_tensor(double(idx.size(0)), torch::kDouble)});
  sums = hvd::allreduce(sums, "eval", {hvd::Sum});
  model->train();
  const double n = sums[2].item<double>();
  return {sums[0].item<double>() / n, sums[1].item<double>() / n};
}

int run(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  const int threads =
      f.threads > 0 ? f.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, hvd::local_size()));
  torch::set_num_threads(threads);
  torch::manual_seed(f.seed);

  auto data = make_datasets(f);
  const Dataset& train = data.first;
  const Dataset& test = data.second;

  Net model(f.checkpoint_segments);
  auto base = make_optimizer(f.optimizer, model->parameters(), f.lr);
  // Horovod's convention: the learning rate grows with the number of ranks.
  for (auto& group : base->param_groups()) group.options().set_lr(group.options().get_lr() * size);
  hvd::DistributedOptimizerOptions dopts;
  dopts.compression = f.fp16 ? hvd::Compression::kFp16 : hvd::Compression::kNone;
  dopts.backward_passes_per_step = f.accumulation_steps;
  hvd::DistributedOptimizer opt(base, model->named_parameters(), dopts);

  int first_epoch = 0;
  if (!f.resume_path.empty()) {
    first_epoch = resume(f.resume_path, model, opt, f);
  } else {
    hvd::broadcast_parameters(*model, 0);
    hvd::broadcast_optimizer_state(opt, 0);
  }
  if (rank == 0) {
    std::printf("train: %d ranks, %d threads each, optimizer %s (lr %g), batch %lld per rank, %d accumulation "
                "steps, fp16 %s, checkpoint segments %d, %lld train / %lld test samples\n",
                size, threads, f.optimizer.c_str(), base->param_groups()[0].options().get_lr(),
                static_cast<long long>(f.batch_size), f.accumulation_steps, f.fp16 ? "on" : "off", f.checkpoint_segments,
                static_cast<long long>(train.size()), static_cast<long long>(test.size()));
    if (!f.resume_path.empty()) std::printf("resumed from %s after epoch %d\n", f.resume_path.c_str(), first_epoch);
    std::fflush(stdout);
  }

  torch::data::samplers::DistributedRandomSampler sampler(train.size(), size, rank);
  double total_seconds = 0, total_samples = 0, last_loss = 0;
  EvalResult last_eval{0, 0};
  for (int epoch = first_epoch; epoch < f.epochs; ++epoch) {
    sampler.set_epoch(static_cast<size_t>(epoch) + f.seed);
    sampler.reset();
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t batches = 0, samples = 0;
    int pending = 0;  // backward passes since the last step
    opt.zero_grad();
    while (auto indices = sampler.next(static_cast<size_t>(f.batch_size))) {
      auto batch = train.get_batch(*indices);
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(batch.first), batch.second);
      (loss / f.accumulation_steps).backward();
      loss_sum += loss.item<double>();
      samples += batch.first.size(0);
      ++batches;
      if (++pending == f.accumulation_steps) {
        opt.step();
        opt.zero_grad();
        pending = 0;
      }
    }
    if (pending > 0) {  // every rank has the same number of batches: the same here
      opt.step();
      opt.zero_grad();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The slowest rank defines the epoch's time.
    const double epoch_seconds =
        hvd::allreduce(torch::full({1}, seconds, torch::kDouble), "epoch.time", {hvd::Max}).item<double>();
    const double global_samples = double(samples) * size;
    last_loss = hvd::allreduce(torch::full({1}, loss_sum / std::max<int64_t>(batches, 1), torch::kDouble),
                               "epoch.loss")
                    .item<double>();
    last_eval = evaluate(model, test);
    total_seconds += epoch_seconds;
    total_samples += global_samples;
    if (rank == 0) {
      std::printf("epoch %d/%d  train-loss %.4f  test-loss %.4f  test-acc %.2f%%  %.0f samples/s  (%.2f s)\n",
                  epoch + 1, f.epochs, last_loss, last_eval.loss, 100.0 * last_eval.accuracy,
                  global_samples / epoch_seconds, epoch_seconds);
      std::fflush(stdout);
      if (!f.save_path.empty()) save_checkpoint(f.save_path, model, opt.optimizer(), f, epoch + 1);
    }
  }
  if (first_epoch >= f.epochs) last_eval = evaluate(model, test);
  if (rank == 0) {
    std::printf("final: epochs %d  ranks %d  train-loss %.4f  test-loss %.4f  test-acc %.2f%%  %.0f samples/s\n",
                f.epochs, size, last_loss, last_eval.loss, 100.0 * last_eval.accuracy,
                total_seconds > 0 ? total_samples / total_seconds : 0.0);
  }
  hvd::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
}
