// The op table: every op, several shapes (odd sizes included), dtypes and memory layouts.
// Included by every backend's op test (tests/ops for the CPU; a CUDA test instantiates it too).
#pragma once

#include <map>

#include "ops/op_harness.h"

namespace diffq::optest {

namespace cases_detail {

inline const char* view_name(View v) {
  switch (v) {
    case View::contiguous: return "contig";
    case View::transposed: return "transposed";
    case View::permuted: return "permuted";
    case View::strided: return "strided";
    case View::expanded: return "expanded";
    case View::offset: return "offset";
  }
  return "?";
}

struct Table {
  std::vector<OpCase> cases;
  std::map<std::string, int> counts;

  // Name: op, running number, first input's dtype and the first non-contiguous view.
  void add(const std::string& op, std::vector<InputSpec> in,
           std::function<Tensor(const std::vector<Tensor>&)> fn, double tol = 1e-5) {
    std::string name = op + "_" + std::to_string(counts[op]++);
    if (!in.empty()) name += "_" + std::string(dtype_name(in[0].dtype));
    for (const InputSpec& s : in)
      if (!s.absent && s.view != View::contiguous) {
        name += std::string("_") + view_name(s.view);
        break;
      }
    cases.push_back({name, std::move(in), std::move(fn), tol});
  }
};

inline InputSpec I(Shape s, DType d = DType::f32, View v = View::contiguous, Gen g = Gen::normal) {
  InputSpec r;
  r.shape = std::move(s);
  r.dtype = d;
  r.view = v;
  r.gen = g;
  return r;
}
inline InputSpec Ids(Shape s, int64_t hi, DType d = DType::i64, View v = View::contiguous) {
  InputSpec r = I(std::move(s), d, v, Gen::ids);
  r.hi = hi;
  return r;
}

constexpr DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16, i32 = DType::i32,
                i64 = DType::i64;
constexpr View C = View::contiguous, T = View::transposed, P = View::permuted, S = View::strided,
               E = View::expanded, O = View::offset;

// Tolerance for an output of dtype d computed with a float op of "tight" f32 accuracy.
inline double tol_for(DType d, double f32_tol = 1e-5) {
  return d == DType::f32 ? f32_tol : d == DType::f16 ? 2e-3 : 1e-2;
}

inline void linear_cases(Table& t) {
  auto lin = [](const std::vector<Tensor>& x) { return ops::linear(x[0], x[1], x[2]); };
  struct L { int64_t m, k, n; };
  for (L s : {L{1, 1, 1}, L{3, 17, 5}, L{67, 33, 19}, L{4, 128, 65}})
    for (DType d : {f32, bf16})
      for (bool bias : {true, false})
        t.add("linear", {I({s.m, s.k}, d), I({s.n, s.k}, d), bias ? I({s.n}, d) : absent()}, lin,
              tol_for(d, 1e-4));
  t.add("linear", {I({2, 3, 16}, f32), I({8, 16}), I({8})}, lin, 1e-4);
  t.add("linear", {I({5, 16}, f32, T), I({8, 16}), I({8})}, lin, 1e-4);
  t.add("linear", {I({5, 16}, f32), I({8, 16}, f32, T), absent()}, lin, 1e-4);
  t.add("linear", {I({2, 5, 16}, f32, P), I({8, 16}, f32, S), I({8}, f32, S)}, lin, 1e-4);
  t.add("linear", {I({5, 16}, f32, O), I({8, 16}, f32, O), I({8})}, lin, 1e-4);
  t.add("linear", {I({3, 5, 16}, f32, E), I({8, 16}), I({8})}, lin, 1e-4);
  t.add("linear", {I({7, 16}, bf16, T), I({9, 16}, bf16, T), I({9}, bf16)}, lin, 1e-2);
  t.add("linear", {I({7, 24}, f16), I({9, 24}, f16), I({9}, f16)}, lin, 2e-3);
  t.add("linear", {I({7, 24}, bf16), I({9, 24}, f32), I({9}, f32)}, lin, 1e-2);

  auto mm = [](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1]); };
  t.add("matmul", {I({3, 5}), I({5, 7})}, mm, 1e-4);
  t.add("matmul", {I({1, 1}), I({1, 1})}, mm, 1e-4);
  t.add("matmul", {I({2, 3, 17, 9}), I({9, 4})}, mm, 1e-4);
  t.add("matmul", {I({2, 1, 5, 6}), I({3, 6, 7})}, mm, 1e-4);
  t.add("matmul", {I({4, 5, 6}, f32, T), I({4, 6, 7}, f32, T)}, mm, 1e-4);
  t.add("matmul", {I({2, 3, 5, 6}, f32, P), I({6, 67}, f32, S)}, mm, 1e-4);
  t.add("matmul", {I({3, 5, 6}, f32, E), I({3, 6, 2}, f32, O)}, mm, 1e-4);
  t.add("matmul", {I({2, 17, 33}, bf16), I({2, 33, 9}, bf16)}, mm, 1e-2);
  t.add("matmul", {I({2, 17, 33}, bf16, T), I({33, 9}, bf16, T)}, mm, 1e-2);
  t.add("matmul", {I({5, 8}, f16), I({8, 3}, f16)}, mm, 2e-3);
}

