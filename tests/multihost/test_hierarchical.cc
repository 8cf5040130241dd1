// The host allreduce algorithms across (simulated) hosts: the hierarchical
// allreduce and the host-ordered flat ring against MPI_Allreduce, on the same
// inputs, for every dtype and op, counts that do not split evenly (0, 1, fewer
// than the ranks, odd, several pipeline pieces), in and out of place, with a
// postscale, and with fp16 on the wire. Inputs are small integers (also for the
// floating types), so every reduction order gives exactly the same result and
// the algorithms are compared bitwise; one case with random reals compares within
// a tolerance. Every result must also be bitwise the same on every rank.
//
// Run on several hosts (tests/multihost/CMakeLists.txt): 2x2 exercises the
// hierarchical algorithm; 2x1, 4x1 check it stays off (one rank per host) and
// the flat ring across hosts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "horovodlite/config.h"
#include "kernels/reduce.h"
#include "mpi/mpi_algorithms.h"
#include "mpi/mpi_hierarchical.h"
#include "mpi/mpi_world.h"
#include "mpi/ring_segment.h"
#include "ops/fusion.h"
#include "ops/hierarchical_allgather.h"
#include "ops/hierarchical_allreduce.h"
#include "ops/ring_backend.h"
#include "world.h"

namespace horovodlite {
namespace {

struct Algorithms {
  World world;
  Config config;  // the algorithms read their switches from it at each call
  // MPI's form (local steps as MPI collectives), and the transport's over the
  // same world (MPI's point-to-point messages): written once, any transport.
  std::unique_ptr<HierarchicalAllreduce> hierarchical;
  std::unique_ptr<HierarchicalAllreduce> hierarchical_wire;
  std::unique_ptr<HierarchicalAllgather> hierarchical_allgather;
  std::unique_ptr<RingBackend> ring;
  std::unique_ptr<MpiAllreduce> reference;
};

Algorithms& algorithms() {
  static Algorithms* a = [] {
    auto* x = new Algorithms;
    EXPECT_TRUE(x->world.init_mpi(nullptr).ok());
    Config& config = x->config;
    config.hierarchical_allreduce = Config::Hierarchical::kOn;  // every size
    config.hierarchical_allgather = Config::Hierarchical::kOn;
    config.ring_threshold_bytes = 0;
    config.ring_segment_bytes = 4096;  // deep pipelines on small buffers
    auto fusion = std::make_shared<FusionBuffer>();
    x->hierarchical = std::make_unique<MpiHierarchicalAllreduce>(x->world, config, fusion);
    x->hierarchical->set_piece_bytes(1000);  // several pieces, not a multiple of any element size
    x->hierarchical_wire = std::make_unique<HierarchicalAllreduce>(x->world, config, fusion);
    x->hierarchical_wire->set_piece_bytes(1000);
    RingAllreduceOptions ring;
    ring.segment_bytes = config.ring_segment_bytes;
    x->ring = std::make_unique<RingBackend>(x->world, 0, ring, fusion);
    x->hierarchical_allgather = std::make_unique<MpiHierarchicalAllgather>(x->world, config, fusion);
    x->reference = std::make_unique<MpiAllreduce>(x->world, fusion);
    return x;
  }();
  return *a;
}

bool hierarchical_applies() {
  const World& m = algorithms().world;
  return m.local_size() > 1 && m.cross_size() > 1;
}

const char* kTypes[] = {"uint8",   "int8",     "int16",   "int32",   "int64",
                        "float16", "bfloat16", "float32", "float64", "bool"};
const char* kOps[] = {"average", "sum", "min", "max", "product"};

std::vector<uint8_t> small_integers(DataType t, ReduceOp op, int64_t count, int rank) {
  std::mt19937 rng(7919u * static_cast<unsigned>(rank + 1) + 31u * static_cast<unsigned>(t) +
                   static_cast<unsigned>(count));
  const bool product = op == ReduceOp::kProduct;
  std::uniform_int_distribution<int> d(product ? -2 : -30, product ? 2 : 30);
  std::vector<uint8_t> buf(count * dtype_size(t) + 1);
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* p = buf.data() + i * dtype_size(t);
    const int v = d(rng);
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (t) {
      case DataType::kUInt8:
        put(static_cast<uint8_t>(std::abs(v)));
        break;
      case DataType::kInt8:
        put(static_cast<int8_t>(v));
        break;
      case DataType::kInt16:
        put(static_cast<int16_t>(v * (product ? 1 : 100)));
        break;
      case DataType::kInt32:
        put(static_cast<int32_t>(v * (product ? 1 : 100000)));
        break;
      case DataType::kInt64:
        put(static_cast<int64_t>(v) * (product ? 1 : (int64_t{1} << 40)));
        break;
      case DataType::kFloat16:
        put(kernels::float_to_half(static_cast<float>(v)));
        break;
      case DataType::kBFloat16:
        put(kernels::float_to_bfloat16(static_cast<float>(v)));
        break;
      case DataType::kFloat32:
        put(static_cast<float>(v) * 0.25f);
        break;
      case DataType::kFloat64:
        put(static_cast<double>(v) * 0.125);
        break;
      case DataType::kBool:
        put(static_cast<uint8_t>(rng() % 4 != 0));
        break;
    }
  }
  return buf;
}

// Whether `buf` is bitwise the same on every rank.
bool same_on_every_rank(const std::vector<uint8_t>& buf) {
  const MPI_Comm comm = algorithms().world.mpi()->comm();
  std::vector<uint8_t> root(buf);
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_BYTE, 0, comm);
  int same = root == buf ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, comm);
  return same == 1;
}

