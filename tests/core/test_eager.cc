// Eager allreduces (HOROVODLITE_EAGER_ALLREDUCE_BYTES, controller.h): a small
// cached host allreduce agreed in the last two cycles sends its data with the
// next cycle's negotiation. Results must be those of the two-round path whether
// the prediction holds or not. Off by default: each test turns it on (the
// core_eager_np* tests also run the whole suite with it on).
#include <chrono>
#include <cmath>
#include <thread>

#include "test_util.h"

using namespace hvl_test;

namespace {

// Element j of rank r in round k: small integers, exact in every dtype tested.
double value(int r, int64_t j, int k) { return static_cast<double>((r + j + k) % 5 + 1); }

double expected(ReduceOp op, int64_t j, int k, int size) {
  double sum = 0, mx = 0;
  for (int r = 0; r < size; ++r) {
    sum += value(r, j, k);
    mx = std::max(mx, value(r, j, k));
  }
  switch (op) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMax:
      return mx;
    case ReduceOp::kAverage:
      return sum / size;
    default:
      return NAN;
  }
}

// Rounds of one named allreduce (every rank waits for each), until `want` (> 0)
// of them went eagerly or `max_rounds` ran (want 0: all of them). Every rank checks every result. The
// eager count is the same on every rank (it follows agreed hits), so every rank
// runs the same number of rounds. Returns the eager allreduces seen.
uint64_t rounds(const std::string& name, DataType dtype, ReduceOp op, int64_t n, bool in_place, uint64_t want,
                int max_rounds) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const uint64_t before = stats().eager_allreduces;
  uint64_t eager = 0;
  for (int k = 0; k < max_rounds && (want == 0 || eager < want); ++k) {
    Buffer in(dtype, {n}), out(dtype, {n});
    for (int64_t j = 0; j < n; ++j) in.set(j, value(rank, j, k));
    Buffer& target = in_place ? in : out;
    HandlePtr h = allreduce_async(name, in.view(), target.view(), {op});
    Status s = h->wait(std::chrono::seconds(60));
    EXPECT_TRUE(s.ok()) << name << ": " << s.to_string();
    if (!s.ok()) return eager;
    for (int64_t j = 0; j < n; ++j) {
      const double e = expected(op, j, k, size);
      EXPECT_NEAR(target.get(j), e, tolerance(dtype, e)) << name << " round " << k << " element " << j;
    }
    eager = stats().eager_allreduces - before;
  }
  return eager;
}

// Restarts with eager allreduces on (16 KiB) for one test, and back after it.
class Eager : public ::testing::Test {
 protected:
  void SetUp() override {
    if (horovodlite::size() < 2) GTEST_SKIP() << "needs two ranks";
    was_ = getenv("HOROVODLITE_EAGER_ALLREDUCE_BYTES") ? getenv("HOROVODLITE_EAGER_ALLREDUCE_BYTES") : "";
    HVL_ASSERT_OK(restart_with({{"HOROVODLITE_EAGER_ALLREDUCE_BYTES", "16384"}}));
  }
  void TearDown() override {
    if (horovodlite::size() < 2) return;
    HVL_ASSERT_OK(restart_with({{"HOROVODLITE_EAGER_ALLREDUCE_BYTES", was_}}));
  }
  std::string was_;
};

}  // namespace

TEST_F(Eager, RepeatedSmallAllreducesGoWithTheNegotiation) {
  ASSERT_EQ(config().eager_allreduce_bytes, 16384);
  const std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat64,  DataType::kInt32, DataType::kInt64,
                                        DataType::kFloat16, DataType::kBFloat16, DataType::kUInt8};
  for (DataType dtype : dtypes) {
    std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMax};
    if (dtype == DataType::kFloat32 || dtype == DataType::kFloat64) ops.push_back(ReduceOp::kAverage);
    for (ReduceOp op : ops) {
      for (bool in_place : {false, true}) {
        const std::string name = "eager." + std::to_string(static_cast<int>(dtype)) + "." +
                                 std::to_string(static_cast<int>(op)) + (in_place ? ".in" : ".out");
        // Two rounds agree on the hit, so eager rounds follow (a round where the
        // ranks' cycles did not line up restarts the count: up to 200 rounds).
        EXPECT_GE(rounds(name, dtype, op, 7, in_place, 2, 200), 2u) << name;
      }
    }
  }
}

