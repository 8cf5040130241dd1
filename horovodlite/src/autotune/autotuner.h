// The autotuner (HOROVOD_AUTOTUNE=1): Bayesian optimisation of the runtime's
// tunable parameters — fusion threshold, cycle time, eager-allreduce size and,
// on multi-host jobs, the hierarchical allreduce/allgather switches — for the
// best observed throughput, in bytes reduced per second.
//
// How a sample is taken. A training step is recognised as Horovod does: when a
// tensor name that was already reduced since the last step boundary comes
// again, a new step starts. Every rank runs the same responses in the same
// order, so every rank sees the same step boundaries. After new parameters
// take effect, the first boundary starts a sample and `steps_per_sample`
// boundaries later it ends; its score is the bytes reduced in those steps over
// the wall time between the two boundaries, on rank 0. The first
// `warmup_samples` samples are discarded (caches warming, the first
// negotiations). After `max_samples` scored samples the best parameters are
// applied for good and tuning stops.
//
// How every rank applies the same parameters at the same cycle: when a sample
// ends (the same cycle everywhere), rank 0 picks the next parameters; the next
// cycle's vote (the negotiation's allreduce) carries them in a data slot of
// kWords int64 words reduced by min: rank 0 writes the encoded parameters (all
// >= 0), every other rank INT64_MAX, so every rank gets rank 0's; each applies them
// right after that vote (`pending_broadcast()` says which cycles carry them).
//
// Parameters the user set by hand (their variable is in the environment) are
// not tuned. Rank 0 writes one CSV row per sample to the log file, if any.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autotune/bayesian_optimizer.h"
#include "horovodlite/common.h"

namespace horovodlite {
namespace autotune {

struct Params {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 1.0;
  int64_t eager_allreduce_bytes = 0;
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  bool operator==(const Params& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_ms == o.cycle_time_ms &&
           eager_allreduce_bytes == o.eager_allreduce_bytes && hierarchical_allreduce == o.hierarchical_allreduce &&
           hierarchical_allgather == o.hierarchical_allgather;
  }
};

struct Options {
  std::string log_path;       // AUTOTUNE_LOG: CSV written by rank 0; empty: none
  int warmup_samples = 3;     // AUTOTUNE_WARMUP_SAMPLES
  int steps_per_sample = 10;  // AUTOTUNE_STEPS_PER_SAMPLE
  int max_samples = 20;       // AUTOTUNE_BAYES_OPT_MAX_SAMPLES
  double gp_noise = 0.8;      // AUTOTUNE_GAUSSIAN_PROCESS_NOISE
  // Which parameters to tune (false: fixed by the user, or not applicable).
  bool tune_fusion = true;
  bool tune_cycle_time = true;
  bool tune_eager = true;
  bool tune_hierarchical_allreduce = false;
  bool tune_hierarchical_allgather = false;
};

// The ranges searched (log scale for sizes and times).
struct Ranges {
  static constexpr double kMinFusionLog2 = 16.0;  // 64 KiB
  static constexpr double kMaxFusionLog2 = 28.0;  // 256 MiB
  static constexpr double kMinCycleMs = 0.2;
  static constexpr double kMaxCycleMs = 25.0;
  static constexpr int64_t kMaxEagerBytes = 64 << 10;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kWords = 4;

  // initial: the configuration the job started with (the first sample's).
  // coordinator: rank 0 (decides, times, writes the log).
  Autotuner(const Options& options, const Params& initial, bool coordinator);
  ~Autotuner();

  // Whether tuning still goes on (false once the final parameters are out).
  bool active() const { return active_; }
  // Whether the next vote carries new parameters (the same answer on every rank).
  bool pending_broadcast() const { return pending_; }
  // Rank 0 fills the words with the parameters to apply (each >= 0); others
  // with INT64_MAX, so that an element-wise min over the ranks leaves rank 0's.
  void encode(int64_t* words) const;
  // After the vote: the agreed parameters (*out); clears pending_broadcast().
  void decode(const int64_t* words, Params* out);

  // After running a cycle's responses: the name and bytes of each tensor
  // reduced, in the order run (the same on every rank).
  void record(const std::vector<std::pair<std::string, int64_t>>& tensors, Clock::time_point now);

  const Options& options() const { return options_; }
  const Params& current() const { return current_; }
  size_t samples_scored() const { return scored_; }
  // Maps a point of [0, 1]^d (the tuned dimensions, in the order of Params) to
  // parameters, starting from `base` for the dimensions not tuned; and back.
  Params to_params(const std::vector<double>& x, const Params& base) const;
  std::vector<double> to_point(const Params& p) const;

 private:
  void on_boundary(Clock::time_point now);
  void end_sample(Clock::time_point now);
  void log_row(const char* phase, const Params& p, double score, double seconds, int steps);

  Options options_;
  bool coordinator_;
  bool active_ = true;
  bool pending_ = false;
  size_t dims_ = 0;
  std::unique_ptr<BayesianOptimizer> optimizer_;  // rank 0 only
  Params current_;
  Params next_;         // rank 0: what the next broadcast carries
  bool final_ = false;  // the next broadcast carries the final parameters

  // Step and sample bookkeeping (every rank).
  std::unordered_set<std::string> seen_;  // names since the last step boundary
  bool in_sample_ = false;                // a sample has started (first boundary seen)
  int steps_ = 0;                         // boundaries since the sample started
  int64_t step_bytes_ = 0;                // bytes since the last boundary
  int64_t sample_bytes_ = 0;
  Clock::time_point sample_start_;
  int samples_taken_ = 0;  // including warmup
  size_t scored_ = 0;
  std::FILE* log_ = nullptr;
};

}  // namespace autotune
}  // namespace horovodlite
