// The cuDNN paths of the CUDA backend as the rest of it sees them (no CUDA or cuDNN header, so
// attention.cu and the host-side tests include it): sdpa through cuDNN's fused flash attention
// (cudnn_sdpa.cpp) and conv2d through cuDNN's convolution (cudnn_conv.cpp), each with a plan cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "backend/cuda/cudnn_plan_keys.h"
#include "backend/cuda/plan_cache.h"
#include "ops/op.h"

namespace diffq::backend::cuda {

// Runs sdpa (q, k, v[, mask] -> out) through cuDNN and returns true, or returns false, touching
// nothing, when cuDNN does not take the call (float32, masks, head dims not multiples of 8, a build
// without cuDNN, a shape cuDNN rejects): the caller runs the simple kernel then.
bool cudnn_sdpa(const ops::OpCall& c, Tensor& out);

// conv2d on CUDA (registered by register_cudnn_kernels, kernels.h, where cuDNN is built). sdpa needs no
// registration of its own: attention.cu's kernel asks cudnn_sdpa first.
void cudnn_conv2d(const ops::OpCall& c, Tensor& out);

// The cuDNN frontend's validation of the graph a call of `key` would build, for a GPU of compute
// capability sm_version (90: Hopper), run without any GPU: "" when the frontend accepts it, else its
// words ("built without cuDNN" in such builds). tests/cuda/test_cudnn_plan_cache.cpp uses it.
std::string cudnn_sdpa_validate_offline(const SdpaPlanKey& key, int sm_version);
std::string cudnn_conv2d_validate_offline(const ConvPlanKey& key, int sm_version);

struct CudnnOpStats {
  PlanCacheStats plans;        // the op's plan cache
  int64_t runs = 0;            // calls that ran on cuDNN
  std::string last_rejection;  // why cuDNN last declined a call (sdpa: the simple kernel ran instead)
};
CudnnOpStats cudnn_sdpa_stats();
CudnnOpStats cudnn_conv2d_stats();
// Empty the op's plan cache and zero its counters (tests).
void cudnn_sdpa_reset();
void cudnn_conv2d_reset();

// What each cuDNN op keeps beside its plans: how many calls ran on cuDNN and why it last declined one
// (cudnn_sdpa.cpp and cudnn_conv.cpp hold one each).
template <class Key, class Plan, class Hash>
class CudnnOpBook {
 public:
  PlanCache<Key, Plan, Hash>& plans() { return plans_; }
  void count_run() { ++runs_; }
  void reject(std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    last_rejection_ = std::move(why);
  }
  CudnnOpStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {plans_.stats(), runs_.load(), last_rejection_};
  }
  void reset() {
    plans_.clear();
    runs_ = 0;
    std::lock_guard<std::mutex> lock(mu_);
    last_rejection_.clear();
  }

 private:
  PlanCache<Key, Plan, Hash> plans_;
  std::atomic<int64_t> runs_{0};
  std::mutex mu_;
  std::string last_rejection_;
};

}  // namespace diffq::backend::cuda