inline void elementwise_cases(Table& t) {
  using ops::BinaryFn;
  for (BinaryFn fn : {BinaryFn::add, BinaryFn::sub, BinaryFn::mul, BinaryFn::div, BinaryFn::maximum,
                      BinaryFn::minimum}) {
    const std::string op = "binary" + std::to_string(int(fn));
    auto f = [fn](const std::vector<Tensor>& x) {
      switch (fn) {
        case BinaryFn::add: return ops::add(x[0], x[1]);
        case BinaryFn::sub: return ops::sub(x[0], x[1]);
        case BinaryFn::mul: return ops::mul(x[0], x[1]);
        case BinaryFn::div: return ops::div(x[0], x[1]);
        case BinaryFn::maximum: return ops::maximum(x[0], x[1]);
        case BinaryFn::minimum: return ops::minimum(x[0], x[1]);
      }
      return Tensor();
    };
    const Gen g2 = fn == BinaryFn::div ? Gen::positive : Gen::normal;
    t.add(op, {I({67}), I({67}, f32, C, g2)}, f);
    t.add(op, {I({1}), I({1}, f32, C, g2)}, f);
    t.add(op, {I({4, 17}), I({17}, f32, C, g2)}, f);
    t.add(op, {I({2, 3, 5}), I({2, 1, 5}, f32, C, g2)}, f);
    t.add(op, {I({3, 1, 5}), I({4, 1}, f32, C, g2)}, f);
    t.add(op, {I({5, 17}, f32, T), I({5, 17}, f32, S, g2)}, f);
    t.add(op, {I({3, 4, 6}, f32, P), I({3, 4, 6}, f32, E, g2)}, f);
    t.add(op, {I({3, 7}, f32, O), I({1, 7}, f32, O, g2)}, f);
    t.add(op, {I({3, 33}, bf16), I({33}, bf16, C, g2)}, f, 1e-2);
    t.add(op, {I({6, 5}, bf16, T), I({6, 5}, f32, C, g2)}, f, 1e-2);
    t.add(op, {I({9}, f16), I({9}, f16, C, g2)}, f, 2e-3);
    t.add(op, {I({5, 7}, i32, C, Gen::small_int), I({7}, i32, C, Gen::nonzero)}, f, 0.0);
    t.add(op, {I({4, 3}, i64, T, Gen::small_int), I({4, 3}, i64, C, Gen::nonzero)}, f, 0.0);
    t.add(op, {I({2, 1000}), I({2, 1000}, f32, C, g2)}, f);
    t.add(op, {I({64, 1031}), I({1031}, f32, C, g2)}, f);  // many chunks, run in parallel
    t.add(op, {I({5, 10007}, bf16, T), I({10007}, f32, C, g2)}, f, 1e-2);
    // More integer dtypes (values that neither overflow nor divide by zero, so the CPU's wrapping and
    // the reference's saturating casts agree), and an integer with a float (the float path; an integer
    // output is truncated).
    if (fn != BinaryFn::mul) t.add(op, {I({3, 5}, DType::i8, C, Gen::small_int), I({5}, DType::i8, C, Gen::nonzero)}, f, 0.0);
    t.add(op, {I({2, 6}, DType::boolean, T, Gen::small_int), I({2, 6}, DType::boolean, C, Gen::nonzero)}, f, 0.0);
    t.add(op, {I({4, 7}, i32, C, Gen::small_int), I({7}, f32, C, g2)}, f, 0.0);
    t.add(op, {I({4, 7}, f32, S), I({4, 1}, i64, C, Gen::nonzero)}, f);
  }

  using ops::ScalarFn;
  struct Sc { ScalarFn fn; double s; Gen g; };
  for (Sc sc : {Sc{ScalarFn::add, 2.5, Gen::normal}, Sc{ScalarFn::mul, -0.75, Gen::normal},
                Sc{ScalarFn::rsub, 1.0, Gen::normal}, Sc{ScalarFn::pow, 2.0, Gen::normal},
                Sc{ScalarFn::pow, 0.5, Gen::positive}, Sc{ScalarFn::pow, -1.5, Gen::positive},
                Sc{ScalarFn::pow, 3.0, Gen::normal}}) {
    auto f = [sc](const std::vector<Tensor>& x) {
      switch (sc.fn) {
        case ScalarFn::add: return ops::add_scalar(x[0], sc.s);
        case ScalarFn::mul: return ops::mul_scalar(x[0], sc.s);
        case ScalarFn::rsub: return ops::rsub_scalar(x[0], sc.s);
        case ScalarFn::pow: return ops::pow_scalar(x[0], sc.s);
      }
      return Tensor();
    };
    const std::string op = "scalar" + std::to_string(int(sc.fn));
    t.add(op, {I({67}, f32, C, sc.g)}, f);
    t.add(op, {I({5, 17}, f32, T, sc.g)}, f);
    t.add(op, {I({3, 33}, bf16, S, sc.g)}, f, 1e-2);
    t.add(op, {I({3, 4, 5}, f16, P, sc.g)}, f, 2e-3);
    if (sc.fn != ScalarFn::pow || sc.s == 2.0 || sc.s == 3.0)
      t.add(op, {I({4, 9}, i32, C, Gen::small_int)}, f, 0.0);
    // Every scalar on int64 views and on int8 (int8 pow saturates: computed in double, as the reference).
    t.add(op, {I({3, 4}, i64, T, Gen::small_int)}, f, 0.0);
    t.add(op, {I({2, 9}, DType::i8, C, Gen::small_int)}, f, 0.0);
  }

  auto cl = [](const std::vector<Tensor>& x) { return ops::clamp(x[0], -0.5, 0.75); };
  t.add("clamp", {I({67})}, cl);
  t.add("clamp", {I({5, 17}, f32, T)}, cl);
  t.add("clamp", {I({3, 9}, bf16, S)}, cl, 1e-2);
  t.add("clamp", {I({3, 9}, i64, C, Gen::small_int)},
        [](const std::vector<Tensor>& x) { return ops::clamp(x[0], -3, 7); }, 0.0);
  t.add("clamp", {I({4, 5}, i32, P, Gen::small_int)},
        [](const std::vector<Tensor>& x) { return ops::clamp(x[0], -2.5, 3.5); }, 0.0);
  t.add("clamp", {I({6}, DType::boolean, C, Gen::small_int)},
        [](const std::vector<Tensor>& x) { return ops::clamp(x[0], -3, 7); }, 0.0);
}

