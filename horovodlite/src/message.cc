#include "message.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace horovodlite {

const char* op_type_name(OpType t) {
  switch (t) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
    case OpType::kError:
      return "error";
  }
  return "invalid-op-type";
}

bool Request::same_params(const Request& o) const {
  return type == o.type && name == o.name && dtype == o.dtype && device == o.device && shape == o.shape &&
         root == o.root && reduce_op == o.reduce_op && prescale == o.prescale && postscale == o.postscale &&
         compression == o.compression && group_id == o.group_id && group_size == o.group_size;
}

uint64_t group_id_of(const std::vector<std::string>& names) {
  std::vector<const std::string*> sorted;
  sorted.reserve(names.size());
  for (const std::string& n : names) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  // FNV-1a over each name and its length (so that {"ab", "c"} and {"a", "bc"} differ).
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  };
  for (const std::string* n : sorted) {
    const uint64_t len = n->size();
    mix(&len, sizeof(len));
    mix(n->data(), n->size());
  }
  return h == 0 ? 1 : h;
}

namespace {

constexpr uint32_t kRequestMagic = 0x48564c51;   // "HVLQ"
constexpr uint32_t kResponseMagic = 0x48564c52;  // "HVLR"

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  template <typename T>
  void pod(T v) {
    out_->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_->append(s);
  }
  void i64s(const std::vector<int64_t>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    if (!v.empty()) out_->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }

 private:
  std::string* out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

  template <typename T>
  Status pod(T* v, const char* what) {
    if (remaining() < sizeof(T)) return truncated(what);
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return Status::OK();
  }
  Status str(std::string* s, size_t max_len, const char* what) {
    uint32_t n = 0;
    HVL_RETURN_IF_ERROR(pod(&n, what));
    if (n > max_len)
      return Status::InvalidArgument(std::string("malformed message: ") + what + " length " + std::to_string(n) +
                                     " exceeds " + std::to_string(max_len));
    if (remaining() < n) return truncated(what);
    s->assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return Status::OK();
  }
  Status i64s(std::vector<int64_t>* v, size_t max_count, const char* what) {
    uint32_t n = 0;
    HVL_RETURN_IF_ERROR(pod(&n, what));
    if (n > max_count)
      return Status::InvalidArgument(std::string("malformed message: ") + what + " count " + std::to_string(n) +
                                     " exceeds " + std::to_string(max_count));
    if (remaining() / sizeof(int64_t) < n) return truncated(what);
    v->resize(n);
    if (n) std::memcpy(v->data(), p_, n * sizeof(int64_t));
    p_ += n * sizeof(int64_t);
    return Status::OK();
  }
  // A count of items each at least `min_item_bytes` long cannot exceed what remains.
  Status count(uint32_t* n, size_t min_item_bytes, const char* what) {
    HVL_RETURN_IF_ERROR(pod(n, what));
    if (*n > remaining() / min_item_bytes) {
      return Status::InvalidArgument(std::string("malformed message: ") + what + " count " + std::to_string(*n) +
                                     " is larger than the message");
    }
    return Status::OK();
  }

 private:
  static Status truncated(const char* what) {
    return Status::InvalidArgument(std::string("malformed message: truncated while reading ") + what);
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

Status check_enum(uint8_t v, uint8_t max, const char* what) {
  if (v > max) return Status::InvalidArgument(std::string("malformed message: bad ") + what + " " + std::to_string(v));
  return Status::OK();
}

Status check_magic(Reader& r, uint32_t expected, const char* what) {
  uint32_t magic = 0;
  HVL_RETURN_IF_ERROR(r.pod(&magic, what));
  if (magic != expected) return Status::InvalidArgument(std::string("malformed message: bad magic in ") + what);
  return Status::OK();
}

// A group: id 0 with size 0 (none), or a non-zero id with a positive size.
Status read_group(Reader& r, uint64_t* id, int32_t* size) {
  HVL_RETURN_IF_ERROR(r.pod(id, "group id"));
  HVL_RETURN_IF_ERROR(r.pod(size, "group size"));
  if ((*id == 0) != (*size == 0) || *size < 0) {
    return Status::InvalidArgument("malformed message: group id " + std::to_string(*id) + " with group size " +
                                   std::to_string(*size));
  }
  return Status::OK();
}

}  // namespace

void encode_requests(const std::vector<Request>& requests, std::string* out) {
  Writer w(out);
  w.pod<uint32_t>(kRequestMagic);
  w.pod<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const Request& q : requests) {
    w.pod<int32_t>(q.rank);
    w.pod<uint8_t>(static_cast<uint8_t>(q.type));
    w.str(q.name);
    w.pod<uint8_t>(static_cast<uint8_t>(q.dtype));
    w.pod<int32_t>(q.device);
    w.i64s(q.shape);
    w.pod<int32_t>(q.root);
    w.pod<uint8_t>(static_cast<uint8_t>(q.reduce_op));
    w.pod<double>(q.prescale);
    w.pod<double>(q.postscale);
    w.pod<uint8_t>(static_cast<uint8_t>(q.compression));
    w.pod<uint64_t>(q.group_id);
    w.pod<int32_t>(q.group_size);
  }
}

