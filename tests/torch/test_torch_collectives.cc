// Every collective of the LibTorch adapter on several dtypes and shapes,
// contiguous and not, synchronous, asynchronous and in place.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>

#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "torch_test_util.h"

namespace {

using namespace hvl_torch_test;
namespace hvt = horovodlite::torch;
using horovodlite::ReduceOp;
using horovodlite::StatusCode;

const std::vector<std::vector<int64_t>> kShapes = {{}, {1}, {5}, {3, 4}, {2, 3, 5}, {0}, {17, 33}};

std::string tag(at::ScalarType t, at::IntArrayRef shape) {
  return std::string(c10::toString(t)) + "." + c10::str(shape);
}

// The reduction of rank_values over all ranks, computed locally in double.
at::Tensor expected_reduce(at::IntArrayRef shape, at::ScalarType type, ReduceOp op, int64_t modulus) {
  at::Tensor acc = rank_values(shape, 0, type, modulus).to(at::kDouble);
  for (int r = 1; r < size(); ++r) {
    at::Tensor v = rank_values(shape, r, type, modulus).to(at::kDouble);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc = acc + v;
        break;
      case ReduceOp::kMin:
        acc = at::minimum(acc, v);
        break;
      case ReduceOp::kMax:
        acc = at::maximum(acc, v);
        break;
      case ReduceOp::kProduct:
        acc = acc * v;
        break;
      default:
        break;
    }
  }
  if (op == ReduceOp::kAverage) acc = acc / size();
  return acc;
}

TEST(TorchCollectives, AllreduceEveryDtypeOpAndShape) {
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  for (at::ScalarType type : numeric_scalar_types()) {
    for (const auto& shape : kShapes) {
      for (ReduceOp op : ops) {
        // Products of values in {1, 2} and sums of values < 7 stay exact everywhere.
        const int64_t modulus = op == ReduceOp::kProduct ? 2 : 7;
        at::Tensor input = rank_values(shape, rank(), type, modulus);
        if (op == ReduceOp::kProduct) input = input + 1;
        at::Tensor expected = expected_reduce(shape, type, op, modulus);
        if (op == ReduceOp::kProduct) {
          expected = at::ones(shape, at::kDouble);
          for (int r = 0; r < size(); ++r)
            expected = expected * (rank_values(shape, r, type, modulus).to(at::kDouble) + 1);
        }
        const std::string name = std::string("ar.") + horovodlite::reduce_op_name(op) + "." + tag(type, shape);
        at::Tensor out = hvt::allreduce(input, name, {op});
        ASSERT_EQ(out.scalar_type(), type) << name;
        ASSERT_EQ(out.sizes(), input.sizes()) << name;
        EXPECT_TRUE(at::equal(out.to(at::kDouble), expected)) << name << "\n" << out << "\n" << expected;
      }
    }
  }
}

TEST(TorchCollectives, AllreduceAverageFloating) {
  for (at::ScalarType type : {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}) {
    for (const auto& shape : kShapes) {
      at::Tensor input = rank_values(shape, rank(), type);
      at::Tensor out = hvt::allreduce(input, "avg." + tag(type, shape));  // Average is the default
      at::Tensor expected = expected_reduce(shape, type, ReduceOp::kAverage, 7);
      const double tol = type == at::kDouble ? 1e-12 : type == at::kFloat ? 1e-6 : 2e-2;
      EXPECT_TRUE(at::allclose(out.to(at::kDouble), expected, tol, tol)) << tag(type, shape);
    }
  }
}

TEST(TorchCollectives, AllreduceBoolIsLogical) {
  at::Tensor input = rank_values({4, 6}, rank(), at::kBool);
  at::Tensor any = at::zeros({4, 6}, at::kBool), all = at::ones({4, 6}, at::kBool);
  for (int r = 0; r < size(); ++r) {
    any = any.logical_or(rank_values({4, 6}, r, at::kBool));
    all = all.logical_and(rank_values({4, 6}, r, at::kBool));
  }
  EXPECT_TRUE(at::equal(hvt::allreduce(input, "bool.max", {ReduceOp::kMax}), any));
  EXPECT_TRUE(at::equal(hvt::allreduce(input, "bool.min", {ReduceOp::kMin}), all));
}

