// What this build of diffq is and what it will run on this machine: version and commit, build options,
// the CPU and its features, the SIMD target and the kernel of each op family, threads and GPUs.
// `diffq info` prints it; `diffq bench --json` records it next to every figure.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace diffq {

struct SystemInfo {
  std::string version;  // DIFFQ_VERSION
  std::string commit;   // git commit the build was made from ("-dirty" when it had local changes)

  // Build options.
  bool cuda_built = false;
  std::string cuda_architectures;                   // e.g. "90"; empty without CUDA
  std::vector<std::string> simd_targets_compiled;   // Highway targets in the binary, best first
  std::string blas;                                 // e.g. "OpenBLAS 0.3.21 ..."
  std::string onednn;                               // e.g. "3.x.y (cpu runtime OMP)", or "not linked"
  std::string highway;                              // e.g. "1.0.3"

  // The CPU.
  std::string cpu_model;
  std::vector<std::pair<std::string, bool>> cpu_features;  // (lscpu flag name, usable) in a fixed order
  std::vector<std::string> simd_targets_supported;         // compiled and runnable here, best first
  std::string simd_target;                                 // what runtime dispatch picks
  int threads = 0;

  // Op family -> the kernel it runs here ("gemm_f32" -> "OpenBLAS 0.3.21", ...).
  std::vector<std::pair<std::string, std::string>> kernels;

  // GPUs seen, or why none.
  struct Gpu {
    int index = 0;
    std::string name;
    std::string compute_capability;
    int64_t memory_bytes = 0;
  };
  std::vector<Gpu> gpus;
  std::string gpus_none_reason;
};

SystemInfo system_info();

// Pretty JSON (2-space indent) of every field.
std::string to_json(const SystemInfo& info);
// One line for benchmark tables: version, commit, CPU, the matrix features present, SIMD target, GEMM kernels.
std::string summary_line(const SystemInfo& info);
// The human-readable report `diffq info` prints.
std::string to_text(const SystemInfo& info);

}  // namespace diffq
