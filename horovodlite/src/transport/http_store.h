// gloo::rendezvous::Store over the launcher's HTTP key-value store (the
// Gloo-launch contract, docs/elastic.md#the-gloo-launch-contract):
// set = PUT /<scope>/<key>, get = GET polled with a growing back-off until
// present or the timeout (an error naming the key and the address). One short
// connection per request over a plain socket; no HTTP library. Every request
// is signed with the job's secret and every reply checked (transport/auth.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "horovodlite/common.h"
#include "transport/auth.h"

namespace horovodlite {
namespace transport {

// One HTTP/1.1 request over a short connection (Connection: close) to
// host:port, signed by `signer`: *code is the reply's status and *reply (when
// not null) its body. A reply not signed for this request is an error, and so
// is a refusal of the signature (401). `timeout` bounds the connection's sends
// and receives (kTimeout when the peer does not answer in time). Also the
// LibTorch adapter's client of the elastic driver (adapters/torch/src/elastic_driver.cc).
Status http_request(const std::string& host, int port, const std::string& method, const std::string& path,
                    const std::vector<char>* body, std::chrono::milliseconds timeout, RequestSigner* signer, int* code,
                    std::vector<char>* reply);

class HttpStoreClient {
 public:
  // `key`: the job's secret (raw bytes).
  HttpStoreClient(std::string host, int port, std::string scope, std::chrono::milliseconds timeout,
                  const std::string& key);

  Status set(const std::string& key, const std::vector<char>& value);
  // Polls until the key is set or the timeout passes.
  Status get(const std::string& key, std::vector<char>* value);
  // *found false (and OK) when the key is not set.
  Status try_get(const std::string& key, std::vector<char>* value, bool* found);
  Status remove(const std::string& key);

  const std::string& scope() const { return scope_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  // One request; *code is the HTTP status.
  Status request(const char* method, const std::string& key, const std::vector<char>* body, int* code,
                 std::vector<char>* reply);

  std::string host_;
  int port_;
  std::string scope_;
  std::chrono::milliseconds timeout_;
  RequestSigner signer_;
};

}  // namespace transport
}  // namespace horovodlite
