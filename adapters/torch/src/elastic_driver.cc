#include "elastic_driver.h"

#include <cctype>
#include <cstdlib>
#include <vector>

#include "transport/http_store.h"

namespace horovodlite {
namespace torch {
namespace elastic {
namespace detail {
namespace {

void skip_space(const std::string& s, size_t* i) {
  while (*i < s.size() && std::isspace(static_cast<unsigned char>(s[*i]))) ++*i;
}

// A JSON string at s[*i] (the opening quote), unescaped (\uXXXX below 0x80 only).
bool parse_string(const std::string& s, size_t* i, std::string* out) {
  if (*i >= s.size() || s[*i] != '"') return false;
  ++*i;
  out->clear();
  while (*i < s.size()) {
    const char c = s[(*i)++];
    if (c == '"') return true;
    if (c != '\\') {
      *out += c;
      continue;
    }
    if (*i >= s.size()) return false;
    const char e = s[(*i)++];
    switch (e) {
      case '"':
      case '\\':
      case '/':
        *out += e;
        break;
      case 'b':
        *out += '\b';
        break;
      case 'f':
        *out += '\f';
        break;
      case 'n':
        *out += '\n';
        break;
      case 'r':
        *out += '\r';
        break;
      case 't':
        *out += '\t';
        break;
      case 'u': {
        if (*i + 4 > s.size()) return false;
        const long code = std::strtol(s.substr(*i, 4).c_str(), nullptr, 16);
        *i += 4;
        *out += code < 0x80 ? static_cast<char>(code) : '?';
        break;
      }
      default:
        return false;
    }
  }
  return false;
}

}  // namespace

bool driver_address(std::string* host, int* port) {
  const char* addr = std::getenv("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  const char* p = std::getenv("HOROVOD_GLOO_RENDEZVOUS_PORT");
  if (addr == nullptr || *addr == '\0' || p == nullptr || *p == '\0') return false;
  *host = addr;
  *port = std::atoi(p);
  return *port > 0;
}

std::string job_key() {
  for (const char* name : {"HOROVODLITE_SECRET_KEY", "HOROVOD_SECRET_KEY"}) {
    const char* v = std::getenv(name);
    std::string key;
    if (v != nullptr && *v != '\0' && transport::parse_secret_hex(v, name, &key).ok()) return key;
  }
  return "";
}

Status http_get(const std::string& host, int port, const std::string& path, std::chrono::milliseconds timeout,
                transport::RequestSigner* signer, std::string* body) {
  const std::string where = "elastic driver at " + host + ":" + std::to_string(port) + ": GET " + path;
  int code = 0;
  std::vector<char> reply;
  const Status st = transport::http_request(host, port, "GET", path, nullptr, timeout, signer, &code, &reply);
  if (!st.ok()) return Status(st.code(), where + ": " + st.message());
  if (code != 200) return Status::Internal(where + " answered " + std::to_string(code));
  body->assign(reply.begin(), reply.end());
  return Status::OK();
}

Status parse_flat_json(const std::string& text, std::map<std::string, std::string>* out) {
  const Status bad =
      Status::InvalidArgument("elastic: expected a flat JSON object from the driver, got: " + text.substr(0, 200));
  out->clear();
  size_t i = 0;
  skip_space(text, &i);
  if (i >= text.size() || text[i++] != '{') return bad;
  skip_space(text, &i);
  if (i < text.size() && text[i] == '}') return Status::OK();
  while (true) {
    std::string key, value;
    skip_space(text, &i);
    if (!parse_string(text, &i, &key)) return bad;
    skip_space(text, &i);
    if (i >= text.size() || text[i++] != ':') return bad;
    skip_space(text, &i);
    if (i < text.size() && text[i] == '"') {
      if (!parse_string(text, &i, &value)) return bad;
    } else {
      const size_t start = i;
      while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '-' ||
                                 text[i] == '+' || text[i] == '.')) {
        ++i;
      }
      if (i == start) return bad;  // nested objects and arrays are not expected
      value = text.substr(start, i - start);
    }
    (*out)[key] = value;
    skip_space(text, &i);
    if (i >= text.size()) return bad;
    if (text[i] == '}') return Status::OK();
    if (text[i++] != ',') return bad;
  }
}

Status json_int(const std::map<std::string, std::string>& object, const std::string& key, int64_t* value) {
  auto it = object.find(key);
  if (it != object.end() && !it->second.empty()) {
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end != nullptr && *end == '\0') {
      *value = v;
      return Status::OK();
    }
  }
  return Status::InvalidArgument("elastic: the driver's answer has no integer '" + key + "'");
}

}  // namespace detail
}  // namespace elastic
}  // namespace torch
}  // namespace horovodlite
