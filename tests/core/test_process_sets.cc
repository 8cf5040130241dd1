// Process sets in the core: every op on the even ranks, on the odd ranks and on
// the world at once (with the same names on every set), a rank outside a set,
// sets given to init(), dynamic add/remove, and removal with ops in flight.
// Run at np 2, 3 and 4 with HOROVODLITE_DYNAMIC_PROCESS_SETS=1 (see CMakeLists).
#include <mpi.h>

#include <chrono>
#include <thread>

#include "test_util.h"

using namespace hvl_test;

namespace {

std::vector<int> parity_ranks(int parity) {
  std::vector<int> r;
  for (int i = parity; i < horovodlite::size(); i += 2) r.push_back(i);
  return r;
}

int index_of(const std::vector<int>& ranks, int rank) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank) return static_cast<int>(i);
  return -1;
}

// Every op on one set, enqueued at once; check() waits and verifies. The names
// are the same whatever the set, so a rank has each name in flight on two sets.
class SetOps {
 public:
  explicit SetOps(ProcessSet set) : set_(set), ranks_(set.ranks()), me_(horovodlite::rank()) {}

  void enqueue() {
    const int n = static_cast<int>(ranks_.size());
    const int r = index_of(ranks_, me_);
    ASSERT_GE(r, 0);
    ASSERT_EQ(set_.rank(), r);
    ASSERT_EQ(set_.size(), n);
    ASSERT_TRUE(set_.included());
    // allreduce: sum and average of (global rank + 1 + i)
    for (int i = 0; i < kN; ++i) ar_in_.set(i, me_ + 1 + i);
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    sum.process_set = set_;
    h_.push_back(allreduce_async("ps.allreduce", ar_in_.view(), ar_out_.view(), sum));
    for (int i = 0; i < kN; ++i) avg_.set(i, me_ + 1 + i);
    AllreduceOptions avg;
    avg.process_set = set_;
    h_.push_back(allreduce_async("ps.average", avg_.view(), avg_.view(), avg));
    // allgather: set rank r contributes r + 1 rows of its global rank
    gather_in_ = std::make_unique<Buffer>(DataType::kInt32, Shape{r + 1, 2});
    for (int i = 0; i < 2 * (r + 1); ++i) gather_in_->set(i, me_);
    AllgatherOptions ag;
    ag.process_set = set_;
    h_.push_back(
        allgather_async("ps.allgather", gather_in_->view(), allocate_into(&gather_out_, DataType::kInt32), ag));
    // broadcast from the set's last member (a global rank)
    for (int i = 0; i < kN; ++i) bc_.set(i, me_ == ranks_.back() ? 1000 + i : -1);
    BroadcastOptions bo;
    bo.process_set = set_;
    h_.push_back(broadcast_async("ps.broadcast", bc_.view(), ranks_.back(), bo));
    // alltoall: one row of (global rank * 100 + destination set rank) to each member
    a2a_in_ = std::make_unique<Buffer>(DataType::kFloat32, Shape{n});
    for (int j = 0; j < n; ++j) a2a_in_->set(j, me_ * 100 + j);
    AlltoallOptions ao;
    ao.process_set = set_;
    h_.push_back(alltoall_async("ps.alltoall", a2a_in_->view(), std::vector<int64_t>(n, 1),
                                allocate_into(&a2a_out_, DataType::kFloat32), ao));
    // reducescatter: 2 rows per member, each of (global rank + row)
    rs_in_ = std::make_unique<Buffer>(DataType::kFloat64, Shape{2 * n});
    for (int i = 0; i < 2 * n; ++i) rs_in_->set(i, me_ + i);
    ReducescatterOptions ro;
    ro.op = ReduceOp::kSum;
    ro.process_set = set_;
    h_.push_back(
        reducescatter_async("ps.reducescatter", rs_in_->view(), allocate_into(&rs_out_, DataType::kFloat64), ro));
    BarrierOptions bo2;
    bo2.process_set = set_;
    h_.push_back(barrier_async(bo2));
  }

