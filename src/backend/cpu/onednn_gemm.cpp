#include "backend/cpu/onednn_gemm.h"

#include <dnnl.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/onednn_runtime.h"

namespace diffq::backend::cpu {

namespace {

using dnnl::memory;

// The operand types of a matmul: bf16 x bf16 -> f32, s8 x s8 -> s32 (alpha 1, beta 0), f32 x f32 -> f32.
enum class Kind : uint8_t { bf16, s8, f32 };

struct Key {
  Kind kind;
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool bf16_dst = false;  // C is bf16 (rounded once by oneDNN), not f32 (s32 for s8)
  bool bias = false;      // + an f32 bias row (the linear's), before the rounding
  bool packed_b = false;  // B in oneDNN's blocked layout (kPackedTag; ldb unused), not strided rows
  // C = (A B) x s before the rounding to C's type, s an f32 per row of C (1) or one value (2): a binary
  // multiply post-op (its src1 passed at execute). The descriptors are then 3-D ([1, m, .]): oneDNN 3.2's
  // brgemm takes a per-row operand as a per-batch-row one (a reference kernel in 2-D), and only with dense
  // C rows (ldc = n).
  uint8_t row_scale = 0;
  bool operator==(const Key& o) const {
    return std::tie(kind, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, bf16_dst, bias, packed_b, row_scale) ==
           std::tie(o.kind, o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha, o.beta, o.bf16_dst, o.bias,
                    o.packed_b, o.row_scale);
  }
};

// The blocked layout of a packed bf16 B[k, n] (onednn_gemm.h): blocks of 64 columns, outermost, each
// k (padded to 32) x 64 with pairs of k innermost: the layout oneDNN's brgemm copies B into per call.
constexpr auto kPackedTag = dnnl::memory::format_tag::BA16a64b2a;
struct KeyHash {
  size_t operator()(const Key& x) const {
    size_t h = size_t(x.kind) * 4 + size_t(x.ta) * 2 + size_t(x.tb);
    for (int64_t v : {x.m, x.n, x.k, x.lda, x.ldb, x.ldc}) h = h * 1000003u ^ size_t(v);
    return (h * 8 + size_t(x.packed_b) * 4 + size_t(x.bf16_dst) * 2 + size_t(x.bias)) * 3 + x.row_scale;
  }
};

// A cached primitive: null where oneDNN offers only a reference implementation (slower than diffq's).
struct Entry {
  std::unique_ptr<dnnl::matmul> prim;
  std::string impl;  // oneDNN's implementation name (also when it is not used)
  memory::desc a, b, c, bias, scale;  // scale: the row-scale post-op's operand (Key::row_scale)
  size_t scratch_bytes = 0;
  float alpha = 1.0f;  // oneDNN 3.x: the weights' scale, passed at execute (2.6: an output scale in the attr)
};

dnnl::engine& engine() { return onednn_engine(); }

// brgemm ("brg:avx512_core_bf16", "brg:avx512_core_amx") for dense operands, the jit GEMM ("gemm:jit")
// where a row stride is wider than the rows (oneDNN 2.6's brgemm takes dense layouts only); never a
// reference implementation.
bool native_impl(const std::string& impl) { return onednn_native_impl(impl); }

std::unique_ptr<Entry> make_entry(const Key& key) {
  auto e = std::make_unique<Entry>();
  const auto in = key.kind == Kind::s8 ? memory::data_type::s8
                  : key.kind == Kind::f32 ? memory::data_type::f32 : memory::data_type::bf16;
  const auto out = key.bf16_dst ? memory::data_type::bf16 : key.kind == Kind::s8 ? memory::data_type::s32
                                                                                 : memory::data_type::f32;
  // [rows, cols] at element strides st; with a row scale as [1, rows, cols] (the batch stride the matrix's
  // extent: what oneDNN reads as a plain abc / acb layout)
  const auto desc = [&key](int64_t rows, int64_t cols, memory::data_type t, const memory::dims& st) {
    if (!key.row_scale) return memory::desc({rows, cols}, t, st);
    return memory::desc({1, rows, cols}, t, {std::max(rows * st[0], cols * st[1]), st[0], st[1]});
  };
  e->a = desc(key.m, key.k, in, key.ta ? memory::dims{1, key.lda} : memory::dims{key.lda, 1});
  e->b = key.packed_b ? memory::desc({key.k, key.n}, in, kPackedTag)
                      : desc(key.k, key.n, in, key.tb ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1});
  e->c = desc(key.m, key.n, out, memory::dims{key.ldc, 1});
  if (key.bias) e->bias = memory::desc({1, key.n}, memory::data_type::f32, memory::dims{key.n, 1});
  dnnl::primitive_attr attr;
  if (key.row_scale) {
    e->scale = key.row_scale == 1 ? memory::desc({1, key.m, 1}, memory::data_type::f32, memory::dims{key.m, 1, 1})
                                  : memory::desc({1, 1, 1}, memory::data_type::f32, memory::dims{1, 1, 1});
    dnnl::post_ops po;
    po.append_binary(dnnl::algorithm::binary_mul, e->scale);
    attr.set_post_ops(po);
  }
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: concurrent parts never share
  // alpha: 2.6's output scale, 3.x's scale of the weights (one value, mask 0); both multiply the f32 (or
  // s32) accumulator once before the sum post-op adds beta * C, so the two versions compute alike.
  e->alpha = key.alpha;
  if (key.alpha != 1.0f) {
#if DNNL_VERSION_MAJOR >= 3
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, 0);
#else
    attr.set_output_scales(0, {key.alpha});
#endif
  }
  if (key.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(key.beta);
    attr.set_post_ops(po);
  }
  try {
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc pd = key.bias ? dnnl::matmul::primitive_desc(engine(), e->a, e->b, e->bias, e->c, attr)
                                               : dnnl::matmul::primitive_desc(engine(), e->a, e->b, e->c, attr);
#else
    dnnl::matmul::primitive_desc pd(key.bias ? dnnl::matmul::desc(e->a, e->b, e->bias, e->c)
                                             : dnnl::matmul::desc(e->a, e->b, e->c),
                                    attr, engine());
#endif
    e->impl = pd.impl_info_str();
    if (!native_impl(e->impl)) return e;
    e->scratch_bytes = pd.scratchpad_desc().get_size();
    e->prim = std::make_unique<dnnl::matmul>(pd);
  } catch (const dnnl::error& err) {
    e->prim.reset();
    e->impl = err.what();
  }
  return e;
}

