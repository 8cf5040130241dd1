#include "transport/gloo_transport.h"

#include <arpa/inet.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/unbound_buffer.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

#include "logging.h"
#include "transport/gloo_shm.h"
#include "transport/gloo_tcp_direct.h"
#include "transport/http_store.h"

namespace horovodlite {
namespace transport {

namespace {

using TcpBuffer = gloo::transport::tcp::UnboundBuffer;

// Gloo's unbound buffers can only be waited for: a wait that times out closes
// every pair of the context. To test one without blocking, this reads the
// buffer's completion count (and pending error) under its own lock, through
// pointers to the protected members (a derived class may form them; the
// buffer object itself is Gloo's). Then waitRecv/waitSend returns at once.
struct Peek : TcpBuffer {
  static bool ready(TcpBuffer* b, bool send) {
    std::mutex TcpBuffer::*m = &Peek::m_;
    int TcpBuffer::*count = send ? &Peek::sendCompletions_ : &Peek::recvCompletions_;
    std::exception_ptr TcpBuffer::*ex = &Peek::ex_;
    std::lock_guard<std::mutex> lock(b->*m);
    return (b->*count) > 0 || (b->*ex) != nullptr;
  }
};

std::string what_of(const std::exception& e) { return e.what(); }

class GlooRequest : public Request {
 public:
  GlooRequest(std::unique_ptr<gloo::transport::UnboundBuffer> buf, int peer, int tag, bool send, int world_peer)
      : Request(peer, tag, send), buf_(std::move(buf)), world_peer_(world_peer) {}
  ~GlooRequest() override {
    if (done_ || !buf_) return;
    try {  // the pair may still read or write the memory: wait (Gloo's own timeout)
      if (is_send()) {
        buf_->waitSend();
      } else {
        buf_->waitRecv();
      }
    } catch (const std::exception&) {
    }
  }
  Status test(bool* done) override {
    *done = done_;
    if (done_) return Status::OK();
    if (!Peek::ready(static_cast<TcpBuffer*>(buf_.get()), is_send())) return Status::OK();
    try {
      const bool ok = is_send() ? buf_->waitSend() : buf_->waitRecv();
      if (!ok) return Status::Aborted("transport (gloo): " + describe() + " was aborted");
    } catch (const std::exception& e) {
      done_ = true;  // the pair is closed: nothing touches the buffer any more
      return Status::Aborted("transport (gloo): " + describe() + " failed: " + what_of(e));
    }
    done_ = true;
    *done = true;
    return Status::OK();
  }
  // Gloo's loop thread completes the buffer: yield to it (and to whoever else
  // needs the core) for a while before sleeping, never busy-spin; the sleeps
  // stay short: with the control back-off alone a vote waits through the
  // doubling sleeps (2 + 4 + ... + 128 us), far longer than over MPI.
  Backoff tune(const Backoff& b) const override {
    Backoff out = yielding(b);  // a busy spin would hold the core the loop thread needs
    out.max_sleep_us = std::min(b.max_sleep_us, 50);
    return out;
  }

 private:
  std::string describe() const {
    return std::string(is_send() ? "send to" : "receive from") + " rank " + std::to_string(world_peer_) + " (tag " +
           std::to_string(tag()) + ")";
  }
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  int world_peer_;
  bool done_ = false;
};

// Per same-host peer, a receive on its TCP pair that nothing is ever sent to:
// Gloo fails it when the pair closes (the peer exited or was killed), which
// tells the shared-memory path that the peer is gone.
struct Sentinels {
  std::map<int, std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;  // by world rank
  char bytes[1] = {0};
  bool gone(int world_peer) const {
    auto it = bufs.find(world_peer);
    return it != bufs.end() && Peek::ready(static_cast<TcpBuffer*>(it->second.get()), false);
  }
};
constexpr uint64_t kSentinelSlot = kMaxTag + 1;  // channel 0, past every tag
constexpr int kShmSetupTag = kMaxTag - 1;        // the world's channel, before anyone else uses it
constexpr int kTcpSetupTag = kMaxTag - 2;

// What every context split from one Gloo world shares.
struct GlooShared {
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::chrono::milliseconds timeout;
  std::string secret;           // GlooOptions::secret
  std::shared_ptr<ShmHub> shm;  // same-host peers (gloo_shm.h); null when none or off
  std::shared_ptr<TcpHub> tcp;  // other peers, HOROVODLITE_GLOO_TCP=direct (gloo_tcp_direct.h); else null
};

class GlooTransport : public Context {
 public:
  GlooTransport(std::shared_ptr<GlooShared> shared, std::shared_ptr<gloo::Context> gctx, std::string prefix,
                uint64_t channel, Topology topology, std::vector<int> world_ranks)
      : Context(gctx->rank, gctx->size, std::move(topology), std::move(world_ranks)),
        shared_(std::move(shared)),
        gctx_(std::move(gctx)),
        prefix_(std::move(prefix)),
        channel_(channel) {}

