#include "launchers.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace torch {
namespace launchers {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

[[noreturn]] void fail(const std::string& message) {
  throw HorovodError(StatusCode::kInvalidArgument, "horovodlite::torch::init(): " + message);
}

int64_t integer(const char* name, int64_t minimum) {
  const std::string v = env(name);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) fail(std::string(name) + "='" + v + "' is not an integer");
  if (x < minimum) fail(std::string(name) + "=" + v + " must be at least " + std::to_string(minimum));
  return x;
}

// The first host of a Slurm host list ("node[03-05,9],gpu1" -> "node03").
std::string first_slurm_host(const std::string& nodelist) {
  std::string item;
  int depth = 0;
  for (char ch : nodelist) {
    if (ch == ',' && depth == 0) break;
    depth += ch == '[';
    depth -= ch == ']';
    item += ch;
  }
  for (size_t open = item.find('['); open != std::string::npos; open = item.find('[')) {
    const size_t close = item.find(']', open);
    if (close == std::string::npos) break;
    const std::string group = item.substr(open + 1, close - open - 1);
    item = item.substr(0, open) + group.substr(0, group.find_first_of(",-")) + item.substr(close + 1);
  }
  return item;
}

struct World {
  std::string kind, why, addr, node, run_id;
  int64_t rank = 0, size = 1, port = 0, restart = 0;
  bool agent_store = false;
};

