// Peak memory of forward + backward with checkpoint_sequential in sqrt(n)
// segments is at most a third of the plain peak. Each mode runs in a fresh child
// process (checkpoint_memory), whose peak RSS is not inflated by this process.
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#ifndef HVL_CHECKPOINT_MEMORY_EXE
#error "HVL_CHECKPOINT_MEMORY_EXE must name the checkpoint_memory program"
#endif

namespace {

// Runs the program with `args` and returns its key=value output.
std::map<std::string, std::string> run_child(const std::string& args) {
  const std::string command = std::string("'") + HVL_CHECKPOINT_MEMORY_EXE + "' " + args;
  std::map<std::string, std::string> values;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return values;
  }
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    output += buffer;
  }
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << command << " failed; output:\n" << output;
  std::cout << "[checkpoint_memory] " << output;
  std::istringstream words(output);
  std::string word;
  while (words >> word) {
    const auto eq = word.find('=');
    if (eq != std::string::npos) {
      values[word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  return values;
}

TEST(CheckpointMemory, SqrtSegmentsUseAtMostAThirdOfThePlainPeak) {
  const std::string shape = "--layers 64 --width 32 --batch 32768 --segments 8 --threads 1";
  auto plain = run_child("--mode plain " + shape);
  auto ckpt = run_child("--mode checkpoint " + shape);
  ASSERT_TRUE(plain.count("peak_delta_bytes") && ckpt.count("peak_delta_bytes"));

  const double plain_peak = std::stod(plain["peak_delta_bytes"]);
  const double ckpt_peak = std::stod(ckpt["peak_delta_bytes"]);
  const double layer_bytes = std::stod(plain["activation_bytes_per_layer"]);
  std::cout << "[checkpoint_memory] plain peak " << plain_peak / (1 << 20) << " MiB, checkpointed peak "
            << ckpt_peak / (1 << 20) << " MiB, ratio " << ckpt_peak / plain_peak << "\n";
  // The plain run must hold roughly one activation per layer, or the
  // measurement is not measuring activations.
  EXPECT_GT(plain_peak, 0.8 * 64 * layer_bytes);
  EXPECT_GT(ckpt_peak, 0.0);
  EXPECT_LE(ckpt_peak, plain_peak / 3.0);

  // Same model, same data: the same loss and (up to float32 rounding) gradients.
  EXPECT_EQ(plain["loss"], ckpt["loss"]);
  const double g_plain = std::stod(plain["grad_norm"]);
  const double g_ckpt = std::stod(ckpt["grad_norm"]);
  EXPECT_NEAR(g_ckpt, g_plain, 1e-4 * g_plain);
}

}  // namespace
