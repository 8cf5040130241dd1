// The project's algorithms over the in-process transport, one thread per rank:
// the pipelined ring (plain and fp16 on the wire, in and out of place), the
// negotiation's recursive doubling, and the transport collectives (broadcast,
// allgather, alltoall, reducescatter). World sizes 1..4, counts 0, 1, odd and
// large, several dtypes and ops; inputs are small integers, so every result is
// exact and compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/reduce.h"
#include "negotiation/recursive_doubling.h"
#include "ops/ring_allreduce.h"
#include "transport/collectives.h"
#include "transport/inproc_transport.h"

namespace {

using horovodlite::DataType;
using horovodlite::ReduceOp;
using horovodlite::RingAllreduce;
using horovodlite::RingAllreduceOptions;
using horovodlite::Status;
namespace tp = horovodlite::transport;
namespace ops = horovodlite::transport_ops;

const std::vector<int64_t> kCounts = {0, 1, 7, 100003};

// Rank r's input value at i: small integers (exact in every type, also fp16).
double input(int rank, int64_t i) { return static_cast<double>((i * 7 + rank * 3) % 11 + 1); }

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
    default:
      return a + b;
  }
}

double expected(int size, int64_t i, ReduceOp op) {
  double v = input(0, i);
  for (int r = 1; r < size; ++r) v = combine(op, v, input(r, i));
  return v;
}

template <typename T>
std::vector<T> inputs(int rank, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<T>(input(rank, i));
  return v;
}

template <typename T>
void check_ring(RingAllreduce& ring, int rank, int size, int64_t n, ReduceOp op, DataType dt, bool fp16,
                bool in_place) {
  std::vector<T> in = inputs<T>(rank, n), out(static_cast<size_t>(n), T(0));
  Status s;
  if (fp16) {
    s = in_place ? ring.run_fp16_wire(in.data(), n, dt, op) : ring.run_fp16_wire(in.data(), out.data(), n, dt, op);
  } else {
    s = in_place ? ring.run(in.data(), n, dt, op) : ring.run(in.data(), out.data(), n, dt, op);
  }
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<T>& got = in_place ? in : out;
  for (int64_t i = 0; i < n; ++i) {
    double want = expected(size, i, op);
    if (fp16) want = horovodlite::kernels::half_to_float(horovodlite::kernels::float_to_half(static_cast<float>(want)));
    ASSERT_EQ(static_cast<double>(got[static_cast<size_t>(i)]), static_cast<double>(static_cast<T>(want)))
        << "size " << size << " rank " << rank << " n " << n << " i " << i << " op " << static_cast<int>(op);
  }
  if (!in_place) {
    EXPECT_EQ(in, inputs<T>(rank, n));  // the input is only read
  }
}

TEST(TransportRing, EveryWorldSizeCountDtypeAndOp) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      // Small segments and a shallow pipeline: many segments per chunk, the
      // allgather's guards on the reduce-scatter sends exercised.
      RingAllreduceOptions options;
      options.segment_bytes = 4096;
      options.pipeline_depth = 2;
      RingAllreduce ring(ctx.shared_from_this(), options);
      const int r = ctx.rank();
      for (int64_t n : kCounts) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
          check_ring<float>(ring, r, size, n, op, DataType::kFloat32, false, true);
          check_ring<int32_t>(ring, r, size, n, op, DataType::kInt32, false, false);
          check_ring<double>(ring, r, size, n, op, DataType::kFloat64, false, false);
          check_ring<float>(ring, r, size, n, op, DataType::kFloat32, true, true);
          check_ring<double>(ring, r, size, n, op, DataType::kFloat64, true, false);
        }
      }
      // Product of small values stays exact in int64.
      check_ring<int64_t>(ring, r, size, 13, ReduceOp::kProduct, DataType::kInt64, false, true);
    });
  }
}

TEST(TransportRing, DefaultOptionsOnALargeBuffer) {
  tp::run_inproc_ranks(3, [&](tp::Context& ctx) {
    RingAllreduce ring(ctx.shared_from_this());
    check_ring<float>(ring, ctx.rank(), 3, int64_t{1} << 20, ReduceOp::kSum, DataType::kFloat32, false, true);
    check_ring<float>(ring, ctx.rank(), 3, (int64_t{1} << 20) + 5, ReduceOp::kSum, DataType::kFloat32, true, false);
  });
}

TEST(TransportRecursiveDoubling, EveryRankGetsTheSums) {
  for (int size = 1; size <= 7; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      for (int64_t message_bytes : {int64_t{0}, int64_t{16}}) {
        horovodlite::RecursiveDoubling rd(ctx.shared_from_this(), message_bytes);
        for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
          std::vector<uint64_t> words(n);
          for (size_t i = 0; i < n; ++i) words[i] = static_cast<uint64_t>(ctx.rank() + 1) * (i + 1);
          const Status s = rd.run(words.data(), n, [n](const uint64_t* in, uint64_t* inout) {
            for (size_t i = 0; i < n; ++i) inout[i] += in[i];
          });
          ASSERT_TRUE(s.ok()) << s.message();
          const uint64_t ranks_sum = static_cast<uint64_t>(size) * (size + 1) / 2;
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(words[i], ranks_sum * (i + 1)) << "size " << size << " n " << n;
        }
      }
    });
  }
}

