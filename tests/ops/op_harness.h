// The table-driven op harness (ggml test-backend-ops style). Each OpCase names an op call through
// the public builders of ops/ops.h, the shapes/dtypes/views of its inputs and a tolerance. run_op_case
// builds random inputs (fixed seed) on the CPU, lays them out as the requested view on `device`,
// runs the op there, and compares with the f64 reference (backend/reference) evaluated on the same
// rounded input values and rounded to the output dtype. Metric: max|out - ref| / max(max|ref|, tiny);
// non-finite reference values must be matched exactly.
//
// The table does not depend on the device: the CPU test instantiates it with Device::cpu(); a CUDA
// test instantiates the same table with Device::cuda().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/reference/reference_ops.h"
#include "diffq/error.h"
#include "ops/ops.h"
#include "ops/trace.h"

namespace diffq::optest {

// How an input tensor is laid out in memory (its logical shape is always InputSpec::shape).
enum class View {
  contiguous,
  transposed,  // last two dims swapped in memory (rank >= 2)
  permuted,    // all dims reversed in memory
  strided,     // every other element of a wider last dim (slice with step 2, start 1)
  expanded,    // dim 0 broadcast from size 1 (stride 0)
  offset,      // contiguous, starting 5 elements into its storage
};

enum class Gen {
  normal,     // N(0, 1)
  positive,   // U(0.1, 3)
  wide,       // N(0, 1) * 30 (softmax stress)
  ids,        // integers in [0, hi)
  nonzero,    // integers in [-9, 9] \ {0}
  small_int,  // integers in [-20, 20]
  mask_add,   // N(0, 1) with ~20% -inf (never in column 0 of the last dim)
  mask_bool,  // ~80% true (always true in column 0 of the last dim)
};

struct InputSpec {
  Shape shape;
  DType dtype = DType::f32;
  View view = View::contiguous;
  Gen gen = Gen::normal;
  int64_t hi = 0;        // Gen::ids upper bound
  bool absent = false;   // an optional input left undefined
};

struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_]
  std::vector<InputSpec> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> build;  // calls one public op builder
  double tol = 1e-5;
};

inline InputSpec absent() {
  InputSpec s;
  s.absent = true;
  return s;
}

inline uint32_t name_seed(const std::string& s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

inline std::vector<float> gen_values(const InputSpec& s, const Shape& base, std::mt19937& rng) {
  const int64_t n = shape_numel(base);
  const int64_t last = base.empty() ? 1 : std::max<int64_t>(base.back(), 1);
  std::vector<float> v(static_cast<size_t>(n));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    float x = 0;
    switch (s.gen) {
      case Gen::normal: x = nd(rng); break;
      case Gen::positive: x = 0.1f + 2.9f * ud(rng); break;
      case Gen::wide: x = 30.f * nd(rng); break;
      case Gen::ids: x = float(std::min<int64_t>(s.hi - 1, int64_t(ud(rng) * float(s.hi)))); break;
      case Gen::nonzero: {
        int k = int(ud(rng) * 18.f) - 9;
        x = float(k >= 0 ? k + 1 : k);
        break;
      }
      case Gen::small_int: x = float(int(ud(rng) * 41.f) - 20); break;
      case Gen::mask_add: x = (i % last != 0 && ud(rng) < 0.2f) ? -INFINITY : nd(rng); break;
      case Gen::mask_bool: x = (i % last == 0 || ud(rng) < 0.8f) ? 1.f : 0.f; break;
    }
    v[size_t(i)] = x;
  }
  return v;
}

