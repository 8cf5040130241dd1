// Wire format round trips and defensive decoding; the response cache; fusion.
#include <gtest/gtest.h>

#include "enforce.h"
#include "message.h"
#include "negotiation/readiness_table.h"
#include "negotiation/response_cache.h"
#include "ops/fusion.h"

using namespace horovodlite;

TEST(Message, RequestsRoundTrip) {
  std::vector<Request> in(2);
  in[0].name = "a";
  in[0].shape = {2, 3};
  in[0].reduce_op = ReduceOp::kMax;
  in[1].type = OpType::kBroadcast;
  in[1].name = std::string(100, 'x');
  in[1].root = 3;
  in[1].dtype = DataType::kBFloat16;
  in[1].prescale = 0.25;
  std::string buf;
  encode_requests(in, &buf);
  std::vector<Request> out;
  ASSERT_TRUE(decode_requests(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].same_params(in[0]));
  EXPECT_TRUE(out[1].same_params(in[1]));
}

TEST(Message, ResponsesRoundTrip) {
  Response r;
  r.type = OpType::kAllgather;
  r.names = {"x", "y"};
  r.tensor_sizes = {1, 2, 3};
  r.shape = {4, 5};
  r.error_message = "e";
  std::string buf;
  encode_responses({r}, &buf);
  std::vector<Response> out;
  ASSERT_TRUE(decode_responses(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names, r.names);
  EXPECT_EQ(out[0].tensor_sizes, r.tensor_sizes);
  EXPECT_EQ(out[0].shape, r.shape);
}

TEST(Message, EveryTruncationAndCorruptionIsAnError) {
  Request q;
  q.name = "tensor";
  q.shape = {7};
  std::string buf;
  encode_requests({q, q}, &buf);
  std::vector<Request> out;
  for (size_t n = 0; n < buf.size(); ++n) {
    EXPECT_FALSE(decode_requests(reinterpret_cast<const uint8_t*>(buf.data()), n, &out).ok()) << n;
  }
  // A huge count must be rejected before anything is allocated.
  std::string bad = buf;
  bad[4] = '\xff';
  bad[5] = '\xff';
  bad[6] = '\xff';
  bad[7] = '\x7f';
  Status s = decode_requests(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("larger than the message"), std::string::npos) << s.message();
}

TEST(Cache, HitInvalidMissAndDeterministicEviction) {
  negotiation::ResponseCache a(2), b(2);
  auto req = [](const std::string& n, int64_t dim) {
    Request q;
    q.name = n;
    q.shape = {dim};
    return q;
  };
  auto resp = [](const Request& q) {
    Response r;
    r.names = {q.name};
    r.shape = q.shape;
    r.tensor_sizes = {q.shape[0]};
    return r;
  };
  for (negotiation::ResponseCache* c : {&a, &b}) {
    for (const char* n : {"x", "y", "z"}) {  // z evicts x, the least recently used
      Request q = req(n, 4);
      c->put(resp(q), &q);
    }
  }
  uint32_t pa = 0, pb = 0;
  EXPECT_EQ(a.lookup(req("x", 4), &pa), negotiation::ResponseCache::Lookup::kMiss);
  EXPECT_EQ(a.lookup(req("z", 4), &pa), negotiation::ResponseCache::Lookup::kHit);
  EXPECT_EQ(b.lookup(req("z", 4), &pb), negotiation::ResponseCache::Lookup::kHit);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(a.lookup(req("z", 5), &pa), negotiation::ResponseCache::Lookup::kInvalid);
}

TEST(Fusion, MergesOnlyCompatibleNeighboursUpToTheThreshold) {
  auto ar = [](const std::string& n, int64_t count, DataType d) {
    Response r;
    r.type = OpType::kAllreduce;
    r.names = {n};
    r.tensor_sizes = {count};
    r.dtype = d;
    return r;
  };
  std::vector<Response> in = {ar("a", 10, DataType::kFloat32), ar("b", 10, DataType::kFloat32),
                              ar("c", 10, DataType::kFloat64), ar("d", 20, DataType::kFloat64)};
  auto out = fuse_responses(in, 240);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"c", "d"}));
  EXPECT_EQ(fuse_responses(in, 0).size(), 4u);
  EXPECT_EQ(fuse_responses(in, 100).size(), 3u);
  // A large tensor is reduced on its own, and nothing joins it.
  std::vector<Response> big = {ar("s1", 10, DataType::kFloat32), ar("big", kFuseAloneBytes / 4, DataType::kFloat32),
                               ar("s2", 10, DataType::kFloat32), ar("s3", 10, DataType::kFloat32)};
  auto fused = fuse_responses(big, int64_t(1) << 30);
  ASSERT_EQ(fused.size(), 3u);
  EXPECT_EQ(fused[1].names, std::vector<std::string>{"big"});
  EXPECT_EQ(fused[2].names, (std::vector<std::string>{"s2", "s3"}));
}

