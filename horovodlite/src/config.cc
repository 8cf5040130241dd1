#include "horovodlite/config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "thread_affinity.h"
#include "transport/auth.h"
#include "transport/world.h"

namespace horovodlite {

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kFatal:
      return "fatal";
  }
  return "?";
}

namespace {

// Returns the value of HOROVODLITE_<name>, else HOROVOD_<name>, else nullptr;
// *var receives the variable's full name for error messages.
const char* lookup(const std::string& name, std::string* var) {
  for (const char* prefix : {"HOROVODLITE_", "HOROVOD_"}) {
    std::string full = prefix + name;
    const char* v = std::getenv(full.c_str());
    if (v != nullptr) {
      *var = full;
      return v;
    }
  }
  return nullptr;
}

Status bad(const std::string& var, const char* value, const std::string& expected) {
  return Status::InvalidArgument("invalid value '" + std::string(value) + "' for " + var + ": expected " + expected);
}

Status read_int(const std::string& name, int64_t min, int64_t max, int64_t* out) {
  std::string var;
  const char* v = lookup(name, &var);
  if (v == nullptr) return Status::OK();
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < min || x > max) {
    return bad(var, v, "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = x;
  return Status::OK();
}

Status read_double(const std::string& name, double min, double max, double* out) {
  std::string var;
  const char* v = lookup(name, &var);
  if (v == nullptr) return Status::OK();
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (*v == '\0' || *end != '\0' || errno != 0 || !std::isfinite(x) || x < min || x > max) {
    return bad(var, v, "a number in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = x;
  return Status::OK();
}

Status read_log_level(LogLevel* out) {
  std::string var;
  const char* v = lookup("LOG_LEVEL", &var);
  if (v == nullptr) return Status::OK();
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i <= static_cast<int>(LogLevel::kFatal); ++i) {
    if (s == log_level_name(static_cast<LogLevel>(i))) {
      *out = static_cast<LogLevel>(i);
      return Status::OK();
    }
  }
  return bad(var, v, "one of trace, debug, info, warning, error, fatal");
}

Status read_bool(const std::string& name, bool* out) {
  std::string var;
  const char* v = lookup(name, &var);
  if (v == nullptr) return Status::OK();
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "0" || s == "false" || s == "no" || s == "off" || s.empty()) {
    *out = false;
  } else {
    return bad(var, v, "0 or 1 (or true/false, yes/no, on/off)");
  }
  return Status::OK();
}

void read_string(const std::string& name, std::string* out) {
  std::string var;
  const char* v = lookup(name, &var);
  if (v != nullptr) *out = v;
}

// "mpi" or "gloo" from HOROVOD_<name>; *set false when absent.
Status read_transport_name(const char* name, Config::Transport* out, bool* set, std::string* var) {
  const char* v = lookup(name, var);
  *set = v != nullptr;
  if (v == nullptr) return Status::OK();
  std::string s(v);
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "mpi") {
    *out = Config::Transport::kMpi;
  } else if (s == "gloo") {
    *out = Config::Transport::kGloo;
  } else {
    return bad(*var, v, "mpi or gloo");
  }
  return Status::OK();
}

// Never a silent world of one: why a process that another launcher started as
// one of several (torchrun, Slurm's srun) and that no horovodlite launcher or
// mpirun placed cannot join ("" when it is not one). Python's init() joins
// those worlds itself (python/horovodlite/common/launchers.py) and sets the
// Gloo-launch contract's variables before the core reads them; the LibTorch
// adapter's init() gives the core a store's world (InitOptions::store).
std::string launcher_refusal() {
  const char* forced = std::getenv("HOROVODLITE_LAUNCHER");
  if (forced != nullptr && std::string(forced) == "single") return "";
  auto value = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? "" : v;
  };
  auto many = [](const std::string& v) { return !v.empty() && std::strtoll(v.c_str(), nullptr, 10) > 1; };
  std::string seen;
  if (many(value("WORLD_SIZE"))) {
    seen = "torchrun's WORLD_SIZE=" + value("WORLD_SIZE") + " RANK=" + value("RANK");
  } else if (!value("SLURM_STEP_ID").empty() &&
             many(value("SLURM_STEP_NUM_TASKS").empty() ? value("SLURM_NTASKS") : value("SLURM_STEP_NUM_TASKS"))) {
    seen = "Slurm's srun step (SLURM_PROCID=" + value("SLURM_PROCID") + " SLURM_NTASKS=" + value("SLURM_NTASKS") + ")";
  } else {
    return "";
  }
  return "init: this process is one of several started by " + seen +
         ", which a C++ program of the core alone does not join: start it with horovodlite-run (--gloo for no "
         "MPI) or mpirun, or use the LibTorch adapter's or Python's init(), which join it, or set "
         "HOROVODLITE_LAUNCHER=single for a world of one";
}