const Entry& entry_for(const Key& key) {
  static std::mutex mu;
  static std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[key];
  if (!slot) slot = make_entry(key);
  return *slot;
}

// Each calling thread runs oneDNN single-threaded (its OpenMP team of one) with its own stream and
// scratchpad.
struct ThreadState {
  dnnl::stream stream{engine()};
  std::vector<uint8_t> scratch;
  ThreadState() { OmpTeam::set_for_this_thread(1); }
};
ThreadState& thread_state() {
  thread_local ThreadState t;
  return t;
}

bool cpu_has_bf16_matrix() {
  const CpuFeatures& f = cpu_features();
  return f.avx512_bf16 || (f.amx_bf16 && amx_tiles_permitted());
}

// Runs the cached primitive of `key` on this thread; false where oneDNN has no native kernel for it.
bool run_cached(const Key& key, const void* a, const void* b, void* c, const float* bias = nullptr,
                const float* row_scale = nullptr) {
  const Entry& e = entry_for(key);
  if (!e.prim) return false;
  ThreadState& t = thread_state();
  if (t.scratch.size() < e.scratch_bytes) t.scratch.resize(e.scratch_bytes);
  dnnl::engine& eng = engine();
  memory am(e.a, eng, const_cast<void*>(a)), bm(e.b, eng, const_cast<void*>(b)), cm(e.c, eng, c);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (key.bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, eng, const_cast<float*>(bias)));
  if (key.row_scale)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(e.scale, eng, const_cast<float*>(row_scale)));
  if (e.scratch_bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(memory::desc({int64_t(e.scratch_bytes)}, memory::data_type::u8,
                                                          memory::dims{1}), eng, t.scratch.data()));
#if DNNL_VERSION_MAJOR >= 3
  if (e.alpha != 1.0f)  // read only by oneDNN
    args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                 memory(memory::desc({1}, memory::data_type::f32, memory::dims{1}), eng, const_cast<float*>(&e.alpha)));
