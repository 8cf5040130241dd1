#include "horovodlite/torch/elastic.h"

#include <ATen/core/grad_mode.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "elastic_driver.h"
#include "horovodlite/torch/basics.h"
#include "horovodlite/torch/broadcast.h"
#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"
#include "optimizer_snapshot.h"

namespace horovodlite {
namespace torch {
namespace elastic {
namespace {

// As the Python side (common/elastic.py): the driver is polled every second; a
// worker waits for the next world as long as the driver keeps it waiting (the
// driver ends the job itself after --elastic-timeout).
constexpr std::chrono::milliseconds kPollInterval{1000};
constexpr std::chrono::milliseconds kPollTimeout{5000};
constexpr std::chrono::milliseconds kRendezvousTimeout{24LL * 3600 * 1000};

const char* env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Polls GET /rendezvous/hosts_updated in a background thread and hands news (a
// timestamp newer than the last one seen) to the registered states. Lives for
// one run().
class HostsUpdatedPoller {
 public:
  HostsUpdatedPoller(std::string host, int port) : host_(std::move(host)), port_(port), signer_(detail::job_key()) {
    last_timestamp_ = std::atoll(env_or_empty("HOROVODLITE_ELASTIC_LAST_UPDATE"));
    thread_ = std::thread([this] { loop(); });
  }
  ~HostsUpdatedPoller() { stop(); }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void add_listener(State* state) {
    std::lock_guard<std::mutex> lock(mu_);
    listeners_.insert(state);
  }
  // Updates up to `timestamp` formed the current world: not news.
  void set_baseline(int64_t timestamp) {
    std::lock_guard<std::mutex> lock(mu_);
    last_timestamp_ = std::max(last_timestamp_, timestamp);
  }
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  transport::RequestSigner* signer() { return &signer_; }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, kPollInterval, [this] { return stopping_; })) {
      lock.unlock();
      poll_once();
      lock.lock();
    }
  }
  void poll_once() {
    std::string body;
    std::map<std::string, std::string> news;
    int64_t timestamp = 0, update = 0;
    // The driver busy or gone: the next poll tells.
    if (!detail::http_get(host_, port_, "/rendezvous/hosts_updated", kPollTimeout, &signer_, &body).ok()) return;
    if (!detail::parse_flat_json(body, &news).ok() || !detail::json_int(news, "timestamp", &timestamp).ok()) return;
    if (!detail::json_int(news, "update", &update).ok()) update = 0;
    std::set<State*> listeners;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (timestamp <= last_timestamp_) return;
      last_timestamp_ = timestamp;
      listeners = listeners_;
    }
    for (State* s : listeners) s->on_hosts_updated(timestamp, static_cast<int>(update));
  }

