// libFuzzer target for the negotiation wire format: decode_requests and
// decode_responses must turn any byte string into either a value or an error
// Status, never a crash, an out-of-bounds read or an unbounded allocation. A
// buffer that decodes must re-encode to exactly the same bytes (the format has
// one encoding per value), which catches decoders that accept garbage silently.
//
// Built two ways: with clang -fsanitize=fuzzer,address (ci/fuzz.sh), and with any
// compiler plus replay_main.cc as a plain regression test over fuzz/corpus (CTest).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "message.h"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_messages: %s\n", what);
    std::abort();
  }
}

}  // namespace

// The first byte picks the decoder; the rest is the message.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace horovodlite;
  if (size == 0) return 0;
  const uint8_t* msg = data + 1;
  const size_t len = size - 1;
  if (data[0] & 1) {
    std::vector<Response> responses;
    if (decode_responses(msg, len, &responses).ok()) {
      std::string again;
      encode_responses(responses, &again);
      check(again.size() == len && std::equal(again.begin(), again.end(), reinterpret_cast<const char*>(msg)),
            "a decoded response list does not re-encode to the same bytes");
    }
  } else {
    std::vector<Request> requests;
    if (decode_requests(msg, len, &requests).ok()) {
      std::string again;
      encode_requests(requests, &again);
      check(again.size() == len && std::equal(again.begin(), again.end(), reinterpret_cast<const char*>(msg)),
            "a decoded request list does not re-encode to the same bytes");
    }
  }
  return 0;
}
