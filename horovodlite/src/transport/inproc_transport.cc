#include "transport/inproc_transport.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

namespace horovodlite {
namespace transport {

namespace {

struct Completion {
  std::atomic<bool> done{false};
  Status error;  // written before done is set
};

struct Posted {
  void* buf;  // the send's data (const in fact) or the receive's destination
  size_t bytes;
  std::shared_ptr<Completion> completion;
};

// (channel, source, destination, tag)
using Key = std::tuple<int, int, int, int>;

}  // namespace

struct InProcWorldState {
  std::mutex mu;
  std::map<Key, std::deque<Posted>> sends;  // posted, not yet matched
  std::map<Key, std::deque<Posted>> recvs;
  // Channels of splits: (parent channel, name, ranks) -> one channel per use.
  std::map<std::string, std::vector<int>> split_channels;
  int next_channel = 1;

  // Matches a send with a receive: copies and completes both.
  static void match(const Posted& send, const Posted& recv) {
    if (send.bytes != recv.bytes) {
      send.completion->error = size_mismatch(send.bytes, recv.bytes);
      recv.completion->error = send.completion->error;
    } else if (send.bytes > 0) {
      std::memcpy(recv.buf, send.buf, send.bytes);
    }
    send.completion->done.store(true, std::memory_order_release);
    recv.completion->done.store(true, std::memory_order_release);
  }
};

namespace {

class InProcRequest : public Request {
 public:
  InProcRequest(std::shared_ptr<Completion> c, int peer, int tag, bool send)
      : Request(peer, tag, send), completion_(std::move(c)) {}
  ~InProcRequest() override {
    // The peer may still copy from or into the buffer: wait (tests only).
    while (!completion_->done.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Status test(bool* done) override {
    *done = completion_->done.load(std::memory_order_acquire);
    if (*done && !completion_->error.ok()) return completion_->error;
    return Status::OK();
  }

 private:
  std::shared_ptr<Completion> completion_;
};

class InProcContext : public Context {
 public:
  InProcContext(std::shared_ptr<InProcWorldState> world, int channel, int rank, int size, Topology topology,
                std::vector<int> world_ranks)
      : Context(rank, size, std::move(topology), std::move(world_ranks)), world_(std::move(world)), channel_(channel) {}

  const char* kind() const override { return "inproc"; }

  Status isend(const void* buf, size_t bytes, int peer, int tag, RequestPtr* request) override {
    return post(true, const_cast<void*>(buf), bytes, peer, tag, request);
  }
  Status irecv(void* buf, size_t bytes, int peer, int tag, RequestPtr* request) override {
    return post(false, buf, bytes, peer, tag, request);
  }

  Status split(const std::vector<int>& ranks, const std::string& name, std::shared_ptr<Context>* out) override {
    int me = -1;
    std::string key = std::to_string(channel_) + "/" + name + "/";
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size_) {
        return Status::InvalidArgument("transport: split over rank " + std::to_string(ranks[i]));
      }
      if (ranks[i] == rank_) me = static_cast<int>(i);
      key += std::to_string(ranks[i]) + ",";
    }
    if (me < 0) return Status::InvalidArgument("transport: split '" + name + "' without this rank");
    const int use = uses_[key]++;
    int channel = 0;
    {
      std::lock_guard<std::mutex> lock(world_->mu);
      std::vector<int>& ids = world_->split_channels[key];
      while (static_cast<int>(ids.size()) <= use) ids.push_back(world_->next_channel++);
      channel = ids[static_cast<size_t>(use)];
    }
    std::vector<int> world_ranks;
    for (int r : ranks) world_ranks.push_back(world_rank(r));
    *out = std::make_shared<InProcContext>(world_, channel, me, static_cast<int>(ranks.size()),
                                           sub_topology(topology_, ranks), world_ranks);
    return Status::OK();
  }

 private:
  Status post(bool send, void* buf, size_t bytes, int peer, int tag, RequestPtr* request) {
    if (peer < 0 || peer >= size_) {
      return Status::InvalidArgument("transport: peer " + std::to_string(peer) + " outside [0, " +
                                     std::to_string(size_) + ")");
    }
    if (tag < 0 || tag > kMaxTag) return Status::InvalidArgument("transport: tag " + std::to_string(tag));
    Posted mine{buf, bytes, std::make_shared<Completion>()};
    const Key key = send ? Key{channel_, rank_, peer, tag} : Key{channel_, peer, rank_, tag};
    {
      std::lock_guard<std::mutex> lock(world_->mu);
      auto& other = send ? world_->recvs : world_->sends;
      auto it = other.find(key);
      if (it != other.end() && !it->second.empty()) {
        const Posted theirs = it->second.front();
        it->second.pop_front();
        if (send) {
          InProcWorldState::match(mine, theirs);
        } else {
          InProcWorldState::match(theirs, mine);
        }
      } else {
        (send ? world_->sends : world_->recvs)[key].push_back(mine);
      }
    }
    *request = std::make_unique<InProcRequest>(mine.completion, peer, tag, send);
    return Status::OK();
  }

  std::shared_ptr<InProcWorldState> world_;
  int channel_;
  std::map<std::string, int> uses_;
};

}  // namespace

std::vector<ContextPtr> make_inproc_world(int size, Topology topology) {
  auto world = std::make_shared<InProcWorldState>();
  if (topology.host.size() != static_cast<size_t>(size)) topology = Topology::single_host(size);
  std::vector<int> world_ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) world_ranks[static_cast<size_t>(r)] = r;
  std::vector<ContextPtr> out;
  for (int r = 0; r < size; ++r) {
    out.push_back(std::make_shared<InProcContext>(world, 0, r, size, topology, world_ranks));
  }
  return out;
}

void run_inproc_ranks(int size, const std::function<void(Context&)>& fn, Topology topology) {
  std::vector<ContextPtr> contexts = make_inproc_world(size, std::move(topology));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&fn, &contexts, r] { fn(*contexts[static_cast<size_t>(r)]); });
  for (std::thread& t : threads) t.join();
}

}  // namespace transport
}  // namespace horovodlite