// Runs `a` on this rank's inputs (in place or not), returns the output bytes.
std::vector<uint8_t> run(HostAllreduce& a, DataType t, ReduceOp op, int64_t count, double postscale, bool in_place,
                         bool wire16 = false) {
  const std::vector<uint8_t> in = small_integers(t, op, count, algorithms().world.rank());
  std::vector<uint8_t> out(in.size(), 0xAB);
  Status s;
  if (in_place) {
    out = in;
    s = wire16 ? a.reduce_fp16_wire(out.data(), out.data(), count, t, op, postscale)
               : a.reduce(out.data(), out.data(), count, t, op, postscale);
  } else {
    s = wire16 ? a.reduce_fp16_wire(in.data(), out.data(), count, t, op, postscale)
               : a.reduce(in.data(), out.data(), count, t, op, postscale);
  }
  EXPECT_TRUE(s.ok()) << a.name() << ": " << s.message();
  out.back() = 0;  // the byte past the data is not compared
  return out;
}

std::vector<int64_t> counts() {
  const int n = algorithms().world.size();
  return {0, 1, n - 1, n + 1, 1001, 4099};
}

TEST(Hierarchical, EnabledOnlyOnSeveralHostsWithSeveralRanksEach) {
  const bool on = algorithms().hierarchical->accepts(DataType::kFloat32, ReduceOp::kSum, 1 << 20);
  EXPECT_EQ(on, hierarchical_applies()) << "local_size " << algorithms().world.local_size() << ", cross_size "
                                        << algorithms().world.cross_size();
  EXPECT_FALSE(algorithms().hierarchical->accepts(DataType::kFloat32, ReduceOp::kAdasum, 1 << 20));
}

// The allgather's results are checked by the core suite run with
// HOROVODLITE_HIERARCHICAL_ALLGATHER=1 (multihost_core_2x2_hierarchical*).
TEST(Hierarchical, AllgatherEnabledOnlyOnSeveralHostsWithSeveralRanksEach) {
  Response r;
  r.type = OpType::kAllgather;
  r.shape = {4, 3};
  r.tensor_sizes.assign(static_cast<size_t>(algorithms().world.size()), 4);
  EXPECT_EQ(algorithms().hierarchical_allgather->enabled(r), hierarchical_applies());
  r.device = 0;  // device tensors are not its business
  EXPECT_FALSE(algorithms().hierarchical_allgather->enabled(r));
}

