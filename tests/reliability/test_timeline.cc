// The timeline: started at run time or by HOROVODLITE_TIMELINE, written by rank 0,
// valid JSON after stop_timeline() and after shutdown, with the phases of every
// named tensor.
#include <unistd.h>

#include "test_util.h"
#include "timeline_util.h"

using namespace hvl_test;

namespace {

std::string temp_path(const std::string& stem) { return "/tmp/hvl_" + stem + "_" + std::to_string(getpid()) + ".json"; }

// A few ops of every kind under fixed names, twice (negotiated, then cached).
void run_some_ops() {
  const int size = horovodlite::size();
  for (int iter = 0; iter < 2; ++iter) {
    std::vector<float> a(100, 1.0f), b(50, 2.0f);
    TensorView ta{a.data(), DataType::kFloat32, {100}}, tb{b.data(), DataType::kFloat32, {50}};
    auto ha = allreduce_async("tl.a", ta, ta, {ReduceOp::kSum});
    auto hb = allreduce_async("tl.b", tb, tb, {ReduceOp::kSum});
    std::vector<double> g(3, 1.0);
    std::unique_ptr<Buffer> gathered;
    auto hg = allgather_async("tl.gather", TensorView{g.data(), DataType::kFloat64, {3}},
                              allocate_into(&gathered, DataType::kFloat64));
    std::vector<int32_t> c(7, horovodlite::rank());
    auto hc = broadcast_async("tl.bcast", TensorView{c.data(), DataType::kInt32, {7}}, 0);
    HVL_ASSERT_OK(ha->wait());
    HVL_ASSERT_OK(hb->wait());
    HVL_ASSERT_OK(hg->wait());
    HVL_ASSERT_OK(hc->wait());
    EXPECT_EQ(a[0], static_cast<float>(size));
    EXPECT_EQ(c[6], 0);
  }
  HVL_ASSERT_OK(barrier_async()->wait());
}

bool has_phase_ending_with(const TensorEvents& t, const std::string& suffix, const std::string& except) {
  for (const auto& n : t.names)
    if (n != except && n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

void check_trace(const nlohmann::json& trace) {
  ASSERT_TRUE(trace.is_array());
  auto by = events_by_tensor(trace);
  const int size = horovodlite::size();
  for (const char* name : {"tl.a", "tl.b"}) {
    ASSERT_TRUE(by.count(name)) << name;
    const TensorEvents& t = by[name];
    EXPECT_TRUE(t.names.count("NEGOTIATE_ALLREDUCE")) << name;
    EXPECT_TRUE(t.names.count("ALLREDUCE")) << name;
    EXPECT_TRUE(t.names.count("QUEUE")) << name;
    // The collective, named by its algorithm (MPI_ALLREDUCE, RING_ALLREDUCE, ...).
    EXPECT_TRUE(has_phase_ending_with(t, "_ALLREDUCE", "NEGOTIATE_ALLREDUCE")) << name;
    for (int r = 0; r < size; ++r) EXPECT_TRUE(t.ready_ranks.count(r)) << name << " rank " << r;
  }
  ASSERT_TRUE(by.count("tl.gather"));
  EXPECT_TRUE(by["tl.gather"].names.count("NEGOTIATE_ALLGATHER"));
  EXPECT_TRUE(by["tl.gather"].names.count("MPI_ALLGATHERV"));
  ASSERT_TRUE(by.count("tl.bcast"));
  EXPECT_TRUE(by["tl.bcast"].names.count("NEGOTIATE_BROADCAST"));
  EXPECT_TRUE(by["tl.bcast"].names.count("MPI_BCAST"));
  // Every duration event is well formed.
  for (const auto& e : trace) {
    if (e.value("ph", "") != "X") continue;
    EXPECT_GE(e.at("ts").get<int64_t>(), 0);
    EXPECT_GE(e.at("dur").get<int64_t>(), 0);
  }
}

}  // namespace

TEST(Timeline, StartedAtRunTimeIsValidJsonWithEveryPhase) {
  const int rank = horovodlite::rank();
  const std::string path = temp_path("timeline_runtime");
  HVL_ASSERT_OK(start_timeline(path, /*mark_cycles=*/true));
  HVL_ASSERT_OK(start_timeline(path, true));  // the same path again: fine
  if (rank == 0) {
    Status other = start_timeline(path + ".other");
    EXPECT_EQ(other.code(), StatusCode::kPrecondition) << other.to_string();
  }
  // Rank 0 writes the timeline: no rank may submit before rank 0's timeline is on,
  // or rank 0's coordinator sees that rank's request before it records anything
  // (failed under TSan at -np 3: ranks 1 and 2 missing from the ready marks).
  HVL_ASSERT_OK(barrier_async()->wait());
  run_some_ops();
  HVL_ASSERT_OK(stop_timeline());
  HVL_ASSERT_OK(stop_timeline());  // none active: fine
  if (rank != 0) return;
  const std::string text = read_file(path);
  ASSERT_EQ(text.substr(0, 2), "[\n");
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(text)) << text.substr(0, 2000);
  check_trace(trace);
  bool cycle_mark = false;
  for (const auto& e : trace) cycle_mark = cycle_mark || e.value("name", "") == "CYCLE_START";
  EXPECT_TRUE(cycle_mark);
  unlink(path.c_str());
}

TEST(Timeline, FromEnvironmentIsCompleteAfterShutdown) {
  // Every rank uses rank 0's path (only rank 0 writes).
  int32_t pid = static_cast<int32_t>(getpid());
  HVL_ASSERT_OK(broadcast_async("tl.pid", TensorView{&pid, DataType::kInt32, {1}}, 0)->wait());
  const std::string path = "/tmp/hvl_timeline_env_" + std::to_string(pid) + ".json";
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_TIMELINE", path}}));
  run_some_ops();
  HVL_ASSERT_OK(restart_with({{"HOROVODLITE_TIMELINE", ""}}));  // shutdown closes the file
  if (horovodlite::rank() != 0) return;
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(read_file(path)));
  check_trace(trace);
  unlink(path.c_str());
}