  const char* kind() const override { return "gloo"; }
  int tcp_peers() const {
    int n = 0;
    for (int r = 0; r < size_; ++r) n += shared_->tcp && shared_->tcp->has(world_rank(r)) ? 1 : 0;
    return n;
  }
  int shm_peers() const {
    int n = 0;
    for (int r = 0; r < size_; ++r) n += shared_->shm && shared_->shm->has(world_rank(r)) ? 1 : 0;
    return n;
  }

  Status isend(const void* buf, size_t bytes, int peer, int tag, RequestPtr* request) override {
    return post(true, const_cast<void*>(buf), bytes, peer, tag, request);
  }
  // An op whose whole buffer fits in half a ring (the reduce-scatter's and the
  // allgather's messages in flight at once then fit in it): its messages
  // through the rings, faster for such ops than single copy; larger ones vary
  // more through the rings than by single copy (docs/transport.md).
  Status isend_in_op(const void* buf, size_t bytes, int peer, int tag, size_t op_bytes, RequestPtr* request) override {
    return post(true, const_cast<void*>(buf), bytes, peer, tag, request, op_bytes <= kShmRingBytes / 2);
  }

  // Collective over the world: a shared-memory channel to every peer on this
  // host (gloo_shm.h). A pair whose file cannot be made (a full /dev/shm) or
  // opened on the far side (another /dev/shm: a container) stays on TCP;
  // failed messages fail the set-up.
  Status attach_shared_memory(bool single_copy) {
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && topology_.host[static_cast<size_t>(r)] == topology_.host[static_cast<size_t>(rank_)]) {
        peers.push_back(r);
      }
    }
    if (peers.empty()) return Status::OK();
    auto sentinels = std::make_shared<Sentinels>();
    auto hub = std::make_shared<ShmHub>(rank_, single_copy, [sentinels](int peer) { return sentinels->gone(peer); });
    std::vector<std::vector<char>> names(static_cast<size_t>(size_), std::vector<char>(ShmHub::kNameBytes, 0));
    std::vector<RequestPtr> reqs;
    Status created = Status::OK();
    // The files this rank created leave /dev/shm when the set-up ends, however
    // it ends (once the peers have them mapped, or never).
    struct Unlink {
      ShmHub* hub;
      std::vector<std::string> names;
      ~Unlink() {
        for (const std::string& n : names) hub->unlink_name(n);
      }
    } unlink{hub.get(), {}};
    for (int p : peers) {
      RequestPtr r;
      std::vector<char>& name = names[static_cast<size_t>(p)];
      if (p > rank_) {
        std::string n;
        Status s = hub->create_channel(p, &n);
        if (!s.ok() && created.ok()) created = s;  // an empty name tells the peer
        if (s.ok()) {
          std::copy(n.begin(), n.end(), name.begin());
          unlink.names.push_back(n);
        }
        HVL_RETURN_IF_ERROR(isend(name.data(), name.size(), p, kShmSetupTag, &r));
      } else {
        HVL_RETURN_IF_ERROR(irecv(name.data(), name.size(), p, kShmSetupTag, &r));
      }
      reqs.push_back(std::move(r));
    }
    HVL_RETURN_IF_ERROR(wait_all(&reqs, shared_->timeout));
    reqs.clear();
    std::vector<int32_t> ok(static_cast<size_t>(size_), 0);
    for (int p : peers) {
      RequestPtr r;
      int32_t& k = ok[static_cast<size_t>(p)];
      if (p < rank_) {
        const std::vector<char>& name = names[static_cast<size_t>(p)];
        const std::string n(name.data(), strnlen(name.data(), name.size()));
        k = !n.empty() && hub->open_channel(p, n).ok() ? 1 : 0;
        if (k) hub->probe_single_copy(p);  // the creator's side is in the file already
        HVL_RETURN_IF_ERROR(isend(&k, sizeof(k), p, kShmSetupTag, &r));
      } else {
        HVL_RETURN_IF_ERROR(irecv(&k, sizeof(k), p, kShmSetupTag, &r));
      }
      reqs.push_back(std::move(r));
    }
    HVL_RETURN_IF_ERROR(wait_all(&reqs, shared_->timeout));
    if (!created.ok()) HVL_LOG(kWarning, created.message() << ": those pairs stay on TCP");
    for (int p : peers) {
      if (!ok[static_cast<size_t>(p)]) {
        hub->drop(p);
        continue;
      }
      if (p > rank_) hub->probe_single_copy(p);  // the peer's side is in the file since its answer
      try {
        auto ub = gctx_->createUnboundBuffer(sentinels->bytes, sizeof(sentinels->bytes));
        ub->recv(p, kSentinelSlot, 0, sizeof(sentinels->bytes));
        sentinels->bufs[p] = std::move(ub);
      } catch (const std::exception& e) {
        return Status::Aborted("transport (gloo): watching rank " + std::to_string(p) + " failed: " + what_of(e));
      }
    }
    shared_->shm = std::move(hub);
    return Status::OK();
  }
  Status irecv(void* buf, size_t bytes, int peer, int tag, RequestPtr* request) override {
    return post(false, buf, bytes, peer, tag, request);
  }

