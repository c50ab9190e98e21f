// Every piece of CUDA work of the backend goes on the thread's current stream (runtime.h), so that a
// CUDA graph capture (graph_capture.cpp, on a non-blocking stream) records all of it: work that strayed
// onto the legacy stream would run at capture time instead of being captured, and be missing from
// every replay. Checked on the sources (no GPU needed): kernel launches, cuBLASLt matmuls, cuDNN
// executions, asynchronous copies and memsets; no synchronous device-to-device copy or memset (those run
// on the legacy stream whatever the current one is).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/source_dir.h"

namespace {

namespace fs = std::filesystem;

struct Source {
  std::string path, text;
};

std::vector<Source> cuda_backend_sources() {
  std::vector<Source> out;
  for (const auto& e : fs::recursive_directory_iterator(diffq::testing::source_dir() / "src/backend/cuda")) {
    const std::string ext = e.path().extension().string();
    if (ext != ".cu" && ext != ".cpp" && ext != ".h" && ext != ".cuh") continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    out.push_back({fs::relative(e.path(), diffq::testing::source_dir()).string(), ss.str()});
  }
  return out;
}

// The text of each call of `name(` up to its closing parenthesis (comments are not calls: a `//` line
// is skipped).
std::vector<std::string> calls_of(const std::string& text, const std::string& name) {
  std::vector<std::string> out;
  for (size_t at = text.find(name + "("); at != std::string::npos; at = text.find(name + "(", at + 1)) {
    const size_t line = text.rfind('\n', at) + 1;
    if (text.compare(text.find_first_not_of(" \t", line), 2, "//") == 0) continue;
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_')) continue;
    int depth = 0;
    size_t end = at + name.size();
    for (; end < text.size(); ++end) {
      if (text[end] == '(') ++depth;
      if (text[end] == ')' && --depth == 0) break;
    }
    out.push_back(text.substr(at, end - at + 1));
  }
  return out;
}

TEST(CudaStreams, EveryKernelLaunchNamesTheCurrentStream) {
  int launches = 0;
  const std::regex launch(R"(<<<([^;]*?)>>>)");
  for (const Source& s : cuda_backend_sources())
    for (auto it = std::sregex_iterator(s.text.begin(), s.text.end(), launch); it != std::sregex_iterator(); ++it) {
      const std::string args = (*it)[1].str();
      if (s.text.rfind("//", it->position()) > s.text.rfind('\n', it->position()) &&
          s.text.rfind("//", it->position()) != std::string::npos)
        continue;  // in a comment
      ++launches;
      EXPECT_NE(args.find("current_stream()"), std::string::npos) << s.path << ": <<<" << args << ">>>";
    }
  EXPECT_GT(launches, 30);  // the sources were found
}

TEST(CudaStreams, LibraryCallsAndAsyncCopiesNameTheCurrentStream) {
  int checked = 0;
  for (const Source& s : cuda_backend_sources()) {
    for (const std::string& c : calls_of(s.text, "cublasLtMatmul")) {
      ++checked;
      EXPECT_NE(c.find("current_stream()"), std::string::npos) << s.path << ": " << c;
    }
    for (const char* fn : {"cudaMemcpyAsync", "cudaMemsetAsync"})
      for (const std::string& c : calls_of(s.text, fn)) {
        ++checked;
        // The transfer stream's uploads (offloading) are the one other stream, by design.
        if (s.path.find("device_interface_cuda.cpp") != std::string::npos) continue;
        EXPECT_NE(c.find("current_stream()"), std::string::npos) << s.path << ": " << c;
      }
    // cuDNN's frontend runs on the handle's stream: set to the current one right before.
    for (size_t at = s.text.find("g.execute("); at != std::string::npos; at = s.text.find("g.execute(", at + 1)) {
      ++checked;
      const size_t set = s.text.rfind("cudnnSetStream(", at);
      EXPECT_TRUE(set != std::string::npos && s.text.substr(set, at - set).find("current_stream()") != std::string::npos &&
                  at - set < 300)
          << s.path << ": cuDNN execute without cudnnSetStream(handle, current_stream()) before it";
    }
    for (const std::string& c : calls_of(s.text, "cudaMemcpy")) {
      ++checked;
      EXPECT_EQ(c.find("cudaMemcpyDeviceToDevice"), std::string::npos) << s.path << ": synchronous " << c;
    }
    for (const std::string& c : calls_of(s.text, "cudaMemset")) {
      ADD_FAILURE() << s.path << ": synchronous " << c << " (use cudaMemsetAsync on current_stream())";
    }
  }
  EXPECT_GT(checked, 5);
}

}  // namespace
