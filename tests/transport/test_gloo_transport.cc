// The Gloo TCP transport (loopback), ranks as threads over Gloo's in-process
// HashStore: the ring, recursive doubling and the collectives on real sockets
// and through the same-host shared-memory rings, a split over a subset (its
// own full mesh), the rings' matching rules, a wait that names the peer, and
// when direct TCP leaves a message in the socket for its receive.
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "negotiation/recursive_doubling.h"
#include "ops/ring_allreduce.h"
#include "transport/collectives.h"
#include "transport/gloo_shm.h"
#include "transport/gloo_tcp_direct.h"
#include "transport/gloo_transport.h"

namespace {

using horovodlite::DataType;
using horovodlite::ReduceOp;
using horovodlite::Status;
namespace tp = horovodlite::transport;

// How the ranks (threads, all naming one host) talk: shared memory with large
// messages read from the sender's memory, shared memory through the rings
// only (HOROVODLITE_GLOO_SHM=copy), TCP through Gloo's pairs (gloo_shm.h), or
// TCP on connections of our own (HOROVODLITE_GLOO_TCP=direct, gloo_tcp_direct.h).
enum class Path { kShm, kShmCopy, kTcp, kDirect };

void run_gloo_ranks(int size, const std::function<void(tp::Context&)>& fn, Path path = Path::kShm) {
  const bool shared_memory = path == Path::kShm || path == Path::kShmCopy;
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      tp::GlooOptions options;
      options.rank = r;
      options.size = size;
      options.hostname = "localhost";
      options.timeout = std::chrono::seconds(20);
      options.shared_memory = shared_memory;
      options.single_copy = path == Path::kShm;
      options.direct_tcp = path == Path::kDirect;
      tp::ContextPtr ctx;
      const Status s = tp::connect_gloo(options, store, &ctx);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_STREQ(ctx->kind(), "gloo");
      EXPECT_EQ(tp::shared_memory_peers(*ctx), shared_memory ? size - 1 : 0);
      EXPECT_EQ(tp::direct_tcp_peers(*ctx), path == Path::kDirect ? size - 1 : 0);
      fn(*ctx);
    });
  }
  for (std::thread& t : threads) t.join();
}

std::string path_name(const ::testing::TestParamInfo<Path>& p) {
  return p.param == Path::kShm       ? "Shm"
         : p.param == Path::kShmCopy ? "ShmCopy"
         : p.param == Path::kTcp     ? "Tcp"
                                     : "Direct";
}

class GlooBothPaths : public ::testing::TestWithParam<Path> {};
INSTANTIATE_TEST_SUITE_P(GlooTransport, GlooBothPaths,
                         ::testing::Values(Path::kShm, Path::kShmCopy, Path::kTcp, Path::kDirect), path_name);

TEST_P(GlooBothPaths, RingRecursiveDoublingAndCollectives) {
  for (int size = 1; size <= 3; ++size) {
    run_gloo_ranks(
        size,
        [&](tp::Context& ctx) {
          for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{300001}}) {
            horovodlite::RingAllreduceOptions options;
            options.segment_bytes = 64 << 10;
            horovodlite::RingAllreduce ring(ctx.shared_from_this(), options);
            std::vector<float> buf(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(ctx.rank() + i % 5);
            std::vector<float> half = buf;
            Status s = ring.run(buf.data(), n, DataType::kFloat32, ReduceOp::kSum);
            ASSERT_TRUE(s.ok()) << s.message();
            s = ring.run_fp16_wire(half.data(), n, DataType::kFloat32, ReduceOp::kSum);
            ASSERT_TRUE(s.ok()) << s.message();
            for (int64_t i = 0; i < n; ++i) {
              const float want = static_cast<float>(size * (size - 1) / 2 + size * (i % 5));
              ASSERT_EQ(buf[static_cast<size_t>(i)], want);
              ASSERT_EQ(half[static_cast<size_t>(i)], want);
            }
            std::vector<int32_t> b(static_cast<size_t>(n), ctx.rank() == size - 1 ? 9 : 0);
            ASSERT_TRUE(horovodlite::transport_ops::broadcast(ctx, b.data(), b.size() * 4, size - 1).ok());
            for (int32_t v : b) ASSERT_EQ(v, 9);
          }
          horovodlite::RecursiveDoubling rd(ctx.shared_from_this());
          uint64_t w[3] = {1, 2, static_cast<uint64_t>(ctx.rank())};
          ASSERT_TRUE(rd.run(w, 3, [](const uint64_t* in, uint64_t* io) {
                          for (int i = 0; i < 3; ++i) io[i] += in[i];
                        }).ok());
          EXPECT_EQ(w[0], static_cast<uint64_t>(size));
          EXPECT_EQ(w[2], static_cast<uint64_t>(size * (size - 1) / 2));
          std::vector<size_t> bytes(static_cast<size_t>(size), 4);
          std::vector<int32_t> all(static_cast<size_t>(size), -1);
          int32_t me = 10 + ctx.rank();
          ASSERT_TRUE(horovodlite::transport_ops::allgatherv(ctx, &me, all.data(), bytes).ok());
          for (int r = 0; r < size; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], 10 + r);
          EXPECT_TRUE(ctx.barrier().ok());
        },
        GetParam());
  }
}

