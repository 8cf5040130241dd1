// One worker of a Gloo job started without mpirun (run_gloo_workers.py starts
// the rendezvous server and N of these with the contract's environment):
// connects through the HTTP rendezvous store, then checks the ring allreduce
// (plain and fp16 wire), the transport collectives and process-set
// sub-contexts against values every rank can compute. Exits 0 when all agree.
// All ranks share a host: with HOROVODLITE_GLOO_SHM unset, 1 or copy every pair
// goes through shared memory (checked), with 0 over TCP. `gloo_worker kill`: after
// the suite the last rank kills itself (SIGKILL) while rank 0 waits for a
// message from it; rank 0 must see the wait fail naming it, not hang.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "horovodlite/config.h"
#include "negotiation/recursive_doubling.h"
#include "ops/ring_allreduce.h"
#include "transport/collectives.h"
#include "transport/gloo_shm.h"
#include "transport/gloo_transport.h"

namespace hvl = horovodlite;
namespace tp = horovodlite::transport;
namespace ops = horovodlite::transport_ops;

namespace {

int failures = 0;

void check(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "gloo_worker rank %d: FAILED %s\n", rank, what);
    ++failures;
  }
}

void check_status(const hvl::Status& s, const char* what, int rank) {
  if (!s.ok()) std::fprintf(stderr, "gloo_worker rank %d: %s: %s\n", rank, what, s.message().c_str());
  check(s.ok(), what, rank);
}

void run_suite(tp::Context& ctx, const char* where) {
  const int r = ctx.rank(), p = ctx.size();
  hvl::RingAllreduceOptions options;
  options.segment_bytes = 32 << 10;
  hvl::RingAllreduce ring(ctx.shared_from_this(), options);
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{1} << 20}) {
    std::vector<float> a(static_cast<size_t>(n)), b;
    for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = static_cast<float>((i + r) % 9);
    b = a;
    check_status(ring.run(a.data(), n, hvl::DataType::kFloat32, hvl::ReduceOp::kSum), where, r);
    check_status(ring.run_fp16_wire(b.data(), n, hvl::DataType::kFloat32, hvl::ReduceOp::kSum), where, r);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += static_cast<float>((i + q) % 9);
      ok = ok && a[static_cast<size_t>(i)] == want && b[static_cast<size_t>(i)] == want;
    }
    check(ok, "ring allreduce values", r);
  }
  std::vector<int32_t> bc(100, r == p - 1 ? 42 : 0);
  check_status(ops::broadcast(ctx, bc.data(), bc.size() * 4, p - 1), "broadcast", r);
  check(bc == std::vector<int32_t>(100, 42), "broadcast values", r);
  std::vector<size_t> bytes;
  for (int q = 0; q < p; ++q) bytes.push_back(static_cast<size_t>(q + 1) * 4);
  std::vector<int32_t> mine(static_cast<size_t>(r + 1), r), all;
  for (int q = 0; q < p; ++q) all.insert(all.end(), static_cast<size_t>(q + 1), -1);
  check_status(ops::allgatherv(ctx, mine.data(), all.data(), bytes), "allgather", r);
  size_t at = 0;
  for (int q = 0; q < p; ++q) {
    for (int k = 0; k <= q; ++k) check(all[at++] == q, "allgather values", r);
  }
  std::vector<size_t> ab(static_cast<size_t>(p), 4);
  std::vector<int32_t> ain(static_cast<size_t>(p)), aout(static_cast<size_t>(p), -1);
  for (int q = 0; q < p; ++q) ain[static_cast<size_t>(q)] = 100 * r + q;
  check_status(ops::alltoallv(ctx, ain.data(), ab, aout.data(), ab), "alltoall", r);
  for (int q = 0; q < p; ++q) check(aout[static_cast<size_t>(q)] == 100 * q + r, "alltoall values", r);
  std::vector<int64_t> counts(static_cast<size_t>(p), 3);
  std::vector<double> rin(static_cast<size_t>(3 * p)), rout(3);
  for (size_t i = 0; i < rin.size(); ++i) rin[i] = static_cast<double>(i + static_cast<size_t>(r));
  check_status(ops::reducescatter(ctx, rin.data(), rout.data(), counts, hvl::DataType::kFloat64, hvl::ReduceOp::kSum),
               "reducescatter", r);
  for (size_t i = 0; i < 3; ++i) {
    const double want =
        static_cast<double>(p) * static_cast<double>(static_cast<size_t>(3 * r) + i) + p * (p - 1) / 2.0;
    check(rout[i] == want, "reducescatter values", r);
  }
  hvl::RecursiveDoubling rd(ctx.shared_from_this());
  uint64_t w = static_cast<uint64_t>(r + 1);
  check_status(rd.run(&w, 1, [](const uint64_t* in, uint64_t* io) { *io += *in; }), "recursive doubling", r);
  check(w == static_cast<uint64_t>(p * (p + 1) / 2), "recursive doubling values", r);
  check_status(ctx.barrier(), "barrier", r);
}

}  // namespace

