#include "transport/gloo_tcp_direct.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "logging.h"
#include "transport/auth.h"

namespace horovodlite {
namespace transport {

struct TcpHeader {
  uint64_t slot;
  uint64_t bytes;
};

// What the connecting side writes first: who it is and its proof (auth.h).
struct TcpHello {
  uint8_t proof[32];
  int32_t rank;
  int32_t unused;
};

struct TcpOp {
  bool send = false;
  int peer = -1;  // world rank
  int tag = 0;
  uint64_t slot = 0;
  uint8_t* buf = nullptr;
  size_t bytes = 0;
  size_t written = 0;  // send: of the header (slot, bytes) and the bytes
  bool complete = false;
  Status error;
  std::vector<uint8_t> owned;  // an abandoned send's bytes
  std::string describe() const { return describe_op(send, peer, tag); }
};

// The bytes of an early message: up to kEarlyPooledBytes (a ring segment
// across hosts is 64 KiB) in a spare buffer of the hub, given back when the
// message is gone; larger ones on the heap. Never zero-filled: every byte is
// read from the socket before it is used. (Most of a large allreduce's
// messages come early; read into zero-filled vectors, the op's time doubled in
// some jobs.)
constexpr size_t kEarlyPooledBytes = size_t{64} << 10;
constexpr size_t kEarlySpares = 64;

// With how much queued behind it, at most, an arriving message waits in the
// socket for its receive (TcpHub::place_arriving).
constexpr int kParkQueueBytes = 2 << 20;

class EarlyBytes {
 public:
  using Spares = std::vector<std::unique_ptr<uint8_t[]>>;
  EarlyBytes(Spares* spares, size_t n) : size_(n) {
    if (n > kEarlyPooledBytes) {
      bytes_.reset(new uint8_t[n]);
      return;
    }
    spares_ = spares;
    if (spares->empty()) {
      bytes_.reset(new uint8_t[kEarlyPooledBytes]);
    } else {
      bytes_ = std::move(spares->back());
      spares->pop_back();
    }
  }
  EarlyBytes(const EarlyBytes&) = delete;
  EarlyBytes& operator=(const EarlyBytes&) = delete;
  ~EarlyBytes() {
    if (spares_ && spares_->size() < kEarlySpares) spares_->push_back(std::move(bytes_));
  }
  size_t size() const { return size_; }
  uint8_t* data() { return bytes_.get(); }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
  size_t size_;
  Spares* spares_ = nullptr;  // the hub's (touched under its lock only)
};

// A message that arrived before its receive was posted.
struct TcpEarly {
  TcpEarly(EarlyBytes::Spares* spares, size_t n) : data(spares, n) {}
  EarlyBytes data;
  bool complete = false;
  std::shared_ptr<TcpOp> claimed;  // the receive that took it while it was still arriving
};

struct TcpChannel {
  int peer = -1;
  int fd = -1;
  int listen_fd = -1;
  uint8_t nonce[16] = {0};
  std::string failed;                                               // why the connection is gone; empty while it works
  std::deque<std::shared_ptr<TcpOp>> sends;                         // in posting order
  std::map<uint64_t, std::deque<std::shared_ptr<TcpOp>>> recvs;     // posted, per slot
  std::map<uint64_t, std::deque<std::shared_ptr<TcpEarly>>> early;  // arrived first, per slot
  // The message being received: into `in_op`'s buffer, `in_early`'s, or dropped.
  TcpHeader in_hdr{0, 0};
  size_t in_hdr_got = 0;
  bool in_msg = false;
  bool parked = false;  // its header is read, the rest waits in the socket for its receive
  std::chrono::steady_clock::time_point parked_since;
  uint64_t in_done = 0;
  std::shared_ptr<TcpOp> in_op;
  std::shared_ptr<TcpEarly> in_early;
  std::vector<uint8_t> sink;

  ~TcpChannel() {
    if (fd >= 0) close(fd);
    if (listen_fd >= 0) close(listen_fd);
  }
};

template class ChannelHub<TcpOp, TcpChannel>;

namespace {

// Whether fewer than `limit` bytes wait unread in the socket.
bool queued_below(int fd, int limit) {
  int queued = 0;
  return ioctl(fd, FIONREAD, &queued) == 0 && queued < limit;
}

class TcpRequest : public Request {
 public:
  TcpRequest(std::shared_ptr<TcpHub> hub, std::shared_ptr<TcpOp> op, int peer, int tag, bool send)
      : Request(peer, tag, send), hub_(std::move(hub)), op_(std::move(op)) {}
  ~TcpRequest() override { hub_->abandon(op_); }
  Status test(bool* done) override { return hub_->test(op_.get(), done); }
  // The I/O happens in test(); its polls yield the core between tests, as an
  // MPI job's do (MPI_Test with the launcher's flags,
  // python/horovodlite/runner/mpi_flags.py): where ranks share cores, a
  // spinning rank holds the core its peer needs (spinning against yielding:
  // docs/results/2026-11-transport.md, "Waits that yield, and 2x2").
  Backoff tune(const Backoff& b) const override { return yielding(b); }