TEST_P(GlooBothPaths, SplitOverASubsetAndDup) {
  run_gloo_ranks(
      3,
      [&](tp::Context& ctx) {
        tp::ContextPtr dup;
        ASSERT_TRUE(ctx.dup("ring", &dup).ok());
        if (ctx.rank() != 1) {
          tp::ContextPtr sub;
          const Status s = ctx.split({2, 0}, "ps.1", &sub);
          ASSERT_TRUE(s.ok()) << s.message();
          EXPECT_EQ(sub->size(), 2);
          EXPECT_EQ(sub->rank(), ctx.rank() == 2 ? 0 : 1);
          int v = 100 + ctx.rank(), got = 0;
          tp::RequestPtr a, b;
          ASSERT_TRUE(sub->irecv(&got, 4, 1 - sub->rank(), 0, &a).ok());
          ASSERT_TRUE(sub->isend(&v, 4, 1 - sub->rank(), 0, &b).ok());
          ASSERT_TRUE(a->wait(std::chrono::seconds(10)).ok());
          ASSERT_TRUE(b->wait(std::chrono::seconds(10)).ok());
          EXPECT_EQ(got, ctx.rank() == 2 ? 100 : 102);
        }
        // The dup's messages do not meet the parent's.
        int x = ctx.rank(), y = -1, z = -1;
        std::vector<tp::RequestPtr> reqs(4);
        const int right = (ctx.rank() + 1) % 3, left = (ctx.rank() + 2) % 3;
        ASSERT_TRUE(dup->irecv(&y, 4, left, 7, &reqs[0]).ok());
        ASSERT_TRUE(ctx.irecv(&z, 4, left, 7, &reqs[1]).ok());
        int x2 = x + 50;
        ASSERT_TRUE(ctx.isend(&x2, 4, right, 7, &reqs[2]).ok());
        ASSERT_TRUE(dup->isend(&x, 4, right, 7, &reqs[3]).ok());
        ASSERT_TRUE(tp::wait_all(&reqs, std::chrono::seconds(10)).ok());
        EXPECT_EQ(y, left);
        EXPECT_EQ(z, left + 50);
      },
      GetParam());
}

// The same-host rings' matching: messages that arrive before their receive
// (kept, then taken by the receive in posting order), receives posted in
// another tag order than the sends, messages larger than a ring sent both
// ways before either side receives (no deadlock: a test moves every
// channel), empty messages, and a length mismatch failing the receive; with
// and without single copy.
class GlooSharedMemory : public ::testing::TestWithParam<Path> {};
// Direct TCP (its sends are eager too) keeps the same rules.
INSTANTIATE_TEST_SUITE_P(GlooTransport, GlooSharedMemory, ::testing::Values(Path::kShm, Path::kShmCopy, Path::kDirect),
                         path_name);