TEST(TorchCollectives, AllreducePrescalePostscale) {
  at::Tensor input = rank_values({3, 5}, rank(), at::kDouble);
  horovodlite::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.prescale_factor = 0.5;
  o.postscale_factor = 3.0;
  at::Tensor out = hvt::allreduce(input, "scaled.sum", o);
  EXPECT_TRUE(at::allclose(out, expected_reduce({3, 5}, at::kDouble, ReduceOp::kSum, 7) * 1.5, 1e-12, 1e-12));
  o.op = ReduceOp::kAverage;
  out = hvt::allreduce(input, "scaled.avg", o);
  EXPECT_TRUE(at::allclose(out, expected_reduce({3, 5}, at::kDouble, ReduceOp::kAverage, 7) * 1.5, 1e-12, 1e-12));
}

TEST(TorchCollectives, AllreduceNonContiguousInAndOutOfPlace) {
  for (at::ScalarType type : {at::kInt, at::kFloat, at::kDouble}) {
    at::Tensor base = rank_values({6, 8}, rank(), type);
    at::Tensor view = base.t().slice(/*dim=*/0, 1, 8, 2);  // transposed and strided: not contiguous
    ASSERT_FALSE(view.is_contiguous());
    at::Tensor expected = at::zeros(view.sizes(), at::kDouble);
    for (int r = 0; r < size(); ++r) {
      expected += rank_values({6, 8}, r, type).t().slice(0, 1, 8, 2).to(at::kDouble);
    }
    at::Tensor before = base.clone();
    at::Tensor out = hvt::allreduce(view, std::string("nc.out.") + c10::toString(type), {ReduceOp::kSum});
    EXPECT_TRUE(at::equal(out.to(at::kDouble), expected));
    EXPECT_TRUE(at::equal(base, before)) << "out-of-place allreduce modified its input";

    at::Tensor result = hvt::allreduce_(view, std::string("nc.in.") + c10::toString(type), {ReduceOp::kSum});
    EXPECT_TRUE(result.is_same(view));
    EXPECT_TRUE(at::equal(view.to(at::kDouble), expected));
    // Elements outside the view are untouched.
    at::Tensor mask = at::ones({8, 6}, at::kBool);
    mask.slice(0, 1, 8, 2).fill_(false);
    EXPECT_TRUE(at::equal(base.t().masked_select(mask), before.t().masked_select(mask)));
  }
}

TEST(TorchCollectives, AsyncInAnyOrderAndInPlace) {
  const int n = 6;
  std::vector<at::Tensor> tensors;
  for (int i = 0; i < n; ++i) tensors.push_back(rank_values({i + 1, 3}, rank() + i, at::kDouble));
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  if (rank() % 2 == 1) std::reverse(order.begin(), order.end());
  std::vector<hvt::AsyncHandle> handles(n), in_place(n);
  std::vector<at::Tensor> copies;
  for (int i = 0; i < n; ++i) copies.push_back(tensors[i].clone());
  for (int i : order) {
    handles[i] = hvt::allreduce_async(tensors[i], "async." + std::to_string(i), {ReduceOp::kSum});
    in_place[i] = hvt::allreduce_async_(copies[i], "async_.inplace." + std::to_string(i), {ReduceOp::kMax});
  }
  for (int i = 0; i < n; ++i) {
    at::Tensor sum = at::zeros({i + 1, 3}, at::kDouble), max = rank_values({i + 1, 3}, i, at::kDouble);
    for (int r = 0; r < size(); ++r) {
      sum += rank_values({i + 1, 3}, r + i, at::kDouble);
      max = at::maximum(max, rank_values({i + 1, 3}, r + i, at::kDouble));
    }
    EXPECT_TRUE(at::equal(hvt::synchronize(handles[i]), sum)) << i;
    EXPECT_TRUE(hvt::poll(handles[i]));
    EXPECT_TRUE(at::equal(handles[i].synchronize(), sum)) << "second synchronize differs";
    at::Tensor r = in_place[i].synchronize();
    EXPECT_TRUE(r.is_same(copies[i]));
    EXPECT_TRUE(at::equal(copies[i], max)) << i;
  }
}