Status decode_requests(const uint8_t* data, size_t size, std::vector<Request>* out) {
  Reader r(data, size);
  HVL_RETURN_IF_ERROR(check_magic(r, kRequestMagic, "request list"));
  uint32_t n = 0;
  constexpr size_t kMinRequestBytes = 4 + 1 + 4 + 1 + 4 + 4 + 4 + 1 + 8 + 8 + 1 + 8 + 4;
  HVL_RETURN_IF_ERROR(r.count(&n, kMinRequestBytes, "requests"));
  out->clear();
  out->reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Request q;
    uint8_t type = 0, dtype = 0, op = 0;
    HVL_RETURN_IF_ERROR(r.pod(&q.rank, "request rank"));
    HVL_RETURN_IF_ERROR(r.pod(&type, "request type"));
    HVL_RETURN_IF_ERROR(check_enum(type, static_cast<uint8_t>(OpType::kJoin), "request type"));
    HVL_RETURN_IF_ERROR(r.str(&q.name, kMaxNameLength, "tensor name"));
    HVL_RETURN_IF_ERROR(r.pod(&dtype, "dtype"));
    HVL_RETURN_IF_ERROR(check_enum(dtype, kNumDataTypes - 1, "dtype"));
    HVL_RETURN_IF_ERROR(r.pod(&q.device, "device"));
    HVL_RETURN_IF_ERROR(r.i64s(&q.shape, kMaxDims, "shape"));
    for (int64_t d : q.shape) {
      if (d < 0) return Status::InvalidArgument("malformed message: negative dimension in shape of '" + q.name + "'");
    }
    HVL_RETURN_IF_ERROR(r.pod(&q.root, "root"));
    HVL_RETURN_IF_ERROR(r.pod(&op, "reduce op"));
    HVL_RETURN_IF_ERROR(check_enum(op, static_cast<uint8_t>(ReduceOp::kAdasum), "reduce op"));
    HVL_RETURN_IF_ERROR(r.pod(&q.prescale, "prescale"));
    HVL_RETURN_IF_ERROR(r.pod(&q.postscale, "postscale"));
    uint8_t comp = 0;
    HVL_RETURN_IF_ERROR(r.pod(&comp, "compression"));
    HVL_RETURN_IF_ERROR(check_enum(comp, static_cast<uint8_t>(Compression::kBf16), "compression"));
    q.compression = static_cast<Compression>(comp);
    HVL_RETURN_IF_ERROR(read_group(r, &q.group_id, &q.group_size));
    q.type = static_cast<OpType>(type);
    q.dtype = static_cast<DataType>(dtype);
    q.reduce_op = static_cast<ReduceOp>(op);
    out->push_back(std::move(q));
  }
  if (r.remaining() != 0) return Status::InvalidArgument("malformed message: trailing bytes after request list");
  return Status::OK();
}

