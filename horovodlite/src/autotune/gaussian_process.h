// Gaussian-process regression for the autotuner (autotune/bayesian_optimizer.h):
// a squared-exponential kernel over inputs in [0, 1]^d, observations
// standardised (zero mean, unit variance), a noise variance added to the
// diagonal, and the kernel's length scale picked from a small grid by the
// marginal likelihood of the observations. The autotuner has at most a few
// dozen samples in two to five dimensions, so the Cholesky factorisation is
// done directly (no linear-algebra library needed).
#pragma once

#include <cstddef>
#include <vector>

namespace horovodlite {
namespace autotune {

class GaussianProcess {
 public:
  // noise: the variance added to the kernel's diagonal, in units of the
  // standardised observations (HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE).
  explicit GaussianProcess(double noise) : noise_(noise) {}

  // Fits the model to x[i] (each of the same dimension, in [0, 1]) -> y[i].
  // With no samples, predictions are the prior (mean 0, variance 1 in
  // standardised units, i.e. the mean and spread of nothing: mean 0, std 1).
  void fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);

  // Posterior mean and standard deviation at `x`, in the units of y.
  void predict(const std::vector<double>& x, double* mean, double* stddev) const;

  double length_scale() const { return length_scale_; }
  size_t samples() const { return x_.size(); }

 private:
  double kernel(const std::vector<double>& a, const std::vector<double>& b, double length) const;
  // Factorises K + noise*I for `length` into l_ and solves alpha_; returns the
  // log marginal likelihood (minus a constant), or -inf if not positive definite.
  double factorise(double length);

  double noise_;
  double length_scale_ = 0.3;
  double y_mean_ = 0.0;
  double y_scale_ = 1.0;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;      // standardised
  std::vector<double> l_;      // lower Cholesky factor, row-major n x n
  std::vector<double> alpha_;  // (K + noise I)^-1 y
};

}  // namespace autotune
}  // namespace horovodlite
