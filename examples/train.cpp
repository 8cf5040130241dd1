// Data-parallel training with horovodlite and LibTorch:
//
//   mpirun -np 4 ./train --epochs 5 --optimizer adam
//   mpirun -np 4 ./train --use-adasum      # Adasum instead of averaging (2^k ranks)
//   mpirun -np 4 ./train --zero 2          # ZeRO: optimizer state and gradients sharded
//
// The data (--data): scikit-learn's handwritten digits (digits, the default: 1797
// 8x8 images, 10 classes, read from the digits.csv.gz that Debian's python3-sklearn
// ships; a fixed 20 % held out for testing), or a deterministic synthetic set
// (synthetic: 10 classes, each a mixture of two Gaussian clusters in 32
// dimensions, so that the classes are not linearly separable). Every rank reads or
// builds the same data, trains an MLP on its shard (DistributedRandomSampler), and
// averages gradients with a DistributedOptimizer (with --use-adasum: combines the
// ranks' updates with Adasum; with --zero 1|2: a ZeroRedundancyOptimizer, which
// shards the optimizer state, and at stage 2 the gradients, across the ranks).
// Rank 0 reports the loss,
// held-out accuracy and throughput per epoch, and can save a checkpoint that a
// later run resumes from (--save / --resume). At the end every rank's weights are
// compared (allreduced min and max): a difference is an error.
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <iostream>
#include <thread>

#include "horovodlite/torch.h"

namespace hvd = horovodlite::torch;

namespace {

constexpr int64_t kSyntheticFeatures = 32;
constexpr int64_t kClasses = 10;
constexpr int64_t kClustersPerClass = 2;
constexpr int64_t kDigitsFeatures = 64;  // 8x8 pixels, values 0..16
constexpr const char* kDigitsFile = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

struct Flags {
  std::string data = "digits";
  std::string data_file = kDigitsFile;
  double test_fraction = 0.2;
  std::string device = "cpu";
  double expect_accuracy = 0.0;
  int epochs = 10;
  int64_t batch_size = 32;
  double lr = 0.0;  // 0: the optimizer's default
  std::string optimizer = "sgd";
  bool fp16 = false;
  bool use_adasum = false;
  int zero = 0;  // ZeRO stage; 0: replicated
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
  torch::Tensor x;  // [n, features] float32
  torch::Tensor y;  // [n] int64
  int64_t size() const { return x.size(0); }
  std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<size_t>& indices) const {
    torch::Tensor idx = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kLong);
    return {x.index_select(0, idx), y.index_select(0, idx)};
  }
};

// The same on every rank for the same seed (an explicit generator, no global RNG).
std::pair<Dataset, Dataset> make_synthetic(const Flags& f) {
  auto gen = at::detail::createCPUGenerator(f.seed * 7919 + 17);
  torch::Tensor centers = at::randn({kClasses * kClustersPerClass, kSyntheticFeatures}, gen, at::kFloat) * 0.9;
  auto sample = [&](int64_t n) {
    torch::Tensor cluster = at::randint(kClasses * kClustersPerClass, {n}, gen, at::kLong);
    torch::Tensor x = centers.index_select(0, cluster) + at::randn({n, kSyntheticFeatures}, gen, at::kFloat) * f.noise;
    return Dataset{x, cluster.remainder(kClasses)};
  };
  Dataset train = sample(f.train_samples);
  Dataset test = sample(f.test_samples);
  return {train, test};
}

