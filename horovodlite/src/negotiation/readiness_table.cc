#include "negotiation/readiness_table.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>

namespace horovodlite::negotiation {

ReadinessTable::ReadinessTable(int size, std::vector<int> global_ranks, std::string where)
    : size_(size), global_(std::move(global_ranks)), where_(std::move(where)), joined_(size, false) {
  if (global_.size() != static_cast<size_t>(size)) {
    global_.resize(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) global_[static_cast<size_t>(r)] = r;
  }
}

void ReadinessTable::add(int rank, const std::vector<Request>& requests) {
  for (const Request& q : requests) {
    if (q.type == OpType::kJoin) {
      if (!joined_[rank]) {
        joined_[rank] = true;
        ++joined_count_;
      }
      last_joined_ = rank;
      continue;
    }
    auto it = table_.find(q.name);
    if (it == table_.end()) {
      Pending p;
      p.by_rank.resize(size_);
      p.has.assign(size_, false);
      p.first_seen = std::chrono::steady_clock::now();
      it = table_.emplace(q.name, std::move(p)).first;
      arrival_.push_back(q.name);
    }
    Pending& p = it->second;
    if (p.has[rank]) continue;  // a rank never sends a name twice while in flight
    p.has[rank] = true;
    p.by_rank[rank] = q;
    p.by_rank[rank].rank = rank;
    ++p.count;
    if (q.group_id != 0) {
      Group& g = groups_[q.group_id];
      if (g.size == 0) g.size = q.group_size;
      if (std::find(g.members.begin(), g.members.end(), q.name) == g.members.end()) g.members.push_back(q.name);
    }
  }
}

bool ReadinessTable::agreed_group(const std::string& name, const Pending& p, uint64_t* group, Response* err) const {
  int first = 0;
  while (!p.has[first]) ++first;
  const Request& q0 = p.by_rank[first];
  *group = q0.group_id;
  bool same = true;
  for (int r = 0; r < size_; ++r) {
    if (p.has[r] && (p.by_rank[r].group_id != q0.group_id || p.by_rank[r].group_size != q0.group_size)) same = false;
  }
  if (same) return true;
  std::ostringstream os;
  bool sep = false;
  for (int r = 0; r < size_; ++r) {
    if (!p.has[r]) continue;
    const Request& q = p.by_rank[r];
    os << (sep ? "; " : "") << "rank " << global_[r] << ": ";
    if (q.group_id == 0)
      os << "not grouped";
    else
      os << "a group of " << q.group_size << " tensors (id " << std::hex << q.group_id << std::dec << ")";
    sep = true;
  }
  err->type = OpType::kError;
  err->names = {name};
  err->error_code = StatusCode::kMismatch;
  err->error_message = "Mismatched groups for tensor '" + name + "' (" + op_type_name(q0.type) + ")" + where_ +
                       ": every rank must submit it in a grouped op over the same names: " + os.str();
  return false;
}

bool ReadinessTable::group_complete(const Group& g, uint64_t id) const {
  if (static_cast<int32_t>(g.members.size()) < g.size) return false;
  for (const std::string& name : g.members) {
    auto it = table_.find(name);
    if (it == table_.end() || !ready(it->second)) return false;
    for (int r = 0; r < size_; ++r) {
      if (it->second.has[r] && it->second.by_rank[r].group_id != id) return false;
    }
  }
  return true;
}

void ReadinessTable::emit_group(uint64_t id, std::vector<Response>* out) {
  Group g = std::move(groups_[id]);
  groups_.erase(id);
  std::vector<Response> built;
  const Response* failed = nullptr;
  for (const std::string& name : g.members) {
    built.push_back(build(name, table_.at(name)));
    built.back().group_id = id;
    built.back().group_size = g.size;
  }
  for (const Response& r : built)
    if (r.type == OpType::kError && failed == nullptr) failed = &r;
  if (failed != nullptr) {
    // One error for the whole group: none of its tensors runs.
    Response err;
    err.type = OpType::kError;
    err.error_code = failed->error_code;
    err.names = g.members;
    std::ostringstream names;
    for (size_t i = 0; i < g.members.size(); ++i) names << (i ? ", " : "") << "'" << g.members[i] << "'";
    const Pending& fp = table_.at(failed->names[0]);
    int first = 0;
    while (!fp.has[first]) ++first;
    err.error_message = "grouped " + std::string(op_type_name(fp.by_rank[first].type)) + " of " +
                        std::to_string(g.members.size()) + " tensors (" + names.str() +
                        ") failed: " + failed->error_message;
    built.assign(1, std::move(err));
  }
  for (const std::string& name : g.members) table_.erase(name);
  out->insert(out->end(), std::make_move_iterator(built.begin()), std::make_move_iterator(built.end()));
}

void ReadinessTable::forget(const std::string& name) {
  auto it = table_.find(name);
  if (it == table_.end()) return;
  for (int r = 0; r < size_; ++r) {
    if (!it->second.has[r] || it->second.by_rank[r].group_id == 0) continue;
    auto g = groups_.find(it->second.by_rank[r].group_id);
    if (g == groups_.end()) continue;
    auto& m = g->second.members;
    m.erase(std::remove(m.begin(), m.end(), name), m.end());
    if (m.empty()) groups_.erase(g);
  }
  table_.erase(it);
}

bool ReadinessTable::ready(const Pending& p) const {
  for (int r = 0; r < size_; ++r) {
    if (!p.has[r] && !joined_[r]) return false;
  }
  return true;
}

std::vector<Response> ReadinessTable::take_ready() {
  std::vector<Response> out;
  std::vector<std::string> still;
  for (const std::string& name : arrival_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;  // went out with its group, or dropped
    if (!ready(it->second)) {
      still.push_back(name);
      continue;
    }
    uint64_t group = 0;
    Response err;
    if (!agreed_group(name, it->second, &group, &err)) {
      out.push_back(std::move(err));
      forget(name);
    } else if (group == 0) {
      out.push_back(build(name, it->second));
      table_.erase(it);
    } else if (group_complete(groups_[group], group)) {
      emit_group(group, &out);  // the group's names, in the order they first arrived
    } else {
      still.push_back(name);  // ready here; waits for the rest of its group
    }
  }
  arrival_.swap(still);
  if (joined_count_ == size_) {
    Response j;
    j.type = OpType::kJoin;
    j.names = {kJoinName};
    j.last_joined_rank = last_joined_;
    out.push_back(j);
    joined_.assign(size_, false);
    joined_count_ = 0;
    last_joined_ = -1;
  }
  return out;
}

std::vector<ReadinessTable::PendingInfo> ReadinessTable::pending() const {
  std::vector<PendingInfo> out;
  for (const std::string& name : arrival_) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;
    PendingInfo info;
    info.name = name;
    info.first_seen = it->second.first_seen;
    for (int r = 0; r < size_; ++r) {
      if (it->second.has[r])
        info.ready_ranks.push_back(global_[r]);
      else if (!joined_[r])
        info.missing_ranks.push_back(global_[r]);
    }
    out.push_back(std::move(info));
  }
  return out;
}

