// Candidate: oneDNN (Debian's 2.6 or the pinned 3.2 wheel, OpenMP runtime; both APIs). f32: dnnl_sgemm (row-major) and the
// matmul primitive; bf16: the matmul primitive with bf16 src/weights and f32 dst (f32 accumulation).
// Weights are given in the gemm.h layout ([N,K] row-major = "ba" for the K x N weights); the
// primitive is created once outside the timing loop (as an engine would cache it). The `_prepacked`
// variants (issue 36: what packing weights once at load would gain) let oneDNN choose the weights'
// layout (format_tag::any) and reorder them into it once before the loop, so the timed calls skip the
// per-call copy of B into oneDNN's blocked layout; s8: s8 x s8 -> s32 (int8dq's product). The bf16
// `_prepacked_at0` / `_prepacked_at16` variants put A, the packed B and C at a 64-byte boundary or 16
// bytes past one (where a std::vector's data may start): oneDNN's AMX kernels read and write such rows
// at about half speed (docs/benchmarks.md "Packed weights on AMX").
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "gemm_bench_common.h"

using namespace gemm_bench;

namespace {

void onednn_sgemm(benchmark::State& state, const Shape& s, int threads) {
  omp_set_num_threads(threads);
  const auto a = random_f32(size_t(s.m * s.k), 1), b = random_f32(size_t(s.n * s.k), 2);
  std::vector<float> c(size_t(s.m * s.n));
  for (auto _ : state) {
    dnnl_sgemm('N', 'T', s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, 0.0f, c.data(), s.n);
    benchmark::DoNotOptimize(c.data());
  }
}

// A buffer of `bytes` whose data starts `offset` bytes past a 64-byte boundary.
struct OffsetBuffer {
  std::vector<uint8_t> raw;
  void* at(size_t bytes, size_t offset) {
    raw.assign(bytes + 128, 0);
    const auto base = (reinterpret_cast<uintptr_t>(raw.data()) + 63) / 64 * 64;
    return reinterpret_cast<void*>(base + offset);
  }
};

// prepacked: B reordered once into oneDNN's layout; offset >= 0: A, packed B and C copied to buffers at
// that offset from a 64-byte boundary (-1: where the vectors and oneDNN's allocation put them).
void onednn_matmul(benchmark::State& state, const Shape& s, int threads, dnnl::memory::data_type dt,
                   bool prepacked = false, int offset = -1) {
  using dnnl::memory;
  omp_set_num_threads(threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const bool s8 = dt == memory::data_type::s8;
  const memory::desc a_md({s.m, s.k}, dt, memory::format_tag::ab);
  const memory::desc b_md({s.k, s.n}, dt, memory::format_tag::ba);
  const memory::desc b_any({s.k, s.n}, dt, memory::format_tag::any);
  const memory::desc c_md({s.m, s.n}, s8 ? memory::data_type::s32 : memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
#if DNNL_VERSION_MAJOR >= 3
    pd = dnnl::matmul::primitive_desc(eng, a_md, prepacked ? b_any : b_md, c_md);
#else
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, prepacked ? b_any : b_md, c_md), eng);
#endif
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetLabel(pd.impl_info_str());
  dnnl::matmul prim(pd);
  std::vector<float> af, bf;
  std::vector<uint16_t> ah, bh;
  std::vector<int8_t> a8, b8;
  void *ap, *bp;
  if (dt == memory::data_type::f32) {
    af = random_f32(size_t(s.m * s.k), 1), bf = random_f32(size_t(s.n * s.k), 2);
    ap = af.data(), bp = bf.data();
  } else if (s8) {
    a8.resize(size_t(s.m * s.k)), b8.resize(size_t(s.n * s.k));
    for (size_t i = 0; i < a8.size(); ++i) a8[i] = int8_t((i * 37 + 11) % 255 - 127);
    for (size_t i = 0; i < b8.size(); ++i) b8[i] = int8_t((i * 53 + 5) % 255 - 127);
    ap = a8.data(), bp = b8.data();
  } else {
    ah = random_bf16(size_t(s.m * s.k), 1), bh = random_bf16(size_t(s.n * s.k), 2);
    ap = ah.data(), bp = bh.data();
  }
  std::vector<int32_t> c(size_t(s.m * s.n));  // f32 or s32, 4 bytes each
  memory am(a_md, eng, ap), bm(b_md, eng, bp), cm(c_md, eng, c.data());
  memory wm = bm;
  OffsetBuffer ab, wb, cb;
  if (prepacked && pd.weights_desc() != b_md) {  // once, outside the loop: the packing at load
    const size_t wbytes = pd.weights_desc().get_size();
    wm = offset < 0 ? memory(pd.weights_desc(), eng) : memory(pd.weights_desc(), eng, wb.at(wbytes, size_t(offset)));
    dnnl::reorder(bm, wm).execute(strm, bm, wm);
    strm.wait();
  }
  if (offset >= 0) {
    const size_t abytes = a_md.get_size();
    void* a2 = ab.at(abytes, size_t(offset));
    std::memcpy(a2, ap, abytes);
    am = memory(a_md, eng, a2);
    cm = memory(c_md, eng, cb.at(c_md.get_size(), size_t(offset)));
  }
  for (auto _ : state) {
    prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, cm}});
    strm.wait();
    benchmark::DoNotOptimize(c.data());
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_gemm("onednn_sgemm_f32", onednn_sgemm);
  register_gemm("onednn_matmul_f32", [](benchmark::State& st, const Shape& s, int t) {
    onednn_matmul(st, s, t, dnnl::memory::data_type::f32);
  });
  register_gemm("onednn_matmul_bf16", [](benchmark::State& st, const Shape& s, int t) {
    onednn_matmul(st, s, t, dnnl::memory::data_type::bf16);
  });
  register_gemm("onednn_matmul_bf16_prepacked", [](benchmark::State& st, const Shape& s, int t) {
    onednn_matmul(st, s, t, dnnl::memory::data_type::bf16, true);
  });
  for (const int offset : {0, 16})
    register_gemm("onednn_matmul_bf16_prepacked_at" + std::to_string(offset),
                  [offset](benchmark::State& st, const Shape& s, int t) {
                    onednn_matmul(st, s, t, dnnl::memory::data_type::bf16, true, offset);
                  });
  register_gemm("onednn_matmul_s8", [](benchmark::State& st, const Shape& s, int t) {
    onednn_matmul(st, s, t, dnnl::memory::data_type::s8);
  });
  register_gemm("onednn_matmul_s8_prepacked", [](benchmark::State& st, const Shape& s, int t) {
    onednn_matmul(st, s, t, dnnl::memory::data_type::s8, true);
  });
  // The slices diffq's int8 linear hands oneDNN on one thread (backend/cpu/int8_gemm.cpp: up to 512 rows
  // x 256 columns of a Wan linear, K 1536 or 8960), plain weights (copied into oneDNN's layout at every
  // call) against weights packed once: GEMM_BENCH_THREADS=1 for the per-call cost.
  const std::vector<Shape> slices = {{512, 256, 1536}, {512, 256, 8960}, {256, 256, 1536}};
  for (const auto& [name, dt] : {std::pair{"s8", dnnl::memory::data_type::s8}, std::pair{"bf16", dnnl::memory::data_type::bf16}})
    for (const bool prepacked : {false, true})
      register_gemm(std::string("onednn_slice_") + name + (prepacked ? "_prepacked" : ""),
                    [dt, prepacked](benchmark::State& st, const Shape& s, int t) {
                      onednn_matmul(st, s, t, dt, prepacked, 0);
                    }, slices);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const auto* v = dnnl_version();
  benchmark::AddCustomContext("onednn_version", std::to_string(v->major) + "." +
                                                    std::to_string(v->minor) + "." +
                                                    std::to_string(v->patch));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