  // Collective over the world, after attach_shared_memory: a connection of our
  // own to every peer that shared memory does not reach (gloo_tcp_direct.h).
  // A pair whose connection fails on either side stays on Gloo's pair (a
  // warning); failed set-up messages fail the set-up.
  Status attach_direct_tcp() {
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && !(shared_->shm && shared_->shm->has(r))) peers.push_back(r);
    }
    if (peers.empty()) return Status::OK();
    auto hub = std::make_shared<TcpHub>(rank_, shared_->secret);
    std::vector<TcpHub::Endpoint> ends(static_cast<size_t>(size_));
    std::memset(static_cast<void*>(ends.data()), 0, ends.size() * sizeof(TcpHub::Endpoint));
    std::vector<RequestPtr> reqs;
    Status first = Status::OK();
    const auto note = [&](const Status& s) {
      if (!s.ok() && first.ok()) first = s;
      return s.ok();
    };
    for (int p : peers) {  // the lower rank of each pair listens
      RequestPtr r;
      TcpHub::Endpoint& e = ends[static_cast<size_t>(p)];
      if (p > rank_) {
        const auto* local = dynamic_cast<const gloo::transport::tcp::Address*>(&gctx_->getPair(p)->address());
        const Status s = local != nullptr ? hub->listen(p, local->getSockaddr(), &e)
                                          : Status::Internal("transport (gloo, direct tcp): not a TCP pair");
        if (!note(s)) std::memset(static_cast<void*>(&e), 0, sizeof(e));  // AF_UNSPEC: the peer does not connect
        HVL_RETURN_IF_ERROR(isend(&e, sizeof(e), p, kTcpSetupTag, &r));
      } else {
        HVL_RETURN_IF_ERROR(irecv(&e, sizeof(e), p, kTcpSetupTag, &r));
      }
      reqs.push_back(std::move(r));
    }
    HVL_RETURN_IF_ERROR(wait_all(&reqs, shared_->timeout));
    reqs.clear();
    std::vector<int32_t> ok(static_cast<size_t>(size_), 0), theirs(static_cast<size_t>(size_), 0);
    for (int p : peers) {  // connect to the lower ranks (their listen queue takes it) ...
      const TcpHub::Endpoint& e = ends[static_cast<size_t>(p)];
      if (p < rank_ && e.address.ss_family != AF_UNSPEC)
        ok[static_cast<size_t>(p)] = note(hub->connect(p, e, shared_->timeout));
    }
    for (int p : peers) {  // ... then take the higher ranks' connections
      const TcpHub::Endpoint& e = ends[static_cast<size_t>(p)];
      if (p > rank_ && e.address.ss_family != AF_UNSPEC)
        ok[static_cast<size_t>(p)] = note(hub->accept(p, shared_->timeout));
    }
    for (int p : peers) {  // a pair is used only where both sides have it
      RequestPtr s, r;
      HVL_RETURN_IF_ERROR(isend(&ok[static_cast<size_t>(p)], sizeof(int32_t), p, kTcpSetupTag, &s));
      HVL_RETURN_IF_ERROR(irecv(&theirs[static_cast<size_t>(p)], sizeof(int32_t), p, kTcpSetupTag, &r));
      reqs.push_back(std::move(s));
      reqs.push_back(std::move(r));
    }
    HVL_RETURN_IF_ERROR(wait_all(&reqs, shared_->timeout));
    for (int p : peers) {
      if (!ok[static_cast<size_t>(p)] || !theirs[static_cast<size_t>(p)]) hub->drop(p);
    }
    if (!first.ok()) HVL_LOG(kWarning, first.message() << ": those pairs stay on Gloo's connections");
    shared_->tcp = std::move(hub);
    return Status::OK();
  }

  Status split(const std::vector<int>& ranks, const std::string& name, std::shared_ptr<Context>* out) override {
    int me = -1;
    bool identity = static_cast<int>(ranks.size()) == size_;
    std::string key = name + "/";
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size_) {
        return Status::InvalidArgument("transport: split over rank " + std::to_string(ranks[i]));
      }
      if (ranks[i] == rank_) me = static_cast<int>(i);
      identity = identity && ranks[i] == static_cast<int>(i);
      key += std::to_string(ranks[i]) + ",";
    }
    if (me < 0) return Status::InvalidArgument("transport: split '" + name + "' without this rank");
    const int use = uses_[key]++;
    key += "#" + std::to_string(use);
    std::vector<int> world_ranks;
    for (int r : ranks) world_ranks.push_back(world_rank(r));
    if (identity) {
      // The same ranks: the same connections, a channel of its own.
      const uint64_t channel = (std::hash<std::string>{}(prefix_ + "|" + key) & 0xFFFFFFFFFFFFull) | 1;
      *out = std::make_shared<GlooTransport>(shared_, gctx_, prefix_ + "/" + key, channel, topology_, world_ranks);
      return Status::OK();
    }
    try {
      auto sub = std::make_shared<gloo::rendezvous::Context>(me, static_cast<int>(ranks.size()));
      sub->setTimeout(shared_->timeout);
      gloo::rendezvous::PrefixStore store(prefix_ + "/" + key, *shared_->store);
      sub->connectFullMesh(store, shared_->device);
      // Its own channel too: same-host messages of every context share the world's rings.
      const uint64_t channel = (std::hash<std::string>{}(prefix_ + "|" + key) & 0xFFFFFFFFFFFFull) | 1;
      *out = std::make_shared<GlooTransport>(shared_, sub, prefix_ + "/" + key, channel, sub_topology(topology_, ranks),
                                             world_ranks);
    } catch (const std::exception& e) {
      return Status::Aborted("transport (gloo): connecting '" + name + "' failed: " + what_of(e));
    }
    return Status::OK();
  }

 private:
  Status post(bool send, void* buf, size_t bytes, int peer, int tag, RequestPtr* request, bool eager = false) {
    if (peer < 0 || peer >= size_) {
      return Status::InvalidArgument("transport: peer " + std::to_string(peer) + " outside [0, " +
                                     std::to_string(size_) + ")");
    }
    if (tag < 0 || tag > kMaxTag) return Status::InvalidArgument("transport: tag " + std::to_string(tag));
    const uint64_t slot = (channel_ << 16) | static_cast<uint64_t>(tag);
    if (shared_->shm && shared_->shm->has(world_rank(peer))) {
      return shared_->shm->post(send, buf, bytes, peer, world_rank(peer), slot, tag, request, eager);
    }
    if (shared_->tcp && shared_->tcp->has(world_rank(peer))) {
      return shared_->tcp->post(send, buf, bytes, peer, world_rank(peer), slot, tag, request);
    }
    try {
      // Gloo wants a valid pointer even for an empty message.
      auto ub = gctx_->createUnboundBuffer(bytes ? buf : static_cast<void*>(&empty_), bytes);
      if (send) {
        ub->send(peer, slot, 0, bytes);
      } else {
        ub->recv(peer, slot, 0, bytes);
      }
      *request = std::make_unique<GlooRequest>(std::move(ub), peer, tag, send, world_rank(peer));
    } catch (const std::exception& e) {
      return Status::Aborted(std::string("transport (gloo): ") + (send ? "send to" : "receive from") + " rank " +
                             std::to_string(world_rank(peer)) + " failed: " + what_of(e));
    }
    return Status::OK();
  }

  std::shared_ptr<GlooShared> shared_;
  std::shared_ptr<gloo::Context> gctx_;
  std::string prefix_;
  uint64_t channel_;
  std::map<std::string, int> uses_;
  char empty_ = 0;
};

