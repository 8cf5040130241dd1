// The transport interface over the in-process implementation: matching in
// order per peer and tag, empty and large messages, timeouts that name the
// peer, the barrier, split/dup isolation, the topology's local/cross ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <thread>
#include <vector>

#include "transport/inproc_transport.h"

namespace {

using horovodlite::Status;
using horovodlite::StatusCode;
namespace tp = horovodlite::transport;

const std::vector<size_t> kCounts = {0, 1, 7, 100003};

TEST(Transport, EveryPairExchangesInOrderPerTag) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      for (size_t n : kCounts) {
        // Two messages per pair and tag, and two tags: each receive gets the
        // send posted in the same position.
        std::vector<std::vector<int>> out, in;
        std::vector<tp::RequestPtr> reqs;
        for (int peer = 0; peer < size; ++peer) {
          for (int k = 0; k < 4; ++k) {
            out.emplace_back(n, ctx.rank() * 1000 + peer * 10 + k);
            in.emplace_back(n, -1);
          }
        }
        for (int peer = 0; peer < size; ++peer) {
          for (int k = 0; k < 4; ++k) {
            const size_t i = static_cast<size_t>(peer * 4 + k);
            reqs.emplace_back();
            ASSERT_TRUE(ctx.irecv(in[i].data(), n * sizeof(int), peer, 5 + k % 2, &reqs.back()).ok());
          }
        }
        for (int peer = size - 1; peer >= 0; --peer) {
          for (int k = 0; k < 4; ++k) {
            const size_t i = static_cast<size_t>(peer * 4 + k);
            reqs.emplace_back();
            ASSERT_TRUE(ctx.isend(out[i].data(), n * sizeof(int), peer, 5 + k % 2, &reqs.back()).ok());
          }
        }
        ASSERT_TRUE(tp::wait_all(&reqs, tp::kDefaultTimeout).ok());
        for (int peer = 0; peer < size; ++peer) {
          for (int k = 0; k < 4; ++k) {
            const std::vector<int>& got = in[static_cast<size_t>(peer * 4 + k)];
            for (int v : got) ASSERT_EQ(v, peer * 1000 + ctx.rank() * 10 + k) << "size " << size << " n " << n;
          }
        }
      }
      EXPECT_TRUE(ctx.barrier().ok());
    });
  }
}

