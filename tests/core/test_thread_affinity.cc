// HOROVODLITE_THREAD_AFFINITY: parsing and the choice of the background
// thread's CPU (src/thread_affinity.h). Where the thread really runs in a job
// is checked by tests/python/mpi/test_basics.py.
#include <gtest/gtest.h>

#include "thread_affinity.h"

namespace horovodlite {
namespace {

const char* kVar = "HOROVODLITE_THREAD_AFFINITY";

ThreadAffinity parsed(const std::string& value) {
  ThreadAffinity a;
  const Status s = parse_thread_affinity(kVar, value, &a);
  EXPECT_TRUE(s.ok()) << value << ": " << s.message();
  return a;
}

// local_rank of local_size, all of them on the same allowed CPUs (unbound).
int cpu_of(const ThreadAffinity& a, int local_rank, int local_size, const std::vector<int>& allowed) {
  int cpu = -2;
  const Status s = background_thread_cpu(a, local_rank, local_size, CpuSharers{local_rank, local_size}, allowed, &cpu);
  EXPECT_TRUE(s.ok()) << s.message();
  return cpu;
}

TEST(ThreadAffinity, ParsesAutoNoneAndLists) {
  EXPECT_EQ(parsed("").mode, ThreadAffinity::Mode::kAuto);
  EXPECT_EQ(parsed("auto").mode, ThreadAffinity::Mode::kAuto);
  EXPECT_EQ(parsed("none").mode, ThreadAffinity::Mode::kNone);
  const ThreadAffinity list = parsed("1, 33,0 ,7");  // blanks as in Horovod's examples
  EXPECT_EQ(list.mode, ThreadAffinity::Mode::kList);
  EXPECT_EQ(list.cpus, (std::vector<int>{1, 33, 0, 7}));
  EXPECT_EQ(parsed("5").cpus, (std::vector<int>{5}));
}

TEST(ThreadAffinity, RefusesMalformedValuesNamingTheVariable) {
  for (const char* v : {"x", "1,,2", "1,", "-1", "0,1.5", "99999", "off"}) {
    ThreadAffinity a;
    const Status s = parse_thread_affinity(kVar, v, &a);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << v;
    EXPECT_NE(s.message().find(kVar), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::string("'") + v + "'"), std::string::npos) << s.message();
  }
}

TEST(ThreadAffinity, AutoPinsRoundRobinOnlyWhereRanksOutnumberCpus) {
  const ThreadAffinity a = parsed("auto");
  // 4 local ranks on CPUs {0, 1}: 0, 1, 0, 1.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cpu_of(a, r, 4, {0, 1}), r % 2) << r;
  // Allowed CPUs that are not 0..n-1 (taskset -c 2,5,6).
  EXPECT_EQ(cpu_of(a, 0, 4, {2, 5, 6}), 2);
  EXPECT_EQ(cpu_of(a, 2, 4, {2, 5, 6}), 6);
  EXPECT_EQ(cpu_of(a, 3, 4, {2, 5, 6}), 2);
  // As many CPUs as ranks, or more, or unknown: left to the kernel.
  EXPECT_EQ(cpu_of(a, 1, 2, {0, 1}), -1);
  EXPECT_EQ(cpu_of(a, 1, 4, {0, 1, 2, 3, 4, 5, 6, 7}), -1);
  EXPECT_EQ(cpu_of(a, 1, 4, {}), -1);
  EXPECT_EQ(cpu_of(parsed("none"), 3, 4, {0, 1}), -1);
}

TEST(ThreadAffinity, AutoCountsTheRanksSharingTheCpusNotTheLocalRanks) {
  const ThreadAffinity a = parsed("auto");
  int cpu = -2;
  // mpirun --bind-to core on a host with two hardware threads per core: 8
  // local ranks, each alone on its core's two threads: left as bound.
  ASSERT_TRUE(background_thread_cpu(a, 5, 8, CpuSharers{0, 1}, {5, 69}, &cpu).ok());
  EXPECT_EQ(cpu, -1);
  // --bind-to core:overload-allowed, two ranks on core 1: on it.
  ASSERT_TRUE(background_thread_cpu(a, 3, 4, CpuSharers{1, 2}, {1}, &cpu).ok());
  EXPECT_EQ(cpu, 1);
  // Two simulated hosts of two ranks each on one 2-CPU machine: the second
  // host's local rank 0 is the third rank on these CPUs.
  ASSERT_TRUE(background_thread_cpu(a, 0, 2, CpuSharers{2, 4}, {0, 1}, &cpu).ok());
  EXPECT_EQ(cpu, 0);
}

TEST(ThreadAffinity, SharersAreTheRanksWithTheSameKey) {
  const std::vector<int> two = {0, 1}, one = {1};
  EXPECT_EQ(cpu_set_key(two), cpu_set_key(two));
  EXPECT_NE(cpu_set_key(two), cpu_set_key(one));
  EXPECT_NE(cpu_set_key({1, 23}), cpu_set_key({12, 3}));
  const uint64_t a = cpu_set_key(two), b = cpu_set_key(one);
  const std::vector<uint64_t> keys = {a, b, a, b, a};
  const CpuSharers r2 = cpu_sharers(keys, 2), r3 = cpu_sharers(keys, 3), r0 = cpu_sharers(keys, 0);
  EXPECT_EQ(r0.index, 0);
  EXPECT_EQ(r0.count, 3);
  EXPECT_EQ(r2.index, 1);
  EXPECT_EQ(r2.count, 3);
  EXPECT_EQ(r3.index, 1);
  EXPECT_EQ(r3.count, 2);
}

TEST(ThreadAffinity, ListGivesEachLocalRankItsCpu) {
  const ThreadAffinity a = parsed("1,0,0,1");
  EXPECT_EQ(cpu_of(a, 0, 4, {0, 1}), 1);
  EXPECT_EQ(cpu_of(a, 2, 4, {0, 1}), 0);
  EXPECT_EQ(cpu_of(a, 3, 4, {0, 1}), 1);
  // Also where every rank has a CPU of its own (the user asked).
  EXPECT_EQ(cpu_of(parsed("3,2"), 0, 2, {0, 1, 2, 3}), 3);
}

TEST(ThreadAffinity, ListErrorsNameTheVariableAndTheLocalRank) {
  int cpu = 0;
  Status s = background_thread_cpu(parsed("0,1"), 2, 3, CpuSharers{2, 3}, {0, 1}, &cpu);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(kVar), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("local rank 2"), std::string::npos) << s.message();
  s = background_thread_cpu(parsed("0,7"), 1, 2, CpuSharers{1, 2}, {0, 1}, &cpu);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("CPU 7"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("local rank 1"), std::string::npos) << s.message();
  EXPECT_EQ(cpu, -1);
}

}  // namespace
}  // namespace horovodlite