#endif
  e.prim->execute(t.stream, args);
  t.stream.wait();
  return true;
}

bool cpu_has_int8_matrix() {
  const CpuFeatures& f = cpu_features();
  return f.avx512_vnni || (f.amx_int8 && amx_tiles_permitted());
}

// A representative matmul of each kind (256^3, x @ W^T), for the availability checks and names.
const Entry& probe(Kind kind) { return entry_for({kind, false, true, 256, 256, 256, 256, 256, 256, 1.f, 0.f}); }

// What the CPU must have for each kind to be worth oneDNN, and why not when it lacks it.
bool cpu_has(Kind kind) {
  switch (kind) {
    case Kind::bf16: return cpu_has_bf16_matrix();
    case Kind::s8: return cpu_has_int8_matrix();
    case Kind::f32: return cpu_features().avx512f;
  }
  return false;
}
const char* lacking(Kind kind) {
  switch (kind) {
    case Kind::bf16: return "unavailable: the CPU has neither AVX512-BF16 nor usable AMX-BF16";
    case Kind::s8: return "unavailable: the CPU has neither AVX512-VNNI nor usable AMX-INT8";
    case Kind::f32: return "unavailable: no AVX-512";
  }
  return "unavailable";
}

bool available(Kind kind) { return cpu_has(kind) && probe(kind).prim != nullptr; }

std::string impl_name(Kind kind) {
  if (!cpu_has(kind)) return lacking(kind);
  const Entry& e = probe(kind);
  return e.prim ? e.impl : "unavailable: oneDNN offers only " + e.impl;
}

}  // namespace

bool onednn_gemm_bf16_part(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                           int64_t ldc) {
  return cpu_has_bf16_matrix() && run_cached({Kind::bf16, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta}, a, b, c);
}

bool onednn_linear_bf16_part(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w,
                             int64_t ldw, const float* bias, uint16_t* y, int64_t ldy) {
  Key key{Kind::bf16, false, true, m, n, k, ldx, ldw, ldy, 1.f, 0.f};
  key.bf16_dst = true;
  key.bias = bias != nullptr;
  return cpu_has_bf16_matrix() && run_cached(key, x, w, y, bias);
}

int64_t onednn_packed_bf16_elems(int64_t n, int64_t k) {
  return int64_t(memory::desc({k, n}, memory::data_type::bf16, kPackedTag).get_size() / sizeof(uint16_t));
}

namespace {
// B[k, n] at element strides `strides` (W[n, k] rows: {1, ldw}; B's own rows: {ldb, 1}) <-> the packed
// layout, by oneDNN's reorder (a copy: exact both ways; the padding written as zeros).
// Reorder primitives are created once per shape, strides and direction (attention packs its K and V
// blocks per head) and run single-threaded on the calling thread, as the matmul parts.
void reorder_b(int64_t k, int64_t n, uint16_t* plain, const memory::dims& strides, uint16_t* packed, bool to_packed) {
  struct R {
    memory::desc plain, packed;
    dnnl::reorder prim;
  };
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>, std::unique_ptr<R>> cache;
  const R* r;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = cache[{k, n, strides[0], strides[1], to_packed}];
    if (!slot) {
      auto e = std::make_unique<R>();
      e->plain = memory::desc({k, n}, memory::data_type::bf16, strides);
      e->packed = memory::desc({k, n}, memory::data_type::bf16, kPackedTag);
      e->prim = to_packed ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), e->plain, engine(), e->packed))
                          : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), e->packed, engine(), e->plain));
      slot = std::move(e);
    }
    r = slot.get();
  }
  ThreadState& t = thread_state();
  memory pm(r->plain, engine(), plain), bm(r->packed, engine(), packed);
  if (to_packed) r->prim.execute(t.stream, pm, bm);
  else r->prim.execute(t.stream, bm, pm);
  t.stream.wait();
}
}  // namespace

void onednn_pack_bf16_weight(int64_t n, int64_t k, const uint16_t* w, int64_t ldw, uint16_t* packed) {
  reorder_b(k, n, const_cast<uint16_t*>(w), {1, ldw}, packed, true);
}

void onednn_unpack_bf16_weight(int64_t n, int64_t k, const uint16_t* packed, uint16_t* w) {
  reorder_b(k, n, w, {1, k}, const_cast<uint16_t*>(packed), false);
}

