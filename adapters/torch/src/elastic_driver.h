// The worker's side of the elastic driver's HTTP protocol
// (python/horovodlite/runner/elastic/driver.py): a plain GET over one short
// connection, and the driver's answers, flat JSON objects of numbers and
// strings. Private to the adapter.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "horovodlite/common.h"
#include "transport/auth.h"

namespace horovodlite {
namespace torch {
namespace elastic {
namespace detail {

// The driver's address from HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT; false if unset.
bool driver_address(std::string* host, int* port);

// The job's secret from HOROVODLITE_SECRET_KEY (raw bytes; empty when unset or
// malformed: the driver then refuses the requests, and http_get says so).
std::string job_key();

// GET `path` from the driver at host:port, signed by `signer` (the reply
// checked); *body is the reply's body. An error status (naming the address and
// the path) when the driver cannot be reached, does not answer within
// `timeout`, refuses the signature, or answers other than 200.
Status http_get(const std::string& host, int port, const std::string& path, std::chrono::milliseconds timeout,
                transport::RequestSigner* signer, std::string* body);

// A flat JSON object ({"k": 1, "s": "text", "n": null}) as key -> text (strings
// unescaped, numbers and literals as written). InvalidArgument on anything else.
Status parse_flat_json(const std::string& text, std::map<std::string, std::string>* out);

// *value = the integer at `key`; InvalidArgument naming the key if missing or not one.
Status json_int(const std::map<std::string, std::string>& object, const std::string& key, int64_t* value);

}  // namespace detail
}  // namespace elastic
}  // namespace torch
}  // namespace horovodlite
