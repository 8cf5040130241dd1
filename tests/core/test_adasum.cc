// Adasum allreduce (ops/adasum.h) through the public API, at every world size:
// on a power-of-two number of ranks the result equals a long-double reference
// of the recursive pairwise combination that every rank computes from every
// rank's inputs; fused tensors are combined each with its own dot products;
// inputs at the dtype's smallest normal number and at the square root of its
// largest neither flush to zero nor overflow; other world sizes get a clear
// error naming the tensor and the size.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "horovodlite/horovodlite.h"
#include "host_memory.h"
#include "huge_page_probe.h"
#include "mpi/adasum.h"
#include "mpi/adasum_exchange.h"
#include "test_util.h"

namespace {

using namespace horovodlite;
using hvl_test::Buffer;

const std::vector<DataType> kAdasumTypes = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                            DataType::kFloat64};

bool power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

using Vec = std::vector<long double>;

// The definition: a' = (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, a zero
// vector having coefficient 1.
Vec combine(const Vec& a, const Vec& b) {
  long double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const long double ca = aa > 0 ? 1 - dot / (2 * aa) : 1, cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Recursive pairwise: ranks (0,1), (2,3), ... then the pairs' results at
// distance 2, and so on (the lower-numbered side is a).
Vec reference(std::vector<Vec> v) {
  for (size_t d = 1; d < v.size(); d *= 2) {
    for (size_t r = 0; r < v.size(); r += 2 * d) v[r] = combine(v[r], v[r + d]);
  }
  return v[0];
}

// Rank r's input for tensor t: values of scale `scale`, rounded to the dtype
// (so that the reference starts from what the rank sends).
Vec input_of(int rank, int t, int64_t n, DataType dtype, double scale) {
  std::mt19937_64 gen(1000 * rank + t + 7);
  Buffer b(dtype, {n});
  // Correlated across ranks (a shared part plus a rank's own), as gradients are.
  // One distribution per engine: a normal_distribution keeps the second value of
  // each pair it draws, so one object shared by both would hand the shared
  // engine's values to every rank.
  std::mt19937_64 shared(t + 99);
  std::normal_distribution<double> common(0.0, scale), own(0.0, scale);
  for (int64_t i = 0; i < n; ++i) b.set(i, common(shared) * 0.7 + own(gen));
  Vec v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = b.get(i);
  return v;
}

// b's elements set from v (as many as b has), rounded to b's dtype.
void fill(Buffer& b, const Vec& v) {
  for (int64_t i = 0; i < b.size(); ++i) b.set(i, static_cast<double>(v[static_cast<size_t>(i)]));
}

double tol(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return 4e-3;
    case DataType::kBFloat16:
      return 3e-2;
    case DataType::kFloat32:
      return 1e-6;
    default:
      return 1e-14;
  }
}

// |got - want| <= tol * max|want| element by element.
void expect_close(const Buffer& got, const Vec& want, DataType dtype, const std::string& what) {
  long double scale = 0;
  for (long double w : want) scale = std::max(scale, std::fabs(w));
  const double limit = tol(dtype) * static_cast<double>(scale);
  int bad = 0;
  for (int64_t i = 0; i < got.size() && bad < 5; ++i) {
    const double w = static_cast<double>(want[static_cast<size_t>(i)]);
    if (!(std::fabs(got.get(i) - w) <= limit)) {
      ADD_FAILURE() << what << " [" << i << "]: " << got.get(i) << " vs reference " << w << " (limit " << limit << ")";
      ++bad;
    }
  }
}

// A count with more segments per half than the exchanges have send slots
// (4; the segments of Adasum::local_segment_bytes(), which is what the ranks of
// one host agree on), for every dtype, so every slot is reused: 6 segments of
// 2-byte elements per half, and odd.
int64_t every_slot_reused() { return 2 * 6 * (Adasum::local_segment_bytes() / 2) + 3; }

