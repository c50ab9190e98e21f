// What a device offers compile: the kernels of the nodes the device-specific passes make (fused
// elementwise programs with their norm / GEMM prologues, RMSNorm + RoPE, a linear written into a
// concat's buffer) and what max-autotune needs (a node's candidate tunings, installing one around its
// kernel, the cache file's processor key and entries). Capture, the graph, the passes and memory planning
// are compile's own and device-neutral.
//
// A backend registers one per device kind, as it registers its op kernels (the CPU's:
// src/backend/cpu/compile/). On a device without one, the passes that need it (fusion, concat elision,
// memory planning, autotune) decline, CompiledGraph's PassStats::declined says which and why, and the
// graph runs op by op through the op dispatcher: the device's own kernels.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "compile/graph.h"
#include "compile/kernel_tuning.h"

namespace diffq::ops {
class PackedWeight;
}

namespace diffq::compile {

// The quantized Linear of a quantized GEMM prologue (GemmPrologue::module), bound by the executor to the
// module being run: its weight and its bias (undefined when it has none).
struct QuantizedLinear {
  const ops::PackedWeight* weight = nullptr;
  Tensor bias;
  Tensor dense;  // weight null: the Linear's dense weight (captured packed, since unpacked or not packable)
};

class CompileBackend {
 public:
  virtual ~CompileBackend() = default;

  // Whether this device offers a pass ("fuse", "fuse_norm", "fuse_epilogue", "fuse_dequant", "fuse_rope",
  // "elide_concat", "plan", "inplace", "autotune"): one it does not offer declines as on a device without
  // a backend (PassStats::declined), and the kernels it would need are never called.
  virtual bool offers(std::string_view pass) const {
    (void)pass;
    return true;
  }

  // ---- kernels of the nodes the passes make (buffers on this device) ----
  // A fused node: `leaves` broadcast to out's shape; out's rows contiguous (it may alias a leaf read
  // whole). `qlinear`: required when p.gemm is quantized.
  virtual void run_fused(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
                         const QuantizedLinear* qlinear) const = 0;
  // A norm_rope node: out [B, S, H, D] with rows of D.
  virtual void run_norm_rope(const NormRope& p, const std::vector<Tensor>& leaves, Tensor& out) const = 0;
  // A linear op (inputs x, w[, bias]) whose output is a row-strided view: its slice of an elided
  // concat's buffer (elide_concat.cpp). The linear kernel's values.
  virtual void run_linear_strided(const std::vector<Tensor>& inputs, Tensor& out) const = 0;
  // Whether a quantized weight's linear can run as a GEMM prologue here (dequantize inside the GEMM).
  virtual bool quantized_linear_in_parts(const ops::PackedWeight& w) const = 0;

  // ---- max-autotune (autotune.h) ----
  // The candidates of a node on its real call, the defaults (an empty tuning) first; empty when nothing
  // about how the node runs can be chosen.
  virtual std::vector<KernelTuning> tuning_candidates(const Node& n, const ops::OpCall& call) const = 0;
  // Installs `t` (empty: the defaults) on the calling thread until the returned guard is released.
  virtual std::shared_ptr<void> install(const KernelTuning& t) const = 0;
  // The autotune cache's section for this device as it is now (model, SIMD level, threads, ...).
  virtual std::string processor_key() const = 0;
  // A tuning as a cache file entry and back; `where` names the entry in errors (a malformed entry).
  virtual nlohmann::json tuning_to_json(const KernelTuning& t) const = 0;
  virtual KernelTuning tuning_from_json(const nlohmann::json& j, const std::string& where) const = 0;
};

// Called by a backend when it registers (as ops::register_kernel); nullptr removes it.
void register_compile_backend(DeviceKind d, const CompileBackend* b);
// The device kind's compile backend; nullptr when it has none (the backends register on first use).
const CompileBackend* find_compile_backend(DeviceKind d);

}  // namespace diffq::compile
