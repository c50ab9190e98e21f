#include "modules/random_init.h"

#include <cmath>

#include "core/thread_pool.h"

namespace diffq {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
}  // namespace

void init_parameters_randn(Module& m, DType dtype, uint64_t seed, double std) {
  // Counter-based (element i of parameter j depends only on seed, j, i): parallel and deterministic
  // for any thread count. Approximately normal: the sum of four 16-bit uniforms (Irwin-Hall, mean 2,
  // variance 1/3) centred and scaled to unit variance — no transcendental per element.
  uint64_t j = 0;
  const float scale = float(std * std::sqrt(3.0));
  for (auto& [name, p] : m.named_parameters()) {
    Tensor v = Tensor::empty(p->shape(), DType::f32);
    float* d = v.data<float>();
    const uint64_t base = splitmix64(seed ^ (++j * 0xD1B54A32D192ED03ULL));
    core::parallel_for(v.numel(), 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const uint64_t r = splitmix64(base + uint64_t(i));
        const float sum = float((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48)) * (1.0f / 65536.0f);
        d[i] = scale * (sum - 2.0f);
      }
    });
    p->set(dtype == DType::f32 ? v : v.to(dtype), Residency::host);
  }
}

}  // namespace diffq