class HttpGlooStore : public gloo::rendezvous::Store {
 public:
  HttpGlooStore(const std::string& host, int port, const std::string& scope, std::chrono::milliseconds timeout,
                const std::string& secret)
      : client_(host, port, scope, timeout, secret) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s = client_.set(key, data);
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> value;
    const Status s = client_.get(key, &value);
    if (!s.ok()) throw std::runtime_error(s.message());
    return value;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, client_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& /*timeout*/) override {
    std::vector<char> value;
    for (const std::string& k : keys) {
      const Status s = client_.get(k, &value);
      if (!s.ok()) throw std::runtime_error(s.message());
    }
  }

 private:
  HttpStoreClient client_;
};

// InitOptions::store as Gloo's store: a launcher's store that the LibTorch
// adapter gives (torchrun's, Slurm's through torch's TCPStore).
class ExternalGlooStore : public gloo::rendezvous::Store {
 public:
  ExternalGlooStore(std::shared_ptr<RendezvousStore> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    const Status s = store_->set(key, data);
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<char> value;
    const Status s = store_->get(key, timeout_, &value);
    if (!s.ok()) throw std::runtime_error(s.message());
    return value;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<char> value;
    for (const std::string& k : keys) {
      const Status s = store_->get(k, timeout, &value);
      if (!s.ok()) throw std::runtime_error(s.message());
    }
  }