TEST(Adasum, MatchesTheReferenceForEveryDtypeAndCount) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  for (DataType d : kAdasumTypes) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{300001}, every_slot_reused()}) {
      std::vector<Vec> all;
      for (int r = 0; r < p; ++r) all.push_back(input_of(r, 0, n, d, 1.0));
      Buffer in(d, {n}), out(d, {n});
      fill(in, all[static_cast<size_t>(rank())]);
      const std::string name = std::string("adasum.") + dtype_name(d) + "." + std::to_string(n);
      HVL_ASSERT_OK(allreduce_async(name, in.view(), out.view(), {ReduceOp::kAdasum})->wait());
      expect_close(out, reference(all), d, name);
      // In place gives the same.
      HVL_ASSERT_OK(allreduce_async(name + ".inplace", in.view(), in.view(), {ReduceOp::kAdasum})->wait());
      EXPECT_TRUE(in.bitwise_equal(out)) << name;
    }
  }
}

// Each op picks plain or streaming stores for the slots it sends from, from a
// timing (ops/adasum_exchange.h, SlotStores); both must give the same bits.
TEST(Adasum, StreamingAndPlainSlotStoresGiveTheSameBits) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  struct Reset {
    ~Reset() { Adasum::force_slot_stores_for_testing(-1); }
  } reset;
  for (DataType d : kAdasumTypes) {
    const int64_t n = every_slot_reused();
    Buffer in(d, {n});
    const Vec mine = input_of(rank(), 3, n, d, 1.0);
    fill(in, mine);
    std::vector<Buffer> outs;
    outs.reserve(3);
    for (int mode : {0, 1, -1}) {
      Adasum::force_slot_stores_for_testing(mode);
      outs.emplace_back(d, std::vector<int64_t>{n});
      const std::string name = std::string("adasum.stores.") + dtype_name(d) + "." + std::to_string(mode);
      HVL_ASSERT_OK(allreduce_async(name, in.view(), outs.back().view(), {ReduceOp::kAdasum})->wait());
    }
    EXPECT_TRUE(outs[1].bitwise_equal(outs[0])) << dtype_name(d) << ": streaming against plain stores";
    EXPECT_TRUE(outs[2].bitwise_equal(outs[0])) << dtype_name(d) << ": measured against plain stores";
    if (p > 1) {
      EXPECT_FALSE(outs[0].bitwise_equal(in)) << dtype_name(d) << ": the output was never written";
    }
  }
}

// Where every rank shares this host, from 4 ranks on, the last level sends
// each result segment to every rank at once (ops/adasum_exchange.h,
// make_and_allgather); elsewhere the allgather exchanges pieces with the
// levels' partners. Both give the same bits, fused tensors and segments sent
// from the slots (buffers not yet on huge pages) included.
TEST(Adasum, TheAllgatherFromEveryRankAndThePairwiseOneGiveTheSameBits) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  struct Reset {
    ~Reset() { Adasum::force_pairwise_allgather_for_testing(false); }
  } reset;
  for (DataType d : kAdasumTypes) {
    for (int64_t n : {int64_t{7}, int64_t{300001}, every_slot_reused()}) {
      Buffer in(d, {n});
      const Vec mine = input_of(rank(), 5, n, d, 1.0);
      fill(in, mine);
      std::vector<Buffer> outs;
      outs.reserve(2);
      const int64_t before = Adasum::allgathers_from_every_rank();
      for (bool pairwise : {true, false}) {
        Adasum::force_pairwise_allgather_for_testing(pairwise);
        outs.emplace_back(d, std::vector<int64_t>{n});
        const std::string name = std::string("adasum.gather.") + dtype_name(d) + "." + std::to_string(n) +
                                 (pairwise ? ".pairwise" : ".every");
        HVL_ASSERT_OK(allreduce_async(name, in.view(), outs.back().view(), {ReduceOp::kAdasum})->wait());
      }
      const std::string what = std::string(dtype_name(d)) + " x " + std::to_string(n);
      // The second op went to every rank at once where it can (4 ranks or more, here one host).
      EXPECT_EQ(Adasum::allgathers_from_every_rank() - before, p >= 4 ? 1 : 0) << what;
      EXPECT_TRUE(outs[1].bitwise_equal(outs[0])) << what << ": from every rank against pairwise";
      if (p > 1) {
        EXPECT_FALSE(outs[0].bitwise_equal(in)) << what << ": the output was never written";
      }
    }
  }
  // Fused: five tensors in one response, each combined with its own dot products.
  const std::vector<int64_t> counts = {5, 100000, 3, 600000, 77777};
  std::vector<std::vector<Buffer>> outs(2);
  std::vector<Buffer> ins;
  for (size_t t = 0; t < counts.size(); ++t) {
    ins.emplace_back(DataType::kFloat32, std::vector<int64_t>{counts[t]});
    const Vec mine = input_of(rank(), 20 + static_cast<int>(t), counts[t], DataType::kFloat32, 1.0);
    fill(ins.back(), mine);
  }
  for (int k = 0; k < 2; ++k) {
    Adasum::force_pairwise_allgather_for_testing(k == 0);
    std::vector<TensorView> in_views, out_views;
    outs[static_cast<size_t>(k)].reserve(counts.size());
    for (size_t t = 0; t < counts.size(); ++t) {
      outs[static_cast<size_t>(k)].emplace_back(DataType::kFloat32, std::vector<int64_t>{counts[t]});
      in_views.push_back(ins[t].view());
      out_views.push_back(outs[static_cast<size_t>(k)].back().view());
    }
    std::vector<std::string> names;
    for (size_t t = 0; t < counts.size(); ++t)
      names.push_back(std::string("adasum.gather.fused.") + (k == 0 ? "pairwise." : "every.") + std::to_string(t));
    for (const HandlePtr& h : grouped_allreduce_async(names, in_views, out_views, {ReduceOp::kAdasum})) {
      HVL_ASSERT_OK(h->wait());
    }
  }
  for (size_t t = 0; t < counts.size(); ++t) {
    EXPECT_TRUE(outs[1][t].bitwise_equal(outs[0][t])) << "fused tensor " << t << ": from every rank against pairwise";
  }
}