void ReadinessTable::drop(const std::string& name) { forget(name); }

namespace {

std::string device_string(int device) { return device < 0 ? "CPU" : "cuda:" + std::to_string(device); }

// "rank 0: X; rank 1: Y" for every rank that sent the name (named by its global rank).
std::string per_rank(const std::vector<Request>& by_rank, const std::vector<bool>& has, const std::vector<int>& global,
                     const std::function<std::string(const Request&)>& show) {
  std::ostringstream os;
  bool first = true;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (!has[r]) continue;
    os << (first ? "" : "; ") << "rank " << global[r] << ": " << show(by_rank[r]);
    first = false;
  }
  return os.str();
}

Shape trailing_dims(const Shape& s) { return s.empty() ? Shape{} : Shape(s.begin() + 1, s.end()); }

std::string fmt_double(double d) {
  std::ostringstream os;
  os.precision(17);
  os << d;
  return os.str();
}

}  // namespace

Response ReadinessTable::build(const std::string& name, const Pending& p) const {
  int first = 0;
  while (!p.has[first]) ++first;
  const Request& q0 = p.by_rank[first];

  Response err;
  err.type = OpType::kError;
  err.names = {name};
  err.error_code = StatusCode::kMismatch;
  // Every rank must ask for the same op, on tensors that agree, with the same arguments.
  if (mismatched(name, p, q0, &err.error_message)) return err;
  // Ranks that have joined take part in allreduces and barriers only.
  if (joined_count_ > 0 && q0.type != OpType::kAllreduce && q0.type != OpType::kBarrier) {
    std::ostringstream os;
    for (int r = 0, n = 0; r < size_; ++r)
      if (joined_[r]) os << (n++ ? ", " : "") << global_[r];
    // Like every negotiated error (Horovod: a precondition error, HorovodInternalError in Python).
    err.error_code = StatusCode::kMismatch;
    err.error_message = std::string(op_type_name(q0.type)) + " of tensor '" + name + "'" + where_ +
                        " is not supported while ranks have joined (joined ranks: " + os.str() +
                        "); only allreduce and barrier are";
    return err;
  }
  return agreed(name, p, q0);
}

