// A main() for the fuzz target without libFuzzer: replays every file given (or
// every file in a directory given) through LLVMFuzzerTestOneInput, so that the
// normal test suite exercises the corpus with any compiler.
//   fuzz_messages_replay <file-or-dir>...        replay
//   fuzz_messages_replay --make-seeds <dir>       write the seed corpus
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using namespace horovodlite;
namespace fs = std::filesystem;

void write_seed(const fs::path& dir, const std::string& name, char selector, const std::string& bytes) {
  std::ofstream out(dir / name, std::ios::binary);
  out.put(selector);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

int make_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  Request a;
  a.rank = 1;
  a.name = "grad.layer1.weight";
  a.shape = {64, 3, 3};
  a.reduce_op = ReduceOp::kAverage;
  Request b = a;
  b.type = OpType::kAllgather;
  b.name = "gather";
  b.dtype = DataType::kFloat16;
  b.shape = {};
  Request c = a;
  c.type = OpType::kBroadcast;
  c.root = 2;
  c.prescale = 0.5;
  c.device = 0;
  Request d = a;  // a member of a grouped allreduce
  d.name = "grad.group.0";
  d.group_id = group_id_of({"grad.group.0", "grad.group.1"});
  d.group_size = 2;
  std::string s;
  encode_requests({}, &s);
  write_seed(dir, "requests_empty", 0, s);
  s.clear();
  encode_requests({a}, &s);
  write_seed(dir, "requests_one", 0, s);
  s.clear();
  encode_requests({a, b, c, d}, &s);
  write_seed(dir, "requests_three", 0, s);

  Response r;
  r.names = {"x", "y", "z"};
  r.tensor_sizes = {10, 20, 30};
  r.dtype = DataType::kBFloat16;
  Response e;
  e.type = OpType::kError;
  e.names = {"bad"};
  e.error_code = StatusCode::kMismatch;
  e.error_message = "Mismatched shapes for tensor 'bad'";
  Response g;
  g.type = OpType::kAllgather;
  g.names = {"g"};
  g.tensor_sizes = {1, 2, 3, 4};
  g.shape = {2, 5};
  g.group_id = 7;
  g.group_size = 3;
  Response j;
  j.type = OpType::kJoin;
  j.names = {"horovodlite.join"};
  j.last_joined_rank = 3;
  s.clear();
  encode_responses({}, &s);
  write_seed(dir, "responses_empty", 1, s);
  s.clear();
  encode_responses({r, e, g, j}, &s);
  write_seed(dir, "responses_four", 1, s);
  std::printf("wrote seeds to %s\n", dir.c_str());
  return 0;
}

int replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  // Every truncation and every single-byte corruption of the input as well.
  for (size_t n = 0; n < bytes.size(); ++n) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), n);
  }
  for (size_t i = 1; i < bytes.size(); ++i) {
    for (int v : {0x00, 0x7f, 0x80, 0xff}) {
      std::vector<char> copy = bytes;
      copy[i] = static_cast<char>(v);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(copy.data()), copy.size());
    }
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--make-seeds") return make_seeds(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <file-or-dir>... | --make-seeds <dir>\n", argv[0]);
    return 2;
  }
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      std::vector<fs::path> entries;
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) entries.push_back(e.path());
      std::sort(entries.begin(), entries.end());
      for (const auto& e : entries) files += replay(e);
    } else if (fs::is_regular_file(p)) {
      files += replay(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  if (files == 0) {
    std::fprintf(stderr, "no corpus files found\n");
    return 2;
  }
  std::printf("replayed %d corpus files (with truncations and corruptions): no crash\n", files);
  return 0;
}