TEST_P(GlooSharedMemory, MatchingAndLargeMessages) {
  const bool single_copy = GetParam() == Path::kShm;
  run_gloo_ranks(
      3,
      [&](tp::Context& ctx) {
        const int right = (ctx.rank() + 1) % 3, left = (ctx.rank() + 2) % 3;
        std::vector<tp::RequestPtr> sends;
        int a = 100 + ctx.rank(), b = 200 + ctx.rank(), c = 300 + ctx.rank();
        sends.emplace_back();
        ASSERT_TRUE(ctx.isend(&a, 4, right, 1, &sends.back()).ok());
        sends.emplace_back();
        ASSERT_TRUE(ctx.isend(&b, 4, right, 2, &sends.back()).ok());
        sends.emplace_back();
        ASSERT_TRUE(ctx.isend(&c, 4, right, 1, &sends.back()).ok());
        sends.emplace_back();
        ASSERT_TRUE(ctx.isend(nullptr, 0, right, 3, &sends.back()).ok());
        const size_t big = tp::kShmRingBytes * 2 + 12345;  // more than a ring, not a multiple of anything
        std::vector<uint8_t> out(big), in(big, 0);
        for (size_t i = 0; i < big; ++i) out[i] = static_cast<uint8_t>(i * 7 + ctx.rank());
        sends.emplace_back();
        ASSERT_TRUE(ctx.isend(out.data(), big, right, 4, &sends.back()).ok());
        ASSERT_TRUE(ctx.barrier().ok());  // the small ones have arrived before any receive
        int x2 = 0, x1 = 0, y1 = 0;
        tp::RequestPtr r2, r1, r1b, r3, r4;
        ASSERT_TRUE(ctx.irecv(&x2, 4, left, 2, &r2).ok());
        ASSERT_TRUE(ctx.irecv(&x1, 4, left, 1, &r1).ok());
        ASSERT_TRUE(ctx.irecv(&y1, 4, left, 1, &r1b).ok());
        ASSERT_TRUE(ctx.irecv(nullptr, 0, left, 3, &r3).ok());
        ASSERT_TRUE(ctx.irecv(in.data(), big, left, 4, &r4).ok());
        for (tp::RequestPtr* r : {&r2, &r1, &r1b, &r3, &r4}) ASSERT_TRUE((*r)->wait(std::chrono::seconds(20)).ok());
        ASSERT_TRUE(tp::wait_all(&sends, std::chrono::seconds(20)).ok());
        EXPECT_EQ(x2, 200 + left);
        EXPECT_EQ(x1, 100 + left);
        EXPECT_EQ(y1, 300 + left);
        for (size_t i = 0; i < big; ++i) ASSERT_EQ(in[i], static_cast<uint8_t>(i * 7 + left)) << i;
        // A receive posted for 4 bytes meets a send of 8: the receive fails naming the lengths.
        int64_t eight = 8;
        int four = 0;
        tp::RequestPtr s8, r4b;
        ASSERT_TRUE(ctx.isend(&eight, 8, right, 5, &s8).ok());
        ASSERT_TRUE(ctx.irecv(&four, 4, left, 5, &r4b).ok());
        const Status w = r4b->wait(std::chrono::seconds(20));
        EXPECT_EQ(w.code(), horovodlite::StatusCode::kInvalidArgument) << w.message();
        EXPECT_NE(w.message().find("8 bytes"), std::string::npos) << w.message();
        EXPECT_TRUE(s8->wait(std::chrono::seconds(20)).ok());
        // The same for a large message (a descriptor with single copy): the
        // receive fails, the send completes.
        tp::RequestPtr sl, rl;
        ASSERT_TRUE(ctx.isend(out.data(), big, right, 7, &sl).ok());
        ASSERT_TRUE(ctx.irecv(in.data(), big - 1, left, 7, &rl).ok());
        const Status wl = rl->wait(std::chrono::seconds(20));
        EXPECT_EQ(wl.code(), horovodlite::StatusCode::kInvalidArgument) << wl.message();
        EXPECT_NE(wl.message().find(std::to_string(big) + " bytes"), std::string::npos) << wl.message();
        EXPECT_TRUE(sl->wait(std::chrono::seconds(20)).ok());
        EXPECT_TRUE(ctx.barrier().ok());
        tp::RequestPtr sb, rb;
        std::fill(in.begin(), in.end(), 0);
        ASSERT_TRUE(ctx.isend(out.data(), big, right, 6, &sb).ok());
        if (single_copy) {
          // A large send goes by descriptor and completes only once its receive
          // has read it (a rendezvous, as over MPI or TCP): not before.
          ASSERT_TRUE(ctx.barrier().ok());  // the descriptors have arrived
          bool done = true;
          ASSERT_TRUE(sb->test(&done).ok());
          EXPECT_FALSE(done);
          ASSERT_TRUE(ctx.barrier().ok());  // no rank posts its receive before every rank has looked
          ASSERT_TRUE(ctx.irecv(in.data(), big, left, 6, &rb).ok());
          ASSERT_TRUE(sb->wait(std::chrono::seconds(20)).ok());
        } else {
          // Every rank waits for its send of more than a ring with no receive
          // posted anywhere: only taking the message out of the full ring lets
          // the sends finish.
          ASSERT_TRUE(sb->wait(std::chrono::seconds(20)).ok());
          ASSERT_TRUE(ctx.irecv(in.data(), big, left, 6, &rb).ok());
        }
        ASSERT_TRUE(rb->wait(std::chrono::seconds(20)).ok());
        for (size_t i = 0; i < big; ++i) ASSERT_EQ(in[i], static_cast<uint8_t>(i * 7 + left)) << i;
        EXPECT_TRUE(ctx.barrier().ok());
      },
      GetParam());
}