// The decision behind streaming stores: the average log ratio of a slot's
// rewrite to its first write over the ops, far above 1.25.
TEST(Adasum, PlacementTurnsFarOnSustainedSlowRewritesOnly) {
  adasum_exchange::Placement near;
  EXPECT_FALSE(near.far()) << "nothing measured yet";
  for (double r : {0.7, 0.5, 0.9, 1.1, 0.6}) near.add(r);
  EXPECT_FALSE(near.far()) << "rewrites as fast as first writes";
  near.add(8.0);  // one op's outlier (a rank preempted while it rewrote)
  EXPECT_FALSE(near.far()) << "one slow op among fast ones";
  adasum_exchange::Placement far;
  far.add(3.0);
  EXPECT_TRUE(far.far()) << "the first op decides alone";
  for (double r : {2.0, 0.9, 5.0, 1.5, 0.9, 3.0}) far.add(r);
  EXPECT_TRUE(far.far()) << "a far peer, with some ops' peers sharing the core";
  for (int i = 0; i < 20; ++i) far.add(0.7);
  EXPECT_FALSE(far.far()) << "the peer's core came near again";
}

TEST(Adasum, FusedTensorsAreCombinedEachWithItsOwnDotProducts) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  // Tensors of very different scales and sizes in one group (fused into one
  // buffer): a whole-buffer combination would be dominated by the large one.
  const std::vector<int64_t> sizes = {5, 100000, 3, 0, 4097};
  const std::vector<double> scales = {1e-3, 1.0, 50.0, 1.0, 1e-2};
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<TensorView> views;
    std::vector<std::string> names;
    std::vector<Vec> want;
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<Vec> all;
      for (int r = 0; r < p; ++r) all.push_back(input_of(r, static_cast<int>(t), sizes[t], d, scales[t]));
      want.push_back(reference(all));
      bufs.push_back(std::make_unique<Buffer>(d, Shape{sizes[t]}));
      fill(*bufs.back(), all[static_cast<size_t>(rank())]);
      views.push_back(bufs.back()->view());
      names.push_back(std::string("adasum.fused.") + dtype_name(d) + "." + std::to_string(t));
    }
    for (const HandlePtr& h : grouped_allreduce_async(names, views, views, {ReduceOp::kAdasum})) {
      HVL_ASSERT_OK(h->wait());
    }
    for (size_t t = 0; t < sizes.size(); ++t) expect_close(*bufs[t], want[t], d, names[t]);
  }
}

