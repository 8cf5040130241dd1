#include "elastic_driver.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace horovodlite {
namespace torch {
namespace elastic {
namespace detail {
namespace {

// One TCP connection, closed on destruction.
class Connection {
 public:
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& host, int port, std::chrono::milliseconds timeout) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) return Status::Internal(std::string("cannot resolve ") + host + ": " + gai_strerror(rc));
    Status last = Status::Internal("no address");
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      fd_ = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd_ < 0) continue;
      if (::connect(fd_, a->ai_addr, a->ai_addrlen) == 0) {
        const int one = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        const auto ms = timeout.count();
        timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        ::freeaddrinfo(res);
        return Status::OK();
      }
      last = Status::Internal(std::string("connect: ") + std::strerror(errno));
      ::close(fd_);
      fd_ = -1;
    }
    ::freeaddrinfo(res);
    return last;
  }
  Status send_all(const std::string& data) {
    const char* p = data.data();
    size_t n = data.size();
    while (n > 0) {
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Status::Internal(std::string("send: ") + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::OK();
  }
  // Everything until the peer closes (the request asks for Connection: close).
  Status receive_all(std::string* out) {
    char buf[4096];
    while (true) {
      const ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Timeout("no answer in time");
      if (r < 0) return Status::Internal(std::string("recv: ") + std::strerror(errno));
      if (r == 0) return Status::OK();
      out->append(buf, static_cast<size_t>(r));
    }
  }

 private:
  int fd_ = -1;
};

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

Status http_get(const std::string& host, int port, const std::string& path, std::chrono::milliseconds timeout,
                std::string* body) {
  const std::string where = "elastic driver at " + host + ":" + std::to_string(port) + ": GET " + path;
  Connection c;
  Status st = c.open(host, port, timeout);
  if (st.ok()) st = c.send_all("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
  std::string raw;
  if (st.ok()) st = c.receive_all(&raw);
  if (!st.ok()) return Status(st.code(), where + ": " + st.message());
  // "HTTP/1.x NNN ...\r\n...\r\n\r\n<body>"
  const size_t sp = raw.find(' ');
  const size_t end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || sp == std::string::npos || end == std::string::npos) {
    return Status::Internal(where + ": not an HTTP reply");
  }
  const int code = std::atoi(raw.c_str() + sp + 1);
  if (code != 200) return Status::Internal(where + " answered " + std::to_string(code));
  body->assign(raw, end + 4, std::string::npos);
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
