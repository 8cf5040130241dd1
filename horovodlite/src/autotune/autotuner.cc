#include "autotune/autotuner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "logging.h"

namespace horovodlite {
namespace autotune {

namespace {
double clamp01(double v) { return std::min(1.0, std::max(0.0, v)); }
uint64_t double_bits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}
double bits_double(uint64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
}  // namespace

Autotuner::Autotuner(const Options& options, const Params& initial, bool coordinator)
    : options_(options), coordinator_(coordinator), current_(initial), next_(initial) {
  options_.warmup_samples = std::max(0, options_.warmup_samples);
  options_.steps_per_sample = std::max(1, options_.steps_per_sample);
  options_.max_samples = std::max(1, options_.max_samples);
  dims_ = static_cast<size_t>(options_.tune_fusion) + options_.tune_cycle_time + options_.tune_eager +
          options_.tune_hierarchical_allreduce + options_.tune_hierarchical_allgather;
  active_ = dims_ > 0;
  if (coordinator_ && active_) {
    optimizer_ = std::make_unique<BayesianOptimizer>(dims_, options_.gp_noise);
    // The switches come last in a point (to_point): binary dimensions.
    std::vector<bool> binary(dims_, false);
    const size_t switches = static_cast<size_t>(options_.tune_hierarchical_allreduce) +
                            static_cast<size_t>(options_.tune_hierarchical_allgather);
    for (size_t i = dims_ - switches; i < dims_; ++i) binary[i] = true;
    optimizer_->set_binary(std::move(binary));
    if (!options_.log_path.empty()) {
      log_ = std::fopen(options_.log_path.c_str(), "w");
      if (log_ == nullptr) {
        HVL_LOG(kWarning, "autotune: cannot open the log file " << options_.log_path << ": " << std::strerror(errno));
      } else {
        std::fprintf(log_,
                     "sample,phase,fusion_threshold_bytes,cycle_time_ms,eager_allreduce_bytes,hierarchical_allreduce,"
                     "hierarchical_allgather,score_bytes_per_s,seconds,steps\n");
        std::fflush(log_);
      }
    }
  }
}

Autotuner::~Autotuner() {
  if (log_ != nullptr) std::fclose(log_);
}

Params Autotuner::to_params(const std::vector<double>& x, const Params& base) const {
  Params p = base;
  size_t i = 0;
  if (options_.tune_fusion) {
    const double lg = Ranges::kMinFusionLog2 + clamp01(x[i++]) * (Ranges::kMaxFusionLog2 - Ranges::kMinFusionLog2);
    p.fusion_threshold_bytes = static_cast<int64_t>(std::llround(std::exp2(lg)));
  }
  if (options_.tune_cycle_time) {
    const double lo = std::log(Ranges::kMinCycleMs), hi = std::log(Ranges::kMaxCycleMs);
    const double ms = std::exp(lo + clamp01(x[i++]) * (hi - lo));
    p.cycle_time_ms = std::round(ms * 1000.0) / 1000.0;  // microsecond steps
  }
  if (options_.tune_eager) {
    const int64_t kib = std::llround(clamp01(x[i++]) * static_cast<double>(Ranges::kMaxEagerBytes >> 10));
    p.eager_allreduce_bytes = kib << 10;
  }
  if (options_.tune_hierarchical_allreduce) p.hierarchical_allreduce = x[i++] >= 0.5;
  if (options_.tune_hierarchical_allgather) p.hierarchical_allgather = x[i++] >= 0.5;
  return p;
}

std::vector<double> Autotuner::to_point(const Params& p) const {
  std::vector<double> x;
  if (options_.tune_fusion) {
    const double lg = p.fusion_threshold_bytes > 0 ? std::log2(static_cast<double>(p.fusion_threshold_bytes))
                                                   : Ranges::kMinFusionLog2;
    x.push_back(clamp01((lg - Ranges::kMinFusionLog2) / (Ranges::kMaxFusionLog2 - Ranges::kMinFusionLog2)));
  }
  if (options_.tune_cycle_time) {
    const double lo = std::log(Ranges::kMinCycleMs), hi = std::log(Ranges::kMaxCycleMs);
    x.push_back(clamp01((std::log(std::max(p.cycle_time_ms, 1e-6)) - lo) / (hi - lo)));
  }
  if (options_.tune_eager) {
    x.push_back(clamp01(static_cast<double>(p.eager_allreduce_bytes) / static_cast<double>(Ranges::kMaxEagerBytes)));
  }
  if (options_.tune_hierarchical_allreduce) x.push_back(p.hierarchical_allreduce ? 1.0 : 0.0);
  if (options_.tune_hierarchical_allgather) x.push_back(p.hierarchical_allgather ? 1.0 : 0.0);
  return x;
}

void Autotuner::encode(int64_t* words) const {
  if (!coordinator_) {
    for (size_t i = 0; i < kWords; ++i) words[i] = std::numeric_limits<int64_t>::max();
    return;
  }
  // A positive double's bits are a positive int64 (sign bit clear).
  words[0] = std::max<int64_t>(0, next_.fusion_threshold_bytes);
  words[1] = static_cast<int64_t>(double_bits(std::max(next_.cycle_time_ms, 0.0)));
  words[2] = std::max<int64_t>(0, next_.eager_allreduce_bytes);
  words[3] = (next_.hierarchical_allreduce ? 1 : 0) | (next_.hierarchical_allgather ? 2 : 0);
}

void Autotuner::decode(const int64_t* words, Params* out) {
  Params p;
  p.fusion_threshold_bytes = words[0];
  p.cycle_time_ms = bits_double(static_cast<uint64_t>(words[1]));
  p.eager_allreduce_bytes = words[2];
  p.hierarchical_allreduce = (words[3] & 1u) != 0;
  p.hierarchical_allgather = (words[3] & 2u) != 0;
  current_ = p;
  *out = p;
  pending_ = false;
  // The next sample starts at the first step boundary under the new parameters.
  seen_.clear();
  in_sample_ = false;
  step_bytes_ = 0;
  if (final_) {
    active_ = false;
    log_row("final", current_, optimizer_ ? optimizer_->best_score() : 0.0, 0.0, 0);
    HVL_LOG(kInfo, "autotune: done after " << scored_ << " samples: fusion threshold " << p.fusion_threshold_bytes
                                           << " B, cycle time " << p.cycle_time_ms << " ms, eager allreduce "
                                           << p.eager_allreduce_bytes << " B, hierarchical allreduce "
                                           << p.hierarchical_allreduce << ", hierarchical allgather "
                                           << p.hierarchical_allgather);
  }
}

void Autotuner::record(const std::vector<std::pair<std::string, int64_t>>& tensors, Clock::time_point now) {
  if (!active_ || pending_) return;
  for (const auto& t : tensors) {
    if (!seen_.insert(t.first).second) {
      seen_.clear();
      seen_.insert(t.first);
      on_boundary(now);
      if (pending_) return;  // the sample ended: nothing counts until the new parameters apply
    }
    step_bytes_ += t.second;
  }
}

void Autotuner::on_boundary(Clock::time_point now) {
  if (!in_sample_) {
    in_sample_ = true;
    steps_ = 0;
    sample_bytes_ = 0;
    sample_start_ = now;
  } else {
    sample_bytes_ += step_bytes_;
    if (++steps_ >= options_.steps_per_sample) end_sample(now);
  }
  step_bytes_ = 0;
}

void Autotuner::end_sample(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - sample_start_).count();
  const double score = seconds > 0.0 ? static_cast<double>(sample_bytes_) / seconds : 0.0;
  const int steps = steps_;
  in_sample_ = false;
  ++samples_taken_;
  if (samples_taken_ <= options_.warmup_samples) {
    log_row("warmup", current_, score, seconds, steps);
    return;  // same parameters again: nothing to broadcast
  }
  ++scored_;
  final_ = scored_ >= static_cast<size_t>(options_.max_samples);
  pending_ = true;
  if (!coordinator_) return;
  log_row("sample", current_, score, seconds, steps);
  optimizer_->add_sample(to_point(current_), score);
  next_ = final_ ? to_params(optimizer_->best_x(), current_) : to_params(optimizer_->next(), current_);
}

void Autotuner::log_row(const char* phase, const Params& p, double score, double seconds, int steps) {
  if (log_ == nullptr) return;
  std::fprintf(log_, "%d,%s,%lld,%.3f,%lld,%d,%d,%.6g,%.6f,%d\n", samples_taken_, phase,
               static_cast<long long>(p.fusion_threshold_bytes), p.cycle_time_ms,
               static_cast<long long>(p.eager_allreduce_bytes), p.hierarchical_allreduce ? 1 : 0,
               p.hierarchical_allgather ? 1 : 0, score, seconds, steps);
  std::fflush(log_);
}

}  // namespace autotune
}  // namespace horovodlite