  void check() {
    for (auto& h : h_) HVL_ASSERT_OK(h->wait());
    const int n = static_cast<int>(ranks_.size());
    const int r = index_of(ranks_, me_);
    int sum_ranks = 0;
    for (int g : ranks_) sum_ranks += g;
    for (int i = 0; i < kN; ++i) {
      EXPECT_EQ(ar_out_.get(i), sum_ranks + n * (1 + i)) << "set " << set_.id() << " i " << i;
      EXPECT_DOUBLE_EQ(avg_.get(i), (sum_ranks + n * (1.0 + i)) / n) << "set " << set_.id();
      EXPECT_EQ(bc_.get(i), 1000 + i) << "set " << set_.id();
    }
    ASSERT_TRUE(gather_out_);
    int64_t row = 0;
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < j + 1; ++k, ++row) EXPECT_EQ(gather_out_->get(2 * row), ranks_[j]) << "set " << set_.id();
    EXPECT_EQ(gather_out_->size(), 2 * row);
    ASSERT_TRUE(a2a_out_);
    ASSERT_EQ(a2a_out_->size(), n);
    for (int j = 0; j < n; ++j) EXPECT_EQ(a2a_out_->get(j), ranks_[j] * 100 + r) << "set " << set_.id();
    ASSERT_TRUE(rs_out_);
    ASSERT_EQ(rs_out_->size(), 2);
    for (int k = 0; k < 2; ++k) EXPECT_EQ(rs_out_->get(k), sum_ranks + n * (2 * r + k)) << "set " << set_.id();
  }

 private:
  static constexpr int kN = 9;
  ProcessSet set_;
  std::vector<int> ranks_;
  int me_;
  Buffer ar_in_{DataType::kFloat32, Shape{kN}}, ar_out_{DataType::kFloat32, Shape{kN}};
  Buffer avg_{DataType::kFloat64, Shape{kN}};
  Buffer bc_{DataType::kInt64, Shape{kN}};
  std::unique_ptr<Buffer> gather_in_, gather_out_, a2a_in_, a2a_out_, rs_in_, rs_out_;
  std::vector<HandlePtr> h_;
};

class ProcessSets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(getenv("HOROVODLITE_DYNAMIC_PROCESS_SETS") != nullptr, true); }
  // Removes the sets a test added (collective).
  void TearDown() override {
    for (const ProcessSet& ps : horovodlite::process_sets()) {
      if (!ps.is_global()) {
        EXPECT_TRUE(remove_process_set(ps).ok());
      }
    }
  }
};

}  // namespace

TEST_F(ProcessSets, EveryOpOnEvenOddAndWorldAtOnce) {
  ProcessSet even, odd;
  HVL_ASSERT_OK(add_process_set(parity_ranks(0), &even));
  const bool has_odd = horovodlite::size() > 1;
  if (has_odd) {
    HVL_ASSERT_OK(add_process_set(parity_ranks(1), &odd));
  }
  EXPECT_NE(even.id(), 0);
  if (has_odd) {
    EXPECT_NE(odd.id(), even.id());
  }
  const ProcessSet mine = horovodlite::rank() % 2 == 0 ? even : odd;
  for (int round = 0; round < 3; ++round) {  // later rounds go through the sets' response caches
    SetOps on_set(mine), on_world(kGlobalProcessSet);
    on_set.enqueue();
    on_world.enqueue();
    on_set.check();
    on_world.check();
  }
}

TEST_F(ProcessSets, RankOutsideASetGetsAnErrorNamingTheSetAndTheRank) {
  if (horovodlite::size() < 2) GTEST_SKIP() << "needs a rank outside the set";
  ProcessSet first;
  HVL_ASSERT_OK(add_process_set({0}, &first));
  if (horovodlite::rank() == 0) {
    EXPECT_TRUE(first.included());
    EXPECT_EQ(first.rank(), 0);
    return;
  }
  EXPECT_FALSE(first.included());
  EXPECT_EQ(first.rank(), -1);
  EXPECT_EQ(first.size(), 1);
  Buffer b(DataType::kFloat32, Shape{4});
  AllreduceOptions o;
  o.process_set = first;
  const Status s = allreduce_async("outside", b.view(), b.view(), o)->wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank " + std::to_string(horovodlite::rank()) + " is not in process set " +
                             std::to_string(first.id())),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("'outside'"), std::string::npos) << s.message();
  BarrierOptions bo;
  bo.process_set = first;
  EXPECT_EQ(barrier_async(bo)->wait().code(), StatusCode::kInvalidArgument);
}

