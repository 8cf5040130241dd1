// The autotuner's parts without MPI: the Gaussian process, the Bayesian
// optimiser on known functions, and the Autotuner's sample protocol (step
// boundaries, warmup, the broadcast words, the final choice, the CSV log)
// driven by a synthetic job whose throughput depends on the parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autotune/autotuner.h"
#include "autotune/bayesian_optimizer.h"
#include "autotune/gaussian_process.h"

namespace horovodlite {
namespace autotune {
namespace {

TEST(GaussianProcess, InterpolatesItsSamplesAndIsUnsureFarFromThem) {
  GaussianProcess gp(1e-6);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i <= 10; ++i) {
    const double v = 0.05 * i;  // samples on [0, 0.5] only
    x.push_back({v});
    y.push_back(std::sin(6.0 * v) * 100.0 + 1000.0);
  }
  gp.fit(x, y);
  double mean = 0, sd_near = 0, sd_far = 0;
  gp.predict({0.225}, &mean, &sd_near);
  EXPECT_NEAR(mean, std::sin(6.0 * 0.225) * 100.0 + 1000.0, 2.0);
  gp.predict({0.95}, &mean, &sd_far);
  EXPECT_GT(sd_far, 10.0 * sd_near);
}

TEST(GaussianProcess, WithoutSamplesPredictsThePrior) {
  GaussianProcess gp(0.8);
  gp.fit({}, {});
  double mean = 1, sd = 0;
  gp.predict({0.5, 0.5}, &mean, &sd);
  EXPECT_EQ(mean, 0.0);
  EXPECT_EQ(sd, 1.0);
}

// A smooth bump with its top at (0.7, 0.3).
double bump(const std::vector<double>& x) {
  const double dx = x[0] - 0.7, dy = x[1] - 0.3;
  return 100.0 * std::exp(-(dx * dx + dy * dy) / 0.08) + 10.0;
}

TEST(BayesianOptimizer, FindsTheTopOfASmoothFunctionInTwentySamples) {
  BayesianOptimizer opt(2, 1e-4);
  for (int i = 0; i < 20; ++i) {
    const std::vector<double> x = opt.next();
    ASSERT_EQ(x.size(), 2u);
    for (double v : x) ASSERT_TRUE(v >= 0.0 && v <= 1.0) << v;
    opt.add_sample(x, bump(x));
  }
  EXPECT_GE(opt.best_score(), 0.9 * 110.0) << opt.best_x()[0] << ", " << opt.best_x()[1];
}

TEST(BayesianOptimizer, IsDeterministicForASeed) {
  BayesianOptimizer a(2, 0.8, 7), b(2, 0.8, 7);
  for (int i = 0; i < 6; ++i) {
    const auto xa = a.next(), xb = b.next();
    ASSERT_EQ(xa, xb);
    a.add_sample(xa, bump(xa));
    b.add_sample(xb, bump(xb));
  }
}

// A synthetic job: two tensors per step, one step takes a time that depends
// on the parameters (best near fusion 4 MiB and cycle time 1 ms).
struct SyntheticJob {
  static double step_seconds(const Params& p) {
    const double f = std::log2(static_cast<double>(std::max<int64_t>(p.fusion_threshold_bytes, 1))) - 22.0;
    const double c = std::log(p.cycle_time_ms);
    return 0.010 * (1.0 + 0.15 * f * f + 0.5 * c * c);
  }
};

// Runs the autotuner on every "rank" of a job in lock step: the same steps,
// rank 0's clock; the words each rank encodes are reduced by min as the vote does.
struct Job {
  using StepTime = double (*)(const Params&);
  Job(const Options& options, const Params& initial, int ranks, StepTime step_time = &SyntheticJob::step_seconds)
      : step_seconds(step_time) {
    for (int r = 0; r < ranks; ++r) tuners.emplace_back(new Autotuner(options, initial, r == 0));
    params = initial;
  }
  // One cycle: the vote (carrying parameters when pending), then one step's tensors.
  void cycle() {
    if (tuners[0]->pending_broadcast()) {
      int64_t agreed[Autotuner::kWords];
      for (auto& w : agreed) w = std::numeric_limits<int64_t>::max();
      for (auto& t : tuners) {
        ASSERT_TRUE(t->pending_broadcast());
        int64_t words[Autotuner::kWords];
        t->encode(words);
        for (size_t i = 0; i < Autotuner::kWords; ++i) agreed[i] = std::min(agreed[i], words[i]);
      }
      std::vector<Params> seen;
      for (auto& t : tuners) {
        Params p;
        t->decode(agreed, &p);
        seen.push_back(p);
      }
      for (const Params& p : seen) ASSERT_TRUE(p == seen[0]);
      params = seen[0];
      applied.push_back(params);
      ++broadcasts;
    }
    now += std::chrono::duration_cast<Autotuner::Clock::duration>(std::chrono::duration<double>(step_seconds(params)));
    const std::vector<std::pair<std::string, int64_t>> step = {{"grad.a", 1 << 20}, {"grad.b", 3 << 20}};
    for (auto& t : tuners) t->record(step, now);
  }
  StepTime step_seconds;
  std::vector<std::unique_ptr<Autotuner>> tuners;
  Params params;
  std::vector<Params> applied;  // every broadcast's parameters, in order
  Autotuner::Clock::time_point now{};
  int broadcasts = 0;
};

TEST(Autotuner, ReachesNinetyPercentOfTheBestFromAPoorStart) {
  Options options;
  options.tune_eager = false;
  options.log_path = testing::TempDir() + "autotune_test.csv";
  Params poor;
  poor.fusion_threshold_bytes = 1 << 20;  // 1 MiB
  poor.cycle_time_ms = 20.0;
  poor.eager_allreduce_bytes = 16384;
  Job job(options, poor, 3);
  int cycles = 0;
  while (job.tuners[0]->active() && cycles < 100000) {
    job.cycle();
    ++cycles;
    if (HasFatalFailure()) return;
  }
  ASSERT_FALSE(job.tuners[0]->active()) << "still tuning after " << cycles << " cycles";
  for (auto& t : job.tuners) EXPECT_FALSE(t->active());
  EXPECT_EQ(job.tuners[0]->samples_scored(), 20u);
  // 20 samples, each followed by new parameters (the last: the final ones).
  EXPECT_EQ(job.broadcasts, 20);
  EXPECT_EQ(job.params.eager_allreduce_bytes, 16384) << "a parameter not tuned changed";
  const double best = 1.0 / SyntheticJob::step_seconds(Params{4 << 20, 1.0, 0, false, false});
  const double got = 1.0 / SyntheticJob::step_seconds(job.params);
  const double start = 1.0 / SyntheticJob::step_seconds(poor);
  EXPECT_GE(got, 0.9 * best) << "fusion " << job.params.fusion_threshold_bytes << " cycle " << job.params.cycle_time_ms
                             << " (start " << start / best << " of best)";

  std::ifstream log(options.log_path);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(log, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 3u + 20u + 1u);  // header, warmup, samples, final
  EXPECT_EQ(lines[0].rfind("sample,phase,fusion_threshold_bytes,cycle_time_ms", 0), 0u);
  EXPECT_NE(lines[1].find(",warmup,"), std::string::npos);
  EXPECT_NE(lines[4].find(",sample,"), std::string::npos);
  EXPECT_NE(lines.back().find(",final,"), std::string::npos);
  std::remove(options.log_path.c_str());
}

TEST(Autotuner, NothingToTuneMeansInactive) {
  Options options;
  options.tune_fusion = options.tune_cycle_time = options.tune_eager = false;
  Autotuner t(options, Params{}, true);
  EXPECT_FALSE(t.active());
  EXPECT_FALSE(t.pending_broadcast());
}

TEST(Autotuner, ASampleSpansStepsPerSampleStepsAfterTheFirstBoundary) {
  Options options;
  options.warmup_samples = 0;
  options.steps_per_sample = 3;
  options.max_samples = 5;
  Autotuner t(options, Params{1 << 20, 1.0, 0, false, false}, false);
  Autotuner::Clock::time_point now{};
  const std::vector<std::pair<std::string, int64_t>> step = {{"a", 8}, {"b", 8}};
  // Step 1 has no boundary yet; steps 2..4 bring boundaries 1..3; the sample
  // starts at boundary 1 and ends at boundary 4 (during step 5).
  for (int s = 0; s < 4; ++s) {
    t.record(step, now);
    EXPECT_FALSE(t.pending_broadcast()) << "step " << s;
  }
  t.record(step, now);
  EXPECT_TRUE(t.pending_broadcast());
}

TEST(Autotuner, PointsAndParametersMapBothWays) {
  Options options;
  options.tune_hierarchical_allreduce = true;
  Autotuner t(options, Params{}, true);
  const Params p{8 << 20, 2.5, 8192, true, false};
  const Params q = t.to_params(t.to_point(p), Params{});
  EXPECT_EQ(q.fusion_threshold_bytes, p.fusion_threshold_bytes);
  EXPECT_NEAR(q.cycle_time_ms, p.cycle_time_ms, 1e-3);
  EXPECT_EQ(q.eager_allreduce_bytes, p.eager_allreduce_bytes);
  EXPECT_TRUE(q.hierarchical_allreduce);
  EXPECT_FALSE(q.hierarchical_allgather);
}

// The hierarchical switches as binary dimensions (a job on several hosts): the
// step is 40 % faster with the hierarchical allreduce and 10 % slower with the
// hierarchical allgather, on top of the fusion / cycle-time bowl. From a start
// with both on, the tuner must try the allreduce switch both ways, end with the
// allreduce on and the allgather off, and every broadcast must reach every rank
// the same (Job::cycle checks); the CSV carries both columns.
double hierarchical_step_seconds(const Params& p) {
  return SyntheticJob::step_seconds(p) * (p.hierarchical_allreduce ? 0.6 : 1.0) *
         (p.hierarchical_allgather ? 1.1 : 1.0);
}

TEST(Autotuner, TunesTheHierarchicalSwitches) {
  Options options;
  options.tune_eager = false;
  options.tune_hierarchical_allreduce = options.tune_hierarchical_allgather = true;
  options.log_path = testing::TempDir() + "autotune_hierarchical_test.csv";
  Params start{1 << 20, 20.0, 16384, true, true};
  Job job(options, start, 4, &hierarchical_step_seconds);
  for (int cycles = 0; job.tuners[0]->active() && cycles < 100000; ++cycles) {
    job.cycle();
    if (HasFatalFailure()) return;
  }
  ASSERT_FALSE(job.tuners[0]->active());
  EXPECT_TRUE(job.params.hierarchical_allreduce);
  EXPECT_FALSE(job.params.hierarchical_allgather);
  int with[2][2] = {};  // [switch][value]: broadcasts that carried it
  for (const Params& p : job.applied) {
    ++with[0][p.hierarchical_allreduce];
    ++with[1][p.hierarchical_allgather];
  }
  EXPECT_GT(with[0][0], 0) << "the hierarchical allreduce was never tried off";
  EXPECT_GT(with[1][0], 0) << "the hierarchical allgather was never tried off";
  const double best = 1.0 / hierarchical_step_seconds(Params{4 << 20, 1.0, 0, true, false});
  EXPECT_GE(1.0 / hierarchical_step_seconds(job.params), 0.9 * best);

  // The log: both switches per row; the final row as applied.
  std::ifstream log(options.log_path);
  std::string line, last;
  std::set<std::string> seen;  // "allreduce,allgather" values of the sample rows
  std::getline(log, line);
  EXPECT_NE(line.find(",hierarchical_allreduce,hierarchical_allgather,"), std::string::npos) << line;
  while (std::getline(log, line)) {
    last = line;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    ASSERT_EQ(cols.size(), 10u) << line;
    ASSERT_TRUE((cols[5] == "0" || cols[5] == "1") && (cols[6] == "0" || cols[6] == "1")) << line;
    if (cols[1] == "sample") seen.insert(cols[5] + "," + cols[6]);
  }
  EXPECT_GE(seen.size(), 2u);
  EXPECT_NE(last.find(",final,"), std::string::npos);
  EXPECT_NE(last.find(",1,0,"), std::string::npos) << last;
  std::remove(options.log_path.c_str());
}

TEST(Autotuner, SwitchesNotTunedKeepTheirValueAndTravelInTheVote) {
  Options options;  // the switches not tuned (one host, or set by hand)
  Autotuner t(options, Params{}, true);
  Params base{1 << 20, 1.0, 0, true, false};
  const Params q = t.to_params(std::vector<double>{0.0, 0.0, 0.0}, base);
  EXPECT_TRUE(q.hierarchical_allreduce);
  EXPECT_FALSE(q.hierarchical_allgather);
  EXPECT_EQ(t.to_point(base).size(), 3u);  // three dimensions: fusion, cycle time, eager

  // Rank 0's words win the min-vote; the switches are decoded on every rank.
  options.tune_hierarchical_allreduce = options.tune_hierarchical_allgather = true;
  Autotuner coordinator(options, Params{1 << 20, 1.0, 0, false, true}, true);
  Autotuner other(options, Params{}, false);
  int64_t a[Autotuner::kWords], b[Autotuner::kWords];
  coordinator.encode(a);
  other.encode(b);
  for (size_t i = 0; i < Autotuner::kWords; ++i) a[i] = std::min(a[i], b[i]);
  Params p;
  other.decode(a, &p);
  EXPECT_FALSE(p.hierarchical_allreduce);
  EXPECT_TRUE(p.hierarchical_allgather);
  EXPECT_EQ(p.fusion_threshold_bytes, 1 << 20);
}

}  // namespace
}  // namespace autotune
}  // namespace horovodlite
