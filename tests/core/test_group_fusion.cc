// Fusion of grouped allgathers and reducescatters, as Horovod 0.28: a group's
// tensors run as one fused response (one collective through the fusion buffer)
// within the fusion threshold, with results equal to the per-tensor ops, for
// several dtypes and uneven first dimensions; and HOROVOD_DISABLE_GROUP_FUSION
// (a group's tensors fuse only with each other), checked on the controller.
#include <mpi.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mpi/mpi_transport.h"
#include "negotiation/controller.h"
#include "ops/fusion.h"
#include "test_util.h"

using namespace hvl_test;

namespace {

// Small integers: exact in every dtype, and so are their sums over 4 ranks
// (bf16 holds integers up to 256 exactly), whatever order MPI reduces in.
double value(DataType d, int rank, int t, int64_t j) {
  if (d == DataType::kBool) return static_cast<double>((rank + t + j) % 2);
  return static_cast<double>((rank * 31 + t * 7 + j) % 50);
}

std::vector<std::string> names_of(const std::string& prefix, int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(prefix + std::to_string(i));
  return v;
}

// The responses n tensors of `bytes` each make under the threshold in force.
uint64_t expected_responses(int n, int64_t bytes) {
  const int64_t t = config().fusion_threshold_bytes;
  if (t == 0 || bytes > t || bytes >= kFuseAloneBytes) return static_cast<uint64_t>(n);
  const int64_t per = t / bytes;
  return static_cast<uint64_t>((n + per - 1) / per);
}

// Tensor t's shape on `rank` for the uneven allgather: dim 0 differs across
// ranks (and is 0 on some), the other dims differ across tensors; the last is 0-d.
Shape gather_shape(int t, int rank) {
  switch (t) {
    case 0:
      return {rank + 1, 3};
    case 1:
      return {(rank % 2) * 2, 2, 2};  // no rows on even ranks
    case 2:
      return {horovodlite::size() - rank};
    default:
      return {};  // gathered as [1] per rank
  }
}

// Tensor t's shape for the reducescatter (the same on every rank): more rows
// than ranks, fewer (some ranks get none), one row per rank, a 1-d tensor.
Shape scatter_shape(int t) {
  const int size = horovodlite::size();
  switch (t) {
    case 0:
      return {2 * size + 1, 3};
    case 1:
      return {1, 2};
    case 2:
      return {size, 2, 2};
    default:
      return {3 * size + 2};
  }
}

// A grouped op's arguments: each input's view, and an output per input that
// the op allocates (GroupIo must stay where it is while the op runs).
struct GroupIo {
  GroupIo(std::vector<Buffer>& in, DataType d) : out(in.size()) {
    for (size_t t = 0; t < in.size(); ++t) {
      views.push_back(in[t].view());
      allocs.push_back(allocate_into(&out[t], d));
    }
  }
  std::vector<std::unique_ptr<Buffer>> out;
  std::vector<TensorView> views;
  std::vector<OutputAllocator> allocs;
};

}  // namespace

TEST(GroupFusion, GroupedAllgatherIsOneFusedResponseEqualToPerTensorOps) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int n = 4;
  for (DataType d : {DataType::kUInt8, DataType::kInt32, DataType::kInt64, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kFloat32, DataType::kFloat64, DataType::kBool}) {
    const std::string tag = std::string(dtype_name(d));
    std::vector<Buffer> in;
    for (int t = 0; t < n; ++t) {
      in.emplace_back(d, gather_shape(t, rank));
      for (int64_t j = 0; j < in[t].size(); ++j) in[t].set(j, value(d, rank, t, j));
    }
    // The per-tensor ops.
    std::vector<std::unique_ptr<Buffer>> ref(n);
    for (int t = 0; t < n; ++t)
      HVL_ASSERT_OK(
          allgather_async("fuse.ref." + tag + std::to_string(t), in[t].view(), allocate_into(&ref[t], d))->wait());
    for (int iter = 0; iter < 2; ++iter) {  // negotiated, then from the response cache
      GroupIo io(in, d);
      const Stats before = stats();
      auto hs = grouped_allgather_async(names_of("fuse.ag." + tag + ".", n), io.views, io.allocs);
      for (auto& h : hs) HVL_ASSERT_OK(h->wait());
      const Stats after = stats();
      EXPECT_EQ(after.responses_executed - before.responses_executed, 1u) << tag << " iteration " << iter;
      EXPECT_EQ(after.fused_tensors - before.fused_tensors, uint64_t(n)) << tag << " iteration " << iter;
      for (int t = 0; t < n; ++t) {
        ASSERT_TRUE(io.out[t]) << tag << " " << t;
        EXPECT_EQ(io.out[t]->shape(), ref[t]->shape()) << tag << " " << t;
        EXPECT_TRUE(io.out[t]->bitwise_equal(*ref[t])) << tag << " tensor " << t;
        // And the gather itself: every rank's rows in rank order.
        int64_t k = 0;
        for (int r = 0; r < size; ++r) {
          const int64_t count = num_elements(gather_shape(t, r));  // 1 for the 0-d tensor
          for (int64_t j = 0; j < count; ++j, ++k)
            ASSERT_EQ(io.out[t]->get(k), value(d, r, t, j)) << tag << " tensor " << t << " rank " << r << " " << j;
        }
        EXPECT_EQ(k, io.out[t]->size()) << tag << " " << t;
      }
    }
  }
}