TEST(GlooTransport, AWaitForAPeerThatNeverSendsNamesIt) {
  run_gloo_ranks(2, [&](tp::Context& ctx) {
    int v = 0;
    if (ctx.rank() == 0) {
      tp::RequestPtr r;
      ASSERT_TRUE(ctx.irecv(&v, 4, 1, 3, &r).ok());
      const Status s = r->wait(std::chrono::milliseconds(50));
      EXPECT_EQ(s.code(), horovodlite::StatusCode::kTimeout);
      EXPECT_NE(s.message().find("receive from rank 1"), std::string::npos) << s.message();
      ASSERT_TRUE(ctx.barrier().ok());
      EXPECT_TRUE(r->wait(std::chrono::seconds(10)).ok());
      EXPECT_EQ(v, 5);
    } else {
      ASSERT_TRUE(ctx.barrier().ok());
      v = 5;
      tp::RequestPtr s;
      ASSERT_TRUE(ctx.isend(&v, 4, 0, 3, &s).ok());
      EXPECT_TRUE(s->wait(std::chrono::seconds(10)).ok());
    }
  });
}

}  // namespace

namespace {

// A peer that goes away (its context destroyed: its sockets close) fails the
// receive waiting on it with Aborted naming it, instead of a hang.
TEST(GlooTransport, APeerThatGoesAwayFailsTheWaitNamingIt) {
  for (const bool direct : {false, true}) {  // shared memory (watched through Gloo's pair); direct TCP
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::thread> threads;
    std::atomic<bool> posted{false};
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        tp::GlooOptions options;
        options.rank = r;
        options.size = 2;
        options.hostname = "localhost";
        options.timeout = std::chrono::seconds(20);
        options.shared_memory = !direct;
        options.direct_tcp = direct;
        tp::ContextPtr ctx;
        ASSERT_TRUE(tp::connect_gloo(options, store, &ctx).ok());
        EXPECT_EQ(tp::shared_memory_peers(*ctx), direct ? 0 : 1);  // shared memory: noticed through the TCP pair
        EXPECT_EQ(tp::direct_tcp_peers(*ctx), direct ? 1 : 0);
        ASSERT_TRUE(ctx->barrier().ok());
        if (r == 0) {
          int v = 0;
          tp::RequestPtr req;
          ASSERT_TRUE(ctx->irecv(&v, 4, 1, 9, &req).ok());
          posted = true;
          const Status s = req->wait(std::chrono::seconds(20));
          EXPECT_EQ(s.code(), horovodlite::StatusCode::kAborted) << s.message();
          EXPECT_NE(s.message().find("receive from rank 1"), std::string::npos) << s.message();
        } else {
          while (!posted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          ctx.reset();  // rank 1 leaves without sending
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
}

// Two hubs in one process as ranks 0 and 1 of one host, their channel made
// and single copy probed (both can read this process's memory).
void connect_hubs(std::chrono::milliseconds abandon_after, std::shared_ptr<tp::ShmHub>* a,
                  std::shared_ptr<tp::ShmHub>* b) {
  auto alive = [](int) { return false; };
  *a = std::make_shared<tp::ShmHub>(0, true, alive, abandon_after);
  *b = std::make_shared<tp::ShmHub>(1, true, alive, abandon_after);
  std::string name;
  ASSERT_TRUE((*a)->create_channel(1, &name).ok());
  ASSERT_TRUE((*b)->open_channel(0, name).ok());
  (*a)->unlink_name(name);
  (*b)->probe_single_copy(0);
  (*a)->probe_single_copy(1);
}

}  // namespace

// A single-copy send whose request goes away before its receive has read
// it: the descriptor is revoked (the "taken" marks) and the receive gets the
// bytes the buffer held when the request went, from the sender's copy, never
// what the caller writes into its buffer afterwards. The receiver had not
// seen the descriptor yet, had it in its queue of early messages, or had the
// receive posted already but not yet met the descriptor (then only the
// revocation keeps it from reading the reused buffer). Two hubs in one
// process, as two ranks.
TEST(GlooTransport, AnAbandonedSingleCopySendIsReadFromItsCopy) {
  for (const char* when : {"unseen", "seen", "posted"}) {
    const std::string w = when;
    std::shared_ptr<tp::ShmHub> a, b;
    ASSERT_NO_FATAL_FAILURE(connect_hubs(std::chrono::milliseconds(50), &a, &b));
    const size_t n = tp::kShmSingleCopyBytes * 4 + 3;
    std::vector<uint8_t> out(n), in(n, 0);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 13 + 1);
    tp::RequestPtr other, r;  // other: a receive on another slot, so that b takes in what arrives
    int unused = 0;
    if (w == "seen") {
      ASSERT_TRUE(b->post(false, &unused, sizeof(unused), 0, 0, 8, 8, &other).ok());
    }
    if (w == "posted") {
      ASSERT_TRUE(b->post(false, in.data(), n, 0, 0, 9, 9, &r).ok());
    }
    {
      tp::RequestPtr s;
      ASSERT_TRUE(a->post(true, out.data(), n, 1, 1, 9, 9, &s).ok());
      bool done = true;
      if (w == "seen") {
        ASSERT_TRUE(other->test(&done).ok());  // moves the descriptor into b's queue
        EXPECT_FALSE(done);
      }
      ASSERT_TRUE(s->test(&done).ok());
      EXPECT_FALSE(done);                     // by descriptor: not complete before it is read
    }                                         // destroyed unfinished: waits 50 ms, then revokes and copies
    std::fill(out.begin(), out.end(), 0xee);  // the caller reuses its buffer
    if (w != "posted") {
      ASSERT_TRUE(b->post(false, in.data(), n, 0, 0, 9, 9, &r).ok());
    }
    ASSERT_TRUE(r->wait(std::chrono::seconds(5)).ok()) << w;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(in[i], static_cast<uint8_t>(i * 13 + 1)) << i << " " << w;
  }
}

// The protocol follows the op's size (Context::isend_in_op): a message of a
// small op goes eagerly through the ring (its send completes once it is in the
// ring, before any receive), the same message of a large op by descriptor (its
// send completes only when the peer has read it). Both arrive intact.
TEST(GlooTransport, MessagesOfASmallOpGoThroughTheRing) {
  std::shared_ptr<tp::ShmHub> a, b;
  ASSERT_NO_FATAL_FAILURE(connect_hubs(tp::kDefaultTimeout, &a, &b));
  const size_t n = size_t{1} << 20;  // far above kShmSingleCopyBytes, a quarter of a ring
  std::vector<uint8_t> small_op(n), large_op(n), in1(n, 0), in2(n, 0);
  for (size_t i = 0; i < n; ++i) {
    small_op[i] = static_cast<uint8_t>(i * 3 + 1);
    large_op[i] = static_cast<uint8_t>(i * 5 + 2);
  }
  tp::RequestPtr eager, descriptor, r1, r2;
  ASSERT_TRUE(a->post(true, small_op.data(), n, 1, 1, 5, 5, &eager, /*eager=*/true).ok());
  ASSERT_TRUE(a->post(true, large_op.data(), n, 1, 1, 6, 6, &descriptor).ok());
  bool done = false;
  ASSERT_TRUE(eager->test(&done).ok());
  EXPECT_TRUE(done);  // in the ring: complete with no receive posted
  ASSERT_TRUE(descriptor->test(&done).ok());
  EXPECT_FALSE(done);  // by descriptor: waits for the peer's read
  ASSERT_TRUE(b->post(false, in2.data(), n, 0, 0, 6, 6, &r2).ok());
  ASSERT_TRUE(b->post(false, in1.data(), n, 0, 0, 5, 5, &r1).ok());
  ASSERT_TRUE(r1->wait(std::chrono::seconds(5)).ok());
  ASSERT_TRUE(r2->wait(std::chrono::seconds(5)).ok());
  ASSERT_TRUE(descriptor->wait(std::chrono::seconds(5)).ok());
  EXPECT_EQ(in1, small_op);
  EXPECT_EQ(in2, large_op);
}

namespace {

const std::string kTestSecret(32, 's');

// Two direct-TCP hubs in one process on 127.0.0.1, as ranks 0 and 1.
void connect_tcp_hubs(std::chrono::microseconds park_limit, std::shared_ptr<tp::TcpHub>* a,
                      std::shared_ptr<tp::TcpHub>* b) {
  *a = std::make_shared<tp::TcpHub>(0, kTestSecret, park_limit);
  *b = std::make_shared<tp::TcpHub>(1, kTestSecret, park_limit);
  sockaddr_storage local{};
  auto* in = reinterpret_cast<sockaddr_in*>(&local);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  tp::TcpHub::Endpoint endpoint{};
  ASSERT_TRUE((*a)->listen(1, local, &endpoint).ok());
  Status accepted;
  std::thread t([&] { accepted = (*a)->accept(1, std::chrono::seconds(10)); });
  const Status connected = (*b)->connect(0, endpoint, std::chrono::seconds(10));
  t.join();
  ASSERT_TRUE(connected.ok()) << connected.message();
  ASSERT_TRUE(accepted.ok()) << accepted.message();
}

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 11 + seed);
  return v;
}

}  // namespace