// scikit-learn's digits.csv.gz: one image per line, 64 pixel values (0..16) and
// the label, comma-separated. Pixels are scaled to [0, 1].
Dataset read_digits(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) {
    throw std::runtime_error("cannot open " + path +
                             " (install python3-sklearn, pass --data-file, or train on --data synthetic)");
  }
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  char line[4096];
  int64_t line_no = 0;
  while (gzgets(in, line, sizeof(line)) != nullptr) {
    ++line_no;
    std::vector<double> values;
    const char* p = line;
    char* end = nullptr;
    while (true) {
      const double v = std::strtod(p, &end);
      if (end == p) break;
      values.push_back(v);
      p = end;
      if (*p == ',') ++p;
    }
    if (values.empty()) continue;  // a blank line
    const auto label = static_cast<int64_t>(values.back());
    if (static_cast<int64_t>(values.size()) != kDigitsFeatures + 1 || label < 0 || label >= kClasses ||
        values.back() != static_cast<double>(label)) {
      gzclose(in);
      throw std::runtime_error(path + " line " + std::to_string(line_no) +
                               ": expected 64 pixel values and a label 0..9");
    }
    for (int64_t i = 0; i < kDigitsFeatures; ++i) pixels.push_back(static_cast<float>(values[i] / 16.0));
    labels.push_back(label);
  }
  const bool read_error = gzeof(in) == 0;
  gzclose(in);
  if (read_error || labels.empty()) throw std::runtime_error("cannot read " + path + " (a gzip CSV of digits)");
  const auto n = static_cast<int64_t>(labels.size());
  return Dataset{torch::from_blob(pixels.data(), {n, kDigitsFeatures}, torch::kFloat).clone(),
                 torch::from_blob(labels.data(), {n}, torch::kLong).clone()};
}

// A fixed, seeded split: every rank holds the same train and test sets.
std::pair<Dataset, Dataset> make_digits(const Flags& f) {
  Dataset all = read_digits(f.data_file);
  auto gen = at::detail::createCPUGenerator(f.seed * 7919 + 17);
  torch::Tensor order = at::randperm(all.size(), gen, at::kLong);
  const auto n_test = static_cast<int64_t>(static_cast<double>(all.size()) * f.test_fraction + 0.5);
  if (n_test < 1 || n_test >= all.size()) {
    throw std::invalid_argument("--test-fraction leaves no test or no training samples");
  }
  torch::Tensor test_idx = order.slice(0, 0, n_test), train_idx = order.slice(0, n_test);
  return {Dataset{all.x.index_select(0, train_idx), all.y.index_select(0, train_idx)},
          Dataset{all.x.index_select(0, test_idx), all.y.index_select(0, test_idx)}};
}

std::pair<Dataset, Dataset> make_datasets(const Flags& f) {
  return f.data == "digits" ? make_digits(f) : make_synthetic(f);
}