TEST(TorchCollectives, AllreduceIntoGivenOutput) {
  at::Tensor expected = expected_reduce({4, 5}, at::kFloat, ReduceOp::kSum, 7).to(at::kFloat);
  // Two buffers used in turn, as an optimizer reuses them step after step; the
  // input is non-contiguous in one round and the output has another shape (same numel).
  std::vector<at::Tensor> buffers = {at::full({20}, -1.0f), at::full({4, 5}, -1.0f)};
  for (int step = 0; step < 4; ++step) {
    at::Tensor input = rank_values({4, 5}, rank(), at::kFloat);
    if (step == 2) input = input.t().contiguous().t();  // same values, column-major
    ASSERT_EQ(input.is_contiguous(), step != 2);
    const at::Tensor before = input.clone();
    at::Tensor& out = buffers[step % 2];
    hvt::AsyncHandle handle = hvt::allreduce_async(input, out, "into." + std::to_string(step), {ReduceOp::kSum});
    at::Tensor result = handle.synchronize();
    EXPECT_TRUE(result.is_same(out)) << step;
    EXPECT_TRUE(at::equal(out.view({4, 5}), expected)) << step;
    EXPECT_TRUE(at::equal(input, before)) << "the input was modified, step " << step;
  }
  // The input itself as the output: in place.
  at::Tensor t = rank_values({4, 5}, rank(), at::kFloat);
  EXPECT_TRUE(hvt::allreduce_async(t, t, "into.self", {ReduceOp::kSum}).synchronize().is_same(t));
  EXPECT_TRUE(at::equal(t, expected));

  // Rejected on every rank alike: another dtype or numel, non-contiguous, overlapping.
  at::Tensor x = at::ones({6}, at::kDouble);
  auto rejects = [&](const at::Tensor& output, const std::string& what) {
    try {
      hvt::allreduce_async(x, output, "into.bad", {ReduceOp::kSum});
      ADD_FAILURE() << what << " was accepted";
    } catch (const hvt::HorovodError& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << what << ": " << e.what();
    }
  };
  rejects(at::empty({6}, at::kFloat), "another dtype");
  rejects(at::empty({7}, at::kDouble), "another numel");
  rejects(at::empty({12}, at::kDouble).slice(0, 0, 12, 2), "a non-contiguous output");
  at::Tensor wide = at::ones({9}, at::kDouble);
  x = wide.slice(0, 0, 6);
  rejects(wide.slice(0, 3, 9), "an overlapping output");
  EXPECT_TRUE(at::equal(wide, at::ones({9}, at::kDouble)));
}

TEST(TorchCollectives, DroppedHandleKeepsTensorsAlive) {
  // The handle and the only reference to the tensor go away before completion.
  for (int i = 0; i < 4; ++i) {
    hvt::allreduce_async(at::full({1000}, 1.0 * rank(), at::kDouble), "dropped." + std::to_string(i));
  }
  at::Tensor out = hvt::allreduce(at::ones({2}, at::kDouble), "after.dropped", {ReduceOp::kSum});
  EXPECT_TRUE(at::equal(out, at::full({2}, 1.0 * size(), at::kDouble)));
}

TEST(TorchCollectives, AllgatherVariableFirstDim) {
  for (at::ScalarType type : all_scalar_types()) {
    at::Tensor mine = rank_values({rank() + 1, 3, 2}, rank(), type);
    at::Tensor out = hvt::allgather(mine, std::string("ag.") + c10::toString(type));
    std::vector<at::Tensor> parts;
    for (int r = 0; r < size(); ++r) parts.push_back(rank_values({r + 1, 3, 2}, r, type));
    EXPECT_TRUE(at::equal(out, at::cat(parts, 0))) << c10::toString(type);
    ASSERT_EQ(out.scalar_type(), type);
  }
  // Non-contiguous input, 0-d input, and an empty contribution.
  at::Tensor nc = rank_values({4, 3}, rank(), at::kFloat).t();
  std::vector<at::Tensor> parts;
  for (int r = 0; r < size(); ++r) parts.push_back(rank_values({4, 3}, r, at::kFloat).t());
  EXPECT_TRUE(at::equal(hvt::allgather(nc, "ag.nc"), at::cat(parts, 0)));
  at::Tensor scalar = at::scalar_tensor(rank() * 2.0, at::kDouble);
  EXPECT_TRUE(at::equal(hvt::allgather(scalar, "ag.0d"), at::arange(size(), at::kDouble) * 2.0));
  at::Tensor maybe_empty = at::full({rank() % 2, 2}, static_cast<int64_t>(rank()), at::kLong);
  at::Tensor gathered = hvt::allgather(maybe_empty, "ag.empty");
  EXPECT_EQ(gathered.size(0), size() / 2);
  EXPECT_TRUE(gathered.remainder(2).eq(1).all().item<bool>());

  hvt::AsyncHandle h = hvt::allgather_async(at::ones({1, 2}, at::kInt) * rank(), "ag.async");
  at::Tensor a = h.synchronize();
  EXPECT_EQ(a.size(0), size());
  EXPECT_EQ(a.sum().item<int64_t>(), 2 * (size() * (size() - 1) / 2));
}

