// Bayesian optimisation over [0, 1]^d, maximising a noisy score (the
// autotuner's throughput): a Gaussian process (gaussian_process.h) models the
// score from the samples so far, and the next point is the one with the largest
// expected improvement over the best sample, found by a seeded random search
// followed by a shrinking local search around the best candidates. Deterministic
// for a given seed and sequence of samples.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "autotune/gaussian_process.h"

namespace horovodlite {
namespace autotune {

class BayesianOptimizer {
 public:
  // dims: the number of parameters; noise: the GP's noise variance; xi: the
  // exploration margin of the expected improvement (standardised units).
  BayesianOptimizer(size_t dims, double noise, uint64_t seed = 0x6876646c, double xi = 0.1);

  // Dimensions that take only 0 or 1 (switches): every point proposed has them
  // at 0 or 1, so the model compares the two values and not a blur between
  // them (a switch that was never tried off is uncertain there, and its
  // expected improvement says so).
  void set_binary(std::vector<bool> binary) { binary_ = std::move(binary); }

  void add_sample(const std::vector<double>& x, double score);
  // The next point to try (every coordinate in [0, 1]). Until two samples are
  // known: random points; then, while a binary dimension has been sampled at
  // one value only, the best point with that dimension flipped.
  std::vector<double> next();
  // The best sample so far (empty before the first) and its score.
  const std::vector<double>& best_x() const { return best_x_; }
  double best_score() const { return best_score_; }
  size_t samples() const { return x_.size(); }

  // The expected improvement of `x` over the best sample under the current model.
  double expected_improvement(const std::vector<double>& x) const;

 private:
  std::vector<double> random_point();
  void snap(std::vector<double>* x) const;  // binary dimensions to 0 or 1

  size_t dims_;
  double xi_;
  GaussianProcess gp_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;
  std::vector<double> best_x_;
  double best_score_ = 0.0;
  double y_scale_ = 1.0;  // the spread of the scores, for xi
  std::vector<bool> binary_;
};

}  // namespace autotune
}  // namespace horovodlite
