// Grouped collectives: a group's tensors become ready together (only once every
// member is enqueued on every rank), run side by side and fused together; cached
// groups hit together; a mismatch inside a group fails the whole group.
#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

using namespace hvl_test;

namespace {

TensorView view_of(std::vector<float>& v) { return TensorView{v.data(), DataType::kFloat32, {int64_t(v.size())}}; }

std::vector<float> ramp(size_t n, int salt = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(horovodlite::rank() + i + salt);
  return v;
}

void check_sum(const std::vector<float>& v, int salt = 0) {
  const int size = horovodlite::size();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_FLOAT_EQ(v[i], size * (size - 1) / 2.0f + size * float(i + salt)) << i;
}

// Lets the background threads of every rank run several full negotiation cycles
// after everything enqueued so far: each probe is negotiated in a cycle no
// earlier than the requests enqueued before it, and the second probe only after
// the first has completed, so every response of those cycles has run by then.
void settle(const std::string& tag) {
  for (int k = 0; k < 2; ++k) {
    auto v = ramp(3);
    TensorView t = view_of(v);
    HVL_ASSERT_OK(allreduce_async("settle." + tag + "." + std::to_string(k), t, t, {ReduceOp::kSum})->wait());
  }
}

std::vector<std::string> member_names(const std::string& prefix, int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(prefix + std::to_string(i));
  return names;
}

}  // namespace

// Members are enqueued one by one, in a different order on every rank, with
// negotiation cycles between them; the last rank withholds one member. No member
// may complete until that member is enqueued; then the group runs as one fused
// response. The second round finds the group in the response cache on the ranks
// that enqueue it whole.
TEST(Groups, WithheldMemberHoldsTheWholeGroup) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int n = 4, withheld = 2;
  const std::vector<std::string> group = member_names("held.", n);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<float>> data(n);
    std::vector<HandlePtr> handles(n);
    const bool holder = rank == size - 1;
    // Round 0 and 1: members enqueued in parts; round 2: the non-holders enqueue
    // the whole group at once (cache path), the holder in parts.
    for (int k = 0; k < n; ++k) {
      const int i = (k + rank) % n;                                             // a different order on every rank
      const bool now = !(holder && i == withheld) && !(round == 2 && !holder);  // else later, or whole below
      if (!(holder && i == withheld)) data[i] = ramp(5 + i, round);
      if (now) {
        TensorView t = view_of(data[i]);
        handles[i] = grouped_allreduce_async({group[i]}, {t}, {t}, {ReduceOp::kSum}, {}, group)[0];
      }
      settle("r" + std::to_string(round) + "k" + std::to_string(k));  // cycles between members
    }
    if (round == 2 && !holder) {
      std::vector<TensorView> views;
      std::vector<std::string> names;
      for (int k = 0; k < n; ++k) {
        const int i = (n - 1 - k + rank) % n;
        names.push_back(group[i]);
        views.push_back(view_of(data[i]));
      }
      auto hs = grouped_allreduce_async(names, views, views, {ReduceOp::kSum});
      for (int k = 0; k < n; ++k) handles[(n - 1 - k + rank) % n] = hs[k];
    }
    settle("r" + std::to_string(round) + ".held");
    for (int i = 0; i < n; ++i) {
      if (handles[i]) {
        EXPECT_FALSE(handles[i]->poll()) << "'" << group[i] << "' completed while '" << group[withheld]
                                         << "' was withheld on rank " << size - 1 << " (round " << round << ")";
      }
    }
    // Everything else has settled. The holder releases only after every rank has
    // checked (a rank may run ahead out of a settle while another is still waking
    // from it): the two settle allreduces and the group are what runs from here.
    const Stats before = stats();
    settle("r" + std::to_string(round) + ".checked");
    if (holder) {
      data[withheld] = ramp(5 + withheld, round);
      TensorView t = view_of(data[withheld]);
      handles[withheld] = grouped_allreduce_async({group[withheld]}, {t}, {t}, {ReduceOp::kSum}, {}, group)[0];
    }
    for (int i = 0; i < n; ++i) {
      HVL_ASSERT_OK(handles[i]->wait());
      check_sum(data[i], round);
    }
    const Stats after = stats();
    EXPECT_EQ(after.responses_executed - before.responses_executed, 3u) << "round " << round;
    EXPECT_EQ(after.fused_tensors - before.fused_tensors, uint64_t(n)) << "round " << round;
  }
}