TEST_F(ProcessSets, BroadcastRootOutsideTheSetIsAnError) {
  if (horovodlite::size() < 2) GTEST_SKIP();
  ProcessSet even;
  HVL_ASSERT_OK(add_process_set(parity_ranks(0), &even));
  if (!even.included()) return;
  Buffer b(DataType::kFloat32, Shape{4});
  BroadcastOptions o;
  o.process_set = even;
  const Status s = broadcast_async("bad_root", b.view(), 1, o)->wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not in process set"), std::string::npos) << s.message();
}

TEST_F(ProcessSets, DynamicAddAndRemove) {
  const int size = horovodlite::size();
  // Two ranks given out of order (one at np 2: {0, 1} would be the global set).
  const std::vector<int> ranks = size > 2 ? std::vector<int>{size - 1, 0} : std::vector<int>{size - 1};
  const std::vector<int> sorted = size > 2 ? std::vector<int>{0, size - 1} : std::vector<int>{size - 1};
  if (size == 1) {
    // The only set of one rank is the global set: a duplicate.
    ProcessSet dup;
    EXPECT_EQ(add_process_set({0}, &dup).code(), StatusCode::kInvalidArgument);
    return;
  }
  ProcessSet ps;
  HVL_ASSERT_OK(add_process_set(ranks, &ps));
  EXPECT_EQ(ps.ranks(), sorted);
  ASSERT_EQ(horovodlite::process_sets().size(), 2u);
  // A set with the same ranks exists already.
  ProcessSet dup;
  const Status d = add_process_set(sorted, &dup);
  EXPECT_EQ(d.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.message().find("exists already"), std::string::npos) << d.message();
  // Ranks out of range fail on every rank.
  EXPECT_EQ(add_process_set({0, size}, &dup).code(), StatusCode::kInvalidArgument);
  // Ranks that differ between ranks fail on every rank (and register nothing).
  const Status differ = add_process_set({horovodlite::rank()}, &dup);
  EXPECT_EQ(differ.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(differ.message().find("differ between ranks"), std::string::npos) << differ.message();
  ASSERT_EQ(horovodlite::process_sets().size(), 2u);

  if (ps.included()) {
    Buffer b(DataType::kInt32, Shape{3});
    for (int i = 0; i < 3; ++i) b.set(i, horovodlite::rank());
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.process_set = ps;
    HVL_ASSERT_OK(allreduce_async("dyn", b.view(), b.view(), o)->wait());
    EXPECT_EQ(b.get(0), size - 1);
  }
  HVL_ASSERT_OK(remove_process_set(ps));
  EXPECT_EQ(ps.size(), -1);
  EXPECT_FALSE(ps.included());
  ASSERT_EQ(horovodlite::process_sets().size(), 1u);
  Buffer b(DataType::kInt32, Shape{3});
  AllreduceOptions o;
  o.process_set = ps;
  const Status gone = allreduce_async("dyn", b.view(), b.view(), o)->wait();
  EXPECT_EQ(gone.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gone.message().find("not registered"), std::string::npos) << gone.message();
  EXPECT_FALSE(remove_process_set(ps).ok());
  EXPECT_FALSE(remove_process_set(kGlobalProcessSet).ok());
  // The same ranks again: a new id, the same on every rank.
  ProcessSet again;
  HVL_ASSERT_OK(add_process_set(ranks, &again));
  EXPECT_NE(again.id(), ps.id());
  int ids[2] = {again.id(), -again.id()};
  MPI_Allreduce(MPI_IN_PLACE, ids, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(ids[0], -ids[1]);
}

TEST_F(ProcessSets, RemovingASetWithOpsInFlightIsAnErrorOnEveryRank) {
  const int size = horovodlite::size();
  if (size < 3) GTEST_SKIP() << "needs a set of two ranks other than the world";
  ProcessSet ps;
  HVL_ASSERT_OK(add_process_set({0, 1}, &ps));
  Buffer b(DataType::kFloat32, Shape{5});
  AllreduceOptions o;
  o.process_set = ps;
  HandlePtr pending;
  // Rank 0's op waits for rank 1, which has not submitted it yet.
  if (horovodlite::rank() == 0) pending = allreduce_async("in_flight", b.view(), b.view(), o);
  const Status s = remove_process_set(ps);
  EXPECT_EQ(s.code(), StatusCode::kPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("in flight on rank(s) 0"), std::string::npos) << s.message();
  EXPECT_EQ(ps.size(), 2);  // still registered
  if (horovodlite::rank() == 1) pending = allreduce_async("in_flight", b.view(), b.view(), o);
  if (pending) HVL_ASSERT_OK(pending->wait());
  HVL_ASSERT_OK(remove_process_set(ps));
}

TEST_F(ProcessSets, AnOpOnOneSetDoesNotWaitForAnother) {
  // A = {0, 1}, B = {1, 2}: rank 1 finishes its op on B (which waits for a late
  // rank 2) before it submits on A, while rank 0 already waits on A. Rank 1's
  // background thread must keep A's negotiation going meanwhile.
  if (horovodlite::size() < 3) GTEST_SKIP();
  ProcessSet a, b;
  HVL_ASSERT_OK(add_process_set({0, 1}, &a));
  HVL_ASSERT_OK(add_process_set({1, 2}, &b));
  Buffer x(DataType::kFloat32, Shape{3});
  for (int i = 0; i < 3; ++i) x.set(i, 1);
  AllreduceOptions oa, ob;
  oa.op = ob.op = ReduceOp::kSum;
  oa.process_set = a;
  ob.process_set = b;
  const int rank = horovodlite::rank();
  if (rank == 0) {
    HVL_ASSERT_OK(allreduce_async("chain", x.view(), x.view(), oa)->wait());
    EXPECT_EQ(x.get(0), 3);  // 1 + (rank 1's 1 + 1 from B)
  } else if (rank == 1) {
    HVL_ASSERT_OK(allreduce_async("chain", x.view(), x.view(), ob)->wait());
    EXPECT_EQ(x.get(0), 2);
    HVL_ASSERT_OK(allreduce_async("chain", x.view(), x.view(), oa)->wait());
    EXPECT_EQ(x.get(0), 3);
  } else if (rank == 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    HVL_ASSERT_OK(allreduce_async("chain", x.view(), x.view(), ob)->wait());
    EXPECT_EQ(x.get(0), 2);
  }
}

TEST(ProcessSetsConfig, InitSetsAndTheDynamicVariable) {
  // Without the variable: add and remove are refused with Horovod's advice.
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_DYNAMIC_PROCESS_SETS", ""}}));
  ProcessSet ps;
  const Status s = add_process_set({0}, &ps);
  EXPECT_EQ(s.code(), StatusCode::kPrecondition);
  EXPECT_NE(s.message().find("HOROVOD_DYNAMIC_PROCESS_SETS=1"), std::string::npos) << s.message();
  // Sets given to init() need no variable, and get ids 1, 2, ... in order.
  HVL_ASSERT_OK(shutdown());
  InitOptions options;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<int> even, odd;
  for (int r = 0; r < world; ++r) (r % 2 ? odd : even).push_back(r);
  if (world > 1) options.process_sets = {odd, even};
  HVL_ASSERT_OK(init(options));
  const std::vector<ProcessSet> sets = horovodlite::process_sets();
  ASSERT_EQ(sets.size(), world > 1 ? 3u : 1u);
  if (world > 1) {
    EXPECT_EQ(sets[1].ranks(), odd);
    EXPECT_EQ(sets[2].ranks(), even);
    const ProcessSet mine = horovodlite::rank() % 2 ? sets[1] : sets[2];
    SetOps ops(mine);
    ops.enqueue();
    ops.check();
    EXPECT_EQ(remove_process_set(mine).code(), StatusCode::kPrecondition);
    // shutdown() on one rank ends every rank's ops in flight (as in Horovod): a
    // rank whose set was done first (a set of one) must not shut down while the
    // others' set ops still run.
    HVL_ASSERT_OK(barrier_async(BarrierOptions())->wait());
  }
  // Bad static sets fail init on every rank.
  HVL_ASSERT_OK(shutdown());
  InitOptions bad;
  bad.process_sets = {{0, world}};
  const Status b = init(bad);
  EXPECT_EQ(b.code(), StatusCode::kInvalidArgument) << b.to_string();
  EXPECT_FALSE(horovodlite::is_initialized());
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_DYNAMIC_PROCESS_SETS", "1"}}));
}

// A mismatch inside a set whose ranks are not 0..n-1: the error names the
// members by their global ranks and says which set.
TEST_F(ProcessSets, MismatchErrorsNameGlobalRanksAndTheSet) {
  const int size = horovodlite::size(), rank = horovodlite::rank();
  if (size < 3) GTEST_SKIP() << "needs a set of two ranks that are not ranks 0 and 1 of the world";
  std::vector<int> ranks;
  for (int r = 1; r < size; ++r) ranks.push_back(r);
  ProcessSet tail;
  HVL_ASSERT_OK(add_process_set(ranks, &tail));
  if (!tail.included()) return;
  Buffer b(DataType::kFloat32, Shape{rank == size - 1 ? 6 : 4});
  AllreduceOptions o;
  o.process_set = tail;
  const Status s = allreduce_async("ps.bad", b.view(), b.view(), o)->wait();
  EXPECT_EQ(s.code(), StatusCode::kMismatch) << s.to_string();
  const std::string where = "in process set " + std::to_string(tail.id()) + " (ranks [" + [&] {
    std::string l;
    for (size_t i = 0; i < ranks.size(); ++i) l += (i ? ", " : "") + std::to_string(ranks[i]);
    return l;
  }() + "])";
  EXPECT_NE(s.message().find("Mismatched shapes for tensor 'ps.bad' (allreduce) " + where), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("rank 1: [4]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank " + std::to_string(size - 1) + ": [6]"), std::string::npos) << s.message();
  // The set keeps working.
  Buffer ok(DataType::kFloat32, Shape{3});
  HVL_ASSERT_OK(allreduce_async("ps.after_bad", ok.view(), ok.view(), o)->wait());
}

// A stall inside a set (ranks 1..n-1) shuts the job down; its members' ops fail
// with the stall naming global ranks and the set, and rank 0, outside the set,
// learns the same reason rather than a generic "shutdown() was called".
TEST_F(ProcessSets, StallInASetTellsEveryRankWhy) {
  const int size = horovodlite::size(), rank = horovodlite::rank();
  if (size < 3) GTEST_SKIP() << "needs a set of two ranks and a rank outside it";
  HVL_ASSERT_OK(
      restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", "1"}, {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", "2"}}));
  std::vector<int> ranks;
  for (int r = 1; r < size; ++r) ranks.push_back(r);
  ProcessSet tail, self;
  HVL_ASSERT_OK(add_process_set(ranks, &tail));
  HVL_ASSERT_OK(add_process_set({0}, &self));
  Buffer b(DataType::kFloat32, Shape{4});
  const std::string where = "' in process set " + std::to_string(tail.id()) + " (ranks [1, ";
  Status s;
  if (tail.included()) {
    // Rank 1 waits in 'ps.stuck', the other members in a name rank 1 never submits.
    AllreduceOptions o;
    o.process_set = tail;
    s = allreduce_async(rank == 1 ? "ps.stuck" : "ps.elsewhere", b.view(), b.view(), o)->wait();
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
    if (rank == 1) {
      EXPECT_NE(s.message().find("tensor 'ps.stuck" + where), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("was submitted by ranks [1] but not by ranks [2"), std::string::npos) << s.message();
    }
  } else {
    // Rank 0 runs ops on a set of its own until the runtime stops (and says why).
    AllreduceOptions o;
    o.process_set = self;
    for (int i = 0; i < 60000 && s.ok(); ++i) {
      s = allreduce_async("ps.poll", b.view(), b.view(), o)->wait();
      if (s.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
    EXPECT_NE(s.message().find("shut down after a stall"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("stalled collective: tensor 'ps."), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(where), std::string::npos) << s.message();
  }
  // Every rank: later ops fail with the stall too.
  const Status after = allreduce_async("ps.after", b.view(), b.view(), {})->wait();
  EXPECT_NE(after.message().find("shut down after a stall"), std::string::npos) << after.message();
  EXPECT_NE(after.message().find("stalled collective"), std::string::npos) << after.message();
  HVL_ASSERT_OK(
      restart_with({{"HOROVODLITE_STALL_CHECK_TIME_SECONDS", ""}, {"HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS", ""}}));
}