 private:
  std::shared_ptr<RendezvousStore> store_;
  std::chrono::milliseconds timeout_;
};

// Whether `name` resolves here (Gloo 0.5's device set-up crashes on a name
// that does not, instead of throwing).
bool resolves(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &result);
  if (result != nullptr) freeaddrinfo(result);
  return rc == 0;
}

// The IPv4 address of the first interface that is up and not loopback ("" if
// none): where a rank listens when its host name (a launcher's name for the
// host, e.g. a simulated host's) does not resolve. Machines with several
// networks name theirs with --network-interface (HOROVOD_GLOO_IFACE).
std::string first_interface_address() {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return "";
  std::string out;
  for (ifaddrs* a = all; a != nullptr && out.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) != nullptr) out = buf;
  }
  freeifaddrs(all);
  return out;
}

std::string machine_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

int shared_memory_peers(const Context& ctx) {
  const auto* g = dynamic_cast<const GlooTransport*>(&ctx);
  return g == nullptr ? 0 : g->shm_peers();
}

int direct_tcp_peers(const Context& ctx) {
  const auto* g = dynamic_cast<const GlooTransport*>(&ctx);
  return g == nullptr ? 0 : g->tcp_peers();
}

std::shared_ptr<gloo::rendezvous::Store> make_http_store(const std::string& host, int port, const std::string& scope,
                                                         std::chrono::milliseconds timeout, const std::string& secret) {
  return std::make_shared<HttpGlooStore>(host, port, scope, timeout, secret);
}

