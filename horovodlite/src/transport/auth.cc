#include "transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <chrono>
#include <random>

namespace horovodlite {
namespace transport {

std::string hmac_sha256(const std::string& key, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
       message.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string to_hex(const std::string& bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

std::string sha256_hex(const char* data, size_t n) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, n, out, &len, EVP_sha256(), nullptr);
  return to_hex(std::string(reinterpret_cast<const char*>(out), len));
}

Status parse_secret_hex(const std::string& hex, const std::string& var, std::string* key) {
  const auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  bool ok = hex.size() % 2 == 0 && hex.size() >= 32;
  for (size_t i = 0; ok && i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    ok = hi >= 0 && lo >= 0;
    out += static_cast<char>(hi * 16 + lo);
  }
  if (!ok) {
    return Status::InvalidArgument(var + " must be an even number of hex digits, at least 32 (128 bits); it has " +
                                   std::to_string(hex.size()) + " characters");
  }
  *key = std::move(out);
  return Status::OK();
}

namespace {

std::string random_hex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&raw[0]), static_cast<int>(bytes)) != 1) {
    std::random_device rd;
    for (char& c : raw) c = static_cast<char>(rd());
  }
  return to_hex(raw);
}

std::string join(std::initializer_list<std::string> fields) {
  std::string out;
  for (const std::string& f : fields) {
    if (!out.empty()) out += '\n';
    out += f;
  }
  return out;
}

}  // namespace

RequestSigner::RequestSigner(std::string key) : key_(std::move(key)), client_(random_hex(8)) {}

RequestSigner::Signed RequestSigner::sign(const std::string& method, const std::string& path, const char* body,
                                          size_t n) {
  const uint64_t counter = counter_.fetch_add(1) + 1;
  const auto stamp =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string digest = sha256_hex(body, n);
  Signed s;
  s.mac = to_hex(hmac_sha256(key_, join({"hvl1-req", method, path, client_, std::to_string(counter),
                                         std::to_string(stamp), std::to_string(n), digest})));
  s.header = "v1 " + client_ + " " + std::to_string(counter) + " " + std::to_string(stamp) + " " + digest + " " + s.mac;
  return s;
}

bool RequestSigner::reply_ok(const std::string& request_mac, int status, const std::string& header, const char* body,
                             size_t n) const {
  const std::string want =
      to_hex(hmac_sha256(key_, join({"hvl1-rep", request_mac, std::to_string(status), sha256_hex(body, n)})));
  return header.size() == want.size() && CRYPTO_memcmp(header.data(), want.data(), want.size()) == 0;
}

}  // namespace transport
}  // namespace horovodlite