// mul_add: a * b + c into a chosen dtype (the product rounded to it first on request), broadcasting.
inline void mul_add_cases(Table& t) {
  auto f = [](DType out, bool round_product) {
    return [out, round_product](const std::vector<Tensor>& x) { return ops::mul_add(x[0], x[1], x[2], out, round_product); };
  };
  t.add("mul_add", {I({67}), I({67}), I({67})}, f(f32, false));
  t.add("mul_add", {I({1, 1, 37}), I({2, 5, 37}, bf16), I({2, 5, 37}, bf16)}, f(bf16, false), 1e-2);  // a gated residual
  t.add("mul_add", {I({1, 1, 37}, bf16), I({2, 5, 37}, bf16), I({2, 5, 37}, bf16)}, f(bf16, true), 1e-2);
  t.add("mul_add", {I({3, 1, 5}), I({4, 1}), I({5})}, f(f32, false));
  t.add("mul_add", {I({5, 17}, f32, T), I({5, 17}, bf16, S), I({5, 17}, f32, O)}, f(f32, false), 1e-2);
  t.add("mul_add", {I({3, 4, 6}, f32, P), I({3, 4, 6}, f32, E), I({1}, f32)}, f(f32, true));
  t.add("mul_add", {I({9}, f16), I({9}, f16), I({9}, f16)}, f(f16, true), 2e-3);
  t.add("mul_add", {I({9}, f16), I({9}, f32), I({9}, bf16)}, f(f16, false), 2e-3);
  t.add("mul_add", {I({1, 2500}), I({3, 2500}, bf16), I({3, 2500}, bf16, T)}, f(bf16, false), 1e-2);  // chunks
  t.add("mul_add", {I({64, 1031}), I({1031}), I({64, 1})}, f(f32, false));  // many rows, in parallel
}

inline void unary_cases(Table& t) {
  using ops::UnaryFn;
  for (int u = 0; u <= int(UnaryFn::square); ++u) {
    const UnaryFn fn = UnaryFn(u);
    const Gen g = (fn == UnaryFn::sqrt || fn == UnaryFn::rsqrt) ? Gen::positive : Gen::normal;
    auto f = [fn](const std::vector<Tensor>& x) { return ops::unary(x[0], fn); };
    const std::string op = "unary" + std::to_string(u);
    t.add(op, {I({67}, f32, C, g)}, f);
    t.add(op, {I({1}, f32, C, g)}, f);
    t.add(op, {I({3, 1000}, f32, C, g)}, f);
    t.add(op, {I({7, 10007}, f32, C, g)}, f);
    t.add(op, {I({5, 17}, f32, T, g)}, f);
    t.add(op, {I({3, 4, 6}, bf16, P, g)}, f, 1e-2);
    t.add(op, {I({3, 19}, bf16, S, g)}, f, 1e-2);
    t.add(op, {I({4, 9}, f16, E, g)}, f, 2e-3);
    if (fn != UnaryFn::sqrt && fn != UnaryFn::rsqrt)
      t.add(op, {I({2, 50}, f32, O, Gen::wide)}, f, 1e-5);
  }
}