Status read_transport(Config* c) {
  Config::Transport controller = Config::Transport::kMpi, cpu_ops = Config::Transport::kMpi;
  bool controller_set = false, cpu_ops_set = false;
  std::string controller_var, cpu_ops_var;
  HVL_RETURN_IF_ERROR(read_transport_name("CONTROLLER", &controller, &controller_set, &controller_var));
  HVL_RETURN_IF_ERROR(read_transport_name("CPU_OPERATIONS", &cpu_ops, &cpu_ops_set, &cpu_ops_var));
  if (controller_set && cpu_ops_set && controller != cpu_ops) {
    return Status::InvalidArgument(controller_var + " and " + cpu_ops_var +
                                   " disagree: horovodlite runs the negotiation and the collectives on one "
                                   "transport (set both to mpi or both to gloo)");
  }
  std::string var;
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr || std::getenv("PMI_RANK") != nullptr ||
                            std::getenv("PMIX_RANK") != nullptr;
  if (controller_set) {
    c->transport = controller;
  } else if (cpu_ops_set) {
    c->transport = cpu_ops;
  } else {
    c->transport = lookup("GLOO_RENDEZVOUS_ADDR", &var) != nullptr && !under_mpirun ? Config::Transport::kGloo
                                                                                    : Config::Transport::kMpi;
  }
  if (c->transport != Config::Transport::kGloo) {
    if (controller_set || cpu_ops_set || under_mpirun) return Status::OK();
    c->launcher_refusal = launcher_refusal();
    if (!c->launcher_refusal.empty()) return Status::OK();  // init() refuses unless given a store's world
    // A world of one inside an srun step (srun -n 1, or HOROVODLITE_LAUNCHER=single):
    // an Open MPI without Slurm's PMI aborts in MPI_Init when it sees the step.
    // Gloo with one rank needs no launcher: an in-process store, a fresh secret.
    if (std::getenv("SLURM_STEP_ID") == nullptr || !transport::gloo_transport_built()) return Status::OK();
    c->transport = Config::Transport::kGloo;
    c->gloo.rank = 0;
    c->gloo.size = 1;
    std::random_device random;
    c->gloo.secret.resize(32);
    for (auto& ch : c->gloo.secret) ch = static_cast<char>(random() & 0xff);
    return Status::OK();
  }
  Config::GlooJob& g = c->gloo;
  const int64_t kMaxRanks = 1 << 24;
  HVL_RETURN_IF_ERROR(read_int("SIZE", 1, kMaxRanks, &g.size));
  HVL_RETURN_IF_ERROR(read_int("RANK", 0, kMaxRanks - 1, &g.rank));
  HVL_RETURN_IF_ERROR(read_int("LOCAL_RANK", 0, kMaxRanks - 1, &g.local_rank));
  HVL_RETURN_IF_ERROR(read_int("LOCAL_SIZE", 1, kMaxRanks, &g.local_size));
  HVL_RETURN_IF_ERROR(read_int("CROSS_RANK", 0, kMaxRanks - 1, &g.cross_rank));
  HVL_RETURN_IF_ERROR(read_int("CROSS_SIZE", 1, kMaxRanks, &g.cross_size));
  HVL_RETURN_IF_ERROR(read_int("GLOO_RENDEZVOUS_PORT", 1, 65535, &g.rendezvous_port));
  HVL_RETURN_IF_ERROR(read_double("GLOO_TIMEOUT_SECONDS", 0.001, 86400.0, &g.timeout_s));
  read_string("HOSTNAME", &g.hostname);
  read_string("GLOO_RENDEZVOUS_ADDR", &g.rendezvous_addr);
  read_string("GLOO_IFACE", &g.iface);
  read_string("GLOO_SCOPE", &g.scope);
  std::string secret_var;
  if (const char* secret = lookup("SECRET_KEY", &secret_var)) {
    HVL_RETURN_IF_ERROR(transport::parse_secret_hex(secret, secret_var, &g.secret));
  }
  std::string shm_var;
  const char* shm = lookup("GLOO_SHM", &shm_var);
  if (shm != nullptr && std::string(shm) == "copy") {
    g.shm_single_copy = false;  // shared memory, every message through the rings
  } else {
    HVL_RETURN_IF_ERROR(read_bool("GLOO_SHM", &g.shared_memory));
  }
  std::string tcp_var;
  if (const char* tcp = lookup("GLOO_TCP", &tcp_var)) {
    const std::string v = tcp;
    if (v != "gloo" && v != "direct") return bad(tcp_var, tcp, "gloo or direct");
    g.direct_tcp = v == "direct";
  }
  if (g.scope.empty()) g.scope = "global";
  const char* why = controller_set || cpu_ops_set ? "HOROVOD_CONTROLLER/HOROVOD_CPU_OPERATIONS=gloo"
                                                  : "HOROVOD_GLOO_RENDEZVOUS_ADDR set outside mpirun";
  std::string missing;
  if (g.rank < 0) missing += " HOROVOD_RANK";
  if (g.size < 0) missing += " HOROVOD_SIZE";
  if (g.rendezvous_addr.empty()) missing += " HOROVOD_GLOO_RENDEZVOUS_ADDR";
  if (g.rendezvous_port == 0) missing += " HOROVOD_GLOO_RENDEZVOUS_PORT";
  if (g.secret.empty()) missing += " HOROVODLITE_SECRET_KEY";
  if (!missing.empty()) {
    return Status::InvalidArgument(std::string("a Gloo job (") + why + ") needs" + missing +
                                   " (start it with horovodlite-run --gloo, or under mpirun for MPI)");
  }
  if (g.rank >= g.size) {
    return Status::InvalidArgument("HOROVOD_RANK " + std::to_string(g.rank) + " is not below HOROVOD_SIZE " +
                                   std::to_string(g.size));
  }
  return Status::OK();
}