TEST(Transport, AWaitThatRunsOutOfTimeNamesThePeerAndTag) {
  std::atomic<bool> timed_out{false};
  tp::run_inproc_ranks(2, [&](tp::Context& ctx) {
    int v = 0;
    if (ctx.rank() == 0) {
      tp::RequestPtr r;
      ASSERT_TRUE(ctx.irecv(&v, sizeof v, 1, 42, &r).ok());
      const Status s = r->wait(std::chrono::milliseconds(30));
      EXPECT_EQ(s.code(), StatusCode::kTimeout);
      EXPECT_NE(s.message().find("receive from rank 1"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("tag 42"), std::string::npos) << s.message();
      timed_out = true;
      EXPECT_TRUE(r->wait(tp::kDefaultTimeout).ok());  // still in flight: completes once sent
      EXPECT_EQ(v, 7);
    } else {
      while (!timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      v = 7;
      tp::RequestPtr s;
      ASSERT_TRUE(ctx.isend(&v, sizeof v, 0, 42, &s).ok());
      EXPECT_TRUE(s->wait(tp::kDefaultTimeout).ok());
    }
  });
}

TEST(Transport, MismatchedLengthsAndBadArgumentsFailClearly) {
  tp::run_inproc_ranks(2, [&](tp::Context& ctx) {
    int v[2] = {1, 2};
    tp::RequestPtr r;
    EXPECT_EQ(ctx.isend(v, 4, 2, 0, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(ctx.isend(v, 4, 0, tp::kMaxTag + 1, &r).code(), StatusCode::kInvalidArgument);
    const Status s = ctx.rank() == 0 ? ctx.isend(v, 8, 1, 1, &r) : ctx.irecv(v, 4, 0, 1, &r);
    ASSERT_TRUE(s.ok());
    const Status w = r->wait(tp::kDefaultTimeout);
    EXPECT_EQ(w.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(w.message().find("8 bytes"), std::string::npos) << w.message();
  });
}

TEST(Transport, SplitAndDupHaveTheirOwnMessages) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      // Even and odd ranks, the odd ones in reverse order.
      std::vector<int> group;
      for (int r = 0; r < size; ++r) {
        if (r % 2 == ctx.rank() % 2) group.push_back(r);
      }
      if (ctx.rank() % 2) std::reverse(group.begin(), group.end());
      tp::ContextPtr sub, dup;
      ASSERT_TRUE(ctx.split(group, ctx.rank() % 2 ? "odd" : "even", &sub).ok());
      ASSERT_TRUE(ctx.dup("dup", &dup).ok());
      ASSERT_EQ(sub->size(), static_cast<int>(group.size()));
      EXPECT_EQ(group[static_cast<size_t>(sub->rank())], ctx.rank());
      EXPECT_EQ(sub->world_rank(sub->rank()), ctx.rank());
      // The same peer and tag on the three contexts: each receive gets its own context's message.
      const int right = (ctx.rank() + 1) % size, left = (ctx.rank() + size - 1) % size;
      const int sright = (sub->rank() + 1) % sub->size(), sleft = (sub->rank() + sub->size() - 1) % sub->size();
      int a = 100 + ctx.rank(), b = 200 + ctx.rank(), c = 300 + ctx.rank(), ra = 0, rb = 0, rc = 0;
      std::vector<tp::RequestPtr> reqs(6);
      ASSERT_TRUE(dup->isend(&b, sizeof b, right, 3, &reqs[0]).ok());
      ASSERT_TRUE(sub->isend(&c, sizeof c, sright, 3, &reqs[1]).ok());
      ASSERT_TRUE(ctx.isend(&a, sizeof a, right, 3, &reqs[2]).ok());
      ASSERT_TRUE(ctx.irecv(&ra, sizeof ra, left, 3, &reqs[3]).ok());
      ASSERT_TRUE(sub->irecv(&rc, sizeof rc, sleft, 3, &reqs[4]).ok());
      ASSERT_TRUE(dup->irecv(&rb, sizeof rb, left, 3, &reqs[5]).ok());
      ASSERT_TRUE(tp::wait_all(&reqs, tp::kDefaultTimeout).ok());
      EXPECT_EQ(ra, 100 + left);
      EXPECT_EQ(rb, 200 + left);
      EXPECT_EQ(rc, 300 + group[static_cast<size_t>(sleft)]);
      EXPECT_TRUE(sub->barrier().ok());
      EXPECT_TRUE(dup->barrier().ok());
      // A split without this rank is refused.
      tp::ContextPtr none;
      if (size > 1) {
        EXPECT_EQ(ctx.split({(ctx.rank() + 1) % size}, "x", &none).code(), StatusCode::kInvalidArgument);
      }
    });
  }
}

TEST(Transport, TopologyGivesLocalAndCrossRanksAndHostOrder) {
  // 5 ranks on hosts a b a b c: round-robin placement.
  const tp::Topology t = tp::Topology::from_names({"a", "b", "a", "b", "c"});
  EXPECT_EQ(t.host, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(t.local_rank(2), 1);
  EXPECT_EQ(t.local_size(4), 1);
  EXPECT_EQ(t.local_ranks(3), (std::vector<int>{1, 3}));
  EXPECT_EQ(t.cross_ranks(0), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(t.cross_rank(4), 2);
  EXPECT_EQ(t.cross_size(2), 2);
  EXPECT_EQ(t.host_order(), (std::vector<int>{0, 2, 1, 3, 4}));
  tp::run_inproc_ranks(
      4,
      [&](tp::Context& ctx) {
        EXPECT_EQ(ctx.local_size(), 2);
        EXPECT_EQ(ctx.cross_size(), 2);
        tp::ContextPtr local;
        ASSERT_TRUE(ctx.split(ctx.topology().local_ranks(ctx.rank()), "local", &local).ok());
        EXPECT_EQ(local->rank(), ctx.local_rank());
        EXPECT_EQ(local->topology().host, (std::vector<int>{0, 0}));
      },
      tp::Topology{{0, 0, 1, 1}});
}

}  // namespace