inline void norm_cases(Table& t) {
  for (int64_t dim : {-1, 0, 1}) {
    auto f = [dim](const std::vector<Tensor>& x) { return ops::softmax(x[0], dim); };
    t.add("softmax", {I({3, 17})}, f);
    t.add("softmax", {I({2, 67, 5}, f32, T)}, f);
    t.add("softmax", {I({2, 9, 300}, f32, C, Gen::wide)}, f);
    t.add("softmax", {I({4, 1, 7}, bf16, P)}, f, 1e-2);
    t.add("softmax", {I({3, 5, 2}, f32, S)}, f);
  }
  t.add("softmax", {I({1, 1})}, [](const std::vector<Tensor>& x) { return ops::softmax(x[0], 0); });
  t.add("softmax", {I({5, 4}, f32, C, Gen::mask_add)},
        [](const std::vector<Tensor>& x) { return ops::softmax(x[0], -1); });

  auto ln = [](const std::vector<Tensor>& x) { return ops::layer_norm(x[0], x[1], x[2], 1e-6); };
  t.add("layer_norm", {I({3, 17}), I({17}), I({17})}, ln);
  t.add("layer_norm", {I({3, 17}), absent(), absent()}, ln);
  t.add("layer_norm", {I({1, 1}), absent(), absent()}, ln);
  t.add("layer_norm", {I({2, 5, 67}, bf16), I({67}, bf16), I({67}, bf16)}, ln, 1e-2);
  t.add("layer_norm", {I({4, 3072}), absent(), absent()}, ln);
  t.add("layer_norm", {I({6, 33}, f32, T), I({33}, f32, S), I({33}, f32, O)}, ln);
  t.add("layer_norm", {I({3, 4, 20}, f32, E), I({20}), absent()}, ln);
  t.add("layer_norm", {I({5, 24}, f16), I({24}, f32), I({24}, f32)}, ln, 2e-3);
  t.add("layer_norm", {I({3, 160}, bf16), I({160}, f32), I({160}, f32)}, ln, 1e-2);  // Wan's modulation
  // Parameters with extra leading size-1 dims (a weight kept as [1, 1, n]).
  t.add("layer_norm", {I({3, 17}), I({1, 1, 17}), I({1, 17}, f32, S)}, ln);

  auto rms = [](const std::vector<Tensor>& x) { return ops::rms_norm(x[0], x[1], 1e-6); };
  t.add("rms_norm", {I({4, 128}), I({128})}, rms);
  t.add("rms_norm", {I({3, 17}), absent()}, rms);
  t.add("rms_norm", {I({1, 1}), I({1})}, rms);
  t.add("rms_norm", {I({2, 3, 5, 128}, bf16), I({128}, bf16)}, rms, 1e-2);
  t.add("rms_norm", {I({2, 3, 67}, bf16, P), I({67}, f32)}, rms, 1e-2);
  t.add("rms_norm", {I({9, 40}, f32, T), I({40}, f32, S)}, rms);
  t.add("rms_norm", {I({2, 5120}), I({5120})}, rms);
  t.add("rms_norm", {I({2, 3, 40}), I({1, 1, 40})}, rms);
  t.add("rms_norm", {I({4, 64}, bf16), I({1, 1, 64}, bf16, S)}, rms, 1e-2);

  auto gn = [](int64_t g) {
    return [g](const std::vector<Tensor>& x) { return ops::group_norm(x[0], g, x[1], x[2], 1e-6); };
  };
  auto chn = [](double scale) {
    return [scale](const std::vector<Tensor>& x) { return ops::channel_norm(x[0], x[1], scale); };
  };
  t.add("channel_norm", {I({2, 6, 5, 7}), I({6})}, chn(std::sqrt(6.0)));
  t.add("channel_norm", {I({3, 5, 2, 3, 4}), absent()}, chn(1.0));
  t.add("channel_norm", {I({1, 96, 40, 52}), I({96})}, chn(std::sqrt(96.0)));  // blocks of 1024 pixels + a tail
  t.add("channel_norm", {I({2, 8, 6, 5}, bf16), I({8}, bf16)}, chn(std::sqrt(8.0)), 1e-2);
  t.add("channel_norm", {I({2, 6, 5, 7}, f32, P), I({6}, f32, S)}, chn(2.0));
  t.add("channel_norm", {I({2, 6, 5, 7}, bf16, P), I({6}, f32)}, chn(2.0), 1e-2);
  t.add("channel_norm", {I({2, 8, 6, 5}, f16), I({8}, f16)}, chn(std::sqrt(8.0)), 2e-3);
  // Wan's layout: video [N, C, T, H, W] in bf16, gamma kept as [C, 1, 1, 1].
  t.add("channel_norm", {I({1, 12, 3, 4, 5}, bf16), I({12, 1, 1, 1}, bf16)}, chn(std::sqrt(12.0)), 1e-2);
  // silu(channel_norm(x)) in one op (the norm rounded to x's dtype first): every dtype, a view, no weight.
  // bf16: the norm's three roundings (Diffusers' op-by-op bf16, which the f64 reference does not make) and
  // silu's own one stay within 2e-2.
  auto chns = [](double scale) {
    return [scale](const std::vector<Tensor>& x) { return ops::channel_norm_silu(x[0], x[1], scale); };
  };
  t.add("channel_norm_silu", {I({2, 6, 5, 7}), I({6})}, chns(std::sqrt(6.0)));
  t.add("channel_norm_silu", {I({1, 12, 3, 40, 50}, bf16), I({12, 1, 1, 1}, bf16)}, chns(std::sqrt(12.0)), 2e-2);
  t.add("channel_norm_silu", {I({2, 8, 6, 5}, f16), I({8}, f16)}, chns(std::sqrt(8.0)), 2e-3);
  t.add("channel_norm_silu", {I({2, 6, 5, 7}, bf16, P), absent()}, chns(2.0), 2e-2);
  t.add("group_norm", {I({2, 6, 5, 7}), I({6}), I({6})}, gn(3));
  t.add("group_norm", {I({1, 32, 3, 3}), I({32}), I({32})}, gn(32));
  t.add("group_norm", {I({2, 4, 9}), absent(), absent()}, gn(2));
  t.add("group_norm", {I({1, 1, 1, 1}), absent(), absent()}, gn(1));
  t.add("group_norm", {I({2, 8, 6, 5}, bf16), I({8}, bf16), I({8}, bf16)}, gn(4), 1e-2);
  t.add("group_norm", {I({2, 6, 5, 7}, f32, P), I({6}, f32, S), I({6})}, gn(2));
  t.add("group_norm", {I({1, 64, 32, 32}), I({64}), I({64})}, gn(32));
  // Blocks normalized in the thread's scratch (bf16 / f16 inputs), in place (f32), or via a copy
  // (views); blocks longer than the statistics' chunks.
  t.add("group_norm", {I({1, 64, 40, 40}, bf16), I({64}, bf16), I({64}, bf16)}, gn(32), 1e-2);
  t.add("group_norm", {I({2, 6, 5, 7}, bf16, P), I({6}, bf16), absent()}, gn(3), 1e-2);
  t.add("group_norm", {I({2, 8, 6, 5}, f16), I({8}, f16), I({8}, f16)}, gn(2), 2e-3);
  t.add("group_norm", {I({1, 8, 70, 70}), absent(), I({8})}, gn(2));
  // The VAEs' bf16 (32 groups), with parameters of another dtype and shape.
  t.add("group_norm", {I({1, 64, 24, 24}, bf16), I({64}, bf16), I({64}, bf16)}, gn(32), 1e-2);
  t.add("group_norm", {I({2, 8, 6, 5}, bf16, T), I({1, 8, 1, 1}, bf16), I({8}, f32)}, gn(4), 1e-2);
  // silu(group_norm(x)) in one op (the norm rounded to x's dtype first): every dtype, a view, no affine,
  // rows longer than the kernel's chunks.
  auto gns = [](int64_t g) {
    return [g](const std::vector<Tensor>& x) { return ops::group_norm_silu(x[0], g, x[1], x[2], 1e-6); };
  };
  t.add("group_norm_silu", {I({2, 6, 5, 7}), I({6}), I({6})}, gns(3));
  t.add("group_norm_silu", {I({1, 8, 70, 70}, bf16), I({8}, bf16), I({8}, bf16)}, gns(2), 1e-2);
  t.add("group_norm_silu", {I({2, 8, 6, 5}, f16), I({8}, f16), I({8}, f16)}, gns(2), 2e-3);
  t.add("group_norm_silu", {I({2, 6, 5, 7}, bf16, P), I({6}, bf16), absent()}, gns(3), 1e-2);
  t.add("group_norm_silu", {I({1, 8, 70, 70}), absent(), absent()}, gns(4));
}