// HIERARCHICAL_ALLREDUCE and HIERARCHICAL_ALLGATHER: on, off, or (unset or
// empty) auto.
Status read_hierarchical(Config* c) {
  for (auto [name, field] : {std::make_pair("HIERARCHICAL_ALLREDUCE", &c->hierarchical_allreduce),
                             std::make_pair("HIERARCHICAL_ALLGATHER", &c->hierarchical_allgather)}) {
    bool hierarchical = false;
    std::string var;
    const char* v = lookup(name, &var);
    if (v != nullptr && *v != '\0') {  // unset or empty: auto
      HVL_RETURN_IF_ERROR(read_bool(name, &hierarchical));
      *field = hierarchical ? Config::Hierarchical::kOn : Config::Hierarchical::kOff;
    }
  }
  return Status::OK();
}

// AUTOTUNE_START: where tuning starts, a comma-separated list of NAME=VALUE;
// each value is validated as that variable would be.
Status read_autotune_start(Config* c) {
  read_string("AUTOTUNE_START", &c->autotune_start);
  if (c->autotune_start.empty()) return Status::OK();
  size_t begin = 0;
  while (begin <= c->autotune_start.size()) {
    size_t end = c->autotune_start.find(',', begin);
    if (end == std::string::npos) end = c->autotune_start.size();
    const std::string item = c->autotune_start.substr(begin, end - begin);
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const std::string var = "HOROVODLITE_AUTOTUNE_START";
    char* rest = nullptr;
    errno = 0;
    if (name == "FUSION_THRESHOLD" || name == "EAGER_ALLREDUCE_BYTES") {
      const long long v = std::strtoll(value.c_str(), &rest, 10);
      const long long max = name == "FUSION_THRESHOLD" ? (1ll << 40) : (1ll << 20);
      if (value.empty() || *rest != '\0' || errno != 0 || v < 0 || v > max)
        return bad(var, c->autotune_start.c_str(), name + "=<bytes, 0.." + std::to_string(max) + ">");
      (name == "FUSION_THRESHOLD" ? c->fusion_threshold_bytes : c->eager_allreduce_bytes) = v;
    } else if (name == "CYCLE_TIME") {
      const double v = std::strtod(value.c_str(), &rest);
      if (value.empty() || *rest != '\0' || errno != 0 || !(v > 0.0 && v <= 10000.0))
        return bad(var, c->autotune_start.c_str(), "CYCLE_TIME=<milliseconds, > 0 and <= 10000>");
      c->cycle_time_ms = v;
    } else if (name == "HIERARCHICAL_ALLREDUCE" || name == "HIERARCHICAL_ALLGATHER") {
      if (value != "0" && value != "1") return bad(var, c->autotune_start.c_str(), name + "=<0 or 1>");
      (name == "HIERARCHICAL_ALLREDUCE" ? c->hierarchical_allreduce : c->hierarchical_allgather) =
          value == "1" ? Config::Hierarchical::kOn : Config::Hierarchical::kOff;
    } else {
      return bad(var, c->autotune_start.c_str(),
                 "a comma-separated list of FUSION_THRESHOLD=, CYCLE_TIME=, EAGER_ALLREDUCE_BYTES=, "
                 "HIERARCHICAL_ALLREDUCE= or HIERARCHICAL_ALLGATHER= values");
    }
    begin = end + 1;
  }
  return Status::OK();
}