// An MLP, features (64 or 32) -> 128 -> 64 -> 10, as a Sequential so that
// activation checkpointing can split it into segments.
struct NetImpl : torch::nn::Module {
  NetImpl(int64_t features, int checkpoint_segments) : checkpoint_segments(checkpoint_segments) {
    layers = register_module(
        "layers", torch::nn::Sequential(torch::nn::Linear(features, 128), torch::nn::ReLU(), torch::nn::Linear(128, 64),
                                        torch::nn::ReLU(), torch::nn::Linear(64, kClasses)));
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

using ParamGroups = std::vector<torch::optim::OptimizerParamGroup>;

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name, ParamGroups params, double lr) {
  namespace optim = torch::optim;
  if (name == "sgd") {
    return std::make_shared<optim::SGD>(std::move(params), optim::SGDOptions(lr > 0 ? lr : 0.02).momentum(0.9));
  }
  if (name == "adam") return std::make_shared<optim::Adam>(std::move(params), optim::AdamOptions(lr > 0 ? lr : 1e-3));
  if (name == "adamw") {
    return std::make_shared<optim::AdamW>(std::move(params), optim::AdamWOptions(lr > 0 ? lr : 1e-3));
  }
  if (name == "rmsprop") {
    return std::make_shared<optim::RMSprop>(std::move(params), optim::RMSpropOptions(lr > 0 ? lr : 1e-3));
  }
  if (name == "adagrad") {
    return std::make_shared<optim::Adagrad>(std::move(params), optim::AdagradOptions(lr > 0 ? lr : 0.02));
  }
  throw std::invalid_argument("--optimizer must be one of sgd, adam, adamw, rmsprop, adagrad (got '" + name + "')");
}

Flags parse_flags(int argc, char** argv) {
  cxxopts::Options options("train", "Data-parallel training of an MLP with horovodlite");
  Flags f;
  // clang-format off
  options.add_options()
    ("data", "digits (scikit-learn's handwritten digits) or synthetic", cxxopts::value<std::string>()->default_value("digits"))
    ("data-file", "--data digits: the gzip CSV to read", cxxopts::value<std::string>()->default_value(kDigitsFile))
    ("test-fraction", "--data digits: the share held out for testing", cxxopts::value<double>()->default_value("0.2"))
    ("device", "cpu, or cuda (each rank on the GPU of its local rank)", cxxopts::value<std::string>()->default_value("cpu"))
    ("expect-accuracy", "Exit with an error unless the final test accuracy exceeds this (0..1; 0: no check)", cxxopts::value<double>()->default_value("0"))
    ("epochs", "Epochs to train (in total, counting those of a resumed checkpoint)", cxxopts::value<int>()->default_value("10"))
    ("batch-size", "Batch size per rank", cxxopts::value<int64_t>()->default_value("32"))
    ("lr", "Learning rate per rank; multiplied by the number of ranks (0: the optimizer's default)", cxxopts::value<double>()->default_value("0"))
    ("optimizer", "sgd (momentum 0.9), adam, adamw, rmsprop or adagrad", cxxopts::value<std::string>()->default_value("sgd"))
    ("fp16", "Send gradients as float16 (compression)", cxxopts::value<bool>()->default_value("false"))
    ("use-adasum", "Combine the ranks' updates with Adasum (2^k ranks) instead of averaging gradients; the learning rate is then not scaled by the number of ranks", cxxopts::value<bool>()->default_value("false"))
    ("zero", "ZeRO stage with a ZeroRedundancyOptimizer: 1 (optimizer state sharded across the ranks) or 2 (and the gradients); 0: replicated. Stage 3 is not built in C++ yet", cxxopts::value<int>()->default_value("0"))
    ("accumulation-steps", "Backward passes per optimizer step (backward_passes_per_step)", cxxopts::value<int>()->default_value("1"))
    ("checkpoint-segments", "Activation checkpointing: run the MLP as N checkpointed segments (0: off; at most 5)", cxxopts::value<int>()->default_value("0"))
    ("save", "Rank 0 saves model and optimizer here after each epoch", cxxopts::value<std::string>()->default_value(""))
    ("resume", "Rank 0 loads a checkpoint saved with --save and broadcasts it", cxxopts::value<std::string>()->default_value(""))
    ("threads", "Intra-op threads per rank (default: hardware threads / ranks on this node)", cxxopts::value<int>()->default_value("0"))
    ("seed", "Seed of the data set, the model and the shuffling", cxxopts::value<uint64_t>()->default_value("42"))
    ("train-samples", "--data synthetic: training set size", cxxopts::value<int64_t>()->default_value("16384"))
    ("test-samples", "--data synthetic: held-out test set size", cxxopts::value<int64_t>()->default_value("4096"))
    ("h,help", "Print usage");
  // clang-format on
  auto r = options.parse(argc, argv);
  if (r.count("help")) {
    std::cout << options.help() << std::endl;
    std::exit(0);
  }
  f.data = r["data"].as<std::string>();
  f.data_file = r["data-file"].as<std::string>();
  f.test_fraction = r["test-fraction"].as<double>();
  f.device = r["device"].as<std::string>();
  f.expect_accuracy = r["expect-accuracy"].as<double>();
  f.epochs = r["epochs"].as<int>();
  f.batch_size = r["batch-size"].as<int64_t>();
  f.lr = r["lr"].as<double>();
  f.optimizer = r["optimizer"].as<std::string>();
  f.fp16 = r["fp16"].as<bool>();
  f.use_adasum = r["use-adasum"].as<bool>();
  f.zero = r["zero"].as<int>();
  f.accumulation_steps = r["accumulation-steps"].as<int>();
  f.checkpoint_segments = r["checkpoint-segments"].as<int>();
  f.save_path = r["save"].as<std::string>();
  f.resume_path = r["resume"].as<std::string>();
  f.threads = r["threads"].as<int>();
  f.seed = r["seed"].as<uint64_t>();
  f.train_samples = r["train-samples"].as<int64_t>();
  f.test_samples = r["test-samples"].as<int64_t>();
  if (f.data != "digits" && f.data != "synthetic") {
    throw std::invalid_argument("--data must be digits or synthetic (got '" + f.data + "')");
  }
  if (f.data == "digits" && (r.count("train-samples") || r.count("test-samples"))) {
    throw std::invalid_argument("--train-samples and --test-samples apply to --data synthetic only");
  }
  if (f.device != "cpu" && f.device != "cuda") {
    throw std::invalid_argument("--device must be cpu or cuda (got '" + f.device + "')");
  }
  if (!(f.test_fraction > 0.0 && f.test_fraction < 1.0))
    throw std::invalid_argument("--test-fraction must be in (0, 1)");
  if (f.zero == 3) throw std::invalid_argument("--zero 3: stage 3 is not built in C++ yet (use --zero 1 or 2)");
  if (f.zero < 0 || f.zero > 2) {
    throw std::invalid_argument("--zero must be 0 (off), 1 or 2 (got " + std::to_string(f.zero) + ")");
  }
  if (f.zero > 0 && f.use_adasum) throw std::invalid_argument("--zero and --use-adasum exclude each other");
  if (f.checkpoint_segments < 0 || f.checkpoint_segments > 5) {
    throw std::invalid_argument("--checkpoint-segments must be between 0 and 5 (the MLP has 5 modules)");
  }
  if (f.epochs < 0 || f.batch_size < 1 || f.accumulation_steps < 1 || f.train_samples < 1 || f.test_samples < 1) {
    throw std::invalid_argument("--epochs must be >= 0; --batch-size, --accumulation-steps and the sample counts >= 1");
  }
  return f;
}

// The optimizer that steps the model: replicated (DistributedOptimizer) or
// sharded (ZeroRedundancyOptimizer, --zero).
struct TrainOptimizer {
  std::unique_ptr<hvd::DistributedOptimizer> replicated;
  std::unique_ptr<hvd::ZeroRedundancyOptimizer> zero;