void encode_responses(const std::vector<Response>& responses, std::string* out) {
  Writer w(out);
  w.pod<uint32_t>(kResponseMagic);
  w.pod<uint32_t>(static_cast<uint32_t>(responses.size()));
  for (const Response& s : responses) {
    w.pod<uint8_t>(static_cast<uint8_t>(s.type));
    w.pod<uint32_t>(static_cast<uint32_t>(s.names.size()));
    for (const auto& n : s.names) w.str(n);
    w.str(s.error_message);
    w.pod<uint8_t>(static_cast<uint8_t>(s.error_code));
    w.pod<uint8_t>(static_cast<uint8_t>(s.dtype));
    w.pod<int32_t>(s.device);
    w.pod<uint8_t>(static_cast<uint8_t>(s.reduce_op));
    w.pod<double>(s.prescale);
    w.pod<double>(s.postscale);
    w.pod<uint8_t>(static_cast<uint8_t>(s.compression));
    w.pod<int32_t>(s.root);
    w.i64s(s.tensor_sizes);
    w.i64s(s.shape);
    w.pod<int32_t>(s.last_joined_rank);
    w.pod<uint64_t>(s.group_id);
    w.pod<int32_t>(s.group_size);
  }
}

Status decode_responses(const uint8_t* data, size_t size, std::vector<Response>* out) {
  Reader r(data, size);
  HVL_RETURN_IF_ERROR(check_magic(r, kResponseMagic, "response list"));
  uint32_t n = 0;
  HVL_RETURN_IF_ERROR(r.count(&n, 52, "responses"));
  out->clear();
  out->reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Response s;
    uint8_t type = 0, code = 0, dtype = 0, op = 0;
    HVL_RETURN_IF_ERROR(r.pod(&type, "response type"));
    HVL_RETURN_IF_ERROR(check_enum(type, static_cast<uint8_t>(OpType::kError), "response type"));
    uint32_t names = 0;
    HVL_RETURN_IF_ERROR(r.count(&names, 4, "names"));
    s.names.resize(names);
    for (auto& name : s.names) HVL_RETURN_IF_ERROR(r.str(&name, kMaxNameLength, "tensor name"));
    HVL_RETURN_IF_ERROR(r.str(&s.error_message, 1 << 20, "error message"));
    HVL_RETURN_IF_ERROR(r.pod(&code, "error code"));
    HVL_RETURN_IF_ERROR(check_enum(code, static_cast<uint8_t>(StatusCode::kInProgress), "error code"));
    HVL_RETURN_IF_ERROR(r.pod(&dtype, "dtype"));
    HVL_RETURN_IF_ERROR(check_enum(dtype, kNumDataTypes - 1, "dtype"));
    HVL_RETURN_IF_ERROR(r.pod(&s.device, "device"));
    HVL_RETURN_IF_ERROR(r.pod(&op, "reduce op"));
    HVL_RETURN_IF_ERROR(check_enum(op, static_cast<uint8_t>(ReduceOp::kAdasum), "reduce op"));
    HVL_RETURN_IF_ERROR(r.pod(&s.prescale, "prescale"));
    HVL_RETURN_IF_ERROR(r.pod(&s.postscale, "postscale"));
    uint8_t comp = 0;
    HVL_RETURN_IF_ERROR(r.pod(&comp, "compression"));
    HVL_RETURN_IF_ERROR(check_enum(comp, static_cast<uint8_t>(Compression::kBf16), "compression"));
    s.compression = static_cast<Compression>(comp);
    HVL_RETURN_IF_ERROR(r.pod(&s.root, "root"));
    HVL_RETURN_IF_ERROR(r.i64s(&s.tensor_sizes, 1 << 24, "tensor sizes"));
    HVL_RETURN_IF_ERROR(r.i64s(&s.shape, kMaxDims, "shape"));
    HVL_RETURN_IF_ERROR(r.pod(&s.last_joined_rank, "last joined rank"));
    HVL_RETURN_IF_ERROR(read_group(r, &s.group_id, &s.group_size));
    s.type = static_cast<OpType>(type);
    s.error_code = static_cast<StatusCode>(code);
    s.dtype = static_cast<DataType>(dtype);
    s.reduce_op = static_cast<ReduceOp>(op);
    out->push_back(std::move(s));
  }
  if (r.remaining() != 0) return Status::InvalidArgument("malformed message: trailing bytes after response list");
  return Status::OK();
}

// std::string only (no iostreams, no locale): it builds the shutdown message,
// which must not depend on the C++ runtime's static state (issue 29).
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace horovodlite