Status connect_gloo(const GlooOptions& options, std::shared_ptr<gloo::rendezvous::Store> store, ContextPtr* out) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return Status::InvalidArgument("transport (gloo): rank " + std::to_string(options.rank) + " of size " +
                                   std::to_string(options.size));
  }
  const std::string hostname = options.hostname.empty() ? machine_hostname() : options.hostname;
  try {
    gloo::rendezvous::PrefixStore prefixed(options.prefix, *store);
    // Every rank's host name first: the topology, and whether all are local.
    prefixed.set("host/" + std::to_string(options.rank), std::vector<char>(hostname.begin(), hostname.end()));
    std::vector<std::string> names;
    std::vector<std::string> keys;
    for (int r = 0; r < options.size; ++r) keys.push_back("host/" + std::to_string(r));
    prefixed.wait(keys);  // a Gloo store's get does not wait (HashStore: an empty value)
    for (int r = 0; r < options.size; ++r) {
      const std::vector<char> v = prefixed.get("host/" + std::to_string(r));
      names.emplace_back(v.begin(), v.end());
    }
    const Topology topology = Topology::from_names(names);
    gloo::transport::tcp::attr attr;
    if (!options.iface.empty()) {
      attr.iface = options.iface;
    } else if (!options.bind_address.empty()) {
      attr.hostname = options.bind_address;
    } else {
      const bool one_host =
          std::all_of(names.begin(), names.end(), [&](const std::string& n) { return n == names[0]; });
      attr.hostname = one_host ? "127.0.0.1" : hostname;
      if (!one_host && !resolves(hostname)) {
        attr.hostname = first_interface_address();
        if (attr.hostname.empty()) {
          return Status::InvalidArgument("transport (gloo): rank " + std::to_string(options.rank) + ": host name '" +
                                         hostname +
                                         "' does not resolve and no network interface is up; name one with "
                                         "--network-interface (HOROVOD_GLOO_IFACE)");
        }
      }
    }
    auto shared = std::make_shared<GlooShared>();
    shared->store = store;
    shared->device = gloo::transport::tcp::CreateDevice(attr);
    shared->timeout = options.timeout;
    shared->secret = options.secret;
    auto gctx = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    gctx->setTimeout(options.timeout);
    gloo::rendezvous::PrefixStore mesh(options.prefix + "/mesh", *store);
    gctx->connectFullMesh(mesh, shared->device);
    std::vector<int> world_ranks(static_cast<size_t>(options.size));
    for (int r = 0; r < options.size; ++r) world_ranks[static_cast<size_t>(r)] = r;
    auto world = std::make_shared<GlooTransport>(shared, gctx, options.prefix, 0, topology, world_ranks);
    if (options.shared_memory) {
      const Status s = world->attach_shared_memory(options.single_copy);
      if (!s.ok()) {
        return Status::Aborted(
            "transport (gloo): rank " + std::to_string(options.rank) +
            ": the same-host shared-memory set-up failed (HOROVODLITE_GLOO_SHM=0 turns it off): " + s.message());
      }
    }
    if (options.direct_tcp) {
      const Status s = world->attach_direct_tcp();
      if (!s.ok()) {
        return Status::Aborted(
            "transport (gloo): rank " + std::to_string(options.rank) +
            ": the direct TCP set-up failed (HOROVODLITE_GLOO_TCP=gloo keeps Gloo's): " + s.message());
      }
    }
    *out = std::move(world);
  } catch (const std::exception& e) {
    return Status::Aborted("transport (gloo): rank " + std::to_string(options.rank) + " of " +
                           std::to_string(options.size) + " could not connect: " + what_of(e));
  }
  return Status::OK();
}

Status connect_gloo_http(const GlooOptions& options, const std::string& host, int port, const std::string& scope,
                         ContextPtr* out) {
  return connect_gloo(options, make_http_store(host, port, scope, options.timeout, options.secret), out);
}

Status connect_gloo_from_config(const Config& config, ContextPtr* out) {
  const Config::GlooJob& g = config.gloo;
  GlooOptions options;
  options.rank = static_cast<int>(g.rank);
  options.size = static_cast<int>(g.size);
  options.hostname = g.hostname;
  options.iface = g.iface;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(g.timeout_s * 1000));
  options.prefix = "hvl";
  options.shared_memory = g.shared_memory;
  options.single_copy = g.shm_single_copy;
  options.direct_tcp = g.direct_tcp;
  options.secret = g.secret;
  if (g.store) return connect_gloo(options, std::make_shared<ExternalGlooStore>(g.store, options.timeout), out);
  if (g.size == 1 && g.rendezvous_addr.empty()) {
    // A world of one that no launcher placed (config.cc): nobody to meet.
    return connect_gloo(options, std::make_shared<gloo::rendezvous::HashStore>(), out);
  }
  return connect_gloo_http(options, g.rendezvous_addr, static_cast<int>(g.rendezvous_port), g.scope, out);
}

}  // namespace transport
}  // namespace horovodlite

// The plugin's entry point, which the core finds with dlsym (transport/world.cc).
extern "C" __attribute__((visibility("default"))) void hvl_gloo_connect_world(const horovodlite::Config* config,
                                                                              horovodlite::transport::ContextPtr* out,
                                                                              horovodlite::Status* status) {
  *status = horovodlite::transport::connect_gloo_from_config(*config, out);
}
