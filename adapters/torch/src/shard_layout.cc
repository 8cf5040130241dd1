#include "shard_layout.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "horovodlite/torch/collectives.h"
#include "horovodlite/torch/error.h"

namespace horovodlite {
namespace torch {
namespace shard_layout {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string shape_text(at::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string param_text(const Signatures& sigs, size_t i) {
  const std::string& name = sigs[0][i].second;
  return "parameter " + std::to_string(i) + (name.empty() ? "" : " ('" + name + "')");
}

Signatures gather(const std::string& what, const std::string& mine, const std::string& prefix, const ProcessSet& ps,
                  const std::vector<int>& set_ranks) {
  const int n = static_cast<int>(set_ranks.size());
  at::Tensor lengths =
      allgather(at::full({1}, static_cast<int64_t>(mine.size()), at::kLong), prefix + ".layout.size", ps);
  at::Tensor bytes = at::empty({static_cast<int64_t>(mine.size())}, at::kByte);
  if (!mine.empty()) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  at::Tensor all = allgather(bytes, prefix + ".layout.data", ps);

  Signatures sigs(n);
  const char* data = static_cast<const char*>(all.data_ptr());
  int64_t offset = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t len = lengths[r].item<int64_t>();
    std::istringstream text(std::string(data + offset, static_cast<size_t>(len)));
    offset += len;
    std::string line;
    while (std::getline(text, line)) {
      const size_t tab = line.find('\t');
      sigs[r].emplace_back(line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1));
    }
  }
  std::map<size_t, std::vector<int>> counts;
  for (int r = 0; r < n; ++r) counts[sigs[r].size()].push_back(set_ranks[r]);
  if (counts.size() > 1) {
    std::string msg = what + ": ranks hold different numbers of parameters: ";
    bool first = true;
    for (const auto& c : counts) {
      msg += (first ? "" : "; ") + std::to_string(c.first) + " on " + ranks_text(c.second);
      first = false;
    }
    throw HorovodError(StatusCode::kInvalidArgument, msg);
  }
  for (size_t i = 0; i < sigs[0].size(); ++i) {
    std::vector<std::pair<std::string, std::vector<int>>> seen;  // in the order of the ranks
    for (int r = 0; r < n; ++r) {
      auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == sigs[r][i].first; });
      if (it == seen.end()) {
        seen.emplace_back(sigs[r][i].first, std::vector<int>{set_ranks[r]});
      } else {
        it->second.push_back(set_ranks[r]);
      }
    }
    if (seen.size() > 1) {
      std::string msg = what + ": " + param_text(sigs, i) + " differs across ranks: ";
      for (size_t k = 0; k < seen.size(); ++k)
        msg += (k ? "; " : "") + seen[k].first + " on " + ranks_text(seen[k].second);
      throw HorovodError(StatusCode::kInvalidArgument, msg);
    }
  }
  return sigs;
}

}  // namespace shard_layout
}  // namespace torch
}  // namespace horovodlite