void onednn_pack_bf16_b(int64_t k, int64_t n, const uint16_t* b, int64_t ldb, uint16_t* packed) {
  reorder_b(k, n, const_cast<uint16_t*>(b), {ldb, 1}, packed, true);
}

bool onednn_gemm_bf16_packed_b_part(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b_packed,
                                    bool accumulate, float* c) {
  Key key{Kind::bf16, false, false, m, n, k, k, 0, n, 1.f, accumulate ? 1.f : 0.f};
  key.packed_b = true;
  return cpu_has_bf16_matrix() && run_cached(key, a, b_packed, c);
}

namespace {
// The packed-weight linear's part: x rows @ packed W (+ bias), written as bf16 or f32.
bool packed_linear_part(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w_packed,
                        const float* bias, void* y, int64_t ldy, bool bf16_out) {
  Key key{Kind::bf16, false, false, m, n, k, ldx, 0, ldy, 1.f, 0.f};
  key.bf16_dst = bf16_out;
  key.bias = bias != nullptr;
  key.packed_b = true;
  return cpu_has_bf16_matrix() && run_cached(key, x, w_packed, y, bias);
}
}  // namespace

bool onednn_linear_bf16_packed_part(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                    const uint16_t* w_packed, const float* bias, uint16_t* y, int64_t ldy) {
  return packed_linear_part(m, n, k, x, ldx, w_packed, bias, y, ldy, true);
}

bool onednn_linear_bf16_packed_part_f32(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                        const uint16_t* w_packed, const float* bias, float* c, int64_t ldc) {
  return packed_linear_part(m, n, k, x, ldx, w_packed, bias, c, ldc, false);
}

bool onednn_bf16_packing_usable() {
  static const bool ok = [] {
    if (!onednn_bf16_available()) return false;
    Key key{Kind::bf16, false, false, 256, 256, 256, 256, 0, 256, 1.f, 0.f};
    key.bf16_dst = key.bias = key.packed_b = true;
    const Entry& e = entry_for(key);
    return e.prim != nullptr && e.impl == probe(Kind::bf16).impl;  // the same kernel as the plain operands'
  }();
  return ok;
}

bool onednn_gemm_s8s8s32_part(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                              int64_t ldb, int32_t* c, int64_t ldc) {
  return cpu_has_int8_matrix() && run_cached({Kind::s8, false, true, m, n, k, lda, ldb, ldc, 1.f, 0.f}, a, b, c);
}

bool onednn_gemm_s8s8_row_scaled_bf16_part(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                                           const int8_t* b, int64_t ldb, const float* s, bool one_scale, uint16_t* c) {
  Key key{Kind::s8, false, true, m, n, k, lda, ldb, n, 1.f, 0.f};
  key.bf16_dst = true;
  key.row_scale = one_scale ? 2 : 1;
  return cpu_has_int8_matrix() && run_cached(key, a, b, c, nullptr, s);
}

bool onednn_sgemm_part(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return cpu_features().avx512f && run_cached({Kind::f32, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta}, a, b, c);
}

bool onednn_bf16_available() {
  static const bool ok = available(Kind::bf16);
  return ok;
}
bool onednn_int8_available() {
  static const bool ok = available(Kind::s8);
  return ok;
}

// Read once: gemm_bf16 asks this for every GEMM.
bool onednn_bf16_uses_amx() {
  static const bool amx = onednn_bf16_available() && cpu_features().amx_bf16 && amx_tiles_permitted() &&
                          probe(Kind::bf16).impl.find("amx") != std::string::npos;
  return amx;
}

bool onednn_bf16_preferred() {
  // On AMD: the brgemm on vdpbf16ps, not the jit GEMM oneDNN falls back to under a lower DNNL_MAX_CPU_ISA.
  static const bool yes = onednn_bf16_uses_amx() ||
                          (cpu_features().amd && onednn_bf16_available() &&
                           probe(Kind::bf16).impl.find("avx512_core_bf16") != std::string::npos);
  return yes;
}

std::string onednn_bf16_impl() { return impl_name(Kind::bf16); }
std::string onednn_int8_impl() { return impl_name(Kind::s8); }
std::string onednn_f32_impl() { return impl_name(Kind::f32); }

}  // namespace diffq::backend::cpu
