// What the cuDNN paths (cudnn_sdpa.cpp, cudnn_conv.cpp) share: dtype mapping, building a cuDNN
// frontend graph into an execution plan (answering why not, instead of throwing, so the caller can cache
// the rejection and take its fallback) and running a built plan with its workspace from diffq's
// allocator. Only compiled where CMake found cuDNN and its frontend (DIFFQ_HAS_CUDNN).
#pragma once

#include <cudnn_frontend.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/cuda/cudnn_handle.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"
#include "diffq/tensor.h"

namespace diffq::backend::cuda {

namespace fe = cudnn_frontend;

inline fe::DataType_t fe_dtype(DType t) {
  switch (t) {
    case DType::bf16: return fe::DataType_t::BFLOAT16;
    case DType::f16: return fe::DataType_t::HALF;
    case DType::f32: return fe::DataType_t::FLOAT;
    default: fail("cudnn", "cuda: no cuDNN data type for ", dtype_name(t));
  }
}

// Validates `g`, queries cuDNN's heuristics (mode A, then the fallback list), and builds the first plan
// that builds. Returns "" on success, else which step failed and cuDNN's words. no_tensor_cores drops
// the engines tagged TENSOR_CORE: for float32 data those are TF32 kernels (10-bit mantissa inputs),
// which the float32 op's 1e-4 agreement with the CPU backend does not allow.
inline std::string build_plan(fe::graph::Graph& g, cudnnHandle_t handle, bool no_tensor_cores) {
  try {
    auto step = [](fe::error_t st, const char* what) -> std::string {
      return st.is_good() ? std::string() : cat(what, ": ", st.get_message());
    };
    std::string e = step(g.validate(), "validate");
    if (e.empty()) e = step(g.build_operation_graph(handle), "build_operation_graph");
    if (e.empty()) e = step(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                            "create_execution_plans");
    if (e.empty() && no_tensor_cores) g.deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE});
    if (e.empty()) e = step(g.check_support(), "check_support");
    if (e.empty()) e = step(g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
    return e;
  } catch (const std::exception& ex) {  // the frontend's descriptor builders may throw
    return cat("exception: ", ex.what());
  }
}

// The frontend's own checks of `g` (attributes, shapes, strides, the sdpa support surface for the SM
// version set on the graph), without a GPU or a cuDNN backend call: "" when valid, else its words.
inline std::string validate_offline(fe::graph::Graph& g) {
  try {
    fe::error_t st = g.validate();
    return st.is_good() ? std::string() : st.get_message();
  } catch (const std::exception& ex) {
    return cat("exception: ", ex.what());
  }
}

// The workspace size of a built plan (bytes).
inline int64_t plan_workspace(fe::graph::Graph& g, const char* op, int device) {
  int64_t ws = 0;
  fe::error_t st = g.get_workspace_size(ws);
  check(st.is_good(), op, "cuda:", device, ": cuDNN get_workspace_size failed: ", st.get_message());
  return ws;
}

// One op's built plan for one key: the graph and its workspace, or why cuDNN rejected the key (cached as
// such by the op's plan cache, so an unsupported shape is not retried at every call).
struct CudnnPlan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN rejected the key
  int64_t workspace = 0;
  std::string rejected;
};

// build_plan on `g`, kept with its workspace size when it builds.
inline std::shared_ptr<CudnnPlan> build_cudnn_plan(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t handle,
                                                   bool no_tensor_cores, const char* op, int device) {
  auto plan = std::make_shared<CudnnPlan>();
  plan->rejected = build_plan(*g, handle, no_tensor_cores);
  if (!plan->rejected.empty()) return plan;
  plan->workspace = plan_workspace(*g, op, device);
  plan->graph = std::move(g);
  return plan;
}

// Runs a built plan on cuda:`device` (the caller holds a DeviceGuard) with the device pointers of
// `pack` (uid -> pointer). The workspace is a device tensor from diffq's allocator, released when the
// call returns: the allocator's frees are ordered on the stream cuDNN runs on (this thread's current one).
inline void run_plan(fe::graph::Graph& g, int64_t workspace_bytes, std::unordered_map<int64_t, void*>& pack,
                     const char* op, int device) {
  CudnnDevice& dev = cudnn_device(device, op);
  Tensor ws;
  if (workspace_bytes > 0) ws = Tensor::empty({workspace_bytes}, DType::u8, Device::cuda(device));
  std::lock_guard<std::mutex> lock(dev.mu);
  check_cudnn(cudnnSetStream(dev.handle, current_stream()), op, "cudnnSetStream", device);  // runtime.h
  fe::error_t st = g.execute(dev.handle, pack, ws.defined() ? ws.data_ptr() : nullptr);
  check(st.is_good(), op, "cuda:", device, ": cuDNN execute failed: ", st.get_message());
}

}  // namespace diffq::backend::cuda