// A whole group per call, the names in a different order on every rank: the
// first call is negotiated, later ones hit the cache together; each runs as one
// fused response.
TEST(Groups, WholeGroupsAreFusedAndHitTheCacheTogether) {
  const int rank = horovodlite::rank();
  const int n = 5;
  const std::vector<std::string> group = member_names("whole.", n);
  for (int iter = 0; iter < 4; ++iter) {
    std::vector<std::vector<float>> data(n);
    std::vector<std::string> names;
    std::vector<TensorView> views;
    std::vector<int> order;
    for (int k = 0; k < n; ++k) order.push_back((rank % 2 ? n - 1 - k : k + rank) % n);
    for (int i : order) {
      data[i] = ramp(7 + 3 * i, iter);
      names.push_back(group[i]);
      views.push_back(view_of(data[i]));
    }
    const Stats before = stats();
    auto hs = grouped_allreduce_async(names, views, views, {ReduceOp::kSum});
    ASSERT_EQ(hs.size(), size_t(n));
    for (auto& h : hs) HVL_ASSERT_OK(h->wait());
    for (int i = 0; i < n; ++i) check_sum(data[i], iter);
    const Stats after = stats();
    EXPECT_EQ(after.responses_executed - before.responses_executed, 1u) << "iteration " << iter;
    EXPECT_EQ(after.fused_tensors - before.fused_tensors, uint64_t(n)) << "iteration " << iter;
    if (iter > 0) {
      EXPECT_EQ(after.cache_hits - before.cache_hits, uint64_t(n)) << "iteration " << iter;
      EXPECT_EQ(after.tensors_negotiated, before.tensors_negotiated) << "iteration " << iter;
    }
  }
}