TEST(GroupFusion, GroupedReducescatterIsOneFusedResponseEqualToPerTensorOps) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int n = 4;
  for (DataType d : {DataType::kInt32, DataType::kInt64, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                     DataType::kFloat64}) {
    const std::string tag = std::string(dtype_name(d));
    const bool is_float =
        d == DataType::kFloat16 || d == DataType::kBFloat16 || d == DataType::kFloat32 || d == DataType::kFloat64;
    ReducescatterOptions options;
    options.op = is_float ? ReduceOp::kAverage : ReduceOp::kSum;
    if (is_float) {
      options.prescale_factor = 2.0;
      options.postscale_factor = 0.5;
    }
    std::vector<Buffer> in;
    for (int t = 0; t < n; ++t) {
      in.emplace_back(d, scatter_shape(t));
      for (int64_t j = 0; j < in[t].size(); ++j) in[t].set(j, value(d, rank, t, j));
    }
    std::vector<std::unique_ptr<Buffer>> ref(n);
    for (int t = 0; t < n; ++t) {
      HVL_ASSERT_OK(
          reducescatter_async("fuse.rsref." + tag + std::to_string(t), in[t].view(), allocate_into(&ref[t], d), options)
              ->wait());
    }
    for (int iter = 0; iter < 2; ++iter) {
      GroupIo io(in, d);
      const Stats before = stats();
      auto hs = grouped_reducescatter_async(names_of("fuse.rs." + tag + ".", n), io.views, io.allocs, options);
      for (auto& h : hs) HVL_ASSERT_OK(h->wait());
      const Stats after = stats();
      EXPECT_EQ(after.responses_executed - before.responses_executed, 1u) << tag << " iteration " << iter;
      EXPECT_EQ(after.fused_tensors - before.fused_tensors, uint64_t(n)) << tag << " iteration " << iter;
      for (int t = 0; t < n; ++t) {
        ASSERT_TRUE(io.out[t]) << tag << " " << t;
        const Shape shape = scatter_shape(t);
        const int64_t rows = reducescatter_rows(shape[0], size, rank);
        Shape expect_shape = shape;
        expect_shape[0] = rows;
        EXPECT_EQ(io.out[t]->shape(), expect_shape) << tag << " " << t;
        EXPECT_TRUE(io.out[t]->bitwise_equal(*ref[t])) << tag << " tensor " << t;
        // And the values: this rank's rows of the (scaled) sum.
        int64_t first = 0;
        for (int r = 0; r < rank; ++r) first += reducescatter_rows(shape[0], size, r);
        const int64_t row = num_elements(shape) / std::max<int64_t>(shape[0], 1);
        for (int64_t j = 0; j < io.out[t]->size(); ++j) {
          double sum = 0;
          for (int r = 0; r < size; ++r) sum += value(d, r, t, first * row + j);
          const double expected = is_float ? 2.0 * sum * 0.5 / size : sum;
          ASSERT_NEAR(io.out[t]->get(j), expected, tolerance(d, expected)) << tag << " tensor " << t << " " << j;
        }
      }
    }
  }
}