 private:
  std::shared_ptr<TcpHub> hub_;
  std::shared_ptr<TcpOp> op_;
};

Status sys_error(const std::string& what, int peer) {
  return Status::Aborted("transport (gloo, direct tcp): " + what + " (rank " + std::to_string(peer) +
                         "): " + std::strerror(errno));
}

// Waits until `fd` is ready for `events`; false on timeout.
bool wait_fd(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int rc = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

// Reads or writes exactly n bytes of a blocking-style exchange within `timeout`.
bool exchange(int fd, void* buf, size_t n, bool write_it, std::chrono::milliseconds timeout) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    if (!wait_fd(fd, write_it ? POLLOUT : POLLIN, timeout)) return false;
    const ssize_t r = write_it ? send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                               : recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

void set_port(sockaddr_storage* a, uint16_t port) {
  if (a->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
  if (a->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
}

socklen_t length_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// Non-blocking, and no Nagle delay (the ring's segments leave at once).
void configure(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

namespace {

// What the connecting rank `from` sends the listening rank `to` for `nonce`.
void hello_proof(const std::string& secret, const uint8_t* nonce, int to, int from, uint8_t out[32]) {
  std::memset(out, 0, 32);
  if (secret.empty()) {
    std::memcpy(out, nonce, 16);
    return;
  }
  const std::string mac = hmac_sha256(secret, "hvl1-tcp\n" + std::string(reinterpret_cast<const char*>(nonce), 16) +
                                                  "\n" + std::to_string(to) + "\n" + std::to_string(from));
  std::memcpy(out, mac.data(), std::min<size_t>(32, mac.size()));
}

}  // namespace

TcpHub::TcpHub(int world_rank, std::string secret, std::chrono::microseconds park_limit)
    : ChannelHub(world_rank, "gloo, direct tcp"), secret_(std::move(secret)), park_limit_(park_limit) {}
// The channels go before spare_ (a member of this class, destroyed before the
// hub's channels_): their early messages give their buffers back to it.
TcpHub::~TcpHub() { channels_.clear(); }

size_t TcpHub::refused_connections() const { return refused_.load(); }

Status TcpHub::listen(int world_peer, const sockaddr_storage& local, Endpoint* out) {
  auto c = std::make_unique<TcpChannel>();
  c->peer = world_peer;
  c->listen_fd = socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->listen_fd < 0) return sys_error("socket", world_peer);
  sockaddr_storage a = local;
  set_port(&a, 0);
  if (bind(c->listen_fd, reinterpret_cast<sockaddr*>(&a), length_of(a)) != 0) return sys_error("bind", world_peer);
  if (::listen(c->listen_fd, 8) != 0) return sys_error("listen", world_peer);
  std::memset(out, 0, sizeof(*out));
  socklen_t len = sizeof(out->address);
  if (getsockname(c->listen_fd, reinterpret_cast<sockaddr*>(&out->address), &len) != 0) {
    return sys_error("getsockname", world_peer);
  }
  if (RAND_bytes(c->nonce, sizeof(c->nonce)) != 1)
    return Status::Internal("transport (gloo, direct tcp): no random bytes");
  std::memcpy(out->nonce, c->nonce, sizeof(c->nonce));
  std::lock_guard<std::mutex> lock(mu_);
  channels_[world_peer] = std::move(c);
  return Status::OK();
}

Status TcpHub::accept(int world_peer, std::chrono::milliseconds timeout) {
  TcpChannel* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = channel(world_peer);
  }
  if (c == nullptr || c->listen_fd < 0) return Status::Internal("transport (gloo, direct tcp): nothing listens");
  const auto timed_out = [&] {
    return Status::Timeout("transport (gloo, direct tcp): rank " + std::to_string(world_peer) +
                           " did not connect within " + std::to_string(timeout.count()) + " ms");
  };
  uint8_t want[32];
  hello_proof(secret_, c->nonce, world_rank_, world_peer, want);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int fd = -1;
  while (fd < 0) {
    // Until the peer proves itself: a connection from outside the job is
    // closed and the wait goes on.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !wait_fd(c->listen_fd, POLLIN, left)) return timed_out();
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const int candidate = accept4(c->listen_fd, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
    if (candidate < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return sys_error("accept", world_peer);
    }
    TcpHello hello{};
    // A peer of the job writes its hello at once: a silent one gets a few seconds.
    const auto hello_wait = std::min(left, std::chrono::milliseconds(5000));
    if (exchange(candidate, &hello, sizeof(hello), false, hello_wait) && hello.rank == world_peer &&
        CRYPTO_memcmp(hello.proof, want, sizeof(want)) == 0) {
      fd = candidate;
      break;
    }
    close(candidate);
    if (refused_.fetch_add(1) == 0) {
      char host[INET6_ADDRSTRLEN] = "?";
      if (from.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&from)->sin_addr, host, sizeof(host));
      } else if (from.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr, host, sizeof(host));
      }
      HVL_LOG(kWarning, "transport (gloo, direct tcp): closed a connection from " << host << " that claimed to be rank "
                                                                                  << world_peer
                                                                                  << " without the job's proof; still "
                                                                                     "waiting for that rank");
    }
  }
  close(c->listen_fd);
  c->listen_fd = -1;
  configure(fd);
  std::lock_guard<std::mutex> lock(mu_);
  c->fd = fd;
  return Status::OK();
}

Status TcpHub::connect(int world_peer, const Endpoint& endpoint, std::chrono::milliseconds timeout) {
  auto c = std::make_unique<TcpChannel>();
  c->peer = world_peer;
  const int fd = socket(endpoint.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return sys_error("socket", world_peer);
  c->fd = fd;  // closed with the channel on any failure
  const sockaddr_storage& a = endpoint.address;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), length_of(a)) != 0 && errno != EINPROGRESS) {
    return sys_error("connect", world_peer);
  }
  int err = 0;
  socklen_t len = sizeof(err);
  if (!wait_fd(fd, POLLOUT, timeout) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    return Status::Aborted("transport (gloo, direct tcp): connecting to rank " + std::to_string(world_peer) +
                           " failed: " + (err != 0 ? std::strerror(err) : "timed out"));
  }
  TcpHello hello{};
  hello_proof(secret_, endpoint.nonce, world_peer, world_rank_, hello.proof);
  hello.rank = world_rank_;
  if (!exchange(fd, &hello, sizeof(hello), true, timeout)) return sys_error("greeting", world_peer);
  configure(fd);
  std::lock_guard<std::mutex> lock(mu_);
  channels_[world_peer] = std::move(c);
  return Status::OK();
}

bool TcpHub::has(int world_peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  const TcpChannel* c = channel(world_peer);
  return c != nullptr && c->fd >= 0;
}

Status TcpHub::post(bool send, void* buf, size_t bytes, int peer, int world_peer, uint64_t slot, int tag,
                    RequestPtr* request) {
  auto op = std::make_shared<TcpOp>();
  op->send = send;
  op->peer = world_peer;
  op->tag = tag;
  op->slot = slot;
  op->buf = static_cast<uint8_t*>(buf);
  op->bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TcpChannel* c = channel(world_peer);
    if (c == nullptr || c->fd < 0) {
      return Status::Internal("transport (gloo, direct tcp): no connection to rank " + std::to_string(world_peer));
    }
    if (!c->failed.empty()) {
      op->error = Status::Aborted("transport (gloo, direct tcp): " + op->describe() + " failed: " + c->failed);
      op->complete = true;
    } else if (send) {
      c->sends.push_back(op);
    } else if (std::shared_ptr<TcpEarly> e = pop_first(&c->early, slot)) {
      receive_early(op, e.get());
    } else {
      c->recvs[slot].push_back(op);
    }
    progress_locked();
  }
  *request = std::make_unique<TcpRequest>(shared_from_this(), std::move(op), peer, tag, send);
  return Status::OK();
}