inline void rope_attention_cases(Table& t) {
  auto rp = [](const std::vector<Tensor>& x) { return ops::rope(x[0], x[1], x[2]); };
  t.add("rope", {I({2, 5, 3, 8}), I({5, 8}), I({5, 8})}, rp);
  t.add("rope", {I({1, 1, 1, 2}), I({1, 2}), I({1, 2})}, rp);
  t.add("rope", {I({1, 17, 2, 128}), I({17, 128}), I({17, 128})}, rp);
  t.add("rope", {I({2, 7, 3, 6}, f32, T), I({7, 6}), I({7, 6}, f32, O)}, rp);
  t.add("rope", {I({2, 6, 3, 4}, f32, P), I({6, 4}, f32, S), I({6, 4})}, rp);
  t.add("rope", {I({2, 9, 4, 34}, bf16), I({9, 34}), I({9, 34})}, rp, 1e-2);
  // FLUX's layout: q is [B, H, S, D] and rope sees its [B, S, H, D] view.
  t.add("rope", {I({1, 3, 11, 16}), I({11, 16}), I({11, 16})},
        [](const std::vector<Tensor>& x) { return ops::rope(x[0].transpose(1, 2), x[1], x[2]); });

  auto sd = [](double scale) {
    return [scale](const std::vector<Tensor>& x) {
      return ops::sdpa(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor(), scale);
    };
  };
  t.add("sdpa", {I({1, 1, 1, 1}), I({1, 1, 1, 1}), I({1, 1, 1, 1})}, sd(0), 1e-4);
  t.add("sdpa", {I({2, 3, 17, 8}), I({2, 3, 17, 8}), I({2, 3, 17, 8})}, sd(0), 1e-4);
  t.add("sdpa", {I({1, 2, 67, 16}), I({1, 2, 300, 16}), I({1, 2, 300, 16})}, sd(0), 1e-4);
  t.add("sdpa", {I({1, 2, 130, 32}), I({1, 2, 520, 32}), I({1, 2, 520, 12})}, sd(0.3), 1e-4);
  t.add("sdpa", {I({2, 2, 5, 8}, f32, T), I({2, 2, 9, 8}, f32, P), I({2, 2, 9, 3}, f32, S)}, sd(0),
        1e-4);
  t.add("sdpa", {I({2, 2, 5, 8}, f32, E), I({2, 2, 9, 8}, f32, O), I({2, 2, 9, 8}, f32, E)}, sd(0),
        1e-4);
  t.add("sdpa", {I({1, 2, 7, 8}), I({1, 2, 300, 8}), I({1, 2, 300, 8}),
                 I({7, 300}, f32, C, Gen::mask_add)}, sd(0), 1e-4);
  t.add("sdpa", {I({2, 2, 7, 8}), I({2, 2, 9, 8}), I({2, 2, 9, 8}), I({2, 1, 1, 9}, f32, C,
                 Gen::mask_add)}, sd(0), 1e-4);
  t.add("sdpa", {I({2, 2, 7, 8}), I({2, 2, 9, 8}), I({2, 2, 9, 8}),
                 I({2, 1, 7, 9}, DType::boolean, C, Gen::mask_bool)}, sd(0), 1e-4);
  // More keys than one tile (2048): the online-softmax rescaling across key blocks; several query
  // tiles per head run on different threads.
  t.add("sdpa", {I({2, 2, 130, 16}), I({2, 2, 2100, 16}), I({2, 2, 2100, 16})}, sd(0), 1e-4);
  t.add("sdpa", {I({1, 2, 3, 8}), I({1, 2, 2100, 8}), I({1, 2, 2100, 8}),
                 I({3, 2100}, f32, C, Gen::mask_add)}, sd(0), 1e-4);
  t.add("sdpa", {I({1, 3, 33, 64}, bf16), I({1, 3, 40, 64}, bf16), I({1, 3, 40, 64}, bf16)}, sd(0),
        1e-2);
  t.add("sdpa", {I({1, 3, 9, 16}, f32, C, Gen::wide), I({1, 3, 9, 16}, f32, C, Gen::wide),
                 I({1, 3, 9, 16})}, sd(0), 1e-4);
  t.add("sdpa", {I({1, 2, 5, 16}, f16), I({1, 2, 6, 16}, f16), I({1, 2, 6, 16}, f16)}, sd(0), 2e-3);
  // Head dims above 256 (the VAEs' single-head attention: 512 in FLUX's, 384 in Wan's) and a float32
  // call with 2^20 scores: CUDA's GEMM path (sdpa_gemm.cpp), in query-row chunks.
  t.add("sdpa", {I({1, 1, 70, 264}), I({1, 1, 90, 264}), I({1, 1, 90, 264}, f32, T)}, sd(0), 1e-4);
  t.add("sdpa", {I({1, 1, 40, 512}, bf16), I({1, 1, 48, 512}, bf16), I({1, 1, 48, 384}, bf16)}, sd(0), 1e-2);
  t.add("sdpa", {I({1, 2, 1024, 16}), I({1, 2, 512, 16}), I({1, 2, 512, 16})}, sd(0), 1e-4);
  // FLUX's layout: heads from [B, S, H, D] tensors.
  t.add("sdpa", {I({1, 20, 2, 16}), I({1, 20, 2, 16}), I({1, 20, 2, 16})},
        [](const std::vector<Tensor>& x) {
          return ops::sdpa(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2));
        },
        1e-4);
}

