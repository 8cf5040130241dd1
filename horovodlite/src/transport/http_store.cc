#include "transport/http_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace horovodlite {
namespace transport {

namespace {

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

class Socket {
 public:
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status connect(const std::string& host, int port, int timeout_ms) {
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
        timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
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
  Status write_all(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return Status::Internal(std::string("send: ") + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::OK();
  }
  // Everything until the peer closes.
  Status read_all(std::vector<char>* out) {
    char buf[8192];
    while (true) {
      const ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Timeout("no answer in time");
      if (r < 0) return Status::Internal(std::string("recv: ") + std::strerror(errno));
      if (r == 0) return Status::OK();
      out->insert(out->end(), buf, buf + r);
    }
  }

 private:
  int fd_ = -1;
};

// The value of header `name` in an HTTP head (case-insensitive name), or "".
std::string header_value(const std::string& head, const std::string& name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const size_t start = pos + 2;
    const size_t end = head.find("\r\n", start);
    const std::string line = head.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const size_t colon = line.find(':');
    if (colon == name.size() && std::equal(name.begin(), name.end(), line.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        })) {
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      size_t e = line.size();
      while (e > v && (line[e - 1] == ' ' || line[e - 1] == '\t')) --e;
      return line.substr(v, e - v);
    }
    pos = end;
  }
  return "";
}

}  // namespace

Status http_request(const std::string& host, int port, const std::string& method, const std::string& path,
                    const std::vector<char>* body, std::chrono::milliseconds timeout, RequestSigner* signer, int* code,
                    std::vector<char>* reply) {
  Socket s;
  HVL_RETURN_IF_ERROR(s.connect(host, port, static_cast<int>(timeout.count())));
  const size_t n = body ? body->size() : 0;
  const char* data = body && !body->empty() ? body->data() : "";
  RequestSigner::Signed sig;
  if (signer != nullptr && signer->has_key()) sig = signer->sign(method, path, data, n);
  std::string head = method + " " + path + " HTTP/1.1\r\nHost: " + host +
                     "\r\nConnection: close\r\nContent-Length: " + std::to_string(n) + "\r\n";
  if (!sig.header.empty()) head += std::string(kAuthHeader) + ": " + sig.header + "\r\n";
  head += "\r\n";
  HVL_RETURN_IF_ERROR(s.write_all(head.data(), head.size()));
  if (body && !body->empty()) HVL_RETURN_IF_ERROR(s.write_all(body->data(), body->size()));
  std::vector<char> raw;
  HVL_RETURN_IF_ERROR(s.read_all(&raw));
  // "HTTP/1.x NNN ...\r\n...\r\n\r\n<body>"
  const std::string text(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(raw.size(), 4096)));
  const size_t sp = text.find(' ');
  const size_t end = text.find("\r\n\r\n");
  if (text.compare(0, 5, "HTTP/") != 0 || sp == std::string::npos || end == std::string::npos) {
    return Status::Internal("not an HTTP reply");
  }
  *code = std::atoi(text.c_str() + sp + 1);
  const std::string proof = header_value(text.substr(0, end + 2), kAuthHeader);
  const char* payload = raw.data() + end + 4;
  const size_t payload_n = raw.size() - (end + 4);
  if (*code == 401 && proof.empty()) {
    return Status::Aborted(std::string("refused (401): the request is not signed with that job's secret (") +
                           (signer != nullptr && signer->has_key() ? "HOROVODLITE_SECRET_KEY differs"
                                                                   : "this process has no HOROVODLITE_SECRET_KEY") +
                           ": start it with the job's launcher)");
  }
  if (signer == nullptr || !signer->reply_ok(sig.mac, *code, proof, payload_n ? payload : "", payload_n)) {
    return Status::Aborted("the reply (status " + std::to_string(*code) +
                           ") is not signed with this job's secret: something else answers at that address");
  }
  if (reply) reply->assign(payload, payload + payload_n);
  return Status::OK();
}

HttpStoreClient::HttpStoreClient(std::string host, int port, std::string scope, std::chrono::milliseconds timeout,
                                 const std::string& key)
    : host_(std::move(host)), port_(port), scope_(std::move(scope)), timeout_(timeout), signer_(key) {}

Status HttpStoreClient::request(const char* method, const std::string& key, const std::vector<char>* body, int* code,
                                std::vector<char>* reply) {
  const std::string where = std::string("rendezvous store at ") + address() + ": " + method + " /" + scope_ + "/" + key;
  const Status st =
      http_request(host_, port_, method, "/" + url_encode(scope_) + "/" + url_encode(key), body,
                   std::chrono::milliseconds(std::min<int64_t>(timeout_.count(), 60000)), &signer_, code, reply);
  if (!st.ok()) return Status::Internal(where + ": " + st.message());
  return Status::OK();
}

Status HttpStoreClient::set(const std::string& key, const std::vector<char>& value) {
  int code = 0;
  std::vector<char> reply;
  HVL_RETURN_IF_ERROR(request("PUT", key, &value, &code, &reply));
  if (code != 200) {
    // The store says why (413: the value's size, 507: the store is full).
    std::string why(reply.begin(), reply.begin() + std::min<size_t>(reply.size(), 300));
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    return Status::Internal("rendezvous store at " + address() + ": PUT /" + scope_ + "/" + key + " answered " +
                            std::to_string(code) + (why.empty() ? "" : ": " + why));
  }
  return Status::OK();
}

Status HttpStoreClient::try_get(const std::string& key, std::vector<char>* value, bool* found) {
  int code = 0;
  HVL_RETURN_IF_ERROR(request("GET", key, nullptr, &code, value));
  *found = code == 200;
  if (code != 200 && code != 404) {
    return Status::Internal("rendezvous store at " + address() + ": GET /" + scope_ + "/" + key + " answered " +
                            std::to_string(code));
  }
  return Status::OK();
}

Status HttpStoreClient::get(const std::string& key, std::vector<char>* value) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  int sleep_ms = 1;
  while (true) {
    bool found = false;
    HVL_RETURN_IF_ERROR(try_get(key, value, &found));
    if (found) return Status::OK();
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Timeout("rendezvous: key '" + scope_ + "/" + key + "' not set at " + address() + " within " +
                             std::to_string(timeout_.count() / 1000) + " s (HOROVOD_GLOO_TIMEOUT_SECONDS)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    sleep_ms = std::min(sleep_ms * 2, 100);
  }
}

Status HttpStoreClient::remove(const std::string& key) {
  int code = 0;
  return request("DELETE", key, nullptr, &code, nullptr);
}

}  // namespace transport
}  // namespace horovodlite
