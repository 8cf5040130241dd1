// Checks a timeline file left by a killed job: it must start with "[\n", end at an
// event boundary, and parse once completed the way the viewers complete it.
//   timeline_check <file>
#include <cstdio>

#include "timeline_util.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string text = hvl_test::read_file(argv[1]);
  if (text.size() < 2 || text.compare(0, 2, "[\n") != 0) {
    std::fprintf(stderr, "timeline does not start with \"[\\n\"\n");
    return 1;
  }
  if (text.size() < 3 || text.compare(text.size() - 3, 3, "},\n") != 0) {
    std::fprintf(stderr, "timeline does not end at an event boundary: ...%s\n",
                 text.substr(text.size() > 80 ? text.size() - 80 : 0).c_str());
    return 1;
  }
  try {
    auto trace = hvl_test::parse_truncated(text);
    auto by = hvl_test::events_by_tensor(trace);
    if (!by.count("step.0") || !by["step.0"].names.count("NEGOTIATE_ALLREDUCE") || !by["step.0"].names.count("QUEUE")) {
      std::fprintf(stderr, "timeline lacks the phases of 'step.0'\n");
      return 1;
    }
    std::printf("truncated timeline OK: %zu events\n", trace.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "truncated timeline does not parse: %s\n", e.what());
    return 1;
  }
  return 0;
}
