// Bayesian optimisation over [0, 1]^d, maximising a noisy score (the
// autotuner's throughput): a Gaussian process (gaussian_process.h) models the
// score from the samples so far, and the next point is the one with the largest
// expected improvement over the best sample, found by a seeded random search
// followed by a shrinking local search around the best candidates. Deterministic
// for a given seed and sequence of samples.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "autotune/gaussian_process.h"

namespace horovodlite {
namespace autotune {

class BayesianOptimizer {
 public:
  // dims: the number of parameters; noise: the GP's noise variance; xi: the
  // exploration margin of the expected improvement (standardised units).
  BayesianOptimizer(size_t dims, double noise, uint64_t seed = 0x6876646c, double xi = 0.1);

  void add_sample(const std::vector<double>& x, double score);
  // The next point to try (every coordinate in [0, 1]). Until two samples are
  // known: random points.
  std::vector<double> next();
  // The best sample so far (empty before the first) and its score.
  const std::vector<double>& best_x() const { return best_x_; }
  double best_score() const { return best_score_; }
  size_t samples() const { return x_.size(); }

  // The expected improvement of `x` over the best sample under the current model.
  double expected_improvement(const std::vector<double>& x) const;

 private:
  std::vector<double> random_point();

  size_t dims_;
  double xi_;
  GaussianProcess gp_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;
  std::vector<double> best_x_;
  double best_score_ = 0.0;
  double y_scale_ = 1.0;  // the spread of the scores, for xi
};

}  // namespace autotune
}  // namespace horovodlite