  const std::string host_;
  const int port_;
  transport::RequestSigner signer_;  // thread-safe
  std::mutex mu_;                    // everything below
  std::condition_variable wake_;
  bool stopping_ = false;
  int64_t last_timestamp_ = 0;
  std::set<State*> listeners_;
  std::thread thread_;
};

void set_env(const char* name, const std::string& value) { ::setenv(name, value.c_str(), /*overwrite=*/1); }

// After a reset: asks the driver for this worker's place in the next world
// (blocks until it forms) and puts it into the environment init() reads. A
// worker without a place leaves with exit status 0.
void rendezvous(HostsUpdatedPoller& poller) {
  const std::string host = env_or_empty("HOROVOD_HOSTNAME");
  const std::string local_rank = env_or_empty("HOROVOD_LOCAL_RANK");
  if (host.empty() || local_rank.empty()) {
    throw HorovodError(StatusCode::kPrecondition,
                       "elastic reset: HOROVOD_HOSTNAME/HOROVOD_LOCAL_RANK are not set (was this worker started by "
                       "horovodlite-run in elastic mode?)");
  }
  std::string body;
  Status st = detail::http_get(poller.host(), poller.port(), "/rendezvous/rank_and_size/" + host + ":" + local_rank,
                               kRendezvousTimeout, poller.signer(), &body);
  if (!st.ok()) throw HorovodError(StatusCode::kAborted, "elastic reset: cannot reach the driver: " + st.message());
  std::map<std::string, std::string> info;
  throw_if_error(detail::parse_flat_json(body, &info));
  int64_t rank = -1;
  if (!detail::json_int(info, "rank", &rank).ok() || rank < 0) {
    auto reason = info.find("reason");
    std::fprintf(stderr, "horovodlite: worker %s[%s] leaves the job: %s\n", host.c_str(), local_rank.c_str(),
                 reason != info.end() ? reason->second.c_str() : "no place");
    std::fflush(stderr);
    poller.stop();
    std::exit(0);
  }
  static const std::pair<const char*, const char*> kPlaces[] = {{"HOROVOD_RANK", "rank"},
                                                                {"HOROVOD_SIZE", "size"},
                                                                {"HOROVOD_LOCAL_RANK", "local_rank"},
                                                                {"HOROVOD_LOCAL_SIZE", "local_size"},
                                                                {"HOROVOD_CROSS_RANK", "cross_rank"},
                                                                {"HOROVOD_CROSS_SIZE", "cross_size"},
                                                                {"HOROVODLITE_ELASTIC_GENERATION", "generation"}};
  for (const auto& place : kPlaces) {
    int64_t v = 0;
    throw_if_error(detail::json_int(info, place.second, &v));
    set_env(place.first, std::to_string(v));
  }
  auto scope = info.find("scope");
  if (scope == info.end())
    throw HorovodError(StatusCode::kInvalidArgument, "elastic: the driver's answer has no scope");
  set_env("HOROVODLITE_GLOO_SCOPE", scope->second);
  int64_t last_update = 0;
  if (!detail::json_int(info, "last_update", &last_update).ok()) last_update = 0;
  set_env("HOROVODLITE_ELASTIC_LAST_UPDATE", std::to_string(last_update));
  poller.set_baseline(last_update);
}

// Re-forms the world: shutdown (the old world may be broken), the driver's new
// place in an elastic job, init.
void reset(HostsUpdatedPoller* poller) {
  try {
    shutdown();
  } catch (const std::exception&) {
    // The old world is broken; init() builds a new one.
  }
  if (poller != nullptr) rendezvous(*poller);
  init();
}

// "key=value\n" lines; keys hold no '=' or newline (checked when broadcast).
std::string encode_values(const TorchState::Values& values) {
  std::string out;
  for (const auto& kv : values) out += kv.first + "=" + std::to_string(kv.second) + "\n";
  return out;
}

TorchState::Values decode_values(const std::string& text) {
  TorchState::Values out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.rfind('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = std::stoll(line.substr(eq + 1));
  }
  return out;
}

}  // namespace

bool is_internal_error(const std::exception& e) {
  const auto* h = dynamic_cast<const HorovodError*>(&e);
  if (h == nullptr) return false;
  switch (h->code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kDuplicateName:
    case StatusCode::kUnimplemented:
      return false;
    default:
      return true;
  }
}

bool elastic_enabled() {
  const std::string flag = env_or_empty("HOROVOD_ELASTIC");
  std::string host;
  int port = 0;
  return !flag.empty() && flag != "0" && detail::driver_address(&host, &port);
}

// ---- State -------------------------------------------------------------------------

void State::commit() {
  save();
  check_host_updates();
}

void State::check_host_updates() {
  const int64_t prev_local = last_updated_timestamp_;
  int64_t last = prev_local;
  int all_update = kNoUpdate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!host_messages_.empty()) {
      const auto message = host_messages_.front();
      host_messages_.pop_front();
      if (message.first > last) {
        last = message.first;
        all_update |= message.second;
      }
    }
  }
  // Rank 0's view, so that every rank interrupts (or not) at the same commit.
  at::Tensor view = at::tensor({prev_local, last, static_cast<int64_t>(all_update)}, at::kLong);
  broadcast_(view, 0, "elastic.check_host_updates");
  const int64_t prev = view[0].item<int64_t>();
  last_updated_timestamp_ = view[1].item<int64_t>();
  all_update = static_cast<int>(view[2].item<int64_t>());
  if (last_updated_timestamp_ > prev) throw HostsUpdatedInterrupt(all_update == kRemoved);
}

void State::register_reset_callbacks(const std::vector<std::function<void()>>& callbacks) {
  reset_callbacks_.insert(reset_callbacks_.end(), callbacks.begin(), callbacks.end());
}

void State::on_reset() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    host_messages_.clear();
  }
  reset();
  for (const auto& callback : reset_callbacks_) callback();
}

void State::on_hosts_updated(int64_t timestamp, int update) {
  std::lock_guard<std::mutex> lock(mu_);
  host_messages_.emplace_back(timestamp, update);
}

// ---- TorchState --------------------------------------------------------------------

namespace {

std::vector<std::pair<std::string, at::Tensor>> named_state(const ::torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    out.emplace_back("parameter." + item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true)) out.emplace_back("buffer." + item.key(), item.value());
  return out;
}

}  // namespace

