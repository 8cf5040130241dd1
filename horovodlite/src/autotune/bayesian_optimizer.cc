#include "autotune/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>

namespace horovodlite {
namespace autotune {

namespace {
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
double normal_cdf(double z) { return 0.5 * std::erfc(-z * kInvSqrt2); }
double normal_pdf(double z) { return kInvSqrt2Pi * std::exp(-0.5 * z * z); }
}  // namespace

BayesianOptimizer::BayesianOptimizer(size_t dims, double noise, uint64_t seed, double xi)
    : dims_(dims), xi_(xi), gp_(noise), rng_(seed) {}

std::vector<double> BayesianOptimizer::random_point() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> x(dims_);
  for (double& v : x) v = u(rng_);
  snap(&x);
  return x;
}

void BayesianOptimizer::snap(std::vector<double>* x) const {
  for (size_t i = 0; i < x->size() && i < binary_.size(); ++i)
    if (binary_[i]) (*x)[i] = (*x)[i] >= 0.5 ? 1.0 : 0.0;
}

void BayesianOptimizer::add_sample(const std::vector<double>& x, double score) {
  x_.push_back(x);
  y_.push_back(score);
  if (best_x_.empty() || score > best_score_) {
    best_x_ = x;
    best_score_ = score;
  }
  gp_.fit(x_, y_);
  double mean = 0.0;
  for (double v : y_) mean += v;
  mean /= static_cast<double>(y_.size());
  double var = 0.0;
  for (double v : y_) var += (v - mean) * (v - mean);
  var /= static_cast<double>(y_.size());
  y_scale_ = var > 0.0 ? std::sqrt(var) : 1.0;
}

double BayesianOptimizer::expected_improvement(const std::vector<double>& x) const {
  double mu = 0.0, sigma = 0.0;
  gp_.predict(x, &mu, &sigma);
  if (sigma <= 0.0) return 0.0;
  const double improvement = mu - best_score_ - xi_ * y_scale_;
  const double z = improvement / sigma;
  return improvement * normal_cdf(z) + sigma * normal_pdf(z);
}

std::vector<double> BayesianOptimizer::next() {
  if (x_.size() < 2 || dims_ == 0) return random_point();
  // A switch sampled at one value only: the best point with it flipped (with
  // one length scale for every dimension the model can stay too sure of a
  // value never seen; each switch costs one sample this way).
  for (size_t i = 0; i < binary_.size() && i < dims_; ++i) {
    if (!binary_[i]) continue;
    const bool one_value =
        std::all_of(x_.begin(), x_.end(), [&](const std::vector<double>& x) { return x[i] == x_[0][i]; });
    if (one_value) {
      std::vector<double> x = best_x_;
      x[i] = 1.0 - x_[0][i];
      return x;
    }
  }
  // Random search, then a shrinking local search around the best few.
  constexpr int kCandidates = 2000;
  constexpr int kKeep = 5;
  constexpr int kLocalSteps = 60;
  std::vector<std::pair<double, std::vector<double>>> top;
  for (int i = 0; i < kCandidates; ++i) {
    std::vector<double> x = random_point();
    const double ei = expected_improvement(x);
    if (static_cast<int>(top.size()) < kKeep || ei > top.back().first) {
      top.emplace_back(ei, std::move(x));
      std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      if (static_cast<int>(top.size()) > kKeep) top.pop_back();
    }
  }
  std::normal_distribution<double> step(0.0, 1.0);
  for (auto& candidate : top) {
    double radius = 0.1;
    for (int s = 0; s < kLocalSteps; ++s) {
      std::vector<double> x = candidate.second;
      for (double& v : x) v = std::min(1.0, std::max(0.0, v + radius * step(rng_)));
      snap(&x);
      const double ei = expected_improvement(x);
      if (ei > candidate.first) {
        candidate = {ei, std::move(x)};
      } else {
        radius *= 0.93;
      }
    }
  }
  auto best = std::max_element(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return best->second;
}

}  // namespace autotune
}  // namespace horovodlite