// The direct TCP handshake: a connection that cannot prove it is of the job
// (garbage, or the right rank with another job's secret) is closed, and the
// listener goes on to take its real peer's; the peers then talk.
TEST(GlooTransport, DirectTcpRefusesConnectionsWithoutTheJobsProof) {
  auto a = std::make_shared<tp::TcpHub>(0, kTestSecret);
  auto b = std::make_shared<tp::TcpHub>(1, kTestSecret);
  auto stranger = std::make_shared<tp::TcpHub>(1, std::string(32, 'x'));
  sockaddr_storage local{};
  auto* in = reinterpret_cast<sockaddr_in*>(&local);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  tp::TcpHub::Endpoint endpoint{};
  ASSERT_TRUE(a->listen(1, local, &endpoint).ok());
  Status accepted;
  std::thread t([&] { accepted = a->accept(1, std::chrono::seconds(20)); });
  {  // garbage of a hello's size
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&endpoint.address), sizeof(sockaddr_in)), 0);
    const std::vector<char> junk(40, 'j');
    ASSERT_EQ(write(fd, junk.data(), junk.size()), 40);
    char c = 0;
    EXPECT_LE(read(fd, &c, 1), 0);  // closed by the listener, nothing said
    close(fd);
  }
  ASSERT_TRUE(stranger->connect(0, endpoint, std::chrono::seconds(10)).ok());  // only writes its hello
  const Status connected = b->connect(0, endpoint, std::chrono::seconds(10));
  t.join();
  ASSERT_TRUE(connected.ok()) << connected.message();
  ASSERT_TRUE(accepted.ok()) << accepted.message();
  EXPECT_EQ(a->refused_connections(), 2u);
  std::vector<uint8_t> out = pattern(1000, 3), got(1000, 0);
  tp::RequestPtr s, r;
  ASSERT_TRUE(b->post(true, out.data(), out.size(), 0, 0, 1, 1, &s).ok());
  ASSERT_TRUE(a->post(false, got.data(), got.size(), 1, 1, 1, 1, &r).ok());
  ASSERT_TRUE(r->wait(std::chrono::seconds(10)).ok());
  ASSERT_TRUE(s->wait(std::chrono::seconds(10)).ok());
  EXPECT_EQ(got, out);
}