// Still queued: it leaves from a copy.
void TcpHub::abandon_send(TcpChannel*, const std::shared_ptr<TcpOp>& op) {
  op->owned.assign(op->buf, op->buf + op->bytes);
  op->buf = op->owned.data();
}

void TcpHub::fail_channel(TcpChannel* c, const std::string& why) {
  c->failed = why;
  const auto fail = [&](const std::shared_ptr<TcpOp>& op) {
    if (!op || op->complete) return;
    op->error = Status::Aborted("transport (gloo, direct tcp): " + op->describe() + " failed: " + why);
    op->complete = true;
  };
  for (auto& op : c->sends) fail(op);
  for (auto& kv : c->recvs) {
    for (auto& op : kv.second) fail(op);
  }
  fail(c->in_op);  // (only the message arriving can have a claimed receive: claiming takes it off `early`)
  if (c->in_early) fail(c->in_early->claimed);
  c->sends.clear();
  c->recvs.clear();
  c->in_op.reset();
  c->in_early.reset();
  c->parked = false;
}

// The message whose header has come goes straight into its receive when that
// is posted. Otherwise it waits in the socket for its receive (the peer
// usually starts an op a little before this rank posts its receives, and a
// ring posts only a few ahead), unless waiting could hold something up or
// cost more than a copy: a receive for another slot is posted (its message may
// be behind this one), this rank's own sends to the peer are stuck (the peer
// may be waiting for this rank to read), more than kParkQueueBytes wait in the
// socket (a full socket closes the peer's window: large allreduces slowed
// down without that bound, and a smaller bound slowed them too), or it has waited
// park_limit_ (so sends complete without their receive, as MPI's eager ones,
// while the rank is busy elsewhere). Then it is read into a heap copy that its
// receive takes when posted. Reading every message at once (most into copies)
// was slower than waiting (docs/transport.md).
bool TcpHub::place_arriving(TcpChannel* c) {
  if (!meet_receive(&c->recvs, c->in_hdr.slot, c->in_hdr.bytes, &c->in_op)) {
    if (c->sends.empty() && c->recvs.empty() && std::chrono::steady_clock::now() - c->parked_since < park_limit_ &&
        queued_below(c->fd, kParkQueueBytes)) {
      return false;
    }
    c->in_early = std::make_shared<TcpEarly>(&spare_, c->in_hdr.bytes);
    c->early[c->in_hdr.slot].push_back(c->in_early);
    ++early_copies_;
  }
  c->parked = false;
  return true;
}