// The switches are read at each call (the autotuner changes them between
// cycles, tests/multihost: multihost_autotune_switches_2x2): off, auto (from
// the ring threshold) and on, for both algorithms, and the algorithm still
// reduces correctly after being switched off and on again.
TEST(Hierarchical, SwitchesAreReadAtEachCall) {
  if (!hierarchical_applies()) GTEST_SKIP() << "one rank per host";
  Algorithms& a = algorithms();
  Config& c = a.config;
  const Config saved = c;
  Response r;
  r.type = OpType::kAllgather;
  r.shape = {4, 3};
  r.tensor_sizes.assign(static_cast<size_t>(a.world.size()), 4);  // 48 bytes of output per rank
  c.hierarchical_allreduce = c.hierarchical_allgather = Config::Hierarchical::kOff;
  EXPECT_FALSE(a.hierarchical->accepts(DataType::kFloat32, ReduceOp::kSum, 1 << 20));
  EXPECT_FALSE(a.hierarchical_allgather->enabled(r));
  c.hierarchical_allreduce = c.hierarchical_allgather = Config::Hierarchical::kAuto;
  c.ring_threshold_bytes = 4096;
  EXPECT_FALSE(a.hierarchical->accepts(DataType::kFloat32, ReduceOp::kSum, 4095));
  EXPECT_TRUE(a.hierarchical->accepts(DataType::kFloat32, ReduceOp::kSum, 4096));
  EXPECT_FALSE(a.hierarchical_allgather->enabled(r));
  c.ring_threshold_bytes = -1;  // auto and RING_THRESHOLD=-1: never
  EXPECT_FALSE(a.hierarchical->accepts(DataType::kFloat32, ReduceOp::kSum, 1 << 20));
  c.hierarchical_allreduce = c.hierarchical_allgather = Config::Hierarchical::kOn;
  EXPECT_TRUE(a.hierarchical->accepts(DataType::kFloat32, ReduceOp::kSum, 4));
  EXPECT_TRUE(a.hierarchical_allgather->enabled(r));
  c = saved;
  for (int64_t count : counts()) {
    const auto ref = run(*a.reference, DataType::kFloat32, ReduceOp::kSum, count, 1.0, false);
    EXPECT_EQ(run(*a.hierarchical, DataType::kFloat32, ReduceOp::kSum, count, 1.0, false), ref) << count;
  }
}

TEST(Hierarchical, TopologyIsSeveralHosts) {
  // The multi-host tests run on simulated hosts: more than one host, each with as many ranks.
  const World& m = algorithms().world;
  EXPECT_GT(m.cross_size(), 1);
  EXPECT_EQ(m.local_size() * m.cross_size(), m.size());
}

// Across hosts the ring's segments fit Open MPI's tcp eager limit (read through
// MPI_T), so that no segment waits for a rendezvous reply (mpi/ring_segment.h).
TEST(RingSegment, AcrossHostsUnderTheTcpEagerLimit) {
  const int64_t limit = tcp_eager_limit_bytes();
  ASSERT_GT(limit, 64) << "btl_tcp_eager_limit is not readable through MPI_T, yet the tcp BTL carries this job";
  int64_t seg = 0;
  ASSERT_TRUE(ring_segment_bytes(MPI_COMM_WORLD, int64_t{1} << 30, true, &seg).ok());
  EXPECT_EQ(seg, (limit - 64) / 64 * 64);
  EXPECT_LE(seg + 64, limit);
  ASSERT_TRUE(ring_segment_bytes(MPI_COMM_WORLD, 4096, true, &seg).ok());
  EXPECT_EQ(seg, 4096);  // a smaller configured segment is kept
  ASSERT_TRUE(ring_segment_bytes(MPI_COMM_WORLD, int64_t{1} << 30, false, &seg).ok());
  EXPECT_EQ(seg, int64_t{1} << 30);  // not across hosts: as configured
}

// Hierarchical and flat ring == MPI_Allreduce, bitwise, for every dtype, op and count.
TEST(Hierarchical, EqualsMpiAndRingForEveryDtypeOpAndCount) {
  Algorithms& a = algorithms();
  for (int ti = 0; ti <= static_cast<int>(DataType::kBool); ++ti) {
    const auto t = static_cast<DataType>(ti);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int64_t count : counts()) {
        for (bool in_place : {false, true}) {
          const std::string what = std::string(kTypes[ti]) + "/" + kOps[static_cast<int>(op)] + " count " +
                                   std::to_string(count) + (in_place ? " in place" : "");
          const auto ref = run(*a.reference, t, op, count, 1.0, in_place);
          const auto ring = run(*a.ring, t, op, count, 1.0, in_place);
          EXPECT_EQ(ring, ref) << "ring, " << what;
          if (hierarchical_applies()) {
            const auto h = run(*a.hierarchical, t, op, count, 1.0, in_place);
            EXPECT_EQ(h, ref) << "hierarchical, " << what;
            EXPECT_TRUE(same_on_every_rank(h)) << what;
            EXPECT_EQ(run(*a.hierarchical_wire, t, op, count, 1.0, in_place), ref)
                << "hierarchical on the wire, " << what;
          }
        }
      }
    }
  }
}