// Equal tensors (the same bytes each), so that how many responses the group
// makes depends only on the threshold: one under the default threshold; split
// at the threshold (the suite runs again with a small HOROVODLITE_FUSION_THRESHOLD).
TEST(GroupFusion, AGroupIsSplitAtTheFusionThreshold) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int n = 6;
  std::vector<Buffer> in;
  for (int t = 0; t < n; ++t) {
    in.emplace_back(DataType::kFloat32, Shape{rank + 1, 4});
    for (int64_t j = 0; j < in[t].size(); ++j) in[t].set(j, value(DataType::kFloat32, rank, t, j));
  }
  const int64_t gathered_bytes = int64_t(size) * (size + 1) / 2 * 4 * 4;
  GroupIo io(in, DataType::kFloat32);
  Stats before = stats();
  for (auto& h : grouped_allgather_async(names_of("split.ag.", n), io.views, io.allocs)) HVL_ASSERT_OK(h->wait());
  Stats after = stats();
  const uint64_t expected = expected_responses(n, gathered_bytes);
  EXPECT_EQ(after.responses_executed - before.responses_executed, expected)
      << "threshold " << config().fusion_threshold_bytes << ", " << gathered_bytes << " bytes each";
  for (int t = 0; t < n; ++t) {
    int64_t k = 0;
    for (int r = 0; r < size; ++r)
      for (int64_t j = 0; j < (r + 1) * 4; ++j, ++k) ASSERT_EQ(io.out[t]->get(k), value(DataType::kFloat32, r, t, j));
  }
  // reducescatter: the input's bytes count.
  std::vector<Buffer> rs;
  for (int t = 0; t < n; ++t) {
    rs.emplace_back(DataType::kFloat32, Shape{2 * size, 4});
    for (int64_t j = 0; j < rs[t].size(); ++j) rs[t].set(j, value(DataType::kFloat32, rank, t, j));
  }
  GroupIo rs_io(rs, DataType::kFloat32);
  before = stats();
  for (auto& h : grouped_reducescatter_async(names_of("split.rs.", n), rs_io.views, rs_io.allocs, {ReduceOp::kSum}))
    HVL_ASSERT_OK(h->wait());
  after = stats();
  EXPECT_EQ(after.responses_executed - before.responses_executed, expected_responses(n, int64_t(2) * size * 4 * 4));
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(rs_io.out[t]->size(), 8);
    for (int64_t j = 0; j < 8; ++j) {
      double sum = 0;
      for (int r = 0; r < size; ++r) sum += value(DataType::kFloat32, r, t, rank * 8 + j);
      ASSERT_EQ(rs_io.out[t]->get(j), sum) << t << " " << j;
    }
  }
}