// Allgathers (bytes: the gathered output) and host reducescatters (bytes: the
// input) fuse with compatible neighbours up to the threshold; device ones and
// reducescatters with other reduce ops do not; DISABLE_GROUP_FUSION keeps groups apart.
TEST(Fusion, AllgatherAndReducescatterFuseUpToTheThreshold) {
  auto ag = [](const std::string& n, std::vector<int64_t> rows, uint64_t group = 0) {
    Response r;
    r.type = OpType::kAllgather;
    r.names = {n};
    r.tensor_sizes = std::move(rows);
    r.shape = {r.tensor_sizes[0], 2};
    r.group_id = group;
    return r;
  };
  auto rs = [](const std::string& n, int64_t dim0, ReduceOp op = ReduceOp::kSum, int32_t device = kCpuDevice) {
    Response r;
    r.type = OpType::kReducescatter;
    r.names = {n};
    r.shape = {dim0, 4};
    r.reduce_op = op;
    r.device = device;
    return r;
  };
  EXPECT_EQ(response_bytes(ag("a", {1, 2, 3})), 6 * 2 * 4);
  EXPECT_EQ(response_bytes(rs("r", 5)), 5 * 4 * 4);
  std::vector<Response> in = {ag("a", {1, 2}), ag("b", {3, 0}), ag("c", {1, 1})};
  auto out = fuse_responses(in, 48);  // 24 + 24 bytes, then 16
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[0].tensor_sizes, (std::vector<int64_t>{1, 2, 3, 0}));
  EXPECT_EQ(fuse_responses(in, 1 << 20).size(), 1u);
  EXPECT_EQ(fuse_responses(in, 0).size(), 3u);
  std::vector<Response> scatters = {rs("r0", 2), rs("r1", 2), rs("r2", 2, ReduceOp::kMax), rs("r3", 2),
                                    rs("r4", 2, ReduceOp::kSum, 0)};
  out = fuse_responses(scatters, 1 << 20);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"r0", "r1"}));
  EXPECT_EQ(out[3].names, std::vector<std::string>{"r4"});  // a device tensor: on its own
  // Groups: fused across groups by default, not with DISABLE_GROUP_FUSION.
  std::vector<Response> grouped = {ag("u0", {1, 1}), ag("g0", {1, 1}, 7), ag("u1", {1, 1}), ag("g1", {1, 1}, 7),
                                   ag("h0", {1, 1}, 9)};
  EXPECT_EQ(fuse_responses(grouped, 1 << 20).size(), 1u);
  out = fuse_responses(grouped, 1 << 20, /*disable_group_fusion=*/true);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].names, std::vector<std::string>{"u0"});
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"g0", "g1"}));  // the group side by side
  EXPECT_EQ(out[2].names, std::vector<std::string>{"u1"});
  EXPECT_EQ(out[3].names, std::vector<std::string>{"h0"});
}

TEST(ReadinessTable, ReadyOnlyWhenEveryRankAskedAndMismatchNamesRanks) {
  negotiation::ReadinessTable c(3);
  Request q;
  q.name = "t";
  q.shape = {4};
  c.add(0, {q});
  c.add(2, {q});
  EXPECT_TRUE(c.take_ready().empty());
  ASSERT_EQ(c.pending().size(), 1u);
  EXPECT_EQ(c.pending()[0].missing_ranks, std::vector<int>{1});
  Request bad = q;
  bad.shape = {5};
  c.add(1, {bad});
  auto out = c.take_ready();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, OpType::kError);
  EXPECT_NE(out[0].error_message.find("rank 1: [5]"), std::string::npos) << out[0].error_message;
  EXPECT_NE(out[0].error_message.find("rank 0: [4]"), std::string::npos) << out[0].error_message;
}

TEST(ReadinessTable, MixedCpuGpuPlacementIsAnErrorButDifferentGpusAreNot) {
  negotiation::ReadinessTable c(2);
  Request q;
  q.name = "mixed";
  q.shape = {4};
  Request on_gpu = q;
  on_gpu.device = 0;
  c.add(0, {q});
  c.add(1, {on_gpu});
  auto out = c.take_ready();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, OpType::kError);
  EXPECT_NE(out[0].error_message.find("rank 0: CPU; rank 1: cuda:0"), std::string::npos) << out[0].error_message;

  Request a = q, b = q;
  a.name = b.name = "gpus";
  a.device = 0;
  b.device = 1;
  c.add(0, {a});
  c.add(1, {b});
  out = c.take_ready();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, OpType::kAllreduce);
}

namespace {

Status enforce_sizes(size_t a, size_t b) {
  HVL_ENFORCE_EQ(a, b, "tensor '", "x", "'");
  return Status::OK();
}

}  // namespace

TEST(Enforce, EqSaysFileLineConditionAndBothValues) {
  EXPECT_TRUE(enforce_sizes(3, 3).ok());
  const Status s = enforce_sizes(3, 4);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("test_message.cc:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("invariant a == b failed (3 vs. 4): tensor 'x'"), std::string::npos) << s.message();
}