// The last rank dies in the middle of a message rank 0 waits for.
int kill_last_rank(tp::Context& world) {
  const int r = world.rank(), last = world.size() - 1;
  std::vector<uint8_t> big(tp::kShmRingBytes * 3);
  check_status(world.barrier(), "barrier before the kill", r);
  if (r == last) {
    tp::RequestPtr s;  // more than the ring holds: rank 0 has a part of it when this rank dies
    check_status(world.isend(big.data(), big.size(), 0, 11, &s), "send before the kill", r);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(getpid(), SIGKILL);
  }
  if (r == 0) {
    // Through the shared-memory rings (HOROVODLITE_GLOO_SHM=copy) the ring
    // holds a third of the message when the peer dies (it moves data only
    // while it tests its request): the wait fails. With single copy (the
    // default) rank 0 reads the message from the peer's memory while it
    // lives, or fails if it is gone; over TCP the whole message may be in the
    // socket by then. Where it completes, a receive that nothing will match
    // fails instead.
    for (int tag : {11, 12}) {
      tp::RequestPtr q;
      int dummy = 0;
      check_status(
          tag == 11 ? world.irecv(big.data(), big.size(), last, tag, &q) : world.irecv(&dummy, 4, last, tag, &q),
          "receive from the dying rank", r);
      const auto t0 = std::chrono::steady_clock::now();
      const hvl::Status w = q->wait(std::chrono::seconds(20));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("gloo_worker rank 0: the wait on rank %d (tag %d) ended after %.2f s: %s\n", last, tag, s,
                  w.ok() ? "completed" : w.message().c_str());
      if (w.ok() && tag == 11) continue;
      check(w.code() == hvl::StatusCode::kAborted, "the wait on a killed peer fails with kAborted", r);
      check(w.message().find("rank " + std::to_string(last)) != std::string::npos, "the failure names the peer", r);
      break;
    }
  }
  std::printf("gloo_worker rank %d: %s\n", r, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  hvl::Config config;
  hvl::Status s = hvl::Config::from_env(&config);
  if (!s.ok() || config.transport != hvl::Config::Transport::kGloo) {
    std::fprintf(stderr, "gloo_worker: not a Gloo job: %s\n", s.message().c_str());
    return 1;
  }
  tp::ContextPtr world;
  s = tp::connect_gloo_from_config(config, &world);
  if (!s.ok()) {
    std::fprintf(stderr, "gloo_worker: %s\n", s.message().c_str());
    return 1;
  }
  const int r = world->rank(), p = world->size();
  check(p == config.gloo.size && r == config.gloo.rank, "rank and size", r);
  check(world->local_rank() == config.gloo.local_rank || config.gloo.local_rank < 0, "local rank", r);
  check(tp::shared_memory_peers(*world) == (config.gloo.shared_memory ? p - 1 : 0), "shared-memory peers", r);
  // One host: our own TCP connections only where shared memory is off.
  const bool direct = config.gloo.direct_tcp && !config.gloo.shared_memory;
  check(tp::direct_tcp_peers(*world) == (direct ? p - 1 : 0), "direct TCP peers", r);
  if (argc > 1 && std::strcmp(argv[1], "kill") == 0) return kill_last_rank(*world);
  run_suite(*world, "world");
  // Process sets: every rank in reverse order, and the even ranks (a real subset).
  std::vector<int> reversed, even;
  for (int q = p - 1; q >= 0; --q) reversed.push_back(q);
  for (int q = 0; q < p; q += 2) even.push_back(q);
  tp::ContextPtr rev, sub;
  check_status(world->split(reversed, "ps.reversed", &rev), "split reversed", r);
  if (rev) run_suite(*rev, "reversed");
  if (r % 2 == 0) {
    check_status(world->split(even, "ps.even", &sub), "split even", r);
    if (sub) run_suite(*sub, "even");
  }
  check_status(world->barrier(), "final barrier", r);
  std::printf("gloo_worker rank %d of %d: %s\n", r, p, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