// Which of the tunable settings the user fixed (the autotuner leaves those alone).
void note_user_set(Config* c) {
  std::string var;
  c->user_set.fusion_threshold = lookup("FUSION_THRESHOLD", &var) != nullptr;
  c->user_set.cycle_time = lookup("CYCLE_TIME", &var) != nullptr;
  c->user_set.eager_allreduce_bytes = lookup("EAGER_ALLREDUCE_BYTES", &var) != nullptr;
  c->user_set.hierarchical_allreduce = c->hierarchical_allreduce != Config::Hierarchical::kAuto;
  c->user_set.hierarchical_allgather = c->hierarchical_allgather != Config::Hierarchical::kAuto;
  // A value in AUTOTUNE_START is where tuning starts, not a fixed setting.
  const std::string start = "," + c->autotune_start;
  if (start.find(",FUSION_THRESHOLD=") != std::string::npos) c->user_set.fusion_threshold = false;
  if (start.find(",CYCLE_TIME=") != std::string::npos) c->user_set.cycle_time = false;
  if (start.find(",EAGER_ALLREDUCE_BYTES=") != std::string::npos) c->user_set.eager_allreduce_bytes = false;
  if (start.find(",HIERARCHICAL_ALLREDUCE=") != std::string::npos) c->user_set.hierarchical_allreduce = false;
  if (start.find(",HIERARCHICAL_ALLGATHER=") != std::string::npos) c->user_set.hierarchical_allgather = false;
}

// GPU_OPERATIONS: nccl or mpi.
Status read_gpu_operations(Config* c) {
  std::string var;
  if (const char* v = lookup("GPU_OPERATIONS", &var)) {
    std::string s(v);
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "nccl")
      c->gpu_operations = Config::GpuOperations::kNccl;
    else if (s == "mpi")
      c->gpu_operations = Config::GpuOperations::kMpi;
    else
      return bad(var, v, "nccl or mpi");
  }
  return Status::OK();
}

}  // namespace

