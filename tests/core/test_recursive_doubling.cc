// The negotiation's allreduce (recursive_doubling.h) on its own: every world size
// the suite runs (1-4, also 2 x 2 hosts in the multi-host set), in rank order and
// shuffled, vectors of 0 to 1000 words, several runs back to back.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "mpi/mpi_transport.h"
#include "mpi/mpi_world.h"
#include "negotiation/recursive_doubling.h"
#include "test_util.h"
#include "world.h"

namespace {

using horovodlite::RecursiveDoubling;

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  // key(rank, size) orders the new communicator.
  template <typename Key>
  explicit Comm(Key key) {
    int world_rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_split(MPI_COMM_WORLD, 0, key(world_rank, world_size), &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  ~Comm() { MPI_Comm_free(&comm); }
  // The communicator as the transport the exchange runs over.
  horovodlite::transport::ContextPtr wire() const {
    return std::make_shared<horovodlite::transport::MpiTransport>(comm);
  }
};

std::vector<Comm*> orders() {
  static Comm in_order([](int r, int) { return r; });
  static Comm reversed([](int r, int n) { return n - 1 - r; });
  static Comm shuffled([](int r, int n) { return (r * 5 + 3) % (n * 7 + 1); });
  return {&in_order, &reversed, &shuffled};
}

void and_then_sum(const uint64_t* in, uint64_t* inout, size_t n) {
  if (n > 0) inout[0] &= in[0];
  for (size_t i = 1; i < n; ++i) inout[i] += in[i];
}

TEST(RecursiveDoubling, EveryRankGetsTheAndAndTheSums) {
  for (Comm* c : orders()) {
    // message_bytes: one message, pieces of 3 words, of 1 word, of 4032 bytes (Open MPI's default shared-memory limit)
    for (int64_t message_bytes : {0, 24, 8, 4032}) {
      RecursiveDoubling rd(c->wire(), message_bytes);
      for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(1000)}) {
        for (int run = 0; run < 3; ++run) {
          std::vector<uint64_t> v(n);
          if (n > 0) v[0] = ~(uint64_t(1) << c->rank) & ~(uint64_t(1) << 63);
          for (size_t i = 1; i < n; ++i) v[i] = (c->rank + 1) * i + run;
          HVL_ASSERT_OK(rd.run(v.data(), n, [n](const uint64_t* in, uint64_t* inout) { and_then_sum(in, inout, n); }));
          const uint64_t s = static_cast<uint64_t>(c->size);
          if (n > 0) {
            uint64_t want = ~(uint64_t(1) << 63);
            for (int r = 0; r < c->size; ++r) want &= ~(uint64_t(1) << r);
            EXPECT_EQ(v[0], want) << "n=" << n << " rank " << c->rank;
          }
          for (size_t i = 1; i < n; ++i)
            ASSERT_EQ(v[i], s * (s + 1) / 2 * i + s * run)
                << "word " << i << " n=" << n << " rank " << c->rank << " pieces of " << message_bytes << " bytes";
        }
      }
    }
  }
}

// Sums of doubles whose order matters in the last bits: every rank must still end
// with the same bits (both partners of an exchange add the same two vectors).
TEST(RecursiveDoubling, EveryRankEndsWithTheSameBits) {
  for (Comm* c : orders()) {
    RecursiveDoubling rd(c->wire());
    const size_t n = 64;
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = (c->rank % 2 ? 1e16 : 1.0) * (1.0 + 0.1 * c->rank) + 0.3 * i;
    std::vector<uint64_t> words(n);
    std::memcpy(words.data(), v.data(), n * sizeof(double));
    HVL_ASSERT_OK(rd.run(words.data(), n, [n](const uint64_t* in, uint64_t* inout) {
      for (size_t i = 0; i < n; ++i) {
        double a, b;
        std::memcpy(&a, in + i, sizeof a);
        std::memcpy(&b, inout + i, sizeof b);
        b += a;
        std::memcpy(inout + i, &b, sizeof b);
      }
    }));
    std::vector<uint64_t> all(n * static_cast<size_t>(c->size));
    MPI_Allgather(words.data(), static_cast<int>(n), MPI_UINT64_T, all.data(), static_cast<int>(n), MPI_UINT64_T,
                  c->comm);
    for (int r = 0; r < c->size; ++r)
      EXPECT_EQ(0, std::memcmp(all.data() + r * n, words.data(), n * sizeof(uint64_t)))
          << "rank " << r << " differs from rank " << c->rank;
    double first;
    std::memcpy(&first, words.data(), sizeof first);
    double want = 0;
    for (int r = 0; r < c->size; ++r) want += (r % 2 ? 1e16 : 1.0) * (1.0 + 0.1 * r);
    EXPECT_NEAR(first, want, std::abs(want) * 1e-15);
  }
}