// Average arrives as Sum with a postscale (1/size): applied once, same as MPI's sum scaled.
TEST(Hierarchical, PostscaleEqualsScaledMpiSum) {
  if (!hierarchical_applies()) GTEST_SKIP() << "one rank per host";
  Algorithms& a = algorithms();
  const double post = 1.0 / a.world.size();
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    for (int64_t count : counts()) {
      auto ref = run(*a.reference, t, ReduceOp::kSum, count, post, false);
      const auto h = run(*a.hierarchical, t, ReduceOp::kSum, count, post, false);
      EXPECT_EQ(h, ref) << kTypes[static_cast<int>(t)] << " count " << count;
    }
  }
}

// fp16 on the cross-host wire: the result is the fp16-rounded reduction, the
// same on every rank; small integers are exact in fp16, so it equals MPI's.
TEST(Hierarchical, Fp16WireEqualsMpiOnExactValuesAndIsTheSameEverywhere) {
  if (!hierarchical_applies()) GTEST_SKIP() << "one rank per host";
  Algorithms& a = algorithms();
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int64_t count : counts()) {
        const auto ref = run(*a.reference, t, op, count, 0.5, false);
        const auto h = run(*a.hierarchical, t, op, count, 0.5, true, /*wire16=*/true);
        EXPECT_EQ(h, ref) << kTypes[static_cast<int>(t)] << "/" << kOps[static_cast<int>(op)] << " count " << count;
        EXPECT_TRUE(same_on_every_rank(h));
      }
    }
  }
}

// Random reals: the orders of summation differ, so within a tolerance; the
// result is still bitwise the same on every rank, and fp16 (bf16) on the wire
// stays within fp16's (bf16's: 8 significant bits, 8x coarser) rounding of the
// exact sum.
TEST(Hierarchical, RandomRealsWithinToleranceAndTheSameEverywhere) {
  if (!hierarchical_applies()) GTEST_SKIP() << "one rank per host";
  Algorithms& a = algorithms();
  const int64_t count = 100003;
  std::mt19937 rng(17u + static_cast<unsigned>(a.world.rank()));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> in(count), ref(count), h(count), h16(count), hbf(count);
  for (auto& x : in) x = d(rng);
  ASSERT_TRUE(a.reference->reduce(in.data(), ref.data(), count, DataType::kFloat32, ReduceOp::kSum, 1.0).ok());
  ASSERT_TRUE(a.hierarchical->reduce(in.data(), h.data(), count, DataType::kFloat32, ReduceOp::kSum, 1.0).ok());
  ASSERT_TRUE(
      a.hierarchical->reduce_fp16_wire(in.data(), h16.data(), count, DataType::kFloat32, ReduceOp::kSum, 1.0).ok());
  ASSERT_TRUE(a.hierarchical
                  ->reduce_16bit_wire(in.data(), hbf.data(), count, DataType::kFloat32, ReduceOp::kSum, 1.0,
                                      DataType::kBFloat16)
                  .ok());
  const double n = a.world.size();
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_NEAR(h[i], ref[i], 1e-5 * n) << "element " << i;
    ASSERT_NEAR(h16[i], ref[i], n * n * 1e-3 + 1e-3 * std::fabs(ref[i])) << "fp16 wire, element " << i;
    ASSERT_NEAR(hbf[i], ref[i], n * n * 8e-3 + 8e-3 * std::fabs(ref[i])) << "bf16 wire, element " << i;
  }
  auto bytes = [](const std::vector<float>& v) {
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                reinterpret_cast<const uint8_t*>(v.data() + v.size()));
  };
  EXPECT_TRUE(same_on_every_rank(bytes(h)));
  EXPECT_TRUE(same_on_every_rank(bytes(h16)));
  EXPECT_TRUE(same_on_every_rank(bytes(hbf)));
  EXPECT_NE(hbf, h16);  // a different wire format really was used
}

}  // namespace
}  // namespace horovodlite