inline void conv_layout_cases(Table& t) {
  auto cv = [](int64_t s, ops::Conv2dPad p) {
    return [s, p](const std::vector<Tensor>& x) { return ops::conv2d(x[0], x[1], x[2], s, p); };
  };
  t.add("conv2d", {I({1, 3, 8, 8}), I({4, 3, 3, 3}), I({4})}, cv(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d", {I({2, 5, 9, 7}), I({6, 5, 3, 3}), I({6})}, cv(2, {0, 1, 0, 1}), 1e-4);
  t.add("conv2d", {I({2, 5, 9, 7}), I({6, 5, 3, 3}), absent()}, cv(2, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d", {I({2, 5, 9, 7}), I({3, 5, 1, 1}), I({3})}, cv(1, {}), 1e-4);
  t.add("conv2d", {I({1, 4, 9, 7}), I({3, 4, 1, 1}), I({3})}, cv(2, {}), 1e-4);
  t.add("conv2d", {I({1, 1, 1, 1}), I({1, 1, 1, 1}), I({1})}, cv(1, {}), 1e-4);
  t.add("conv2d", {I({1, 1, 1, 1}), I({2, 1, 3, 3}), I({2})}, cv(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d", {I({1, 3, 17, 13}), I({5, 3, 3, 3}), I({5})}, cv(1, {2, 0, 1, 0}), 1e-4);
  t.add("conv2d", {I({1, 16, 40, 40}), I({32, 16, 3, 3}), I({32})}, cv(1, {1, 1, 1, 1}), 1e-4);
  // Enough columns that im2col runs in several chunks of output rows.
  t.add("conv2d", {I({1, 64, 20, 200}), I({8, 64, 3, 3}), I({8})}, cv(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d", {I({2, 3, 6, 5}, f32, P), I({4, 3, 3, 3}, f32, T), I({4}, f32, S)},
        cv(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d", {I({2, 3, 6, 5}, f32, E), I({4, 3, 3, 3}, f32, O), I({4})}, cv(2, {0, 1, 0, 1}),
        1e-4);
  t.add("conv2d", {I({1, 8, 10, 9}, bf16), I({8, 8, 3, 3}, bf16), I({8}, bf16)}, cv(1, {1, 1, 1, 1}),
        1e-2);
  // bf16 input and weights stay bf16 (col in bf16, gemm_bf16): strided, 1x1 direct and strided, no
  // bias, several im2col chunks, batch of two, wide enough for whole 32-column panels and K blocks,
  // views that must be made contiguous first, and a bf16 input with f32 weights (widened).
  t.add("conv2d", {I({2, 5, 9, 7}, bf16), I({6, 5, 3, 3}, bf16), I({6}, bf16)}, cv(2, {0, 1, 0, 1}), 1e-2);
  t.add("conv2d", {I({2, 5, 9, 7}, bf16), I({3, 5, 1, 1}, bf16), I({3}, bf16)}, cv(1, {}), 1e-2);
  t.add("conv2d", {I({1, 4, 9, 7}, bf16), I({3, 4, 1, 1}, bf16), absent()}, cv(2, {}), 1e-2);
  t.add("conv2d", {I({1, 32, 20, 40}, bf16), I({40, 32, 3, 3}, bf16), I({40}, bf16)}, cv(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d", {I({1, 64, 20, 200}, bf16), I({8, 64, 3, 3}, bf16), I({8}, bf16)}, cv(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d", {I({2, 3, 6, 5}, bf16, P), I({4, 3, 3, 3}, bf16, T), I({4}, bf16, S)}, cv(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d", {I({1, 8, 10, 9}, bf16), I({8, 8, 3, 3}), I({8})}, cv(1, {1, 1, 1, 1}), 1e-2);
  // residual + conv (conv2d_add): f32 and bf16, with and without bias, a residual view, a batch of two,
  // the VAE resnet's 3x3 over enough rows for several bands per image.
  auto cva = [](int64_t s, ops::Conv2dPad p) {
    return [s, p](const std::vector<Tensor>& x) { return ops::conv2d_add(x[0], x[1], x[2], s, p, x[3]); };
  };
  t.add("conv2d_add", {I({1, 3, 8, 8}), I({4, 3, 3, 3}), I({4}), I({1, 4, 8, 8})}, cva(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d_add", {I({2, 5, 9, 7}), I({6, 5, 3, 3}), absent(), I({2, 6, 5, 4}, f32, T)}, cva(2, {1, 1, 1, 1}),
        1e-4);
  t.add("conv2d_add", {I({1, 8, 10, 9}, bf16), I({8, 8, 3, 3}, bf16), I({8}, bf16), I({1, 8, 10, 9}, bf16)},
        cva(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d_add", {I({2, 32, 20, 24}, bf16), I({16, 32, 3, 3}, bf16), I({16}, bf16), I({2, 16, 20, 24}, bf16, P)},
        cva(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d_add", {I({1, 16, 9, 7}, bf16), I({8, 16, 1, 1}, bf16), absent(), I({1, 8, 9, 7}, bf16)}, cva(1, {}),
        1e-2);
  t.add("conv2d", {I({1, 4, 6, 6}, f16), I({2, 4, 3, 3}, f16), I({2}, f16)}, cv(1, {1, 1, 1, 1}),
        2e-3);

  auto up = [](const std::vector<Tensor>& x) { return ops::upsample_nearest2x(x[0]); };
  t.add("upsample", {I({1, 2, 3, 5})}, up, 0.0);
  t.add("upsample", {I({1, 1, 1, 1})}, up, 0.0);
  t.add("upsample", {I({2, 3, 4, 5}, bf16, T)}, up, 0.0);
  t.add("upsample", {I({2, 3, 4, 5}, f32, P)}, up, 0.0);
  t.add("upsample", {I({2, 3, 4, 5}, i32, S, Gen::small_int)}, up, 0.0);
  t.add("upsample", {I({1, 4, 16, 16}, bf16)}, up, 0.0);
  // Rows of whole and partial 16-byte vectors (the interleaving fast path) and its tail, 2- and 4-byte.
  t.add("upsample", {I({1, 3, 5, 21}, bf16)}, up, 0.0);
  t.add("upsample", {I({2, 2, 3, 11})}, up, 0.0);
  t.add("upsample", {I({1, 2, 3, 3}, i64, E, Gen::small_int)}, up, 0.0);

  // Channels-last images ([N, H, W, C]; ops::ImageLayout): the VAEs' layout where the device prefers it.
  // The CPU's oneDNN convolutions read and write them in place, its group norm and upsampling have their
  // own kernels; every other case (f16, views, the GEMM convolutions, CUDA) goes through channels-first.
  constexpr auto CL = ops::ImageLayout::channels_last;
  auto cvl = [](int64_t s, ops::Conv2dPad p) {
    return [s, p](const std::vector<Tensor>& x) { return ops::conv2d(x[0], x[1], x[2], s, p, CL); };
  };
  t.add("conv2d_cl", {I({1, 8, 8, 3}), I({4, 3, 3, 3}), I({4})}, cvl(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d_cl", {I({2, 9, 7, 5}), I({6, 5, 3, 3}), I({6})}, cvl(2, {0, 1, 0, 1}), 1e-4);
  t.add("conv2d_cl", {I({2, 9, 7, 5}), I({3, 5, 1, 1}), absent()}, cvl(1, {}), 1e-4);
  t.add("conv2d_cl", {I({1, 10, 9, 8}, bf16), I({8, 8, 3, 3}, bf16), I({8}, bf16)}, cvl(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d_cl", {I({2, 20, 24, 32}, bf16), I({16, 32, 3, 3}, bf16), I({16}, bf16)}, cvl(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d_cl", {I({2, 9, 7, 5}, bf16), I({6, 5, 3, 3}, bf16), I({6}, bf16)}, cvl(2, {0, 1, 0, 1}), 1e-2);
  t.add("conv2d_cl", {I({2, 6, 5, 3}, bf16, P), I({4, 3, 3, 3}, bf16, T), I({4}, bf16)}, cvl(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d_cl", {I({1, 6, 6, 4}, f16), I({2, 4, 3, 3}, f16), I({2}, f16)}, cvl(1, {1, 1, 1, 1}), 2e-3);
  auto cval = [](int64_t s, ops::Conv2dPad p) {
    return [s, p](const std::vector<Tensor>& x) { return ops::conv2d_add(x[0], x[1], x[2], s, p, x[3], CL); };
  };
  t.add("conv2d_add_cl", {I({1, 8, 8, 3}), I({4, 3, 3, 3}), I({4}), I({1, 8, 8, 4})}, cval(1, {1, 1, 1, 1}), 1e-4);
  t.add("conv2d_add_cl", {I({1, 10, 9, 8}, bf16), I({8, 8, 3, 3}, bf16), I({8}, bf16), I({1, 10, 9, 8}, bf16)},
        cval(1, {1, 1, 1, 1}), 1e-2);
  t.add("conv2d_add_cl", {I({2, 20, 24, 32}, bf16), I({16, 32, 3, 3}, bf16), I({16}, bf16), I({2, 20, 24, 16}, bf16, P)},
        cval(1, {1, 1, 1, 1}), 1e-2);
  auto gnl = [](int64_t g, bool silu) {
    return [g, silu](const std::vector<Tensor>& x) {
      return silu ? ops::group_norm_silu(x[0], g, x[1], x[2], 1e-6, CL) : ops::group_norm(x[0], g, x[1], x[2], 1e-6, CL);
    };
  };
  t.add("group_norm_cl", {I({2, 5, 7, 6}), I({6}), I({6})}, gnl(3, false));
  t.add("group_norm_cl", {I({1, 40, 40, 64}, bf16), I({64}, bf16), I({64}, bf16)}, gnl(32, false), 1e-2);
  t.add("group_norm_cl", {I({2, 9, 4}), absent(), absent()}, gnl(2, false));
  t.add("group_norm_cl", {I({1, 70, 70, 8}), absent(), I({8})}, gnl(2, false));  // several chunks of pixels
  t.add("group_norm_cl", {I({1, 3, 3, 32}, f32, C, Gen::positive), I({32}), I({32})}, gnl(32, false));
  t.add("group_norm_cl", {I({2, 6, 5, 8}, f16), I({8}, f16), I({8}, f16)}, gnl(2, false), 2e-3);
  t.add("group_norm_cl", {I({2, 5, 7, 6}, bf16, P), I({6}, bf16), absent()}, gnl(3, false), 1e-2);
  t.add("group_norm_silu_cl", {I({2, 5, 7, 6}), I({6}), I({6})}, gnl(3, true));
  t.add("group_norm_silu_cl", {I({1, 70, 70, 8}, bf16), I({8}, bf16), I({8}, bf16)}, gnl(2, true), 1e-2);
  t.add("group_norm_silu_cl", {I({2, 6, 5, 8}, f16), I({8}, f16), I({8}, f16)}, gnl(2, true), 2e-3);
  auto upl = [](const std::vector<Tensor>& x) { return ops::upsample_nearest2x(x[0], CL); };
  t.add("upsample_cl", {I({1, 3, 5, 2})}, upl, 0.0);
  t.add("upsample_cl", {I({1, 16, 16, 4}, bf16)}, upl, 0.0);
  t.add("upsample_cl", {I({2, 4, 5, 3}, bf16, T)}, upl, 0.0);
  t.add("upsample_cl", {I({2, 3, 4, 5}, i32, S, Gen::small_int)}, upl, 0.0);

  for (int64_t dim : {0, 1, -1}) {
    auto cc = [dim](const std::vector<Tensor>& x) { return ops::concat(x, dim); };
    auto sh = [dim](Shape s, int64_t n) {
      s[size_t(dim < 0 ? int64_t(s.size()) + dim : dim)] = n;
      return s;
    };
    t.add("concat", {I(sh({2, 3, 4}, 1)), I(sh({2, 3, 4}, 3)), I(sh({2, 3, 4}, 2))}, cc, 0.0);
    t.add("concat", {I(sh({2, 3, 5}, 2), f32, T), I(sh({2, 3, 5}, 3), f32, S)}, cc, 0.0);
    t.add("concat", {I(sh({3, 4, 5}, 2), bf16, P), I(sh({3, 4, 5}, 1), bf16, O)}, cc, 0.0);
    t.add("concat", {I(sh({2, 3, 4}, 2), i64, E, Gen::small_int), I(sh({2, 3, 4}, 2), i64)}, cc, 0.0);
    // contiguous inputs of runs over 256 KiB (copied in pieces over the threads), one a view
    t.add("concat", {I(sh({2, 70, 1000}, 3), bf16), I(sh({2, 70, 1000}, 2), bf16, T), I(sh({2, 70, 1000}, 4), bf16)},
          cc, 0.0);
  }
  t.add("concat", {I({5})}, [](const std::vector<Tensor>& x) { return ops::concat(x, 0); }, 0.0);

  auto em = [](const std::vector<Tensor>& x) { return ops::embedding(x[0], x[1]); };
  t.add("embedding", {Ids({3, 5}, 11), I({11, 7})}, em, 0.0);
  t.add("embedding", {Ids({17}, 4, i32), I({4, 9}, bf16)}, em, 0.0);
  t.add("embedding", {Ids({4, 3}, 6, i64, View::transposed), I({6, 5}, f32, T)}, em, 0.0);
  t.add("embedding", {Ids({2, 2}, 3, i32, View::strided), I({3, 4}, f16, S)}, em, 0.0);
  t.add("embedding", {Ids({1}, 1), I({1, 1})}, em, 0.0);
  // T5's and CLIP's: int64 ids into a bf16 table.
  t.add("embedding", {Ids({2, 77}, 1000), I({1000, 64}, bf16)}, em, 0.0);
  t.add("embedding", {Ids({1, 33}, 500, i64, View::offset), I({500, 32}, f16, T)}, em, 0.0);
}

inline void reduce_cases(Table& t) {
  using ops::ReduceFn;
  struct R { std::vector<int64_t> dims; bool keep; };
  for (ReduceFn fn : {ReduceFn::sum, ReduceFn::mean, ReduceFn::max}) {
    const std::string op = "reduce" + std::to_string(int(fn));
    for (R r : {R{{}, false}, R{{0}, false}, R{{-1}, true}, R{{0, 2}, true}, R{{1}, false}}) {
      auto f = [fn, r](const std::vector<Tensor>& x) { return ops::reduce(x[0], fn, r.dims, r.keep); };
      t.add(op, {I({3, 5, 17})}, f);
      t.add(op, {I({4, 3, 6}, f32, P)}, f);
      t.add(op, {I({2, 7, 9}, bf16, T)}, f, 1e-2);
      t.add(op, {I({3, 4, 5}, f32, E)}, f);
    }
    auto f0 = [fn](const std::vector<Tensor>& x) { return ops::reduce(x[0], fn, {-1}, false); };
    t.add(op, {I({2, 3000})}, f0);
    t.add(op, {I({1})}, f0);
    t.add(op, {I({3, 9}, f32, S)}, f0);
    if (fn != ReduceFn::mean) t.add(op, {I({4, 9}, i32, C, Gen::small_int)}, f0, 0.0);
    if (fn != ReduceFn::mean) t.add(op, {I({4, 9}, i64, T, Gen::small_int)}, f0, 0.0);
    t.add(op, {I({3, 6}, f16)}, f0, 2e-3);
    // Integer mean too (double(sum) / count, truncated), over several dims, and booleans.
    t.add(op, {I({3, 4, 5}, i64, P, Gen::small_int)},
          [fn](const std::vector<Tensor>& x) { return ops::reduce(x[0], fn, {0, 2}, true); }, 0.0);
    t.add(op, {I({5, 7}, DType::boolean, C, Gen::small_int)}, f0, 0.0);
    t.add(op, {I({4, 9}, i32, C, Gen::small_int)},
          [fn](const std::vector<Tensor>& x) { return ops::reduce(x[0], fn, {}, false); }, 0.0);
  }

  auto am = [](int64_t b) {
    return [b](const std::vector<Tensor>& x) { return ops::absmax_blocks(x[0], b); };
  };
  t.add("absmax", {I({3, 64})}, am(32), 0.0);
  t.add("absmax", {I({2, 17})}, am(17), 0.0);
  t.add("absmax", {I({1})}, am(1), 0.0);
  t.add("absmax", {I({2, 3, 96}, bf16)}, am(32), 0.0);
  t.add("absmax", {I({5, 8}, f32, T)}, am(4), 0.0);
  t.add("absmax", {I({5, 8}, f16, S)}, am(8), 0.0);
  t.add("absmax", {I({4, 4096})}, am(64), 0.0);
  t.add("absmax", {I({7, 256}, bf16, T)}, am(128), 0.0);
}

}  // namespace cases_detail

inline std::vector<OpCase> all_op_cases() {
  cases_detail::Table t;
  cases_detail::linear_cases(t);
  cases_detail::elementwise_cases(t);
  cases_detail::mul_add_cases(t);
  cases_detail::unary_cases(t);
  cases_detail::norm_cases(t);
  cases_detail::rope_attention_cases(t);
  cases_detail::conv_layout_cases(t);
  cases_detail::reduce_cases(t);
  return t.cases;
}

}  // namespace diffq::optest
