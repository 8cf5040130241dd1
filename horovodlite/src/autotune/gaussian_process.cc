#include "autotune/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace horovodlite {
namespace autotune {

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b, double length) const {
  double d2 = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    d2 += d * d;
  }
  return std::exp(-d2 / (2.0 * length * length));
}

double GaussianProcess::factorise(double length) {
  const size_t n = x_.size();
  l_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = kernel(x_[i], x_[j], length) + (i == j ? noise_ : 0.0);
      for (size_t k = 0; k < j; ++k) sum -= l_[i * n + k] * l_[j * n + k];
      if (i == j) {
        if (sum <= 0.0) return -std::numeric_limits<double>::infinity();
        l_[i * n + i] = std::sqrt(sum);
      } else {
        l_[i * n + j] = sum / l_[j * n + j];
      }
    }
  }
  // alpha = L^T \ (L \ y)
  std::vector<double> z(n);
  for (size_t i = 0; i < n; ++i) {
    double sum = y_[i];
    for (size_t k = 0; k < i; ++k) sum -= l_[i * n + k] * z[k];
    z[i] = sum / l_[i * n + i];
  }
  alpha_.assign(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    double sum = z[i];
    for (size_t k = i + 1; k < n; ++k) sum -= l_[k * n + i] * alpha_[k];
    alpha_[i] = sum / l_[i * n + i];
  }
  double log_det = 0.0;
  double fit = 0.0;
  for (size_t i = 0; i < n; ++i) {
    log_det += std::log(l_[i * n + i]);
    fit += y_[i] * alpha_[i];
  }
  return -0.5 * fit - log_det;
}

void GaussianProcess::fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  x_ = x;
  y_mean_ = 0.0;
  y_scale_ = 1.0;
  y_.assign(y.begin(), y.end());
  if (y_.empty()) {
    l_.clear();
    alpha_.clear();
    return;
  }
  for (double v : y_) y_mean_ += v;
  y_mean_ /= static_cast<double>(y_.size());
  double var = 0.0;
  for (double v : y_) var += (v - y_mean_) * (v - y_mean_);
  var /= static_cast<double>(y_.size());
  y_scale_ = var > 0.0 ? std::sqrt(var) : (std::abs(y_mean_) > 0.0 ? std::abs(y_mean_) : 1.0);
  for (double& v : y_) v = (v - y_mean_) / y_scale_;

  // The length scale with the best marginal likelihood on a small grid.
  static const double kLengths[] = {0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2};
  double best = -std::numeric_limits<double>::infinity();
  double best_length = length_scale_;
  for (double length : kLengths) {
    const double ll = factorise(length);
    if (ll > best) {
      best = ll;
      best_length = length;
    }
  }
  length_scale_ = best_length;
  factorise(length_scale_);
}

void GaussianProcess::predict(const std::vector<double>& x, double* mean, double* stddev) const {
  const size_t n = x_.size();
  if (n == 0 || l_.size() != n * n) {
    *mean = y_mean_;
    *stddev = y_scale_;
    return;
  }
  std::vector<double> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = kernel(x, x_[i], length_scale_);
  double mu = 0.0;
  for (size_t i = 0; i < n; ++i) mu += k[i] * alpha_[i];
  // v = L \ k; var = k(x, x) - v.v
  std::vector<double> v(n);
  double vv = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double sum = k[i];
    for (size_t j = 0; j < i; ++j) sum -= l_[i * n + j] * v[j];
    v[i] = sum / l_[i * n + i];
    vv += v[i] * v[i];
  }
  const double var = std::max(1.0 - vv, 1e-12);
  *mean = y_mean_ + y_scale_ * mu;
  *stddev = y_scale_ * std::sqrt(var);
}

}  // namespace autotune
}  // namespace horovodlite
