#include "backend/cpu/onednn_gemm.h"

#include <dlfcn.h>

#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_features.h"

namespace diffq::backend::cpu {

namespace {

using dnnl::memory;

struct Key {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool int8 = false;  // s8 x s8 -> s32 (alpha 1, beta 0) instead of bf16 x bf16 -> f32
  bool f32 = false;   // f32 x f32 -> f32
  bool operator==(const Key& o) const {
    return std::tie(ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, int8, f32) ==
           std::tie(o.ta, o.tb, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha, o.beta, o.int8, o.f32);
  }
};
struct KeyHash {
  size_t operator()(const Key& x) const {
    size_t h = size_t(x.ta) * 2 + size_t(x.tb) + size_t(x.int8) * 4 + size_t(x.f32) * 8;
    for (int64_t v : {x.m, x.n, x.k, x.lda, x.ldb, x.ldc}) h = h * 1000003u ^ size_t(v);
    return h;
  }
};

// A cached primitive: null where oneDNN offers only a reference implementation (slower than diffq's).
struct Entry {
  std::unique_ptr<dnnl::matmul> prim;
  std::string impl;  // oneDNN's implementation name (also when it is not used)
  memory::desc a, b, c;
  size_t scratch_bytes = 0;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// brgemm ("brg:avx512_core_bf16", "brg:avx512_core_amx") for dense operands, the jit GEMM ("gemm:jit")
// where a row stride is wider than the rows (oneDNN 2.6's brgemm takes dense layouts only); never a
// reference implementation.
bool native_impl(const std::string& impl) { return impl.find("ref") == std::string::npos; }

std::unique_ptr<Entry> make_entry(const Key& key) {
  auto e = std::make_unique<Entry>();
  const auto in = key.int8 ? memory::data_type::s8 : key.f32 ? memory::data_type::f32 : memory::data_type::bf16;
  e->a = memory::desc({key.m, key.k}, in, key.ta ? memory::dims{1, key.lda} : memory::dims{key.lda, 1});
  e->b = memory::desc({key.k, key.n}, in, key.tb ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1});
  e->c = memory::desc({key.m, key.n}, key.int8 ? memory::data_type::s32 : memory::data_type::f32,
                      memory::dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-thread scratch: concurrent parts never share
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(key.beta);
    attr.set_post_ops(po);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->a, e->b, e->c), attr, engine());
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
// Debian's oneDNN runs on OpenMP (libgomp, loaded as its dependency): omp_set_num_threads(1) is looked
// up at run time, so diffq links no OpenMP runtime of its own (clang's would be another package).
void omp_threads_one_for_this_thread() {
  using Fn = void (*)(int);
  static const Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (fn) fn(1);
}

struct ThreadState {
  dnnl::stream stream{engine()};
  std::vector<uint8_t> scratch;
  ThreadState() { omp_threads_one_for_this_thread(); }
};
ThreadState& thread_state() {
  thread_local ThreadState t;
  return t;
}

bool cpu_has_bf16_matrix() {
  const CpuFeatures& f = cpu_features();
  return f.avx512_bf16 || (f.amx_bf16 && amx_tiles_permitted());
}

}  // namespace

namespace {

// Runs the cached primitive of `key` on this thread; false where oneDNN has no native kernel for it.
bool run_cached(const Key& key, const void* a, const void* b, void* c) {
  const Entry& e = entry_for(key);
  if (!e.prim) return false;
  ThreadState& t = thread_state();
  if (t.scratch.size() < e.scratch_bytes) t.scratch.resize(e.scratch_bytes);
  dnnl::engine& eng = engine();
  memory am(e.a, eng, const_cast<void*>(a)), bm(e.b, eng, const_cast<void*>(b)), cm(e.c, eng, c);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (e.scratch_bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(memory::desc({int64_t(e.scratch_bytes)}, memory::data_type::u8,
                                                          memory::dims{1}), eng, t.scratch.data()));
  e.prim->execute(t.stream, args);
  t.stream.wait();
  return true;
}

bool cpu_has_int8_matrix() {
  const CpuFeatures& f = cpu_features();
  return f.avx512_vnni || (f.amx_int8 && amx_tiles_permitted());
}

}  // namespace

bool onednn_gemm_bf16_part(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                           int64_t ldc) {
  if (!cpu_has_bf16_matrix()) return false;
  return run_cached({trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, false}, a, b, c);
}

bool onednn_gemm_s8s8s32_part(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                              int64_t ldb, int32_t* c, int64_t ldc) {
  if (!cpu_has_int8_matrix()) return false;
  return run_cached({false, true, m, n, k, lda, ldb, ldc, 1.f, 0.f, true}, a, b, c);
}

bool onednn_sgemm_part(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!cpu_features().avx512f) return false;
  return run_cached({trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, false, true}, a, b, c);
}

std::string onednn_f32_impl() {
  if (!cpu_features().avx512f) return "unavailable: no AVX-512";
  const Entry& e = entry_for({false, true, 256, 256, 256, 256, 256, 256, 1.f, 0.f, false, true});
  return e.prim ? e.impl : "unavailable: oneDNN offers only " + e.impl;
}

bool onednn_int8_available() {
  static const bool ok =
      cpu_has_int8_matrix() && entry_for({false, true, 256, 256, 256, 256, 256, 256, 1.f, 0.f, true}).prim;
  return ok;
}

std::string onednn_int8_impl() {
  if (!cpu_has_int8_matrix()) return "unavailable: the CPU has neither AVX512-VNNI nor usable AMX-INT8";
  const Entry& e = entry_for({false, true, 256, 256, 256, 256, 256, 256, 1.f, 0.f, true});
  return e.prim ? e.impl : "unavailable: oneDNN offers only " + e.impl;
}

bool onednn_bf16_available() {
  static const bool ok = cpu_has_bf16_matrix() && entry_for({false, true, 256, 256, 256, 256, 256, 256, 1.f, 0.f}).prim;
  return ok;
}

bool onednn_bf16_uses_amx() {
  return onednn_bf16_available() && cpu_features().amx_bf16 && amx_tiles_permitted() &&
         onednn_bf16_impl().find("amx") != std::string::npos;
}

std::string onednn_bf16_impl() {
  if (!cpu_has_bf16_matrix()) return "unavailable: the CPU has neither AVX512-BF16 nor usable AMX-BF16";
  try {
    const memory::desc a({256, 256}, memory::data_type::bf16, memory::dims{256, 1});
    const memory::desc b({256, 256}, memory::data_type::bf16, memory::dims{1, 256});
    const memory::desc c({256, 256}, memory::data_type::f32, memory::dims{256, 1});
    const std::string impl = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), engine()).impl_info_str();
    return native_impl(impl) ? impl : "unavailable: oneDNN offers only " + impl;
  } catch (const dnnl::error& e) {
    return std::string("unavailable: ") + e.what();
  }
}

}  // namespace diffq::backend::cpu