bool ReadinessTable::mismatched(const std::string& name, const Pending& p, const Request& q0,
                                std::string* message) const {
  auto mismatch = [&](const char* what, const std::function<std::string(const Request&)>& show,
                      const std::function<bool(const Request&)>& differs) -> bool {
    for (int r = 0; r < size_; ++r) {
      if (p.has[r] && differs(p.by_rank[r])) {
        *message = std::string("Mismatched ") + what + " for tensor '" + name + "' (" + op_type_name(q0.type) + ")" +
                   where_ + ": " + per_rank(p.by_rank, p.has, global_, show);
        return true;
      }
    }
    return false;
  };

  if (mismatch(
          "operations", [](const Request& q) { return std::string(op_type_name(q.type)); },
          [&](const Request& q) { return q.type != q0.type; }))
    return true;
  if (mismatch(
          "data types", [](const Request& q) { return std::string(dtype_name(q.dtype)); },
          [&](const Request& q) { return q.dtype != q0.dtype; }))
    return true;
  if (mismatch(
          "devices (mixed CPU/GPU placement)", [](const Request& q) { return device_string(q.device); },
          // Each rank may use its own GPU (cuda:0 here, cuda:1 there); what must agree is
          // whether the tensor is in host or device memory.
          [&](const Request& q) { return (q.device < 0) != (q0.device < 0); }))
    return true;

  const bool dim0_free = q0.type == OpType::kAllgather || q0.type == OpType::kAlltoall;
  if (dim0_free) {
    if (mismatch(
            "shapes (all dimensions but the first must match)", [](const Request& q) { return shape_string(q.shape); },
            [&](const Request& q) {
              return q.shape.size() != q0.shape.size() || trailing_dims(q.shape) != trailing_dims(q0.shape);
            }))
      return true;
  } else if (q0.type != OpType::kBarrier) {
    if (mismatch(
            "shapes", [](const Request& q) { return shape_string(q.shape); },
            [&](const Request& q) { return q.shape != q0.shape; }))
      return true;
  }
  if (q0.type == OpType::kBroadcast && mismatch(
                                           "root ranks", [](const Request& q) { return std::to_string(q.root); },
                                           [&](const Request& q) { return q.root != q0.root; }))
    return true;
  if (q0.type == OpType::kAllreduce || q0.type == OpType::kReducescatter) {
    if (mismatch(
            "reduce ops", [](const Request& q) { return std::string(reduce_op_name(q.reduce_op)); },
            [&](const Request& q) { return q.reduce_op != q0.reduce_op; }))
      return true;
    if (mismatch(
            "prescale factors", [](const Request& q) { return fmt_double(q.prescale); },
            [&](const Request& q) { return q.prescale != q0.prescale; }))
      return true;
    if (mismatch(
            "compression", [](const Request& q) { return std::string(compression_name(q.compression)); },
            [&](const Request& q) { return q.compression != q0.compression; }))
      return true;
    if (mismatch(
            "postscale factors", [](const Request& q) { return fmt_double(q.postscale); },
            [&](const Request& q) { return q.postscale != q0.postscale; }))
      return true;
  }
  return false;
}

// The response every rank runs: the op as the ranks agreed on it.
Response ReadinessTable::agreed(const std::string& name, const Pending& p, const Request& q0) const {
  Response s;
  s.type = q0.type;
  s.names = {name};
  s.dtype = q0.dtype;
  s.device = q0.device;
  s.reduce_op = q0.reduce_op;
  s.prescale = q0.prescale;
  s.postscale = q0.postscale;
  s.compression = q0.compression;
  s.root = q0.root;
  s.shape = q0.shape;
  if (q0.type == OpType::kAllgather) {
    s.tensor_sizes.resize(size_);
    for (int r = 0; r < size_; ++r) s.tensor_sizes[r] = p.by_rank[r].shape.empty() ? 1 : p.by_rank[r].shape[0];
  } else if (q0.type == OpType::kAllreduce) {
    s.tensor_sizes = {num_elements(q0.shape)};
  }
  return s;
}

}  // namespace horovodlite::negotiation