TEST(TorchCollectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < size(); ++root) {
    for (at::ScalarType type : all_scalar_types()) {
      const std::string name = "bc." + std::to_string(root) + "." + c10::toString(type);
      at::Tensor mine = rank_values({3, 4}, rank(), type);
      at::Tensor expected = rank_values({3, 4}, root, type);
      at::Tensor before = mine.clone();
      EXPECT_TRUE(at::equal(hvt::broadcast(mine, root, name), expected)) << name;
      EXPECT_TRUE(at::equal(mine, before)) << "broadcast modified its input";
      hvt::broadcast_(mine, root, name + "_");
      EXPECT_TRUE(at::equal(mine, expected)) << name;
    }
    // In place into a non-contiguous view.
    at::Tensor base = rank_values({5, 6}, rank(), at::kDouble);
    at::Tensor view = base.slice(1, 0, 6, 3);
    hvt::broadcast_async_(view, root, "bc.nc." + std::to_string(root)).synchronize();
    EXPECT_TRUE(at::equal(view, rank_values({5, 6}, root, at::kDouble).slice(1, 0, 6, 3)));
    EXPECT_TRUE(at::equal(base.slice(1, 1, 3), rank_values({5, 6}, rank(), at::kDouble).slice(1, 1, 3)));
  }
}

TEST(TorchCollectives, AlltoallWithAndWithoutSplits) {
  // Rank r sends (r + j) % 3 + 1 rows to rank j; each row holds 100 * r + j.
  std::vector<int64_t> splits;
  std::vector<at::Tensor> rows;
  for (int j = 0; j < size(); ++j) {
    splits.push_back((rank() + j) % 3 + 1);
    rows.push_back(at::full({splits.back(), 2}, 100.0 * rank() + j, at::kDouble));
  }
  hvt::AlltoallResult res = hvt::alltoall(at::cat(rows, 0), splits, "a2a.splits");
  std::vector<at::Tensor> expected;
  std::vector<int64_t> expected_splits;
  for (int r = 0; r < size(); ++r) {
    expected_splits.push_back((r + rank()) % 3 + 1);
    expected.push_back(at::full({expected_splits.back(), 2}, 100.0 * r + rank(), at::kDouble));
  }
  EXPECT_TRUE(at::equal(res.output, at::cat(expected, 0)));
  EXPECT_EQ(res.received_splits, expected_splits);

  // Even split of dim 0, int16.
  at::Tensor even = (at::arange(2 * size(), at::kShort) + 10 * rank()).reshape({2 * size(), 1});
  hvt::AlltoallResult e = hvt::alltoall(even, {}, "a2a.even");
  std::vector<at::Tensor> got;
  for (int r = 0; r < size(); ++r) {
    got.push_back((at::arange(2 * rank(), 2 * rank() + 2, at::kShort) + 10 * r).reshape({2, 1}));
  }
  EXPECT_TRUE(at::equal(e.output, at::cat(got, 0)));
  EXPECT_EQ(e.received_splits, std::vector<int64_t>(size(), 2));
}