Status Config::from_env(Config* out) {
  Config c;
  HVL_RETURN_IF_ERROR(read_int("FUSION_THRESHOLD", 0, int64_t(1) << 40, &c.fusion_threshold_bytes));
  HVL_RETURN_IF_ERROR(read_bool("DISABLE_GROUP_FUSION", &c.disable_group_fusion));
  HVL_RETURN_IF_ERROR(read_double("CYCLE_TIME", 0.0, 10000.0, &c.cycle_time_ms));
  HVL_RETURN_IF_ERROR(read_int("CACHE_CAPACITY", 0, 1 << 20, &c.cache_capacity));
  HVL_RETURN_IF_ERROR(read_int("EAGER_ALLREDUCE_BYTES", 0, 1 << 20, &c.eager_allreduce_bytes));
  HVL_RETURN_IF_ERROR(read_log_level(&c.log_level));
  HVL_RETURN_IF_ERROR(read_int("RING_THRESHOLD", -1, int64_t(1) << 50, &c.ring_threshold_bytes));
  HVL_RETURN_IF_ERROR(read_int("RING_SEGMENT_BYTES", 64, int64_t(1) << 30, &c.ring_segment_bytes));
  HVL_RETURN_IF_ERROR(read_bool("STALL_CHECK_DISABLE", &c.stall_check_disable));
  HVL_RETURN_IF_ERROR(read_double("STALL_CHECK_TIME_SECONDS", 0.001, 1e7, &c.stall_check_time_s));
  HVL_RETURN_IF_ERROR(read_double("STALL_SHUTDOWN_TIME_SECONDS", 0.0, 1e7, &c.stall_shutdown_time_s));
  read_string("TIMELINE", &c.timeline_path);
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: no timeline from init(); start_timeline() later.
  if (c.timeline_path == "DYNAMIC") c.timeline_path.clear();
  HVL_RETURN_IF_ERROR(read_bool("TIMELINE_MARK_CYCLES", &c.timeline_mark_cycles));
  HVL_RETURN_IF_ERROR(read_double("PEER_TIMEOUT_SECONDS", 0.0, 1e7, &c.peer_timeout_s));
  HVL_RETURN_IF_ERROR(read_bool("DYNAMIC_PROCESS_SETS", &c.dynamic_process_sets));
  HVL_RETURN_IF_ERROR(read_bool("KEEP_FREED_MEMORY", &c.keep_freed_memory));
  HVL_RETURN_IF_ERROR(read_bool("HUGE_PAGE_INPUTS", &c.huge_page_inputs));
  if (const char* v = lookup("THREAD_AFFINITY", &c.thread_affinity_var)) {
    c.thread_affinity = v;
    ThreadAffinity parsed;
    HVL_RETURN_IF_ERROR(parse_thread_affinity(c.thread_affinity_var, c.thread_affinity, &parsed));
  }
  HVL_RETURN_IF_ERROR(read_hierarchical(&c));
  HVL_RETURN_IF_ERROR(read_bool("AUTOTUNE", &c.autotune));
  read_string("AUTOTUNE_LOG", &c.autotune_log);
  HVL_RETURN_IF_ERROR(read_int("AUTOTUNE_WARMUP_SAMPLES", 0, 1000, &c.autotune_warmup_samples));
  HVL_RETURN_IF_ERROR(read_int("AUTOTUNE_STEPS_PER_SAMPLE", 1, 100000, &c.autotune_steps_per_sample));
  HVL_RETURN_IF_ERROR(read_int("AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1, 1000, &c.autotune_bayes_opt_max_samples));
  HVL_RETURN_IF_ERROR(read_double("AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 1e-9, 1e3, &c.autotune_gaussian_process_noise));
  HVL_RETURN_IF_ERROR(read_autotune_start(&c));
  note_user_set(&c);
  HVL_RETURN_IF_ERROR(read_gpu_operations(&c));
  HVL_RETURN_IF_ERROR(read_transport(&c));
  *out = c;
  return Status::OK();
}

}  // namespace horovodlite
