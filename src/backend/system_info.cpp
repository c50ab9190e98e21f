// diffq::system_info(): the facts `diffq info` prints and benchmarks record. The kernel names come from
// the dispatch code that chooses them (gemm_kernel_name, the Highway target), never from a copy of its
// rules.
#include "diffq/system_info.h"

#include <nlohmann/json.hpp>
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu/hwy_config.h"
#include <hwy/highway.h>  // HWY_MAJOR/MINOR/PATCH

#include <cstdio>
#include <sstream>

#include "backend/cpu/attention_tiles.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/conv.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/tuning.h"
#include "diffq/runtime.h"
#include "diffq_git_commit.h"
#if DIFFQ_HAS_CUDA
#include "backend/cuda/cudnn_info.h"
#include "backend/cuda/runtime.h"
#endif

namespace diffq {

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  if (!v) return "unknown";
  const char* rt = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OMP"
                   : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "SEQ"
                   : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                   : v->cpu_runtime == DNNL_RUNTIME_THREADPOOL ? "threadpool" : "other";
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (cpu runtime " + rt + ")";
}

}  // namespace

SystemInfo system_info() {
  backend::cpu::apply_simd_target_env();
  SystemInfo s;
  s.version = DIFFQ_VERSION;
  s.commit = DIFFQ_GIT_COMMIT;
#if DIFFQ_HAS_CUDA
  s.cuda_built = true;
#ifdef DIFFQ_CUDA_ARCHITECTURES
  s.cuda_architectures = DIFFQ_CUDA_ARCHITECTURES;
#endif
#endif
  s.simd_targets_compiled = backend::cpu::simd_targets_compiled();
  s.blas = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64"
  s.onednn = onednn_version();
  s.highway = std::to_string(HWY_MAJOR) + "." + std::to_string(HWY_MINOR) + "." + std::to_string(HWY_PATCH);

  s.cpu_model = backend::cpu::cpu_model_name();
  const backend::cpu::CpuFeatures& f = backend::cpu::cpu_features();
  s.cpu_features = {{"avx2", f.avx2},           {"fma", f.fma},
                    {"f16c", f.f16c},           {"avx512f", f.avx512f},
                    {"avx512bw", f.avx512bw},   {"avx512vl", f.avx512vl},
                    {"avx512_bf16", f.avx512_bf16}, {"avx512_fp16", f.avx512_fp16},
                    {"avx_vnni", f.avx_vnni},   {"avx512_vnni", f.avx512_vnni},
                    {"amx_tile", f.amx_tile},   {"amx_bf16", f.amx_bf16},
                    {"amx_int8", f.amx_int8}};
  s.simd_targets_supported = backend::cpu::simd_targets_supported();
  s.simd_target = backend::cpu::simd_target_chosen();
  s.threads = num_threads();

  const std::string f32 = backend::cpu::gemm_kernel_name(false);
  std::string quantized = "f32 weight tiles -> " + f32;
  if (backend::cpu::gemm_bf16_native(1024, 1024, backend::cpu::current_tuning()))
    quantized += "; tiles of exact bf16 values (GGUF, bnb 4-bit in bf16) with a bf16 input -> the bf16 GEMM";
  std::string attention = "diffq flash attention, ";
  attention += backend::cpu::attention_kernel_name(backend::cpu::current_tuning()) + " (";
  attention += s.simd_target;
  attention += ")";
  s.kernels = {
      {"gemm_f32", f32},
      {"gemm_bf16", backend::cpu::gemm_kernel_name(true)},
      {"bf16 linear weights", backend::cpu::weight_packing_description()},
      {"gemm_int8 (torchao int8dq)", backend::cpu::int8_gemm_kernel_name()},
      {"attention", attention},
      {"quantized linears (dequantizing)", quantized},
      {"conv2d_f32", backend::cpu::conv_kernel_name(false)},
      {"conv2d_bf16", backend::cpu::conv_kernel_name(true)},
  };

#if DIFFQ_HAS_CUDA
  // Which CUDA attention and convolution run, and the cuDNN behind them (cudnn_handle.cpp).
  s.kernels.push_back({"cuda attention", backend::cuda::cuda_sdpa_kernel_description()});
  s.kernels.push_back({"cuda conv2d", backend::cuda::cuda_conv2d_kernel_description()});
  s.kernels.push_back({"cuda cudnn", backend::cuda::cudnn_version_description()});
  s.kernels.push_back({"cuda libraries", backend::cuda::library_versions_description()});
  for (const auto& d : backend::cuda::list_devices(&s.gpus_none_reason))
    s.gpus.push_back({d.index, d.name, std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor), d.memory_bytes});