TEST(TransportCollectives, BroadcastFromEveryRoot) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      for (int64_t n : kCounts) {
        for (int root = 0; root < size; ++root) {
          std::vector<int32_t> buf = ctx.rank() == root ? inputs<int32_t>(root, n) : std::vector<int32_t>(n, -1);
          ASSERT_TRUE(ops::broadcast(ctx, buf.data(), buf.size() * 4, root).ok());
          ASSERT_EQ(buf, inputs<int32_t>(root, n)) << "size " << size << " root " << root;
        }
      }
      std::vector<int32_t> x(1);
      EXPECT_EQ(ops::broadcast(ctx, x.data(), 4, size).code(), horovodlite::StatusCode::kInvalidArgument);
    });
  }
}

TEST(TransportCollectives, AllgatherOfUnequalBlocks) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      for (int64_t n : kCounts) {
        // Rank r contributes n + r elements (rank 0 nothing when n is 0).
        std::vector<size_t> bytes;
        size_t total = 0;
        for (int r = 0; r < size; ++r) {
          bytes.push_back(static_cast<size_t>(n + r) * 4);
          total += bytes.back();
        }
        const std::vector<int32_t> mine = inputs<int32_t>(ctx.rank(), n + ctx.rank());
        std::vector<int32_t> out(total / 4, -1);
        ASSERT_TRUE(ops::allgatherv(ctx, mine.data(), out.data(), bytes).ok());
        size_t at = 0;
        for (int r = 0; r < size; ++r) {
          const std::vector<int32_t> want = inputs<int32_t>(r, n + r);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + static_cast<std::ptrdiff_t>(at)))
              << "size " << size << " block " << r;
          at += want.size();
        }
      }
    });
  }
}

TEST(TransportCollectives, AlltoallWithUnevenSplits) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      for (int64_t n : kCounts) {
        // Rank i sends (n + i + j) % (n + 3) elements of value 1000 i + j to rank j.
        auto len = [n](int i, int j) { return static_cast<size_t>((n + i + j) % (n + 3)); };
        const int me = ctx.rank();
        std::vector<size_t> sb, rb;
        std::vector<int32_t> in;
        for (int j = 0; j < size; ++j) {
          sb.push_back(len(me, j) * 4);
          rb.push_back(len(j, me) * 4);
          in.insert(in.end(), len(me, j), 1000 * me + j);
        }
        std::vector<int32_t> out(std::accumulate(rb.begin(), rb.end(), size_t{0}) / 4, -1);
        ASSERT_TRUE(ops::alltoallv(ctx, in.data(), sb, out.data(), rb).ok());
        size_t at = 0;
        for (int j = 0; j < size; ++j) {
          for (size_t k = 0; k < len(j, me); ++k) ASSERT_EQ(out[at++], 1000 * j + me) << "size " << size;
        }
      }
    });
  }
}

TEST(TransportCollectives, ReducescatterEveryDtypeAndOp) {
  for (int size = 1; size <= 4; ++size) {
    tp::run_inproc_ranks(size, [&](tp::Context& ctx) {
      for (int64_t n : kCounts) {
        std::vector<int64_t> counts;
        int64_t total = 0;
        for (int r = 0; r < size; ++r) {
          counts.push_back(n / size + (r < n % size ? 1 : 0));
          total += counts.back();
        }
        int64_t first = 0;
        for (int r = 0; r < ctx.rank(); ++r) first += counts[static_cast<size_t>(r)];
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          const std::vector<float> in = inputs<float>(ctx.rank(), total);
          std::vector<float> out(static_cast<size_t>(counts[static_cast<size_t>(ctx.rank())]), -1);
          ASSERT_TRUE(ops::reducescatter(ctx, in.data(), out.data(), counts, DataType::kFloat32, op).ok());
          for (size_t i = 0; i < out.size(); ++i) {
            ASSERT_EQ(out[i], static_cast<float>(expected(size, first + static_cast<int64_t>(i), op)))
                << "size " << size << " n " << n;
          }
          const std::vector<int64_t> in64 = inputs<int64_t>(ctx.rank(), total);
          std::vector<int64_t> out64(out.size(), -1);
          ASSERT_TRUE(ops::reducescatter(ctx, in64.data(), out64.data(), counts, DataType::kInt64, op).ok());
          for (size_t i = 0; i < out64.size(); ++i) {
            ASSERT_EQ(out64[i], static_cast<int64_t>(expected(size, first + static_cast<int64_t>(i), op)));
          }
        }
      }
    });
  }
}

}  // namespace
