// Shared helpers of the compile tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compile/compile_options.h"
#include "compile/graph.h"
#include "diffq/tensor.h"

namespace compile_test {

// Deterministic inputs: xorshift values, uniform in [-scale, scale].
inline diffq::Tensor randn(const diffq::Shape& s, uint64_t seed, diffq::DType dt = diffq::DType::f32,
                           float scale = 2.f) {
  std::vector<float> v(size_t(diffq::shape_numel(s)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = float(double(x % 20001) / 10000.0 - 1.0) * scale;
  }
  return diffq::Tensor::from_vector(v, s, dt);
}

// max |a - b| / max |b| (a and b same shape)
inline double max_rel(const diffq::Tensor& a, const diffq::Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  const auto x = a.to_f64_vector(), y = b.to_f64_vector();
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(y[i]));
  }
  return num / den;
}

// Same shape, dtype and bytes.
inline bool same_bits(const diffq::Tensor& a, const diffq::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const diffq::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * diffq::dtype_size(x.dtype())) == 0;
}

// Every pass on, then each pass off in turn, then all off.
// A fused program over three leaves: ((a * b) + silu(c)) - clamp(gelu_tanh(a), -0.5, 0.5), then 3 - that;
// every register of dtype `dt` (each rounded to it, as the eager ops round).
inline diffq::compile::FusedProgram sample_fused_program(diffq::DType dt = diffq::DType::f32) {
  using diffq::compile::Instr;
  namespace ops = diffq::ops;
  diffq::compile::FusedProgram p;
  auto add = [&](Instr i) {
    i.dtype = dt;
    p.code.push_back(i);
    return int32_t(p.code.size() - 1);
  };
  const int32_t la = add({Instr::Op::load, 0}), lb = add({Instr::Op::load, 1}), lc = add({Instr::Op::load, 2});
  const int32_t ab = add({Instr::Op::binary, la, lb, int64_t(ops::BinaryFn::mul)});
  const int32_t sc = add({Instr::Op::unary, lc, -1, int64_t(ops::UnaryFn::silu)});
  const int32_t s = add({Instr::Op::binary, ab, sc, int64_t(ops::BinaryFn::add)});
  const int32_t g = add({Instr::Op::unary, la, -1, int64_t(ops::UnaryFn::gelu_tanh)});
  const int32_t cl = add({Instr::Op::clamp, g, -1, 0, -0.5f, 0.5f});
  const int32_t d = add({Instr::Op::binary, s, cl, int64_t(ops::BinaryFn::sub)});
  add({Instr::Op::scalar, d, -1, int64_t(ops::ScalarFn::rsub), 3.f});
  return p;
}

inline std::vector<std::pair<std::string, diffq::compile::CompileOptions>> pass_settings() {
  std::vector<std::pair<std::string, diffq::compile::CompileOptions>> out;
  out.emplace_back("all-on", diffq::compile::CompileOptions{});
  for (const char* p : {"dce", "cse", "fuse", "fuse_norm", "fuse_epilogue", "fuse_dequant", "fuse_rope", "elide_concat", "plan", "inplace",
                        "all"})
    out.emplace_back(std::string("no-") + p, diffq::compile::disable_passes({}, p, "test"));
  for (auto& [n, o] : out) o.fullgraph = true;  // a capture failure must fail the test, not fall back
  return out;
}

}  // namespace compile_test