// Random input with the requested layout on `device`.
inline Tensor make_input(const InputSpec& s, std::mt19937& rng, Device device) {
  if (s.absent) return {};
  const Shape& shape = s.shape;
  const int64_t r = int64_t(shape.size());
  View view = s.view;
  if ((view == View::transposed && r < 2) || (view == View::permuted && r < 2)) view = View::strided;
  if (view == View::strided && r < 1) view = View::offset;
  if (view == View::expanded && (r < 1 || shape[0] <= 1)) view = View::offset;
  Shape base = shape;
  switch (view) {
    case View::contiguous: break;
    case View::transposed: std::swap(base[size_t(r - 1)], base[size_t(r - 2)]); break;
    case View::permuted: std::reverse(base.begin(), base.end()); break;
    case View::strided: base.back() = 2 * shape.back() + 1; break;
    case View::expanded: base[0] = 1; break;
    case View::offset: base = {shape_numel(shape) + 5}; break;
  }
  Tensor t = Tensor::from_vector(gen_values(s, base, rng), base, s.dtype);
  if (!device.is_cpu()) t = t.to(device);
  switch (view) {
    case View::contiguous: return t;
    case View::transposed: return t.transpose(r - 1, r - 2);
    case View::permuted: {
      std::vector<int64_t> p(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) p[size_t(i)] = r - 1 - i;
      return t.permute(p);
    }
    case View::strided: return t.slice(r - 1, 1, 2 * shape.back() + 1, 2);
    case View::expanded: return t.expand(shape);
    case View::offset: return t.slice(0, 5, 5 + shape_numel(shape)).view(shape);
  }
  return t;
}

// Captures the OpCall the builder makes (a trace records it instead of running it).
inline ops::OpCall capture_call(const OpCase& c, const std::vector<Tensor>& cpu_inputs) {
  ops::Trace trace;
  Tensor out = c.build(cpu_inputs);
  ops::Graph g = trace.finish({out});
  EXPECT_EQ(g.nodes.size(), 1u) << c.name << ": builder must make exactly one op call";
  return g.nodes.back().call;
}

struct Comparison {
  double rel_err = 0;
  std::string mismatch;  // non-empty when a non-finite value differs or shapes disagree
};

inline Comparison compare(const Tensor& out, const reference::Array& ref) {
  Comparison r;
  if (out.shape() != ref.shape) {
    r.mismatch = "shape " + shape_str(out.shape()) + " vs reference " + shape_str(ref.shape);
    return r;
  }
  const std::vector<double> got = out.to_f64_vector();
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = ref.v[i];
    if (!std::isfinite(b) || !std::isfinite(a)) {
      const bool same = (std::isnan(a) && std::isnan(b)) || a == b;
      if (!same && r.mismatch.empty())
        r.mismatch = cat("element ", i, ": got ", a, ", reference ", b);
      continue;
    }
    max_ref = std::max(max_ref, std::fabs(b));
    max_diff = std::max(max_diff, std::fabs(a - b));
  }
  r.rel_err = max_diff / std::max(max_ref, 1e-30);
  return r;
}

inline void run_op_case(const OpCase& c, Device device) {
  std::mt19937 rng(name_seed(c.name));
  std::vector<Tensor> dev_inputs, cpu_inputs;
  for (const InputSpec& s : c.inputs) {
    Tensor t = make_input(s, rng, device);
    dev_inputs.push_back(t);
    cpu_inputs.push_back(!t.defined() || device.is_cpu() ? t : t.to(Device::cpu()));
  }
  const ops::OpCall call = capture_call(c, cpu_inputs);
  const ops::OutputMeta meta = ops::infer(call);
  reference::Array ref = reference::run(call);
  reference::round_to(ref, meta.dtype);

  Tensor out = c.build(dev_inputs);
  ASSERT_EQ(out.device(), device) << c.name;
  ASSERT_EQ(out.dtype(), meta.dtype) << c.name;
  if (!device.is_cpu()) out = out.to(Device::cpu());
  const Comparison cmp = compare(out, ref);
  EXPECT_TRUE(cmp.mismatch.empty()) << c.name << ": " << cmp.mismatch;
  EXPECT_LE(cmp.rel_err, c.tol) << c.name << ": relative error " << cmp.rel_err << " > " << c.tol;
}

}  // namespace diffq::optest