TEST(Adasum, PrescaleAndPostscaleAndFp16Compression) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  const int64_t n = 5000;
  std::vector<Vec> all;
  for (int r = 0; r < p; ++r) all.push_back(input_of(r, 3, n, DataType::kFloat32, 1.0));
  const Vec plain = reference(all);
  Buffer in(DataType::kFloat32, {n}), out(DataType::kFloat32, {n});
  fill(in, all[static_cast<size_t>(rank())]);
  // Adasum(c a, c b) = c Adasum(a, b): the result scales by pre * post.
  AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  o.prescale_factor = 0.5;
  o.postscale_factor = 3.0;
  HVL_ASSERT_OK(allreduce_async("adasum.scaled", in.view(), out.view(), o)->wait());
  Vec scaled(plain);
  for (auto& v : scaled) v *= 1.5L;
  expect_close(out, scaled, DataType::kFloat32, "adasum.scaled");
  // fp16 on the wire: the reference of the fp16-rounded inputs, to fp16 precision.
  std::vector<Vec> halves;
  for (int r = 0; r < p; ++r) {
    Vec h(all[static_cast<size_t>(r)]);
    for (auto& v : h) v = kernels::half_to_float(kernels::float_to_half(static_cast<float>(v)));
    halves.push_back(h);
  }
  o.prescale_factor = o.postscale_factor = 1.0;
  o.compression = Compression::kFp16;
  HVL_ASSERT_OK(allreduce_async("adasum.fp16", in.view(), out.view(), o)->wait());
  expect_close(out, reference(halves), DataType::kFloat16, "adasum.fp16");
}

// The dtype's smallest normal number and (a power of two just below) the
// square root of its largest.
std::pair<double, double> extremes(DataType d) {
  switch (d) {
    case DataType::kFloat16:
      return {std::ldexp(1.0, -14), 255.875};  // sqrt(65504) = 255.94
    case DataType::kBFloat16:
    case DataType::kFloat32:
      return {std::ldexp(1.0, -126), std::ldexp(1.0, 63)};  // sqrt(3.4e38) = 1.8e19
    default:
      return {DBL_MIN, std::ldexp(1.0, 511)};  // sqrt(1.8e308) = 1.3e154
  }
}

TEST(Adasum, ExtremeMagnitudesNeitherFlushNorOverflow) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  const int64_t n = 64;  // 64 squares of sqrt(max) overflow the dtype's own range (and double's for float64)
  for (DataType d : kAdasumTypes) {
    const auto [tiny, huge] = extremes(d);
    for (double v : {tiny, huge}) {
      const std::string tag = std::string(dtype_name(d)) + (v == tiny ? ".min_normal" : ".sqrt_max");
      // The same vector on every rank: Adasum(x, x) = x exactly.
      Buffer same(d, {n});
      for (int64_t i = 0; i < n; ++i) same.set(i, (i % 2 ? -v : v));
      HVL_ASSERT_OK(allreduce_async("adasum.same." + tag, same.view(), same.view(), {ReduceOp::kAdasum})->wait());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(same.get(i), (i % 2 ? -v : v)) << tag << " identical [" << i << "]";
      // Orthogonal vectors (element i only on rank i % p): they add, exactly.
      Buffer orth(d, {n});
      for (int64_t i = 0; i < n; ++i) orth.set(i, i % p == rank() ? v : 0.0);
      HVL_ASSERT_OK(allreduce_async("adasum.orth." + tag, orth.view(), orth.view(), {ReduceOp::kAdasum})->wait());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(orth.get(i), v) << tag << " orthogonal [" << i << "]";
      // Parallel, twice as long on odd ranks: Adasum(x, 2x) = 1.5x (two ranks).
      if (p == 2) {
        Buffer par(d, {n});
        const double w = v == tiny ? 2 * v : v / 2;  // stay within [min normal, sqrt(max)]
        for (int64_t i = 0; i < n; ++i) par.set(i, rank() == 0 ? w : 2 * w);
        HVL_ASSERT_OK(allreduce_async("adasum.par." + tag, par.view(), par.view(), {ReduceOp::kAdasum})->wait());
        Buffer want(d, {1});
        want.set(0, 1.5 * w);  // rounded to the dtype
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(par.get(i), want.get(0)) << tag << " parallel [" << i << "]";
      }
    }
  }
}