TEST_F(Eager, PrescaleAndPostscaleApply) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const uint64_t before = stats().eager_allreduces;
  for (int k = 0; k < 200 && stats().eager_allreduces - before < 2; ++k) {
    std::vector<float> v = {static_cast<float>(rank + 1), 2.0f, -4.0f};
    AllreduceOptions o;
    o.op = ReduceOp::kAverage;
    o.prescale_factor = 2.0;
    o.postscale_factor = 0.5;
    TensorView t{v.data(), DataType::kFloat32, {3}};
    HVL_ASSERT_OK(allreduce_async("eager.scaled", t, t, o)->wait(std::chrono::seconds(60)));
    // mean(2 * x) * 0.5 == mean(x)
    EXPECT_FLOAT_EQ(v[0], (size + 1) / 2.0f);
    EXPECT_FLOAT_EQ(v[1], 2.0f);
    EXPECT_FLOAT_EQ(v[2], -4.0f);
  }
  EXPECT_GE(stats().eager_allreduces - before, 2u);
}

// The prediction fails: the predicted name is not submitted (a different cached
// name comes instead), or one rank is late. Results stay right.
TEST_F(Eager, AMissedPredictionFallsBackToTheTwoRoundPath) {
  const int rank = horovodlite::rank();
  rounds("miss.b", DataType::kFloat32, ReduceOp::kSum, 5, false, 0, 3);                   // cached
  EXPECT_GE(rounds("miss.a", DataType::kFloat32, ReduceOp::kSum, 5, false, 1, 200), 1u);  // predicted next
  rounds("miss.b", DataType::kFloat32, ReduceOp::kSum, 5, false, 0, 1);                   // not miss.a
  EXPECT_GE(rounds("miss.a", DataType::kFloat32, ReduceOp::kSum, 5, false, 1, 200), 1u);
  // Rank 0 comes late: the others' cycles see miss.a without rank 0's vote.
  for (int k = 0; k < 3; ++k) {
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    rounds("miss.a", DataType::kFloat32, ReduceOp::kSum, 5, true, 0, 1);
  }
  // Two names in one cycle on some ranks and one on others.
  std::vector<float> a(5, 1.0f), b(5, 2.0f);
  TensorView ta{a.data(), DataType::kFloat32, {5}}, tb{b.data(), DataType::kFloat32, {5}};
  HandlePtr ha = allreduce_async("miss.a", ta, ta, {ReduceOp::kSum});
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  HandlePtr hb = allreduce_async("miss.b", tb, tb, {ReduceOp::kSum});
  HVL_ASSERT_OK(ha->wait(std::chrono::seconds(60)));
  HVL_ASSERT_OK(hb->wait(std::chrono::seconds(60)));
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(a[j], 1.0f * horovodlite::size());
    EXPECT_EQ(b[j], 2.0f * horovodlite::size());
  }
}

TEST_F(Eager, OffWithZeroAndAboveTheLimit) {
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_EAGER_ALLREDUCE_BYTES", "0"}}));
  EXPECT_EQ(rounds("off.small", DataType::kFloat32, ReduceOp::kSum, 7, false, 1, 30), 0u);
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_EAGER_ALLREDUCE_BYTES", "64"}}));
  EXPECT_EQ(rounds("off.large", DataType::kFloat32, ReduceOp::kSum, 17, false, 1, 30), 0u);  // 68 bytes
  EXPECT_GE(rounds("on.small", DataType::kFloat32, ReduceOp::kSum, 16, false, 1, 200), 1u);  // 64 bytes
}

TEST_F(Eager, RanksMustAgreeOnTheLimit) {
  const int rank = horovodlite::rank();  // (not known between shutdown() and init())
  HVL_ASSERT_OK(shutdown());
  setenv("HOROVODLITE_EAGER_ALLREDUCE_BYTES", rank == 0 ? "100" : "200", 1);
  Status s = init();
  unsetenv("HOROVODLITE_EAGER_ALLREDUCE_BYTES");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("HOROVODLITE_EAGER_ALLREDUCE_BYTES must be the same on every rank"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("from 100 to 200"), std::string::npos) << s.message();
  HVL_ASSERT_OK(init());  // (TearDown restarts with the suite's setting)
}
