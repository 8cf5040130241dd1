// The client's side of the control plane's authentication, the same macs as
// python/horovodlite/runner/secret.py computes (that file explains the scheme):
// every request to the launcher's store is signed with the job's secret
// (HOROVODLITE_SECRET_KEY), and a reply counts only when it is signed for that
// request. Also the direct TCP handshake's proof (gloo_tcp_direct.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "horovodlite/common.h"

namespace horovodlite {
namespace transport {

constexpr const char* kAuthHeader = "X-HVL-Auth";

// HMAC-SHA256 of `message` under `key`: the 32 raw bytes.
std::string hmac_sha256(const std::string& key, const std::string& message);
std::string to_hex(const std::string& bytes);
std::string sha256_hex(const char* data, size_t n);

// The key bytes of a hex secret of at least 128 bits; an error naming `var`
// (never the value) otherwise.
Status parse_secret_hex(const std::string& hex, const std::string& var, std::string* key);

class RequestSigner {
 public:
  // A random client id; counters start at 1 and never repeat.
  explicit RequestSigner(std::string key);

  struct Signed {
    std::string header;  // the X-HVL-Auth value
    std::string mac;     // what the reply's mac covers
  };
  Signed sign(const std::string& method, const std::string& path, const char* body, size_t n);
  bool reply_ok(const std::string& request_mac, int status, const std::string& header, const char* body,
                size_t n) const;
  bool has_key() const { return !key_.empty(); }

 private:
  std::string key_;
  std::string client_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace transport
}  // namespace horovodlite