TEST(Timeline, ErrorsAreStatusValues) {
  if (horovodlite::rank() == 0) {
    Status s = start_timeline("/nonexistent-dir/x/timeline.json");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("/nonexistent-dir/x/timeline.json"), std::string::npos) << s.message();
  }
  ASSERT_TRUE(shutdown().ok());
  EXPECT_EQ(start_timeline("/tmp/x.json").code(), StatusCode::kPrecondition);
  EXPECT_EQ(stop_timeline().code(), StatusCode::kPrecondition);
  // A bad HOROVODLITE_TIMELINE makes init fail on every rank (rank 0 opens it).
  setenv("HOROVODLITE_TIMELINE", "/nonexistent-dir/x/env.json", 1);
  Status s = init();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("HOROVODLITE_TIMELINE"), std::string::npos) << s.message();
  EXPECT_FALSE(is_initialized());
  unsetenv("HOROVODLITE_TIMELINE");
  HVL_ASSERT_OK(init());
}

TEST(Timeline, EscapesNames) {
  const std::string path = temp_path("timeline_escape");
  HVL_ASSERT_OK(start_timeline(path));
  const std::string odd = "odd \"name\"\\with\ttabs\nand newline";
  std::vector<float> v(3, 1.0f);
  TensorView t{v.data(), DataType::kFloat32, {3}};
  HVL_ASSERT_OK(allreduce_async(odd, t, t)->wait());
  HVL_ASSERT_OK(stop_timeline());
  if (horovodlite::rank() != 0) return;
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(read_file(path)));
  EXPECT_TRUE(events_by_tensor(trace).count(odd));
  unlink(path.c_str());
}

// The same name on the global set and on a process set: each set has its own
// rows ("process_set_<id>/" + name), and the set's ready marks name global ranks.
TEST(Timeline, EachProcessSetHasItsOwnRows) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  if (size < 2) GTEST_SKIP() << "needs a process set other than the world";
  // Rank 0 and the last rank (only rank 0 at np 2: {0, 1} is the world).
  const std::vector<int> members = size > 2 ? std::vector<int>{0, size - 1} : std::vector<int>{0};
  ASSERT_TRUE(shutdown().ok());
  InitOptions options;
  options.process_sets = {members};
  HVL_ASSERT_OK(init(options));
  const ProcessSet set = horovodlite::process_sets().at(1);
  int32_t pid = static_cast<int32_t>(getpid());
  HVL_ASSERT_OK(broadcast_async("tl.ps.pid", TensorView{&pid, DataType::kInt32, {1}}, 0)->wait());
  const std::string path = "/tmp/hvl_timeline_sets_" + std::to_string(pid) + ".json";
  HVL_ASSERT_OK(start_timeline(path));
  // As in StartedAtRunTimeIsValidJsonWithEveryPhase: no rank submits before
  // rank 0's timeline is on (failed at -np 3: the set's rank 2 submitted while
  // rank 0 was still opening the file, and its ready mark was missing).
  HVL_ASSERT_OK(barrier_async()->wait());
  std::vector<float> world(8, 1.0f), subset(8, 1.0f);
  TensorView tw{world.data(), DataType::kFloat32, {8}}, ts{subset.data(), DataType::kFloat32, {8}};
  AllreduceOptions on_set;
  on_set.op = ReduceOp::kSum;
  on_set.process_set = set;
  HandlePtr hs = set.included() ? allreduce_async("tl.same", ts, ts, on_set) : nullptr;
  HandlePtr hw = allreduce_async("tl.same", tw, tw, {ReduceOp::kSum});
  HVL_ASSERT_OK(hw->wait());
  if (hs) {
    HVL_ASSERT_OK(hs->wait());
  }
  EXPECT_EQ(world[0], static_cast<float>(size));
  if (hs) {
    EXPECT_EQ(subset[0], static_cast<float>(members.size()));
  }
  HVL_ASSERT_OK(barrier_async()->wait());
  HVL_ASSERT_OK(stop_timeline());
  if (rank == 0) {
    nlohmann::json trace;
    ASSERT_NO_THROW(trace = nlohmann::json::parse(read_file(path)));
    auto by = events_by_tensor(trace);
    const std::string row = "process_set_" + std::to_string(set.id()) + "/tl.same";
    ASSERT_TRUE(by.count("tl.same"));
    ASSERT_TRUE(by.count(row)) << "no row '" << row << "'";
    EXPECT_EQ(by["tl.same"].names.count("ALLREDUCE"), 1u);
    EXPECT_EQ(by[row].names.count("ALLREDUCE"), 1u);
    EXPECT_EQ(by["tl.same"].names.count("NEGOTIATE_ALLREDUCE"), 1u);
    EXPECT_EQ(by[row].names.count("NEGOTIATE_ALLREDUCE"), 1u);
    std::set<int> all;
    for (int r = 0; r < size; ++r) all.insert(r);
    EXPECT_EQ(by["tl.same"].ready_ranks, all);
    EXPECT_EQ(by[row].ready_ranks, std::set<int>(members.begin(), members.end()));
    unlink(path.c_str());
  }
  ASSERT_TRUE(shutdown().ok());
  HVL_ASSERT_OK(init());
}