// One member's shape differs on the last rank: every member of the group fails
// on every rank, with a message naming that tensor and each rank.
TEST(Groups, MismatchInsideAGroupFailsTheWholeGroup) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  if (size < 2) GTEST_SKIP() << "needs two ranks to disagree";
  const std::vector<std::string> group = member_names("bad.", 3);
  std::vector<std::vector<float>> data = {ramp(4), ramp(rank == size - 1 ? 6 : 4), ramp(4)};
  std::vector<TensorView> views;
  for (auto& d : data) views.push_back(view_of(d));
  auto hs = grouped_allreduce_async(group, views, views, {ReduceOp::kSum});
  for (size_t i = 0; i < hs.size(); ++i) {
    Status s = hs[i]->wait();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << group[i] << ": " << s.to_string();
    EXPECT_NE(s.message().find("Mismatched shapes for tensor 'bad.1'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("grouped allreduce of 3 tensors"), std::string::npos) << s.message();
    for (int r = 0; r < size; ++r)
      EXPECT_NE(s.message().find("rank " + std::to_string(r) + ":"), std::string::npos) << s.message();
  }
  // Grouped on one rank, not grouped on the others: a clear error for each name.
  std::vector<std::vector<float>> d2 = {ramp(2), ramp(2)};
  std::vector<HandlePtr> h2;
  if (rank == 0) {
    std::vector<TensorView> v2 = {view_of(d2[0]), view_of(d2[1])};
    h2 = grouped_allreduce_async({"mixed.0", "mixed.1"}, v2, v2, {ReduceOp::kSum});
  } else {
    for (int i = 0; i < 2; ++i) {
      TensorView t = view_of(d2[i]);
      h2.push_back(allreduce_async("mixed." + std::to_string(i), t, t, {ReduceOp::kSum}));
    }
  }
  for (int i = 0; i < 2; ++i) {
    Status s = h2[i]->wait();
    ASSERT_EQ(s.code(), StatusCode::kMismatch) << s.to_string();
    EXPECT_NE(s.message().find("Mismatched groups for tensor 'mixed." + std::to_string(i) + "'"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("rank 1: not grouped"), std::string::npos) << s.message();
  }
  // The runtime goes on.
  auto v = ramp(3);
  TensorView t = view_of(v);
  HVL_ASSERT_OK(allreduce_async("after.bad.group", t, t, {ReduceOp::kSum})->wait());
  check_sum(v);
}

TEST(Groups, GroupedAllgatherAndReducescatter) {
  const int rank = horovodlite::rank(), size = horovodlite::size();
  const int n = 3;
  // allgather: member i has (rank + i + 1) rows of 2 on each rank.
  std::vector<Buffer> inputs;
  for (int i = 0; i < n; ++i) {
    inputs.emplace_back(DataType::kFloat32, Shape{rank + i + 1, 2});
    for (int64_t j = 0; j < inputs[i].size(); ++j) inputs[i].set(j, 100 * rank + 10 * i + j);
  }
  std::vector<std::unique_ptr<Buffer>> outs(n);
  std::vector<TensorView> views;
  std::vector<OutputAllocator> allocs;
  for (int i = 0; i < n; ++i) {
    views.push_back(inputs[i].view());
    allocs.push_back(allocate_into(&outs[i], DataType::kFloat32));
  }
  auto hs = grouped_allgather_async(member_names("gather.", n), views, allocs);
  for (int i = 0; i < n; ++i) {
    HVL_ASSERT_OK(hs[i]->wait());
    int64_t row = 0;
    for (int r = 0; r < size; ++r)
      for (int j = 0; j < 2 * (r + i + 1); ++j, ++row) ASSERT_EQ(outs[i]->get(row), 100 * r + 10 * i + j) << i;
    EXPECT_EQ(row, outs[i]->size());
  }
  // reducescatter: member i has 2 * size + i rows of 1.
  std::vector<Buffer> rs_in;
  for (int i = 0; i < n; ++i) {
    rs_in.emplace_back(DataType::kFloat32, Shape{2 * size + i});
    for (int64_t j = 0; j < rs_in[i].size(); ++j) rs_in[i].set(j, rank + j);
  }
  std::vector<std::unique_ptr<Buffer>> rs_out(n);
  views.clear();
  allocs.clear();
  for (int i = 0; i < n; ++i) {
    views.push_back(rs_in[i].view());
    allocs.push_back(allocate_into(&rs_out[i], DataType::kFloat32));
  }
  auto rh = grouped_reducescatter_async(member_names("scatter.", n), views, allocs, {ReduceOp::kSum});
  for (int i = 0; i < n; ++i) {
    HVL_ASSERT_OK(rh[i]->wait());
    const int64_t dim0 = 2 * size + i;
    int64_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += reducescatter_rows(dim0, size, r);
    ASSERT_EQ(rs_out[i]->size(), reducescatter_rows(dim0, size, rank));
    for (int64_t j = 0; j < rs_out[i]->size(); ++j)
      ASSERT_EQ(rs_out[i]->get(j), size * (size - 1) / 2.0 + size * double(offset + j)) << i;
  }
}

TEST(Groups, BadArgumentsFailEveryHandle) {
  std::vector<float> a = ramp(2), b = ramp(2);
  std::vector<TensorView> two = {view_of(a), view_of(b)};
  auto hs = grouped_allreduce_async({"args.0"}, two, two);
  ASSERT_EQ(hs.size(), 2u);
  for (auto& h : hs) EXPECT_EQ(h->wait().code(), StatusCode::kInvalidArgument);
  hs = grouped_allreduce_async({"args.0", "args.x"}, two, two, {}, {}, {"args.0", "args.1"});
  for (auto& h : hs) {
    Status s = h->wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("'args.x' is not a member"), std::string::npos) << s.message();
  }
  hs = grouped_allreduce_async({"args.0", "args.0"}, two, two);
  for (auto& h : hs) EXPECT_NE(h->wait().message().find("appears twice"), std::string::npos);
}

// A group mixing host and device tensors is an error naming both tensors (as in
// Horovod), found before the device tensor is looked at: no GPU is needed.
TEST(Groups, MixingHostAndDeviceTensorsFailsEveryHandle) {
  std::vector<float> a = ramp(4), b = ramp(4);
  TensorView host = view_of(a), device = view_of(b);
  device.device = 0;  // claims cuda:0; never dereferenced
  const std::vector<TensorView> mixed = {host, device};
  auto check = [](std::vector<HandlePtr> hs, const std::string& op) {
    ASSERT_EQ(hs.size(), 2u);
    for (auto& h : hs) {
      const Status s = h->wait();
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
      EXPECT_NE(s.message().find("grouped_" + op + ": all tensors must be on one device"), std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find("'dev." + op + ".0' is on the CPU and 'dev." + op + ".1' on cuda:0"),
                std::string::npos)
          << s.message();
    }
  };
  check(grouped_allreduce_async({"dev.allreduce.0", "dev.allreduce.1"}, mixed, mixed, {ReduceOp::kSum}), "allreduce");
  auto alloc = [](const Shape&, TensorView*) { return Status::Internal("not reached"); };
  check(grouped_allgather_async({"dev.allgather.0", "dev.allgather.1"}, mixed, {alloc, alloc}), "allgather");
  check(grouped_reducescatter_async({"dev.reducescatter.0", "dev.reducescatter.1"}, mixed, {alloc, alloc}, {}),
        "reducescatter");
  settle("dev");  // the runtime is unaffected
}