bool placed_by_ours_or_mpirun() {
  for (const char* v : {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_RANK", "HOROVODLITE_GLOO_RENDEZVOUS_ADDR",
                        "HOROVODLITE_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (!env(v).empty()) return true;
  }
  return false;
}

// The world the environment names, or false.
bool detect(World* w) {
  const std::string forced = env("HOROVODLITE_LAUNCHER");
  if (forced == "single" || forced == "mpi" || forced == "horovodlite" || placed_by_ours_or_mpirun()) return false;
  const bool has_rank = !env("RANK").empty(), has_size = !env("WORLD_SIZE").empty();
  if ((has_rank || has_size) && forced != "slurm") {
    if (!has_rank || !has_size) {
      fail(std::string(has_rank ? "RANK" : "WORLD_SIZE") + " is set but " + (has_rank ? "WORLD_SIZE" : "RANK") +
           " is not: a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together "
           "(HOROVODLITE_LAUNCHER=single ignores them)");
    }
    w->kind = "torchrun";
    w->rank = integer("RANK", 0);
    w->size = integer("WORLD_SIZE", 1);
    w->why = "torchrun's variables (RANK=" + std::to_string(w->rank) + " WORLD_SIZE=" + std::to_string(w->size) + ")";
    if (w->rank >= w->size) fail("RANK=" + env("RANK") + " is not below WORLD_SIZE=" + env("WORLD_SIZE"));
    if (w->size == 1) return false;
    if (env("MASTER_ADDR").empty() || env("MASTER_PORT").empty()) {
      fail(w->why + " set but " + (env("MASTER_ADDR").empty() ? "MASTER_ADDR" : "MASTER_PORT") +
           " not: rank 0's store is at MASTER_ADDR:MASTER_PORT");
    }
    w->addr = env("MASTER_ADDR");
    w->port = integer("MASTER_PORT", 1);
    w->node = env("GROUP_RANK");
    w->restart = env("TORCHELASTIC_RESTART_COUNT").empty() ? 0 : integer("TORCHELASTIC_RESTART_COUNT", 0);
    w->run_id = env("TORCHELASTIC_RUN_ID").empty() ? "torchrun" : env("TORCHELASTIC_RUN_ID");
    w->agent_store = env("TORCHELASTIC_USE_AGENT_STORE") == "True";
    return true;
  }
  const char* ntasks_var = env("SLURM_STEP_NUM_TASKS").empty() ? "SLURM_NTASKS" : "SLURM_STEP_NUM_TASKS";
  if (env(ntasks_var).empty() || (forced != "" && forced != "slurm" && forced != "auto")) return false;
  w->size = integer(ntasks_var, 1);
  if (w->size == 1) return false;
  if (env("SLURM_STEP_ID").empty() || env("SLURM_PROCID").empty()) {
    fail(std::string(ntasks_var) + "=" + std::to_string(w->size) +
         " but this process is not a task of an srun step (no SLURM_STEP_ID): start it with srun -n " +
         std::to_string(w->size) + ", or set HOROVODLITE_LAUNCHER=single for a world of one");
  }
  w->kind = "slurm";
  w->rank = integer("SLURM_PROCID", 0);
  if (w->rank >= w->size) fail("SLURM_PROCID=" + env("SLURM_PROCID") + " is not below " + ntasks_var);
  std::string nodes = env("SLURM_STEP_NODELIST");
  if (nodes.empty()) nodes = env("SLURM_NODELIST");
  w->addr = env("MASTER_ADDR").empty() ? first_slurm_host(nodes) : env("MASTER_ADDR");
  if (w->addr.empty()) fail("an srun step without MASTER_ADDR, SLURM_STEP_NODELIST or SLURM_NODELIST: nowhere to meet");
  if (!env("MASTER_PORT").empty()) {
    w->port = integer("MASTER_PORT", 1);
  } else {
    std::string digits;
    for (char c : env("SLURM_JOB_ID")) {
      if (c >= '0' && c <= '9') digits += c;
    }
    w->port =
        digits.empty() ? 29500 : 15000 + std::stoll(digits.size() > 4 ? digits.substr(digits.size() - 4) : digits);
  }
  w->node = env("SLURM_NODEID");
  w->run_id = "slurm-" + env("SLURM_JOB_ID") + "." + env("SLURM_STEP_ID");
  w->why = "Slurm's variables (SLURM_PROCID=" + std::to_string(w->rank) + " " + ntasks_var + "=" +
           std::to_string(w->size) + ")";
  return true;
}

std::chrono::milliseconds timeout() {
  for (const char* name : {"HOROVODLITE_GLOO_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS"}) {
    const std::string v = env(name);
    if (v.empty()) continue;
    char* end = nullptr;
    const double s = std::strtod(v.c_str(), &end);
    if (*end != '\0' || !(s > 0)) fail(std::string(name) + "='" + v + "' is not a number of seconds");
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return std::chrono::seconds(30);
}

// Our keys in torch's store, under one prefix per world formed.
class TorchStore : public RendezvousStore {
 public:
  TorchStore(std::shared_ptr<c10d::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}

  Status set(const std::string& key, const std::vector<char>& value) override {
    try {
      store_->set(prefix_ + key, std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception& e) {
      return Status::Aborted("the launcher's store: set '" + prefix_ + key + "': " + e.what());
    }
    return Status::OK();
  }

  Status get(const std::string& key, std::chrono::milliseconds within, std::vector<char>* value) override {
    try {
      store_->wait({prefix_ + key}, within);
      const std::vector<uint8_t> v = store_->get(prefix_ + key);
      value->assign(v.begin(), v.end());
    } catch (const std::exception& e) {
      return Status::Timeout("the launcher's store: '" + prefix_ + key + "' not set within " +
                             std::to_string(within.count()) + " ms: " + e.what());
    }
    return Status::OK();
  }

  c10d::Store& raw() { return *store_; }

 private:
  std::shared_ptr<c10d::Store> store_;
  std::string prefix_;
};

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  const char* override_name = std::getenv("HOROVODLITE_HOSTNAME_OVERRIDE");
  return override_name != nullptr && *override_name != '\0' ? override_name : buf;
}

std::string random_secret() {
  std::random_device random;
  std::string key(32, '\0');
  for (auto& ch : key) ch = static_cast<char>(random() & 0xff);
  return key;
}

std::string secret_from_env() {
  for (const char* name : {"HOROVODLITE_SECRET_KEY", "HOROVOD_SECRET_KEY"}) {
    const std::string hex = env(name);
    if (hex.empty()) continue;
    if (hex.size() < 32 || hex.size() % 2 != 0) fail(std::string(name) + " must be at least 32 hex digits");
    std::string key;
    for (size_t i = 0; i < hex.size(); i += 2) {
      char* end = nullptr;
      const std::string byte = hex.substr(i, 2);
      const long b = std::strtol(byte.c_str(), &end, 16);
      if (*end != '\0') fail(std::string(name) + " is not hex");
      key += static_cast<char>(b);
    }
    return key;
  }
  return "";
}

int generation = 0;

// Which world init() joins, at info level (as Python's init() says it).
void log_joined(const World& w) {
  std::string level = env("HOROVODLITE_LOG_LEVEL");
  if (level.empty()) level = env("HOROVOD_LOG_LEVEL");
  for (auto& c : level) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (level == "trace" || level == "debug" || level == "info") {
    std::fprintf(stderr, "[horovodlite info] horovodlite::torch::init(): joins the %s world (%s)\n", w.kind.c_str(),
                 w.why.c_str());
  }
}

}  // namespace

bool join(InitOptions* options) {
  World w;
  if (!detect(&w)) return false;
  log_joined(w);
  const std::chrono::milliseconds within = timeout();
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(w.port);
  o.isServer = w.rank == 0 && !w.agent_store;
  o.numWorkers = static_cast<int>(w.size);
  o.waitWorkers = false;
  o.timeout = within;
  o.multiTenant = true;  // a later c10d init of this process shares the server
  std::shared_ptr<c10d::Store> tcp;
  try {
    tcp = std::make_shared<c10d::TCPStore>(w.addr, o);
  } catch (const std::exception& e) {
    fail("rank " + std::to_string(w.rank) + " of " + std::to_string(w.size) + " (" + w.why + ") cannot " +
         (o.isServer ? "serve" : "reach") + " the store at MASTER_ADDR:MASTER_PORT=" + w.addr + ":" +
         std::to_string(w.port) + " within " + std::to_string(within.count() / 1000) +
         " s (HOROVOD_GLOO_TIMEOUT_SECONDS): " + e.what());
  }
  ++generation;
  const std::string prefix =
      "horovodlite-cc/" + w.run_id + "/" + std::to_string(w.restart) + "/" + std::to_string(generation) + "/";
  auto store = std::make_shared<TorchStore>(tcp, prefix);
  if (tcp->add(prefix + "claim/" + std::to_string(w.rank), 1) != 1) {
    fail("two processes claim rank " + std::to_string(w.rank) + " of " + std::to_string(w.size) + " (" + w.why +
         "): each rank must be started once");
  }
  std::string secret = secret_from_env();
  if (secret.empty()) {
    // As open as torch.distributed's own store (docs/launchers.md#how-the-ranks-meet).
    std::vector<char> shared;
    if (w.rank == 0) {
      secret = random_secret();
      shared.assign(secret.begin(), secret.end());
      throw_if_error(store->set("secret", shared));
    } else {
      const Status s = store->get("secret", within, &shared);
      if (!s.ok()) {
        fail("rank " + std::to_string(w.rank) + " of " + std::to_string(w.size) + " (" + w.why +
             "): rank 0 did not arrive: " + s.message());
      }
      secret.assign(shared.begin(), shared.end());
    }
  }
  options->store = store;
  options->store_rank = static_cast<int>(w.rank);
  options->store_size = static_cast<int>(w.size);
  // A node is what the launcher calls one (torchrun's GROUP_RANK, SLURM_NODEID).
  options->store_node = hostname() + (w.node.empty() ? "" : "#" + w.node);
  options->store_secret = secret;
  return true;
}

}  // namespace launchers
}  // namespace torch
}  // namespace horovodlite