TorchState::TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer* optimizer, Values values)
    : model_(model),
      optimizer_(optimizer),
      values_(std::move(values)),
      saved_optimizer_(std::make_unique<torch::detail::OptimizerSnapshot>()) {
  for (const auto& kv : values_) {
    check_argument(kv.first.find_first_of("=\n") == std::string::npos,
                   "elastic::TorchState: value names must not hold '=' or a newline: '" + kv.first + "'");
  }
  TorchState::save();
}

TorchState::~TorchState() = default;

int64_t TorchState::value(const std::string& key) const {
  auto it = values_.find(key);
  check_argument(it != values_.end(), "elastic::TorchState: no value named '" + key + "'");
  return it->second;
}

void TorchState::add_object(const std::string& name, std::function<std::string()> get,
                            std::function<void(const std::string&)> set) {
  check_argument(get && set, "elastic::TorchState::add_object: get and set must be callable");
  for (const Object& o : objects_) {
    check_argument(o.name != name, "elastic::TorchState::add_object: '" + name + "' was added already");
  }
  objects_.push_back(Object{name, std::move(get), std::move(set), std::string()});
  objects_.back().saved = objects_.back().get();
}

void TorchState::save() {
  at::NoGradGuard no_grad;
  // Copy into the buffers of the last commit where the layout matches (a commit
  // of a large model is then a plain copy), a fresh clone elsewhere.
  std::map<std::string, at::Tensor> previous(saved_tensors_.begin(), saved_tensors_.end());
  saved_tensors_.clear();
  for (const auto& item : named_state(model_)) {
    const at::Tensor& live = item.second;
    if (!live.defined()) continue;
    auto it = previous.find(item.first);
    if (it != previous.end() && it->second.sizes() == live.sizes() && it->second.dtype() == live.dtype() &&
        it->second.device() == live.device() && live.layout() == at::kStrided) {
      horovodlite::torch::detail::copy_into(it->second, live);
      saved_tensors_.emplace_back(item.first, it->second);
    } else {
      saved_tensors_.emplace_back(item.first, live.detach().clone());
    }
  }
  if (optimizer_ != nullptr) saved_optimizer_->save(*optimizer_);
  saved_values_ = values_;
  for (Object& o : objects_) o.saved = o.get();
}

void TorchState::restore() {
  {
    at::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> saved(saved_tensors_.begin(), saved_tensors_.end());
    for (const auto& item : named_state(model_)) {
      auto it = saved.find(item.first);
      if (it != saved.end() && item.second.defined()) item.second.copy_(it->second);
    }
  }
  if (optimizer_ != nullptr) saved_optimizer_->restore(*optimizer_);
  values_ = saved_values_;
  for (Object& o : objects_) o.set(o.saved);
}

void TorchState::sync() {
  broadcast_parameters(model_, 0);
  if (optimizer_ != nullptr) broadcast_optimizer_state(*optimizer_, 0);
  const bool root = rank() == 0;
  const std::string values = broadcast_bytes(encode_values(values_), 0, "elastic.values");
  if (!root) values_ = decode_values(values);
  for (Object& o : objects_) {
    const std::string bytes = broadcast_bytes(root ? o.get() : std::string(), 0, "elastic.object." + o.name);
    if (!root) o.set(bytes);
  }
}

// ---- run ---------------------------------------------------------------------------

void run(State& state, const std::function<void()>& fn) {
  if (!is_initialized()) init();
  std::unique_ptr<HostsUpdatedPoller> poller;
  if (elastic_enabled()) {
    std::string host;
    int port = 0;
    detail::driver_address(&host, &port);
    poller = std::make_unique<HostsUpdatedPoller>(host, port);
    poller->add_listener(&state);
  }
  bool skip_sync = false;
  while (true) {
    try {
      if (!skip_sync) state.sync();
      fn();
      return;
    } catch (const HostsUpdatedInterrupt& e) {
      skip_sync = e.skip_sync();
      std::fprintf(stderr, "horovodlite: elastic: hosts updated; re-forming the world\n");
    } catch (const std::exception& e) {
      if (!is_internal_error(e)) throw;
      std::fprintf(stderr, "horovodlite: elastic: %s; rolling back to the last commit and re-forming the world\n",
                   e.what());
      state.restore();
      skip_sync = false;
    }
    reset(poller.get());
    state.on_reset();
  }
}

}  // namespace elastic
}  // namespace torch
}  // namespace horovodlite
