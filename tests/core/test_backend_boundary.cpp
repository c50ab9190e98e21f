// The device-generic core (issue 35): nothing outside src/backend names a backend. The layers above
// the backends (quant, compile, offload, core, models, pipelines, and the rest of src/) include no
// backend/cuda header, no CUDA runtime header and test no DIFFQ_HAS_CUDA: devices are reached through
// src/backend/device_interface.h and the op dispatcher alone (src/backend/register_backends.cpp is the
// one place that knows which backends a build has).
// The host thread pool is the runtime's (src/core/thread_pool.h), not the CPU backend's. Compile reaches
// its device-specific parts (fused kernels, autotune) through its per-device compile backend
// (src/compile/compile_backend.h; the CPU's in src/backend/cpu/compile): no file under src/compile names
// the CPU backend. The quantization layer holds formats and reference math only: its CPU kernels (SIMD
// dequantization, the tile-dequantizing GEMM driver, the integer GEMM linears) are the CPU backend's
// linear_q kernels (src/backend/cpu/quant), so no file under src/quant names it either.
// Files that include backend/cpu would be listed below as a ratchet (a file not on the list that includes
// backend/cpu fails, and so does a listed file that no longer does): the list is empty and stays so.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = DIFFQ_SOURCE_DIR;

const char* kLayers[] = {"quant", "compile", "offload", "core", "models", "pipelines", "modules", "ops",
                         "io",    "lora",    "cache",   "schedulers", "tokenizers", "metrics"};

// Files above the backends that still include backend/cpu.
const std::set<std::string> kCpuIncludesLeft = {};

std::vector<std::string> sources_under(const std::vector<std::string>& layers) {
  std::vector<std::string> out;
  for (const std::string& layer : layers) {
    const fs::path dir = kRoot / "src" / layer;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".h" || ext == ".cpp" || ext == ".inc" || ext == ".cu" || ext == ".cuh"))
        out.push_back(fs::relative(e.path(), kRoot).generic_string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> sources_above_the_backends() { return sources_under({std::begin(kLayers), std::end(kLayers)}); }

bool contains(const std::string& file, const std::string& needle) {
  std::ifstream in(kRoot / file);
  std::string line;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

TEST(BackendBoundary, NoLayerAboveTheBackendsNamesCuda) {
  const auto files = sources_above_the_backends();
  ASSERT_GT(files.size(), 200u) << "the scan found too few sources under " << kRoot;
  for (const auto& f : files)
    for (const char* needle : {"backend/cuda", "cuda_runtime", "cuda.h>", "DIFFQ_HAS_CUDA", "cudaMalloc"})
      EXPECT_FALSE(contains(f, needle)) << f << " names the CUDA backend (" << needle
                                        << "): reach devices through src/backend/device_interface.h";
}

TEST(BackendBoundary, CpuBackendIncludesOnlyShrink) {
  std::set<std::string> found;
  for (const auto& f : sources_above_the_backends())
    if (contains(f, "\"backend/cpu/")) found.insert(f);
  for (const auto& f : found)
    EXPECT_TRUE(kCpuIncludesLeft.count(f)) << f << " includes a backend/cpu header: go through ops:: or the device "
                                              "interface instead";
  for (const auto& f : kCpuIncludesLeft)
    EXPECT_TRUE(found.count(f)) << f << " no longer includes backend/cpu: take it off kCpuIncludesLeft";
}

TEST(BackendBoundary, CompileNamesNoBackend) {
  // Compile's graph carries its device; what is device-specific is asked of that device's compile backend.
  const auto files = sources_under({"compile"});
  ASSERT_GT(files.size(), 20u) << "the scan found too few sources under src/compile";
  for (const auto& f : files)
    for (const char* needle : {"backend::cpu", "\"backend/cpu/", "backend::cuda", "\"backend/cuda/"})
      EXPECT_FALSE(contains(f, needle)) << f << " names a backend (" << needle
                                        << "): ask the graph device's compile backend (compile_backend.h)";
}

TEST(BackendBoundary, QuantNamesNoCpuBackend) {
  // Formats and reference math only: the CPU's kernels of a scheme are its linear_q kernels.
  const auto files = sources_under({"quant"});
  ASSERT_GT(files.size(), 50u) << "the scan found too few sources under src/quant";
  for (const auto& f : files)
    for (const char* needle : {"backend::cpu", "\"backend/cpu/"})
      EXPECT_FALSE(contains(f, needle)) << f << " names the CPU backend (" << needle
                                        << "): its kernels belong in src/backend/cpu/quant (linear_q per scheme)";
}

}  // namespace