  void step() { zero ? static_cast<void>(zero->step()) : static_cast<void>(replicated->step()); }
  void zero_grad() { zero ? zero->zero_grad() : replicated->zero_grad(); }
  torch::optim::Optimizer& optimizer() { return zero ? zero->optimizer() : replicated->optimizer(); }
};

// Rank 0 writes; every rank calls it (ZeRO gathers its state there first).
void save_checkpoint(const std::string& path, Net& model, TrainOptimizer& opt, const Flags& f, int epoch) {
  if (opt.zero) opt.zero->consolidate_state_dict(0);
  if (hvd::rank() != 0) return;
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  model->save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive opt_archive(archive.compilation_unit());
  // The same layout either way: a plain optimizer's save() over the model's parameters.
  if (opt.zero) {
    opt.zero->save(opt_archive);
  } else {
    opt.replicated->optimizer().save(opt_archive);
  }
  archive.write("optimizer", opt_archive);
  archive.write("optimizer_name", c10::IValue(f.optimizer));
  archive.write("epoch", c10::IValue(static_cast<int64_t>(epoch)));
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write checkpoint " + path);
}

// Rank 0 loads the checkpoint, then everything is broadcast from it; with --zero
// every rank reads the optimizer state too (its shard of it), so the file must be
// readable on every rank. Returns the number of epochs already done.
int resume(const std::string& path, Net& model, TrainOptimizer& opt, const Flags& f, const torch::Device& device) {
  std::string error;
  int64_t epoch = 0;
  if (hvd::rank() == 0 || opt.zero) {
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(path, device);
      c10::IValue name, done;
      archive.read("optimizer_name", name);
      if (name.toStringRef() != f.optimizer) {
        throw std::runtime_error("the checkpoint was written with --optimizer " + name.toStringRef());
      }
      torch::serialize::InputArchive model_archive, opt_archive;
      if (hvd::rank() == 0) {
        archive.read("model", model_archive);
        model->load(model_archive);
      }
      archive.read("optimizer", opt_archive);
      if (opt.zero) {
        opt.zero->load(opt_archive);
      } else {
        opt.optimizer().load(opt_archive);
      }
      archive.read("epoch", done);
      epoch = done.toInt();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Every rank fails alike: with rank 0's reason, else its own, else another rank's.
  const std::string mine = error;
  error = hvd::broadcast_bytes(error, 0, "resume.error");
  const bool failed =
      hvd::allreduce(torch::full({1}, mine.empty() ? 0 : 1, torch::kInt), "resume.failed", {hvd::Max}).item<int>() != 0;
  if (failed) {
    throw std::runtime_error("cannot resume from " + path + ": " +
                             (!error.empty()  ? error
                              : !mine.empty() ? mine
                                              : "it failed on another rank"));
  }
  hvd::broadcast_parameters(*model, 0);
  if (!opt.zero) hvd::broadcast_optimizer_state(*opt.replicated, 0);
  return static_cast<int>(hvd::broadcast(torch::full({1}, epoch, torch::kLong), 0, "resume.epoch").item<int64_t>());
}

struct EvalResult {
  double loss;
  double accuracy;
};

// Each rank evaluates every size()-th test sample; the sums are allreduced.
EvalResult evaluate(Net& model, const Dataset& test, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor idx = torch::arange(hvd::rank(), test.size(), hvd::size(), torch::kLong);
  torch::Tensor logits = model->forward(test.x.index_select(0, idx).to(device));
  torch::Tensor y = test.y.index_select(0, idx).to(device);
  torch::Tensor sums = torch::stack({torch::cross_entropy_loss(logits, y, {}, at::Reduction::Sum).to(torch::kDouble),
                                     logits.argmax(1).eq(y).sum().to(torch::kDouble),
                                     torch::scalar_tensor(double(idx.size(0)), torch::kDouble).to(device)});
  sums = hvd::allreduce(sums.cpu(), "eval", {hvd::Sum});
  model->train();
  const double n = sums[2].item<double>();
  return {sums[0].item<double>() / n, sums[1].item<double>() / n};
}

// --device cuda: this rank's GPU is the one of its local rank.
torch::Device pick_device(const Flags& f) {
  if (f.device == "cpu") return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    throw std::runtime_error("--device cuda on rank " + std::to_string(hvd::rank()) +
                             ": no CUDA device is available (this LibTorch has no CUDA, or no GPU is visible)");
  }
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (hvd::local_rank() >= gpus) {
    throw std::runtime_error("--device cuda on rank " + std::to_string(hvd::rank()) + ": local rank " +
                             std::to_string(hvd::local_rank()) + " but only " + std::to_string(gpus) +
                             " GPU(s) on this host");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(hvd::local_rank()));
}

// True when every rank holds bitwise the same parameters (their elementwise min
// and max over the ranks equal this rank's values).
bool weights_identical(Net& model) {
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kFloat));
  torch::Tensor mine = torch::cat(flat);
  torch::Tensor lo = hvd::allreduce(mine, "weights.min", {hvd::Min});
  torch::Tensor hi = hvd::allreduce(mine, "weights.max", {hvd::Max});
  const bool same = lo.equal(mine) && hi.equal(mine);
  // Every rank answers the same: the verdict is allreduced too.
  return hvd::allreduce(torch::full({1}, same ? 1 : 0, torch::kInt), "weights.same", {hvd::Min}).item<int>() == 1;
}

