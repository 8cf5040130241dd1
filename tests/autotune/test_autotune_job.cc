// The autotuner inside a real job (run under mpirun with HOROVODLITE_AUTOTUNE=1
// and a small sample plan, see CMakeLists.txt): "training steps" of a few named
// allreduces; the tuner must finish within its samples, every rank must end with
// the same parameters (it applies them at the same cycle everywhere, so results
// stay correct throughout), the parameters fixed by hand must not move, and
// rank 0's CSV log must have one row per sample.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"

using namespace horovodlite;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Whether the hierarchical switches are tuned in this job (several hosts,
// tests/multihost, AUTOTUNE_START naming them): then each step also runs an
// allgather, and the switches must have taken both values during the run.
bool switches_tuned() { return env("HOROVODLITE_AUTOTUNE_START").find("HIERARCHICAL_ALLREDUCE=") != std::string::npos; }

// An allgather of rank-dependent rows (rank r: r + 1 rows); checks the result.
void allgather_step(int s) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int64_t cols = 5000;  // 20 KB a row: the output reaches tens of KB
  std::vector<float> in(static_cast<size_t>((rank + 1) * cols), static_cast<float>(rank * 1000 + s));
  TensorView view{in.data(), DataType::kFloat32, {rank + 1, cols}, kCpuDevice};
  std::vector<float> out;
  auto h = allgather_async("gather", view, [&out](const Shape& shape, TensorView* o) {
    out.assign(static_cast<size_t>(shape[0] * shape[1]), -1.0f);
    *o = TensorView{out.data(), DataType::kFloat32, shape, kCpuDevice};
    return Status::OK();
  });
  ASSERT_TRUE(h->wait().ok()) << h->status().message();
  ASSERT_EQ(static_cast<int64_t>(out.size()), int64_t{size} * (size + 1) / 2 * cols) << "step " << s;
  size_t i = 0;
  for (int r = 0; r < size; ++r) {
    for (int64_t k = 0; k < (r + 1) * cols; ++k, ++i) {
      ASSERT_EQ(out[i], static_cast<float>(r * 1000 + s)) << "step " << s << " from rank " << r;
    }
  }
}

// One step: four allreduces (Sum) of rank-dependent values; checks every result.
void step(int s) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const std::vector<int64_t> counts = {1000, 20000, 7, 300000};
  std::vector<std::vector<float>> in(counts.size()), out(counts.size());
  std::vector<HandlePtr> handles;
  for (size_t t = 0; t < counts.size(); ++t) {
    in[t].assign(static_cast<size_t>(counts[t]), static_cast<float>(rank + 1 + s % 3));
    out[t].assign(static_cast<size_t>(counts[t]), 0.0f);
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    handles.push_back(allreduce_async("grad." + std::to_string(t),
                                      TensorView{in[t].data(), DataType::kFloat32, {counts[t]}, kCpuDevice},
                                      TensorView{out[t].data(), DataType::kFloat32, {counts[t]}, kCpuDevice}, o));
  }
  if (switches_tuned()) allgather_step(s);
  const float want = static_cast<float>(size * (size + 1) / 2 + size * (s % 3));
  for (size_t t = 0; t < counts.size(); ++t) {
    ASSERT_TRUE(handles[t]->wait().ok()) << handles[t]->status().message();
    ASSERT_EQ(out[t][0], want) << "step " << s << " tensor " << t;
    ASSERT_EQ(out[t][static_cast<size_t>(counts[t] - 1)], want) << "step " << s << " tensor " << t;
  }
}

TEST(AutotuneJob, FinishesWithTheSameParametersOnEveryRank) {
  ASSERT_TRUE(config().autotune) << "run with HOROVODLITE_AUTOTUNE=1";
  const int64_t eager_before = config().eager_allreduce_bytes;
  // warmup 1 + 6 samples of 3 steps, each with a boundary step: well under 200 steps.
  int steps = 0;
  for (; steps < 200; ++steps) {
    step(steps);
    if (HasFatalFailure()) return;
  }
  // Every rank's final parameters, gathered as doubles: the same on every rank.
  const int size = horovodlite::size();
  std::vector<double> mine = {static_cast<double>(config().fusion_threshold_bytes), config().cycle_time_ms,
                              static_cast<double>(config().eager_allreduce_bytes),
                              static_cast<double>(config().hierarchical_allreduce),
                              static_cast<double>(config().hierarchical_allgather)};
  std::vector<double> all(mine.size() * static_cast<size_t>(size), 0.0);
  for (int r = 0; r < size; ++r) {
    std::vector<double> contribution(mine.size(), 0.0);
    if (r == horovodlite::rank()) contribution = mine;
    std::vector<double> summed(mine.size(), 0.0);
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    auto h = allreduce_async("check." + std::to_string(r),
                             TensorView{contribution.data(), DataType::kFloat64, {5}, kCpuDevice},
                             TensorView{summed.data(), DataType::kFloat64, {5}, kCpuDevice}, o);
    ASSERT_TRUE(h->wait().ok());
    for (size_t i = 0; i < mine.size(); ++i) all[static_cast<size_t>(r) * mine.size() + i] = summed[i];
  }
  for (int r = 1; r < size; ++r)
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(all[static_cast<size_t>(r) * mine.size() + i], all[i]) << r;
  EXPECT_EQ(config().eager_allreduce_bytes, eager_before) << "EAGER_ALLREDUCE_BYTES was set by hand";

  if (horovodlite::rank() == 0) {
    std::ifstream log(env("HOROVODLITE_AUTOTUNE_LOG"));
    ASSERT_TRUE(log.good()) << env("HOROVODLITE_AUTOTUNE_LOG");
    std::string line;
    int warmup = 0, samples = 0, final = 0;
    std::vector<std::string> finals;
    std::set<std::string> switches;  // "allreduce,allgather" columns of the rows
    std::getline(log, line);         // the header
    while (std::getline(log, line)) {
      std::vector<std::string> cols;
      std::stringstream row(line);
      for (std::string c; std::getline(row, c, ',');) cols.push_back(c);
      if (cols.size() == 10) switches.insert(cols[5] + "," + cols[6]);
      warmup += line.find(",warmup,") != std::string::npos;
      samples += line.find(",sample,") != std::string::npos;
      if (line.find(",final,") != std::string::npos) {
        ++final;
        finals.push_back(line);
      }
    }
    EXPECT_EQ(warmup, std::atoi(env("HOROVODLITE_AUTOTUNE_WARMUP_SAMPLES").c_str()));
    EXPECT_EQ(samples, std::atoi(env("HOROVODLITE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES").c_str()));
    ASSERT_EQ(final, 1);
    // The final row names the parameters now in force.
    EXPECT_NE(finals[0].find("," + std::to_string(config().fusion_threshold_bytes) + ","), std::string::npos)
        << finals[0];
    if (switches_tuned()) {
      // Started off/off (AUTOTUNE_START), then switched: both values of each
      // switch were in force for some samples, with correct results throughout.
      bool ar[2] = {false, false}, ag[2] = {false, false};
      for (const std::string& v : switches) {
        ar[v[0] == '1'] = true;
        ag[v[2] == '1'] = true;
      }
      EXPECT_TRUE(ar[0] && ar[1] && ag[0] && ag[1]) << "switch values seen: " << switches.size();
    } else {
      EXPECT_EQ(switches, std::set<std::string>{"0,0"}) << "one host: the switches are not tuned";
    }
  }
}

}  // namespace