TEST(TorchCollectives, Reducescatter) {
  for (at::ScalarType type : {at::kInt, at::kFloat, at::kDouble}) {
    const int64_t dim0 = 2 * size() + 1;
    at::Tensor input = rank_values({dim0, 3}, rank(), type);
    at::Tensor out = hvt::reducescatter(input, std::string("rs.") + c10::toString(type), {ReduceOp::kSum});
    at::Tensor sum = expected_reduce({dim0, 3}, type, ReduceOp::kSum, 7);
    int64_t begin = 0;
    for (int r = 0; r < rank(); ++r) begin += horovodlite::reducescatter_rows(dim0, size(), r);
    const int64_t rows = horovodlite::reducescatter_rows(dim0, size(), rank());
    EXPECT_TRUE(at::equal(out.to(at::kDouble), sum.slice(0, begin, begin + rows))) << c10::toString(type);
  }
  at::Tensor avg = hvt::reducescatter(rank_values({size() * 2, 2}, rank(), at::kDouble).t().t(), "rs.avg");
  at::Tensor expected = expected_reduce({size() * 2, 2}, at::kDouble, ReduceOp::kAverage, 7);
  EXPECT_TRUE(at::allclose(avg, expected.slice(0, 2 * rank(), 2 * rank() + 2), 1e-12, 1e-12));
}

TEST(TorchCollectives, GroupedOpsAndTheEmptyGroup) {
  // One handle per tensor, in order.
  std::vector<at::Tensor> ins = {rank_values({5}, rank(), at::kDouble), rank_values({2, 3}, rank(), at::kFloat)};
  std::vector<hvt::AsyncHandle> sums = hvt::grouped_allreduce_async(ins, {"grouped.a", "grouped.b"}, {ReduceOp::kSum});
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_TRUE(at::equal(sums[0].synchronize(), expected_reduce({5}, at::kDouble, ReduceOp::kSum, 7)));
  EXPECT_TRUE(at::equal(sums[1].synchronize(), expected_reduce({2, 3}, at::kFloat, ReduceOp::kSum, 7).to(at::kFloat)));
  std::vector<hvt::AsyncHandle> gathered = hvt::grouped_allgather_async({at::full({1, 2}, 1.0 * rank())});
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_EQ(gathered[0].synchronize().size(0), size());

  // No tensors: the core's error is raised at the call (not an empty list of
  // handles that drops it), with the op's name.
  auto refuses_empty = [](const char* what, const std::function<std::vector<hvt::AsyncHandle>()>& call) {
    try {
      std::vector<hvt::AsyncHandle> handles = call();
      ADD_FAILURE() << what << " of no tensors returned " << handles.size() << " handles";
    } catch (const hvt::HorovodError& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << e.what();
      EXPECT_EQ(std::string(e.what()), std::string(what) + ": the list of tensors is empty");
    }
  };
  refuses_empty("grouped_allreduce", [] { return hvt::grouped_allreduce_async({}); });
  refuses_empty("grouped_allreduce", [] { return hvt::grouped_allreduce_async_({}); });  // the core's op name
  refuses_empty("grouped_allgather", [] { return hvt::grouped_allgather_async({}); });
  refuses_empty("grouped_reducescatter", [] { return hvt::grouped_reducescatter_async({}); });
}

TEST(TorchCollectives, JoinAndBarrier) {
  hvt::barrier();
  const int last = hvt::join();
  EXPECT_GE(last, 0);
  EXPECT_LT(last, size());
  hvt::barrier();
}

TEST(TorchCollectives, ErrorsBecomeHorovodErrors) {
  try {
    hvt::allreduce(at::ones({2}, at::kComplexFloat), "complex");
    FAIL() << "complex tensors must be rejected";
  } catch (const hvt::HorovodError& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ComplexFloat"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hvt::allreduce(at::Tensor(), "undefined"), hvt::HorovodError);
  // Ranks disagree about the shape: every rank gets an error, nobody hangs.
  // The error names the tensor once (the handle prefixes "name: " only to a
  // message that does not name it already).
  auto occurrences = [](const std::string& s, const std::string& sub) {
    int n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + 1)) ++n;
    return n;
  };
  try {
    hvt::allreduce(at::ones({rank() + 1}, at::kFloat), "shape.differs");
    FAIL() << "a shape mismatch must fail";
  } catch (const hvt::HorovodError& e) {
    EXPECT_EQ(e.code(), StatusCode::kMismatch) << e.what();
    EXPECT_EQ(occurrences(e.what(), "shape.differs"), 1) << e.what();
  }
  // The runtime still works afterwards.
  EXPECT_TRUE(at::equal(hvt::allreduce(at::ones({3}, at::kLong), "after.mismatch", {ReduceOp::kSum}),
                        at::full({3}, static_cast<int64_t>(size()), at::kLong)));
}

}  // namespace
