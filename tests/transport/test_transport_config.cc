// The Gloo-launch contract's variables in Config::from_env (transport choice,
// validation with errors that name the variable), and the HTTP store client's
// error when the rendezvous server cannot be reached.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "horovodlite/config.h"
#include "transport/http_store.h"

namespace {

using horovodlite::Config;
using horovodlite::Status;
using horovodlite::StatusCode;

// Sets variables for one test and restores the environment after it.
class Env {
 public:
  Env() {
    for (const char* name : kNames) unsetenv(name);
  }
  ~Env() {
    for (const char* name : kNames) unsetenv(name);
  }
  void set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  static constexpr const char* kNames[] = {"HOROVOD_CONTROLLER",
                                           "HOROVODLITE_SECRET_KEY",
                                           "HOROVOD_SECRET_KEY",
                                           "HOROVOD_CPU_OPERATIONS",
                                           "HOROVODLITE_CONTROLLER",
                                           "HOROVOD_RANK",
                                           "HOROVOD_SIZE",
                                           "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                           "HOROVOD_GLOO_RENDEZVOUS_PORT",
                                           "HOROVOD_GLOO_TIMEOUT_SECONDS",
                                           "HOROVOD_HOSTNAME",
                                           "HOROVOD_GLOO_IFACE",
                                           "HOROVODLITE_GLOO_SHM",
                                           "HOROVODLITE_GLOO_TCP",
                                           "OMPI_COMM_WORLD_RANK",
                                           "PMI_RANK",
                                           "PMIX_RANK"};
};

void set_job(Env& env) {
  env.set("HOROVOD_RANK", "1");
  env.set("HOROVOD_SIZE", "2");
  env.set("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1");
  env.set("HOROVOD_GLOO_RENDEZVOUS_PORT", "4242");
  env.set("HOROVODLITE_SECRET_KEY", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
}

// The job's secret: hex of 128 bits or more into raw bytes; required for a Gloo
// job (the store refuses unsigned requests); a malformed one is an error that
// names the variable and never shows the value.
TEST(TransportConfig, TheJobSecretIsRequiredAndNeverShown) {
  {
    Env env;
    set_job(env);
    Config c;
    ASSERT_TRUE(Config::from_env(&c).ok());
    ASSERT_EQ(c.gloo.secret.size(), 32u);
    EXPECT_EQ(static_cast<unsigned char>(c.gloo.secret[1]), 0x11);
    EXPECT_EQ(static_cast<unsigned char>(c.gloo.secret[31]), 0xff);
  }
  for (const char* bad : {"not-hex-but-long-enough-0123456789abcdef", "0011", "abc"}) {
    Env env;
    set_job(env);
    env.set("HOROVODLITE_SECRET_KEY", bad);
    Config c;
    const Status s = Config::from_env(&c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("HOROVODLITE_SECRET_KEY"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find(bad), std::string::npos) << s.message();
  }
  {
    Env env;
    set_job(env);
    unsetenv("HOROVODLITE_SECRET_KEY");
    Config c;
    const Status s = Config::from_env(&c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("needs HOROVODLITE_SECRET_KEY"), std::string::npos) << s.message();
  }
}

TEST(TransportConfig, MpiByDefaultAndGlooWhenAskedOrLaunchedWithoutMpirun) {
  {
    Env env;
    Config c;
    ASSERT_TRUE(Config::from_env(&c).ok());
    EXPECT_EQ(c.transport, Config::Transport::kMpi);
  }
  {
    Env env;
    set_job(env);
    env.set("HOROVOD_CONTROLLER", "gloo");
    env.set("HOROVOD_CPU_OPERATIONS", "GLOO");
    env.set("HOROVOD_HOSTNAME", "host-a");
    env.set("HOROVOD_GLOO_TIMEOUT_SECONDS", "5");
    Config c;
    const Status s = Config::from_env(&c);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(c.transport, Config::Transport::kGloo);
    EXPECT_EQ(c.gloo.rank, 1);
    EXPECT_EQ(c.gloo.size, 2);
    EXPECT_EQ(c.gloo.rendezvous_addr, "127.0.0.1");
    EXPECT_EQ(c.gloo.rendezvous_port, 4242);
    EXPECT_EQ(c.gloo.hostname, "host-a");
    EXPECT_EQ(c.gloo.timeout_s, 5.0);
  }
  {
    Env env;  // the rendezvous address alone, outside mpirun: Gloo
    set_job(env);
    Config c;
    ASSERT_TRUE(Config::from_env(&c).ok());
    EXPECT_EQ(c.transport, Config::Transport::kGloo);
  }
  {
    Env env;  // the same under mpirun: MPI
    set_job(env);
    env.set("OMPI_COMM_WORLD_RANK", "0");
    Config c;
    ASSERT_TRUE(Config::from_env(&c).ok());
    EXPECT_EQ(c.transport, Config::Transport::kMpi);
  }
  {
    Env env;  // the HOROVODLITE_ spelling wins over HOROVOD_
    set_job(env);
    env.set("HOROVOD_CONTROLLER", "gloo");
    env.set("HOROVODLITE_CONTROLLER", "mpi");
    Config c;
    ASSERT_TRUE(Config::from_env(&c).ok());
    EXPECT_EQ(c.transport, Config::Transport::kMpi);
  }
}

// HOROVODLITE_GLOO_SHM: on (single copy for large messages) by default, "copy"
// (the rings only), 0 (TCP); anything else an error naming the variable.
TEST(TransportConfig, SharedMemoryModes) {
  for (const char* value : {"", "1", "copy", "0", "sometimes"}) {
    Env env;
    set_job(env);
    if (*value != '\0') env.set("HOROVODLITE_GLOO_SHM", value);
    Config c;
    const Status s = Config::from_env(&c);
    const std::string v = value;
    if (v == "sometimes") {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("HOROVODLITE_GLOO_SHM"), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(c.gloo.shared_memory, v != "0") << v;
    EXPECT_EQ(c.gloo.shm_single_copy, v != "copy") << v;
  }
}

// HOROVODLITE_GLOO_TCP: "direct" (our own connections) by default, "gloo"
// (Gloo's pairs); anything else an error naming the variable.
TEST(TransportConfig, TcpModes) {
  for (const char* value : {"", "direct", "gloo", "fast"}) {
    Env env;
    set_job(env);
    if (*value != '\0') env.set("HOROVODLITE_GLOO_TCP", value);
    Config c;
    const Status s = Config::from_env(&c);
    const std::string v = value;
    if (v == "fast") {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("'fast' for HOROVODLITE_GLOO_TCP"), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(c.gloo.direct_tcp, v != "gloo") << v;
  }
}

TEST(TransportConfig, BadValuesNameTheVariable) {
  auto error_of = [](const std::vector<std::pair<const char*, const char*>>& vars, bool job) {
    Env env;
    if (job) set_job(env);
    for (const auto& kv : vars) env.set(kv.first, kv.second);
    Config c;
    const Status s = Config::from_env(&c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(error_of({{"HOROVOD_CONTROLLER", "tcp"}}, true).find("HOROVOD_CONTROLLER"), std::string::npos);
  EXPECT_NE(error_of({{"HOROVOD_CONTROLLER", "gloo"}, {"HOROVOD_CPU_OPERATIONS", "mpi"}}, true).find("disagree"),
            std::string::npos);
  const std::string missing = error_of({{"HOROVOD_CONTROLLER", "gloo"}}, false);
  EXPECT_NE(missing.find("HOROVOD_RANK"), std::string::npos) << missing;
  EXPECT_NE(missing.find("HOROVOD_GLOO_RENDEZVOUS_PORT"), std::string::npos) << missing;
  EXPECT_NE(error_of({{"HOROVOD_RANK", "2"}}, true).find("not below HOROVOD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"HOROVOD_GLOO_RENDEZVOUS_PORT", "70000"}}, true).find("HOROVOD_GLOO_RENDEZVOUS_PORT"),
            std::string::npos);
  EXPECT_NE(error_of({{"HOROVOD_GLOO_TIMEOUT_SECONDS", "soon"}}, true).find("HOROVOD_GLOO_TIMEOUT_SECONDS"),
            std::string::npos);
}

TEST(TransportConfig, AnUnreachableRendezvousStoreIsNamed) {
  // Port 1 on loopback: nothing listens there.
  horovodlite::transport::HttpStoreClient client("127.0.0.1", 1, "global", std::chrono::milliseconds(200),
                                                 std::string(32, 'k'));
  std::vector<char> v;
  const Status s = client.get("rank_0", &v);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/global/rank_0"), std::string::npos) << s.message();
}

}  // namespace