// The plan: log2 exchanges with distinct peers (first the nearest), partners
// agree, and ranks beyond the largest power of two fold into a neighbour.
TEST(RecursiveDoubling, PeersArePairwiseAndNearestFirst) {
  Comm& c = *orders()[0];
  RecursiveDoubling rd(c.wire());
  int pof2 = 1;
  while (pof2 * 2 <= c.size) pof2 *= 2;
  const int rem = c.size - pof2;
  const bool folded_out = c.rank < 2 * rem && c.rank % 2 == 0;
  int steps = 0;
  while ((1 << steps) < pof2) ++steps;
  ASSERT_EQ(rd.peers().size(), folded_out ? 0u : static_cast<size_t>(steps)) << "rank " << c.rank;
  if (c.size == 4) {
    EXPECT_EQ(rd.peers(), (std::vector<int>{c.rank ^ 1, c.rank ^ 2}));
  }
  if (c.size == 3 && c.rank > 0) {
    EXPECT_EQ(rd.peers(), std::vector<int>{3 - c.rank});
  }
  // Every rank's k-th peer names it as its own k-th peer.
  const int width = 32;
  std::vector<int> mine(width, -1), all(static_cast<size_t>(width * c.size));
  std::copy(rd.peers().begin(), rd.peers().end(), mine.begin());
  MPI_Allgather(mine.data(), width, MPI_INT, all.data(), width, MPI_INT, c.comm);
  for (size_t k = 0; k < rd.peers().size(); ++k) {
    const int peer = rd.peers()[k];
    EXPECT_NE(peer, c.rank);
    EXPECT_EQ(all[static_cast<size_t>(peer * width) + k], c.rank) << "exchange " << k << " of rank " << c.rank;
  }
}

}  // namespace

namespace {

// What the negotiation's exchange is given: the host order and the eager limit.
TEST(RecursiveDoubling, TheContextAgreesOnHostOrderAndMessageSize) {
  horovodlite::World world;
  HVL_ASSERT_OK(world.init_mpi(nullptr));
  const horovodlite::mpi::Comms& mpi = *world.mpi();
#ifdef OPEN_MPI
  // horovodlite::init() asked for MPI_THREAD_MULTIPLE, which Open MPI provides;
  // reading its limits through MPI_T (at every init) must leave that alone.
  int level = -1;
  MPI_Query_thread(&level);
  EXPECT_EQ(level, MPI_THREAD_MULTIPLE);
  EXPECT_GE(horovodlite::mpi_control_variable("btl_tcp_eager_limit"), 0);
  MPI_Query_thread(&level);
  EXPECT_EQ(level, MPI_THREAD_MULTIPLE);
#endif
  int rank = 0, size = 1;
  MPI_Comm_rank(mpi.host_comm(), &rank);
  MPI_Comm_size(mpi.host_comm(), &size);
  EXPECT_EQ(size, mpi.size());
  if (mpi.local_size() == mpi.size()) {
    EXPECT_EQ(rank, mpi.rank()) << "one host: rank order";
  }
  // Each host's ranks are adjacent in host order: local rank r sits r places after local rank 0.
  int first = rank;
  MPI_Bcast(&first, 1, MPI_INT, 0, mpi.local_comm());
  EXPECT_EQ(rank, first + mpi.local_rank());

  const int64_t bytes = world.eager_message_bytes();
  int64_t range[2] = {bytes, -bytes};
  MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_INT64_T, MPI_MIN, mpi.comm());
  EXPECT_EQ(range[0], -range[1]) << "ranks disagree";
  EXPECT_EQ(bytes % 8, 0);
#ifdef OPEN_MPI
  if (mpi.size() == 1) return;  // no transport but "self" loaded
  EXPECT_GT(bytes, 0);
  // Shared memory is loaded where a host holds several ranks, TCP where ranks
  // span hosts; a host with one rank (2 x 1) reads no shared-memory limit.
  const int64_t shm = horovodlite::mpi_control_variable("btl_vader_eager_limit");
  if (mpi.local_size() > 1) {
    ASSERT_GT(shm, 128) << "Open MPI's shared-memory eager limit could not be read";
    EXPECT_LE(bytes, (shm - 64) / 8 * 8);
  }
  if (mpi.local_size() == mpi.size()) {
    EXPECT_EQ(bytes, (shm - 64) / 8 * 8);
  } else {  // across hosts (the multi-host set runs this suite on 2 x 2)
    const int64_t tcp = horovodlite::mpi_control_variable("btl_tcp_eager_limit");
    ASSERT_GT(tcp, 128) << "Open MPI's TCP eager limit could not be read";
    EXPECT_LE(bytes, (tcp - 64) / 8 * 8);
    if (mpi.local_size() == 1 && shm <= 128) {
      EXPECT_EQ(bytes, (tcp - 64) / 8 * 8) << "one rank here: the TCP limit";
    }
  }
#endif
}

}  // namespace