// The controller's output for one batch of requests that every rank passes in
// one cycle (deterministic: no dependence on when the background thread wakes):
// with DISABLE_GROUP_FUSION no response mixes a group's tensors with others;
// without it, compatible neighbours fuse across groups. Both for the negotiated
// cycle and the cycle after, which hits the response cache.
TEST(GroupFusion, DisableGroupFusionKeepsEachGroupApart) {
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  auto request = [&](OpType type, const std::string& name, Shape shape) {
    Request q;
    q.rank = rank;
    q.type = type;
    q.name = name;
    q.shape = std::move(shape);
    q.reduce_op = ReduceOp::kSum;
    return q;
  };
  auto grouped = [](Request q, const std::vector<std::string>& group) {
    q.group_id = group_id_of(group);
    q.group_size = static_cast<int32_t>(group.size());
    return q;
  };
  const std::vector<std::string> a = {"g.a", "g.b"}, b = {"h.x"}, c = {"ag.0", "ag.1"};
  const std::vector<Request> requests = {
      request(OpType::kAllreduce, "u.0", {4}),
      grouped(request(OpType::kAllreduce, "g.a", {4}), a),
      grouped(request(OpType::kAllreduce, "g.b", {3}), a),
      request(OpType::kAllreduce, "u.1", {4}),
      grouped(request(OpType::kAllreduce, "h.x", {2}), b),  // a grouped op of one tensor
      grouped(request(OpType::kAllgather, "ag.0", {rank + 1, 2}), c),
      grouped(request(OpType::kAllgather, "ag.1", {rank, 2}), c),
      request(OpType::kAllgather, "ag.u", {1, 2}),
  };
  std::map<std::string, uint64_t> group_of;
  for (const Request& q : requests) group_of[q.name] = q.group_id;
  // This rank's ops in flight, as the controller reads them.
  struct Local : negotiation::LocalOps {
    const std::vector<Request>& requests;
    explicit Local(const std::vector<Request>& r) : requests(r) {}
    bool find(const std::string& name, Request* out, Clock::time_point* since) const override {
      for (const Request& q : requests) {
        if (q.name != name) continue;
        if (out) *out = q;
        if (since) *since = Clock::now();
        return true;
      }
      return false;
    }
    const void* host_input(const std::string&) const override { return nullptr; }
  } lookup(requests);
  using Names = std::vector<std::string>;
  for (bool disable : {false, true}) {
    Config config;
    config.disable_group_fusion = disable;
    Timeline timeline;
    Watchdog watchdog(0, nullptr);
    auto wire = std::make_shared<transport::MpiTransport>(comm);
    negotiation::Controller controller(Communicator{rank, size, 0, wire, wire}, config, timeline, watchdog, lookup);
    for (int cycle = 0; cycle < 2; ++cycle) {
      negotiation::Controller::Input input;
      input.requests = requests;
      negotiation::Controller::Output out;
      HVL_ASSERT_OK(controller.compute_responses(input, &out));
      std::vector<Names> got;
      size_t names = 0;
      for (const Response& r : out.responses) {
        ASSERT_NE(r.type, OpType::kError) << r.error_message;
        got.push_back(r.names);
        names += r.names.size();
      }
      EXPECT_EQ(names, requests.size()) << "cycle " << cycle;
      if (cycle == 1) {
        EXPECT_EQ(controller.cache_hits(), requests.size());
      }
      auto mixes = [&](const Names& response) {
        for (const std::string& name : response)
          if (group_of[name] != group_of[response[0]]) return true;
        return false;
      };
      if (!disable) {
        // Compatible neighbours fuse whatever their groups: 8 tensors of two ops
        // in fewer responses than with the groups kept apart, one of them mixed.
        EXPECT_LT(got.size(), 6u) << "cycle " << cycle;
        EXPECT_TRUE(std::any_of(got.begin(), got.end(), mixes)) << "cycle " << cycle;
        continue;
      }
      // Each response holds one group, or only ungrouped tensors; each group whole.
      for (const Names& response : got) EXPECT_FALSE(mixes(response)) << response[0] << " (cycle " << cycle << ")";
      auto together = [&](const Names& group) {
        for (const Names& response : got)
          if (response == group) return true;
        return false;
      };
      EXPECT_TRUE(together(a)) << "cycle " << cycle;
      EXPECT_TRUE(together(b)) << "cycle " << cycle;
      EXPECT_TRUE(together(c)) << "cycle " << cycle;
      // The ungrouped allreduces and allgathers may fuse among themselves.
      EXPECT_GE(got.size(), 5u) << "cycle " << cycle;
    }
  }
  MPI_Comm_free(&comm);
}

TEST(GroupFusion, DisableGroupFusionVariableAndItsHorovodName) {
  EXPECT_FALSE(config().disable_group_fusion);
  for (const char* var : {"HOROVODLITE_DISABLE_GROUP_FUSION", "HOROVOD_DISABLE_GROUP_FUSION"}) {
    HVL_ASSERT_OK(restart_with({{var, "1"}}));
    EXPECT_TRUE(config().disable_group_fusion) << var;
    // Grouped ops still run (each group as one fused response).
    std::vector<Buffer> in;
    for (int t = 0; t < 3; ++t) {
      in.emplace_back(DataType::kFloat32, Shape{2, 2});
      for (int64_t j = 0; j < 4; ++j) in[t].set(j, j);
    }
    GroupIo io(in, DataType::kFloat32);
    const Stats before = stats();
    for (auto& h : grouped_allgather_async(names_of("nofuse.", 3), io.views, io.allocs)) HVL_ASSERT_OK(h->wait());
    EXPECT_EQ(stats().responses_executed - before.responses_executed, 1u);
    HVL_ASSERT_OK(restart_with({{var, ""}}));
  }
  ASSERT_TRUE(shutdown().ok());
  setenv("HOROVOD_DISABLE_GROUP_FUSION", "sometimes", 1);
  const Status s = init();
  unsetenv("HOROVOD_DISABLE_GROUP_FUSION");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("HOROVOD_DISABLE_GROUP_FUSION"), std::string::npos) << s.message();
  HVL_ASSERT_OK(init());
}