void TcpHub::progress_channel(TcpChannel* c) {
  if (c->fd < 0 || !c->failed.empty()) return;
  const auto broken = [&](const char* what) {
    fail_channel(c, std::string(what) + " rank " + std::to_string(c->peer) + ": " + std::strerror(errno));
  };
  // Sends, in posting order, as far as the socket takes them.
  while (!c->sends.empty()) {
    TcpOp* op = c->sends.front().get();
    const size_t total = sizeof(TcpHeader) + op->bytes;
    TcpHeader header{op->slot, op->bytes};  // sendmsg copies it
    iovec iov[2];
    int n = 0;
    if (op->written < sizeof(TcpHeader)) {
      iov[n++] = {reinterpret_cast<uint8_t*>(&header) + op->written, sizeof(TcpHeader) - op->written};
    }
    const size_t body = op->written > sizeof(TcpHeader) ? op->written - sizeof(TcpHeader) : 0;
    if (op->bytes > body) iov[n++] = {op->buf + body, op->bytes - body};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return broken("sending to");
    }
    op->written += static_cast<size_t>(w);
    if (op->written < total) break;
    op->complete = true;
    c->sends.pop_front();
  }
  // Reads what has arrived of n bytes into dst (*got grows by the count); a
  // closed or failed connection fails the channel.
  enum class Read { kMoved, kWouldBlock, kBroken };
  const auto read_some = [&](void* dst, size_t n, size_t* got) {
    while (true) {
      const ssize_t r = recv(c->fd, dst, n, MSG_DONTWAIT);
      if (r > 0) {
        *got += static_cast<size_t>(r);
        return Read::kMoved;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Read::kWouldBlock;
      if (r == 0) errno = ECONNRESET;
      broken(r == 0 ? "the connection was closed by" : "receiving from");
      return Read::kBroken;
    }
  };
  // Arrived bytes, message by message (place_arriving: where each goes).
  while (true) {
    if (!c->in_msg) {
      const Read r = read_some(reinterpret_cast<uint8_t*>(&c->in_hdr) + c->in_hdr_got,
                               sizeof(TcpHeader) - c->in_hdr_got, &c->in_hdr_got);
      if (r == Read::kBroken) return;
      if (r == Read::kWouldBlock) break;
      if (c->in_hdr_got < sizeof(TcpHeader)) continue;
      c->in_hdr_got = 0;
      c->in_msg = true;
      c->in_done = 0;
      c->parked = true;
      c->parked_since = std::chrono::steady_clock::now();
    }
    if (c->parked && !place_arriving(c)) break;  // it waits in the socket
    if (c->in_done < c->in_hdr.bytes) {
      size_t want = c->in_hdr.bytes - c->in_done;
      uint8_t* dst = nullptr;
      if (c->in_op) {
        dst = c->in_op->buf + c->in_done;
      } else if (c->in_early) {
        dst = c->in_early->data.data() + c->in_done;
      } else {
        c->sink.resize(size_t{1} << 16);
        want = std::min(want, c->sink.size());
        dst = c->sink.data();
      }
      size_t got = 0;
      const Read r = read_some(dst, want, &got);
      if (r == Read::kBroken) return;
      if (r == Read::kWouldBlock) break;
      c->in_done += got;
      if (c->in_done < c->in_hdr.bytes) continue;
    }
    finish_message(&c->in_op, &c->in_early);
    c->in_msg = false;
  }
}

}  // namespace transport
}  // namespace horovodlite