#else
  s.gpus_none_reason = "built without CUDA (-DDIFFQ_CUDA=OFF or no nvcc at configure time)";
#endif
  if (!s.gpus.empty()) s.gpus_none_reason.clear();
  return s;
}

std::string to_json(const SystemInfo& s) {
  nlohmann::json feats = nlohmann::json::object();
  for (const auto& [k, v] : s.cpu_features) feats[k] = v;
  nlohmann::json kernels = nlohmann::json::object();
  for (const auto& [k, v] : s.kernels) kernels[k] = v;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : s.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"compute_capability", g.compute_capability},
                    {"memory_bytes", g.memory_bytes}});
  const nlohmann::json j = {
      {"version", s.version},
      {"commit", s.commit},
      {"build",
       {{"cuda", s.cuda_built},
        {"cuda_architectures", s.cuda_built ? nlohmann::json(s.cuda_architectures) : nlohmann::json(nullptr)},
        {"simd_targets", s.simd_targets_compiled},
        {"blas", s.blas},
        {"onednn", s.onednn},
        {"highway", s.highway}}},
      {"cpu",
       {{"model", s.cpu_model},
        {"features", feats},
        {"simd_targets_supported", s.simd_targets_supported},
        {"simd_target", s.simd_target}}},
      {"threads", s.threads},
      {"kernels", kernels},
      {"gpus", gpus},
      {"gpus_none_reason", s.gpus.empty() ? nlohmann::json(s.gpus_none_reason) : nlohmann::json(nullptr)},
      {"summary", summary_line(s)}};
  return j.dump(2);
}

std::string summary_line(const SystemInfo& s) {
  std::vector<std::string> matrix;
  for (const auto& [k, v] : s.cpu_features)
    if (v && (k == "avx2" || k.rfind("avx512", 0) == 0 || k.rfind("amx", 0) == 0 || k == "avx_vnni"))
      matrix.push_back(k);
  std::string gemm_f32, gemm_bf16;
  for (const auto& [k, v] : s.kernels) {
    if (k == "gemm_f32") gemm_f32 = v;
    if (k == "gemm_bf16") gemm_bf16 = v;
  }
  return "diffq " + s.version + " (" + s.commit + ") | " + s.cpu_model + " | " + join(matrix, " ") + " | simd " +
         s.simd_target + " | " + std::to_string(s.threads) + " threads | gemm f32: " + gemm_f32 +
         "; bf16: " + gemm_bf16;
}

std::string to_text(const SystemInfo& s) {
  std::ostringstream o;
  o << "diffq " << s.version << " (commit " << s.commit << ")\n";
  o << "build:   CUDA " << (s.cuda_built ? "on (architectures " + s.cuda_architectures + ")" : std::string("off"))
    << "; Highway " << s.highway << " targets " << join(s.simd_targets_compiled) << "; " << s.blas << "; oneDNN "
    << s.onednn << "\n";
  o << "cpu:     " << s.cpu_model << "\n";
  std::vector<std::string> have, lack;
  for (const auto& [k, v] : s.cpu_features) (v ? have : lack).push_back(k);
  o << "  has:   " << (have.empty() ? "-" : join(have, " ")) << "\n";
  o << "  lacks: " << (lack.empty() ? "-" : join(lack, " ")) << "\n";
  o << "simd:    " << s.simd_target << " (runnable here: " << join(s.simd_targets_supported) << ")\n";
  o << "threads: " << s.threads << "\n";
  o << "kernels:\n";
  for (const auto& [k, v] : s.kernels) o << "  " << k << ": " << v << "\n";
  o << "gpus:    ";
  if (s.gpus.empty()) {
    o << "none (" << s.gpus_none_reason << ")\n";
  } else {
    o << "\n";
    for (const auto& g : s.gpus)
      o << "  cuda:" << g.index << " " << g.name << " (sm " << g.compute_capability << ", "
        << g.memory_bytes / (1 << 20) << " MiB)\n";
  }
  return o.str();
}

}  // namespace diffq