// A receive abandoned unfinished (its request destroyed) leaves no trace in
// the hub: a message arriving later, with no receive posted, waits in the ring
// for its own receive (no copy), as if the abandoned one had never been posted.
// A receive for another slot, posted, does make it copied (the counter moves).
TEST(GlooTransport, AnAbandonedReceiveLeavesArrivingMessagesInTheRing) {
  std::shared_ptr<tp::ShmHub> a, b;
  ASSERT_NO_FATAL_FAILURE(connect_hubs(std::chrono::milliseconds(20), &a, &b));
  const size_t n = 4096;
  int sink = 0, ping = 1;
  {
    std::vector<uint8_t> never(n);
    tp::RequestPtr r;
    ASSERT_TRUE(b->post(false, never.data(), n, 0, 0, 8, 8, &r).ok());
  }  // destroyed unfinished: waits 20 ms, then abandons
  std::vector<uint8_t> first = pattern(n, 3), second = pattern(n, 7);
  std::vector<uint8_t> in(n, 0);
  tp::RequestPtr s, poke, r;
  ASSERT_TRUE(a->post(true, first.data(), n, 1, 1, 5, 5, &s, /*eager=*/true).ok());
  ASSERT_TRUE(s->wait(std::chrono::seconds(5)).ok());  // in the ring
  // b moves its channel (a send of its own) with no receive posted.
  ASSERT_TRUE(b->post(true, &ping, sizeof(ping), 0, 0, 20, 20, &poke, /*eager=*/true).ok());
  ASSERT_TRUE(poke->wait(std::chrono::seconds(5)).ok());
  EXPECT_EQ(b->early_copies(), 0u);
  ASSERT_TRUE(b->post(false, in.data(), n, 0, 0, 5, 5, &r).ok());
  ASSERT_TRUE(r->wait(std::chrono::seconds(5)).ok());
  EXPECT_EQ(in, first);
  EXPECT_EQ(b->early_copies(), 0u);

  // The same message with a receive for another slot posted: copied.
  tp::RequestPtr other, s2, s9, r2;
  ASSERT_TRUE(b->post(false, &sink, sizeof(sink), 0, 0, 9, 9, &other).ok());
  ASSERT_TRUE(a->post(true, second.data(), n, 1, 1, 5, 5, &s2, /*eager=*/true).ok());
  ASSERT_TRUE(s2->wait(std::chrono::seconds(5)).ok());
  bool done = true;
  ASSERT_TRUE(other->test(&done).ok());
  EXPECT_FALSE(done);
  EXPECT_EQ(b->early_copies(), 1u);
  ASSERT_TRUE(b->post(false, in.data(), n, 0, 0, 5, 5, &r2).ok());
  ASSERT_TRUE(r2->wait(std::chrono::seconds(5)).ok());
  EXPECT_EQ(in, second);
  ASSERT_TRUE(a->post(true, &ping, sizeof(ping), 1, 1, 9, 9, &s9, /*eager=*/true).ok());
  ASSERT_TRUE(other->wait(std::chrono::seconds(5)).ok());
  EXPECT_EQ(sink, ping);
}

