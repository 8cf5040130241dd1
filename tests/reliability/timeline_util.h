// Reading a timeline file back: parses it (completing a file cut short by a
// killed job the way chrome://tracing and Perfetto do) and groups the events by
// tensor name.
#pragma once

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace hvl_test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file cut at an event boundary ends in "},\n": drop the comma, close the array.
inline nlohmann::json parse_truncated(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ',')) text.pop_back();
  return nlohmann::json::parse(text + "\n]");
}

struct TensorEvents {
  std::multiset<std::string> names;  // event names (phases, rank marks)
  std::set<int> ready_ranks;         // ranks with an instant "ready" mark
};

// Events by tensor name (the process_name metadata of each pid).
inline std::map<std::string, TensorEvents> events_by_tensor(const nlohmann::json& trace) {
  std::map<int, std::string> pid_names;
  for (const auto& e : trace)
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name")
      pid_names[e.at("pid").get<int>()] = e.at("args").at("name").get<std::string>();
  std::map<std::string, TensorEvents> out;
  for (const auto& e : trace) {
    if (e.value("ph", "") == "M" || !e.contains("pid")) continue;
    auto it = pid_names.find(e.at("pid").get<int>());
    if (it == pid_names.end()) continue;
    TensorEvents& t = out[it->second];
    t.names.insert(e.at("name").get<std::string>());
    if (e.value("ph", "") == "i" && e.contains("args") && e.at("args").contains("rank"))
      t.ready_ranks.insert(e.at("args").at("rank").get<int>());
  }
  return out;
}

}  // namespace hvl_test