int run(int argc, char** argv) {
  const Flags f = parse_flags(argc, argv);
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  const torch::Device device = pick_device(f);
  const int threads =
      f.threads > 0
          ? f.threads
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, hvd::local_size()));
  torch::set_num_threads(threads);
  torch::manual_seed(f.seed);

  auto data = make_datasets(f);
  const Dataset& train = data.first;
  const Dataset& test = data.second;

  Net model(train.x.size(1), f.checkpoint_segments);
  model->to(device);
  // Horovod's convention: the learning rate grows with the number of ranks;
  // with Adasum it does not (Horovod's Adasum guide).
  auto scale_lr = [&](torch::optim::Optimizer& o) {
    if (f.use_adasum) return;
    for (auto& group : o.param_groups()) group.options().set_lr(group.options().get_lr() * size);
  };
  TrainOptimizer opt;
  if (f.zero > 0) {
    hvd::ZeroOptions zopts;
    zopts.stage = f.zero;
    zopts.compression = f.fp16 ? hvd::Compression::kFp16 : hvd::Compression::kNone;
    zopts.backward_passes_per_step = f.accumulation_steps;
    opt.zero = std::make_unique<hvd::ZeroRedundancyOptimizer>(
        model->named_parameters(),
        [&](ParamGroups groups) { return make_optimizer(f.optimizer, std::move(groups), f.lr); }, zopts);
    scale_lr(opt.zero->optimizer());
  } else {
    ParamGroups groups;
    groups.emplace_back(model->parameters());
    auto base = make_optimizer(f.optimizer, std::move(groups), f.lr);
    scale_lr(*base);
    hvd::DistributedOptimizerOptions dopts;
    dopts.op = f.use_adasum ? horovodlite::ReduceOp::kAdasum : horovodlite::ReduceOp::kAverage;
    dopts.compression = f.fp16 ? hvd::Compression::kFp16 : hvd::Compression::kNone;
    dopts.backward_passes_per_step = f.accumulation_steps;
    opt.replicated = std::make_unique<hvd::DistributedOptimizer>(base, model->named_parameters(), dopts);
  }

  int first_epoch = 0;
  if (!f.resume_path.empty()) {
    first_epoch = resume(f.resume_path, model, opt, f, device);
  } else {
    // The shards are refreshed from the parameters at each step: broadcasting
    // the parameters is enough for ZeRO (its state starts empty on every rank).
    hvd::broadcast_parameters(*model, 0);
    if (!opt.zero) hvd::broadcast_optimizer_state(*opt.replicated, 0);
  }
  const std::string mode = f.use_adasum ? "Adasum"
                           : f.zero > 0 ? "Average, ZeRO stage " + std::to_string(f.zero)
                                        : "Average";
  if (rank == 0) {
    std::printf(
        "train: %d ranks, %d threads each, device %s, data %s, optimizer %s (lr %g), batch %lld per rank, "
        "%d accumulation steps, fp16 %s, %s, checkpoint segments %d, %lld train / %lld test samples\n",
        size, threads, f.device.c_str(), f.data.c_str(), f.optimizer.c_str(),
        opt.optimizer().param_groups()[0].options().get_lr(), static_cast<long long>(f.batch_size),
        f.accumulation_steps, f.fp16 ? "on" : "off", mode.c_str(), f.checkpoint_segments,
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
      batch.first = batch.first.to(device);
      batch.second = batch.second.to(device);
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
    last_loss = hvd::allreduce(torch::full({1}, loss_sum / std::max<int64_t>(batches, 1), torch::kDouble), "epoch.loss")
                    .item<double>();
    last_eval = evaluate(model, test, device);
    total_seconds += epoch_seconds;
    total_samples += global_samples;
    if (rank == 0) {
      std::printf("epoch %d/%d  train-loss %.4f  test-loss %.4f  test-acc %.2f%%  %.0f samples/s  (%.2f s)\n",
                  epoch + 1, f.epochs, last_loss, last_eval.loss, 100.0 * last_eval.accuracy,
                  global_samples / epoch_seconds, epoch_seconds);
      std::fflush(stdout);
    }
    if (!f.save_path.empty()) save_checkpoint(f.save_path, model, opt, f, epoch + 1);
  }
  if (first_epoch >= f.epochs) last_eval = evaluate(model, test, device);
  const bool identical = weights_identical(model);
  if (rank == 0) {
    std::printf("final: epochs %d  ranks %d  train-loss %.4f  test-loss %.4f  test-acc %.2f%%  %.0f samples/s\n",
                f.epochs, size, last_loss, last_eval.loss, 100.0 * last_eval.accuracy,
                total_seconds > 0 ? total_samples / total_seconds : 0.0);
    std::printf("weights identical on all %d ranks: %s\n", size, identical ? "yes" : "NO");
  }
  hvd::shutdown();
  if (!identical) {
    std::fprintf(stderr, "train: rank %d: the ranks' weights differ after training\n", rank);
    return 3;
  }
  if (f.expect_accuracy > 0 && !(last_eval.accuracy > f.expect_accuracy)) {
    if (rank == 0) {
      std::fprintf(stderr, "train: test accuracy %.4f is not above --expect-accuracy %g\n", last_eval.accuracy,
                   f.expect_accuracy);
    }
    return 4;
  }
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
