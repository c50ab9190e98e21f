// A thread-safe map from a plan key to a built plan, with hit/miss counters. cuDNN's graph build
// (heuristics query, engine support checks, kernel compilation) takes milliseconds to seconds, so each
// shape is built once and every later call of that shape reuses it. A failed build is cached too (the
// plan then records why), so an unsupported shape is not retried at every call.
// Plain C++ (no CUDA or cuDNN header): tests/cuda/test_cudnn_plan_cache.cpp checks it on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace diffq::backend::cuda {

struct PlanCacheStats {
  int64_t hits = 0;     // lookups that found a plan (built or failed)
  int64_t misses = 0;   // lookups that had to build
  int64_t entries = 0;  // plans held
};

// Key: equality-comparable with a Hash functor; Plan: any type, held by shared_ptr so a caller keeps
// using its plan while another thread adds entries.
template <class Key, class Plan, class Hash = std::hash<Key>>
class PlanCache {
 public:
  // The plan of `key`: the cached one, or build() called once (under the lock: two threads asking for
  // the same new shape build it once) and stored. build() returns std::shared_ptr<Plan>; if it throws,
  // nothing is stored and the exception propagates (the next call builds again).
  template <class Build>
  std::shared_ptr<Plan> get_or_build(const Key& key, Build&& build) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
    std::shared_ptr<Plan> p = std::forward<Build>(build)();
    map_.emplace(key, p);
    return p;
  }

  // The cached plan of `key` or null; counts nothing.
  std::shared_ptr<Plan> peek(const Key& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }

  PlanCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, misses_, int64_t(map_.size())};
  }

  // Drops every plan and zeroes the counters (tests; a plan in use stays alive through its shared_ptr).
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    hits_ = misses_ = 0;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<Plan>, Hash> map_;
  int64_t hits_ = 0, misses_ = 0;
};

// Boost-style hash combination for the keys' fields.
inline void hash_combine(size_t& seed, uint64_t v) {
  seed ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);
}

}  // namespace diffq::backend::cuda