// Whether the library moves the user's memory onto huge pages here: this
// kernel does it on request (MADV_COLLAPSE, Linux 6.1), and its THP mode is not
// "never" (where the library leaves memory alone, as the administrator said).
bool kernel_moves_onto_huge_pages() {
  const std::string mode = hvl_test::thp_mode();
  return !mode.empty() && mode != "never" && hvl_test::collapse_unsupported().empty();
}

// The user's buffers, sent as they are (one tensor), are moved onto huge pages
// from their second op on (host_memory.h, huge_pages_for_sending): Adasum then
// sends their whole 2 MiB pages as they are and copies only the ends into its
// slots. The same bits as the first op (everything copied), in and out of place.
TEST(Adasum, TheUsersBuffersMovedOntoHugePagesGiveTheSameBits) {
  const int p = size();
  if (!power_of_two(p)) GTEST_SKIP() << "Adasum needs a power-of-two world";
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    // Over kMoveToHugePagesMinBytes, with ends off the 2 MiB boundaries.
    const int64_t n = (int64_t{12} << 20) / static_cast<int64_t>(dtype_size(d)) + 1001;
    std::vector<Vec> all;
    for (int r = 0; r < p; ++r) all.push_back(input_of(r, 5, n, d, 1.0));
    Buffer in(d, {n}), out(d, {n}), inplace(d, {n});
    fill(in, all[static_cast<size_t>(rank())]);
    const std::string name = std::string("adasum.moved.") + dtype_name(d);
    std::vector<Buffer> results, inplace_results;
    for (int op = 0; op < 3; ++op) {
      HVL_ASSERT_OK(allreduce_async(name, in.view(), out.view(), {ReduceOp::kAdasum})->wait());
      results.push_back(out);
      std::memcpy(inplace.data(), in.data(), static_cast<size_t>(n) * dtype_size(d));
      HVL_ASSERT_OK(allreduce_async(name + ".inplace", inplace.view(), inplace.view(), {ReduceOp::kAdasum})->wait());
      inplace_results.push_back(inplace);
    }
    expect_close(results[0], reference(all), d, name);
    for (int op = 0; op < 3; ++op) {
      EXPECT_TRUE(results[static_cast<size_t>(op)].bitwise_equal(results[0])) << name << ", op " << op;
      EXPECT_TRUE(inplace_results[static_cast<size_t>(op)].bitwise_equal(results[0])) << name << " in place, op " << op;
    }
    const char* setting = std::getenv("HOROVODLITE_HUGE_PAGE_INPUTS");
    const bool off = setting != nullptr && std::string(setting) == "0";
    if (p > 1 && (off || kernel_moves_onto_huge_pages())) {
      // The path this test is for was taken: the buffers are on huge pages
      // (HOROVODLITE_HUGE_PAGE_INPUTS=0: still not).
      const size_t bytes = static_cast<size_t>(n) * dtype_size(d);
      for (Buffer* b : {&in, &out, &inplace}) {
        const ByteRange moved = huge_pages_for_sending(b->data(), bytes);
        if (off) {
          EXPECT_EQ(moved.lo, moved.hi) << name << ": moved with HOROVODLITE_HUGE_PAGE_INPUTS=0";
        } else {
          EXPECT_GE(moved.hi - moved.lo, static_cast<ptrdiff_t>(bytes - 2 * HostBuffer::kHugePage)) << name;
        }
      }
    }
  }
}

TEST(Adasum, ClearErrors) {
  // Integer tensors are refused, naming the tensor.
  Buffer ints(DataType::kInt32, {4});
  Status s = allreduce_async("adasum.int", ints.view(), ints.view(), {ReduceOp::kAdasum})->wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("adasum.int"), std::string::npos) << s.message();
  // Other world sizes: an error naming the tensor and the size, at once, on every rank.
  Buffer f(DataType::kFloat32, {4});
  s = allreduce_async("adasum.size", f.view(), f.view(), {ReduceOp::kAdasum})->wait();
  if (power_of_two(size())) {
    EXPECT_TRUE(s.ok()) << s.to_string();
  } else {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("adasum.size"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("power-of-two"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("world size is " + std::to_string(size())), std::string::npos) << s.message();
  }
  // The runtime keeps working.
  HVL_ASSERT_OK(allreduce_async("adasum.after", f.view(), f.view(), {ReduceOp::kSum})->wait());
}

}  // namespace
