// The stall inspector: a name submitted by some ranks and not others is reported
// (tensor, submitting ranks, missing ranks), through full negotiation and through
// the response cache; with a shutdown time it fails on every rank and shuts down.
#include <memory>

#include "capture.h"
#include "test_util.h"

using namespace hvl_test;

namespace {

constexpr int kLaggard = 1;  // the rank that submits late

HandlePtr sum_async(const std::string& name, std::vector<float>& v) {
  TensorView t{v.data(), DataType::kFloat32, {static_cast<int64_t>(v.size())}};
  return allreduce_async(name, t, t, {ReduceOp::kSum});
}

std::vector<float> ones(size_t n) { return std::vector<float>(n, 1.0f); }

// "[0, 2]": every rank but the laggard.
std::string submitters() {
  std::string s = "[";
  for (int r = 0, n = 0; r < horovodlite::size(); ++r)
    if (r != kLaggard) s += (n++ ? ", " : "") + std::to_string(r);
  return s + "]";
}

// Rank 0 tells every rank whether it saw what it waited for (a broadcast under
// another name: it is negotiated independently of the stalled one).
bool share_from_rank0(bool value, const std::string& name) {
  int32_t flag = value ? 1 : 0;
  TensorView t{&flag, DataType::kInt32, {1}};
  Status s = broadcast_async(name, t, 0)->wait();
  EXPECT_TRUE(s.ok()) << s.to_string();
  return flag == 1;
}

// Every rank but the laggard submits `name`; rank 0 waits for the stall warning;
// then the laggard submits and the allreduce completes everywhere.
void expect_stall_warning(const std::string& name) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  std::unique_ptr<StderrCapture> capture;
  if (rank == 0) capture = std::make_unique<StderrCapture>();
  auto v = ones(8);
  HandlePtr h;
  if (rank != kLaggard) h = sum_async(name, v);
  const std::string line = "tensor '" + name + "': submitted by ranks " + submitters() + ", missing ranks [" +
                           std::to_string(kLaggard) + "]";
  bool seen = false;
  if (rank == 0) seen = capture->wait_for({"Stalled collectives", line}, std::chrono::seconds(60));
  seen = share_from_rank0(seen, name + ".seen");
  if (rank == kLaggard) h = sum_async(name, v);
  HVL_ASSERT_OK(h->wait());
  for (float x : v) EXPECT_EQ(x, static_cast<float>(size));
  if (rank == 0) {
    capture->restore();
    EXPECT_TRUE(seen) << "expected a warning containing \"" << line << "\"; stderr was:\n" << capture->text();
  }
  EXPECT_TRUE(seen);
}

}  // namespace

TEST(Stall, WarningNamesTensorSubmittersAndMissingRanks) {
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", "1"}}));
  expect_stall_warning("stall.uncached");
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", ""}}));
}

TEST(Stall, NamesWaitingInTheResponseCacheAreReportedToo) {
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
  // Horovod's name for the variable is accepted too.
  HVL_ASSERT_OK(restart_with({{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}}));
  for (int i = 0; i < 2; ++i) {  // negotiated once, then agreed through the cache
    auto v = ones(8);
    HVL_ASSERT_OK(sum_async("stall.cached", v)->wait());
  }
  ASSERT_GE(stats().cache_hits, 1u);
  expect_stall_warning("stall.cached");
  // And it is cached again and keeps working afterwards.
  auto v = ones(8);
  HVL_ASSERT_OK(sum_async("stall.cached", v)->wait());
  HVL_ASSERT_OK(restart_with({{"HOROVOD_STALL_CHECK_TIME_SECONDS", ""}}));
}