// Direct TCP (gloo_tcp_direct.h): a message whose receive is not yet posted
// waits in the socket and then goes straight into its buffer, with no copy;
// unless a receive for another slot is posted (the message may be in its way:
// it is copied, and the receive behind it completes), or it has waited the
// park limit (it is copied, so sends complete with no receive, as eager ones).
TEST(GlooTransport, DirectTcpMessagesWaitInTheSocketForTheirReceive) {
  const size_t n = size_t{64} << 10;  // a ring segment across hosts
  {
    std::shared_ptr<tp::TcpHub> a, b;
    ASSERT_NO_FATAL_FAILURE(connect_tcp_hubs(std::chrono::seconds(60), &a, &b));
    std::vector<uint8_t> first = pattern(n, 1), second = pattern(n, 2);
    int small = 77;
    tp::RequestPtr s1, s2, s3;
    ASSERT_TRUE(a->post(true, first.data(), n, 1, 1, 1, 1, &s1).ok());
    ASSERT_TRUE(s1->wait(std::chrono::seconds(5)).ok());  // eager: written with no receive
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (std::chrono::steady_clock::now() < until) b->poll();  // it has arrived and waits
    EXPECT_EQ(b->early_copies(), 0u);
    std::vector<uint8_t> in1(n, 0), in2(n, 0);
    tp::RequestPtr r1, r2, r3;
    ASSERT_TRUE(b->post(false, in1.data(), n, 0, 0, 1, 1, &r1).ok());
    ASSERT_TRUE(r1->wait(std::chrono::seconds(5)).ok());
    EXPECT_EQ(in1, first);
    EXPECT_EQ(b->early_copies(), 0u);  // straight from the socket
    // A message for slot 2 with no receive, then one for slot 3 whose receive
    // is posted: the first is copied out of the way.
    ASSERT_TRUE(a->post(true, second.data(), n, 1, 1, 2, 2, &s2).ok());
    ASSERT_TRUE(a->post(true, &small, sizeof(small), 1, 1, 3, 3, &s3).ok());
    int got = 0;
    ASSERT_TRUE(b->post(false, &got, sizeof(got), 0, 0, 3, 3, &r3).ok());
    ASSERT_TRUE(r3->wait(std::chrono::seconds(5)).ok());
    EXPECT_EQ(got, 77);
    EXPECT_EQ(b->early_copies(), 1u);
    ASSERT_TRUE(b->post(false, in2.data(), n, 0, 0, 2, 2, &r2).ok());
    ASSERT_TRUE(r2->wait(std::chrono::seconds(5)).ok());
    EXPECT_EQ(in2, second);
    ASSERT_TRUE(s2->wait(std::chrono::seconds(5)).ok());
    ASSERT_TRUE(s3->wait(std::chrono::seconds(5)).ok());
  }
  {
    // The default park limit: 16 MiB sent with no receive posted (more than
    // the sockets hold) completes while the receiver only polls.
    std::shared_ptr<tp::TcpHub> a, b;
    ASSERT_NO_FATAL_FAILURE(connect_tcp_hubs(tp::TcpHub::kDefaultParkLimit, &a, &b));
    const int count = 256;
    std::vector<std::vector<uint8_t>> out;
    std::vector<tp::RequestPtr> sends(count);
    for (int i = 0; i < count; ++i) {
      out.push_back(pattern(n, i));
      ASSERT_TRUE(a->post(true, out.back().data(), n, 1, 1, 4, 4, &sends[static_cast<size_t>(i)]).ok());
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool all = false;
    while (!all && std::chrono::steady_clock::now() < deadline) {
      b->poll();
      all = true;
      for (tp::RequestPtr& s : sends) {
        bool done = false;
        ASSERT_TRUE(s->test(&done).ok());
        all = all && done;
      }
    }
    EXPECT_TRUE(all);
    EXPECT_GT(b->early_copies(), 0u);
    for (int i = 0; i < count; ++i) {
      std::vector<uint8_t> in(n, 0);
      tp::RequestPtr r;
      ASSERT_TRUE(b->post(false, in.data(), n, 0, 0, 4, 4, &r).ok());
      ASSERT_TRUE(r->wait(std::chrono::seconds(5)).ok());
      ASSERT_EQ(in, out[static_cast<size_t>(i)]) << i;
    }
  }
}