TEST(Stall, DisabledInspectorDoesNotWarn) {
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", "0.2"},
                              {"HOROVODLITE_STALL_CHECK_DISABLE", "1"},
                              {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", "0.5"}}));
  const int rank = horovodlite::rank();
  std::unique_ptr<StderrCapture> capture;
  if (rank == 0) capture = std::make_unique<StderrCapture>();
  auto v = ones(4);
  HandlePtr h;
  if (rank != kLaggard) h = sum_async("stall.quiet", v);
  // Rank 0 gives the (disabled) inspector several shutdown periods to misbehave.
  if (rank == 0) capture->wait_for({"no such text"}, std::chrono::seconds(2));
  share_from_rank0(true, "stall.quiet.go");
  if (rank == kLaggard) h = sum_async("stall.quiet", v);
  HVL_ASSERT_OK(h->wait());
  if (rank == 0) {
    capture->restore();
    EXPECT_EQ(capture->text().find("Stalled"), std::string::npos) << capture->text();
  }
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", ""},
                              {"HOROVODLITE_STALL_CHECK_DISABLE", ""},
                              {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", ""}}));
}

TEST(Stall, ShutdownTimeFailsTheOpOnEveryRankAndShutsDown) {
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
  HVL_ASSERT_OK(
      restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", "1"}, {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", "2"}}));
  const int rank = horovodlite::rank();
  auto v = ones(4);
  // The laggard is stuck on another name that nobody else submits.
  HandlePtr h = sum_async(rank == kLaggard ? "stall.other" : "stall.fatal", v);
  Status s = h->wait();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
  EXPECT_NE(s.message().find("stalled collective"), std::string::npos) << s.message();
  if (rank != kLaggard) {
    EXPECT_NE(s.message().find("tensor 'stall.fatal' was submitted by ranks " + submitters() + " but not by ranks [" +
                               std::to_string(kLaggard) + "]"),
              std::string::npos)
        << s.message();
  }
  // Horovodlite has shut down on every rank: later ops fail and say why.
  Status after = sum_async("stall.after", v)->wait();
  EXPECT_EQ(after.code(), StatusCode::kAborted) << after.to_string();
  EXPECT_NE(after.message().find("shut down after a stall"), std::string::npos) << after.message();
  EXPECT_NE(after.message().find("stall."), std::string::npos) << after.message();
  // shutdown() + init() work again.
  HVL_ASSERT_OK(
      restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", ""}, {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", ""}}));
  auto w = ones(4);
  HVL_ASSERT_OK(sum_async("stall.recovered", w)->wait());
  EXPECT_EQ(w[0], static_cast<float>(horovodlite::size()));
}

TEST(Config, ReliabilityVariablesAreValidatedAndAliased) {
  struct Bad {
    const char* var;
    const char* value;
  };
  for (Bad b : {Bad{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", "soon"}, Bad{"HOROVOD_STALL_CHECK_DISABLE", "maybe"},
                Bad{"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", "-1"}, Bad{"HOROVODLITE_PEER_TIMEOUT_SECONDS", "inf"},
                Bad{"HOROVOD_TIMELINE_MARK_CYCLES", "2"}}) {
    ASSERT_TRUE(shutdown().ok());
    setenv(b.var, b.value, 1);
    Status s = init();
    unsetenv(b.var);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.var << ": " << s.to_string();
    EXPECT_NE(s.message().find(b.var), std::string::npos) << s.message();
    EXPECT_FALSE(is_initialized());
  }
  HVL_ASSERT_OK(restart_with({{"HOROVOD_STALL_CHECK_TIME_SECONDS", "7.5"},
                              {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", "30"},
                              {"HOROVODLITE_STALL_CHECK_DISABLE", "yes"},
                              {"HOROVODLITE_PEER_TIMEOUT_SECONDS", "0"}}));
  EXPECT_EQ(config().stall_check_time_s, 7.5);
  EXPECT_EQ(config().stall_shutdown_time_s, 30.0);
  EXPECT_TRUE(config().stall_check_disable);
  EXPECT_EQ(config().peer_timeout_s, 0.0);
  HVL_ASSERT_OK(restart_with({{"HOROVOD_STALL_CHECK_TIME_SECONDS", ""},
                              {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", ""},
                              {"HOROVODLITE_STALL_CHECK_DISABLE", ""},
                              {"HOROVODLITE_PEER_TIMEOUT_SECONDS", ""}}));
  EXPECT_EQ(config().stall_check_time_s, 60.0);
  EXPECT_EQ(config().peer_timeout_s, 60.0);
  EXPECT_FALSE(config().stall_check_disable);
}
