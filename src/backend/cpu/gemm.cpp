// sgemm / gemm_bf16: C split into static parts over diffq's pool (for_each_part), each part computed by
// one single-threaded kernel, chosen per GEMM by gemm_uses_diffq_kernel (measured: docs/benchmarks.md
// "CPU GEMM (issue 2)"):
// - f32: OpenBLAS cblas_sgemm (diffq's blocked kernel measured on par, not faster).
// - bf16 from 16 rows and columns: diffq's blocked kernel (sgemm_kernel.h), which widens bf16 (exactly)
//   while packing, so no widened copy is made (1.0-1.46x faster than the path below).
// - other bf16: OpenBLAS's cblas_sbgemm is not exported by Debian's build, BLIS has no bf16 GEMM and
//   oneDNN 2.6 has no bf16 matmul without AVX512-BF16/AMX; so bf16 A/B are widened to f32 (exact) block
//   by block into a reused scratch buffer and multiplied with sgemm (f32 accumulation). Blocks stay
//   around L3 size, so the widened copy is consumed from cache and no full-size f32 copy of a weight
//   is ever made.
// Tuning::gemm_kernel forces either kernel (benchmarks, tests).
#include "backend/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/bf16_gemm_amx.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/sgemm_kernel.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "diffq/dtype.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

namespace {

// OpenBLAS runs single-threaded; sgemm splits C over diffq's own pool instead. Measured: OpenBLAS's
// own threads scale 1.3-1.5x from 1 to 2 cores here and spin against diffq's pool between calls
// (docs/benchmarks.md "CPU GEMM"); one pool for everything avoids both.
void blas_single_threaded() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

void blas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}


// Elements per widened operand block (16 MiB of f32).
constexpr int64_t kBlockElems = int64_t(1) << 22;

// Rows of op(X) per block, when each row holds k elements: blocks of about equal size, each within
// kBlockElems (but at least 64 rows), a multiple of 16 rows unless one block covers all `rows`.
int64_t block_rows(int64_t rows, int64_t k) {
  const int64_t cap = std::max<int64_t>(64, kBlockElems / std::max<int64_t>(k, 1));
  if (rows <= cap) return rows;
  const int64_t blocks = (rows + cap - 1) / cap;
  int64_t b = (rows + blocks - 1) / blocks;
  b = (b + 15) / 16 * 16;
  return std::min(b, std::max<int64_t>(16, cap - cap % 16));
}

// dst[r * cols + c] = f32(src[r * ld + c]) for r < rows, c < cols.
void widen(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint16_t* s = src + r * ld;
      float* d = dst + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        const uint32_t u = uint32_t(s[c]) << 16;
        std::memcpy(d + c, &u, 4);
      }
    }
  };
  if (rows * cols < (int64_t(1) << 16))
    body(0, rows);
  else
    parallel_for(rows, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(cols, 1)), body);
}

// A scratch buffer that only grows; reused across calls on the same thread (no page faults, no
// zero-fill per call).
struct Scratch {
  std::unique_ptr<float[]> data;
  int64_t size = 0;
  float* get(int64_t n) {
    if (n > size) {
      data.reset(new float[size_t(n)]);
      size = n;
    }
    return data.get();
  }
};

// The widened operand blocks of gemm_bf16 / gemm_bf16_parts on this thread.
thread_local Scratch widened_a, widened_b;

// The block [i0, i0 + rows) of op(X)'s `rows` dimension (M for A, N for B), widened. X is stored
// untransposed-for-this-purpose when `rows_are_rows` (block = rows of X, each k long) and otherwise
// as k rows of which the block is a column range. Returns the leading dimension of the widened block.
int64_t widen_block(const uint16_t* x, int64_t ldx, bool rows_are_rows, int64_t i0, int64_t rows,
                    int64_t k, float* dst) {
  if (rows_are_rows) {
    widen(x + i0 * ldx, ldx, rows, k, dst);
    return k;
  }
  widen(x + i0, ldx, k, rows, dst);
  return rows;
}

}  // namespace

GemmSplitPlan gemm_split_plan(int64_t m, int64_t n, int64_t k, int threads, const Tuning& t) {
  if (threads <= 1 || t.gemm_split == GemmSplit::none || double(m) * double(n) * double(k) < kGemmParallelMacs)
    return {};
  GemmSplitPlan p;
  p.split_n = t.gemm_split == GemmSplit::cols || (t.gemm_split == GemmSplit::longer_side && n >= m);
  const int64_t len = p.split_n ? n : m;
  p.parts = std::min<int64_t>(int64_t(threads) * std::max(1, t.gemm_parts_per_thread), (len + 15) / 16);
  return p;
}

namespace {
// The threads a GEMM called here may split over: 1 inside a pool task (nested parallel_for runs inline).
int pool_threads() { return in_parallel_region() ? 1 : num_threads(); }
}  // namespace

bool openblas_lacks_this_cpu() {
  static const bool lacks = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.avx2 || !f.fma) return false;
    // OpenBLAS's DYNAMIC_ARCH picks its kernels by CPU model; a model newer than the build (0.3.21 does
    // not know Emerald Rapids, family 6 model 207) falls back to "Prescott" (SSE3), 4x slower here.
    const std::string core = openblas_get_corename();
    for (const char* ok : {"Haswell", "Zen", "SkylakeX", "CooperLake", "SapphireRapids", "Excavator"})
      if (core == ok) return false;
    return true;
  }();
  return lacks;
}

bool gemm_uses_diffq_kernel(bool bf16, int64_t m, int64_t n, const Tuning& t) {
  switch (t.gemm_kernel) {
    case GemmKernel::diffq: case GemmKernel::diffq_widen: return true;
    case GemmKernel::openblas: return false;
    case GemmKernel::best: case GemmKernel::onednn: break;
  }
  // Measured (docs/benchmarks.md "diffq's blocked kernel"): f32 on par with OpenBLAS (median 1.00x on
  // the FLUX shapes, 1 and 2 threads), so OpenBLAS stays where it runs AVX2/AVX-512 kernels; where it
  // fell back to SSE kernels on an AVX2 CPU the blocked kernel is ~4x faster (docs/benchmarks.md
  // "Session 7"). bf16 1.0-1.46x faster than widening + OpenBLAS (no widening pass). Below 16 rows or
  // columns most of a 6 x 16 tile would be padding.
  return (bf16 || openblas_lacks_this_cpu()) && m >= 16 && n >= 16;
}

bool gemm_bf16_uses_onednn(int64_t m, int64_t n, const Tuning& t) {
  switch (t.gemm_kernel) {
    case GemmKernel::onednn: return true;
    case GemmKernel::diffq: case GemmKernel::diffq_widen: case GemmKernel::openblas: return false;
    case GemmKernel::best: break;
  }
  // AMX tiles; and AMD CPUs with AVX512-BF16 (Zen 4, Zen 5), where oneDNN's brg:avx512_core_bf16 per
  // part made bf16 steps 4-12% faster than diffq's vdpbf16ps pair kernel (docs/benchmarks.md "bf16 GEMM
  // on oneDNN on AMD"). Not on Intel's AVX512-BF16 without AMX: there oneDNN's matmul ran 81 GFLOP/s a
  // thread against the blocked kernel's 142 on an Emerald Rapids Xeon (docs/benchmarks.md "Session 7").
  return onednn_bf16_preferred() && m >= 16 && n >= 16;
}

bool gemm_bf16_uses_dot(int64_t m, int64_t n, const Tuning& t) {
  switch (t.gemm_kernel) {
    case GemmKernel::best: case GemmKernel::diffq: break;
    case GemmKernel::diffq_widen: case GemmKernel::openblas: case GemmKernel::onednn: return false;
  }
  if (t.gemm_kernel == GemmKernel::best && gemm_bf16_uses_onednn(m, n, t)) return false;  // oneDNN first
  // Every shape, thin ones too: bf16 pairs are packed without widening, so even a GEMV reads its
  // weight once at half the bytes of the widened copy the OpenBLAS path makes.
  return bf16_dot_gemm_usable();
}

bool gemm_bf16_native(int64_t m, int64_t n, const Tuning& t) {
  return gemm_bf16_uses_onednn(m, n, t) || gemm_bf16_uses_dot(m, n, t);
}

bool gemm_f32_uses_onednn(int64_t m, int64_t n, const Tuning& t) {
  if (!cpu_features().avx512f) return false;  // AVX2 CPUs: OpenBLAS / the blocked kernel (measured there)
  switch (t.gemm_kernel) {
    case GemmKernel::onednn: return true;
    case GemmKernel::diffq: case GemmKernel::diffq_widen: case GemmKernel::openblas: return false;
    case GemmKernel::best: break;
  }
  // On AVX-512: oneDNN's brgemm per part made an fp32 FLUX step 1.13x faster than the blocked kernel on
  // an Emerald Rapids Xeon (docs/benchmarks.md "Session 7").
  return m >= 16 && n >= 16;
}

std::string gemm_kernel_name(bool bf16) {
  if (!bf16 && gemm_f32_uses_onednn(1024, 1024, current_tuning())) return "oneDNN matmul " + onednn_f32_impl();
  if (bf16 && gemm_bf16_uses_onednn(1024, 1024, current_tuning())) return "oneDNN matmul " + onednn_bf16_impl();
  if (bf16 && gemm_bf16_uses_dot(1024, 1024, current_tuning())) return "diffq-blocked (AVX512-BF16 vdpbf16ps pairs)";
  const bool own = gemm_uses_diffq_kernel(bf16, 1024, 1024, current_tuning());
  if (own)
    return std::string("diffq-blocked (") + simd_target_chosen() + (bf16 ? ", bf16 widened in packing)" : ")") +
           (!bf16 && openblas_lacks_this_cpu() ? "; OpenBLAS runs " + std::string(openblas_get_corename()) + " kernels here" : "");
  std::string blas = "openblas";
#ifdef OPENBLAS_VERSION
  blas = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
  blas = blas.substr(blas.find_first_not_of(' '));
  blas = blas.substr(0, blas.find_last_not_of(' ') + 1);
#endif
  blas += std::string(" (") + openblas_get_corename() + " kernels)";
  return bf16 ? blas + ", bf16 widened to f32 blocks" : blas;
}

namespace {

// The parts sgemm splits C[m, n] into (gemm_split_plan), each given to f(r0, r1, c0, c1) on the pool thread that owns
// it (one part on the calling thread when the GEMM is small, single-threaded or nested in a pool
// task). One part of C per thread (times tune.gemm_parts_per_thread), split along its longer side by
// default, at multiples of 16. The split is static, so a given thread count and tuning always give
// the same bits. oneDNN's bf16 linears (min_rows > 0) split along m wherever every part gets >=
// min_rows rows (their parts then write whole rows: oneDNN's AMX kernels write strided rows of a part
// several times slower), else along n at multiples of kOnednnPackedCols (packed weights' blocks).
// Packed weights take kPackedRowsPerPart: fewer rows than that per part read the whole weight twice for
// little work each (docs/benchmarks.md "Linears on AMX: rows or columns per thread"); plain weights 64,
// their column parts being strided.
constexpr int64_t kPackedRowsPerPart = 256;
constexpr int64_t kPlainRowsPerPart = 64;
void for_each_part(int64_t m, int64_t n, int64_t k,
                   const std::function<void(int64_t, int64_t, int64_t, int64_t)>& f, int64_t min_rows = 0) {
  const GemmSplitPlan plan = gemm_split_plan(m, n, k, pool_threads(), current_tuning());
  if (plan.parts <= 1) {
    f(0, m, 0, n);
    return;
  }
  const bool split_n = min_rows > 0 ? m < min_rows * plan.parts : plan.split_n;
  const int64_t col_align = min_rows > 0 ? kOnednnPackedCols : 16;
  const int64_t len = split_n ? n : m, parts = plan.parts;
  const int64_t align = split_n ? col_align : 16;
  auto edge = [&](int64_t p) { return p == parts ? len : (len * p / parts) / align * align; };
  parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t x0 = edge(p), x1 = edge(p + 1);
      if (x1 <= x0) continue;
      if (split_n)
        f(0, m, x0, x1);
      else
        f(x0, x1, 0, n);
    }
  });
}

// op(A)[r0:r1, :] and op(B)[:, c0:c1] as BLAS operands.
template <class T>
const T* a_rows_at(const T* a, bool trans_a, int64_t lda, int64_t r0) {
  return trans_a ? a + r0 : a + r0 * lda;
}
template <class T>
const T* b_cols_at(const T* b, bool trans_b, int64_t ldb, int64_t c0) {
  return trans_b ? b + c0 * ldb : b + c0;
}

// The kernel of an f32 GEMM's parts.
enum class F32Kernel { onednn, own, blas };
F32Kernel f32_kernel(int64_t m, int64_t n) {
  const Tuning& t = current_tuning();
  if (gemm_f32_uses_onednn(m, n, t)) return F32Kernel::onednn;
  return gemm_uses_diffq_kernel(false, m, n, t) ? F32Kernel::own : F32Kernel::blas;
}

// One part of C, by oneDNN (where it has a kernel for the part's layout), diffq's blocked kernel or
// OpenBLAS.
void part_gemm(F32Kernel kern, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (kern == F32Kernel::onednn && onednn_sgemm_part(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  if (kern != F32Kernel::blas)
    sgemm_blocked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    blas_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const F32Kernel kern = f32_kernel(m, n);
  blas_single_threaded();
  for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    part_gemm(kern, trans_a, trans_b, r1 - r0, c1 - c0, k, alpha, a_rows_at(a, trans_a, lda, r0), lda,
              b_cols_at(b, trans_b, ldb, c0), ldb, beta, c + r0 * ldc + c0, ldc);
  });
}

void sgemm_parts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, const GemmParts& parts) {
  if (m <= 0 || n <= 0) return;
  const F32Kernel kern = f32_kernel(m, n);
  blas_single_threaded();
  for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    int64_t ld = 0;
    float* c = parts.begin(r0, r1, c0, c1, &ld);
    part_gemm(kern, trans_a, trans_b, r1 - r0, c1 - c0, k, alpha, a_rows_at(a, trans_a, lda, r0), lda,
              b_cols_at(b, trans_b, ldb, c0), ldb, beta, c, ld);
    parts.end(r0, r1, c0, c1, c, ld);
  });
}

namespace {

// The kernel of a bf16 GEMM's parts.
enum class Bf16Kernel { onednn, dot, widening, blas };
Bf16Kernel bf16_kernel(int64_t m, int64_t n) {
  const Tuning& t = current_tuning();
  if (gemm_bf16_uses_onednn(m, n, t)) return Bf16Kernel::onednn;
  if (gemm_bf16_uses_dot(m, n, t)) return Bf16Kernel::dot;
  return gemm_uses_diffq_kernel(true, m, n, t) ? Bf16Kernel::widening : Bf16Kernel::blas;
}

// One part of a bf16 GEMM by oneDNN (where it has a native kernel for the part's layout), diffq's
// bf16-pair kernel or diffq's widening blocked kernel.
void bf16_part(Bf16Kernel kern, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (kern == Bf16Kernel::onednn && onednn_gemm_bf16_part(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
    return;
  // A part oneDNN declines runs on the pair kernel where the CPU has one.
  if (kern == Bf16Kernel::dot || (kern == Bf16Kernel::onednn && bf16_dot_gemm_usable()))
    gemm_bf16_dot(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    sgemm_blocked_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// gemm_bf16's blocks: op(A) and op(B) widened block by block into per-thread scratch, each block pair
// multiplied by gemm(trans_a, trans_b, rows, cols, alpha, widened A, lda_w, widened B, ldb_w, i0, j0).
template <class Gemm>
void bf16_blocks(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                 const uint16_t* b, int64_t ldb, const Gemm& gemm) {
  Scratch& sa = widened_a;
  Scratch& sb = widened_b;
  const int64_t mb = block_rows(m, k), nb = block_rows(n, k);
  const int64_t m_blocks = (m + mb - 1) / mb, n_blocks = (n + nb - 1) / nb;
  // Op(A) rows are A's rows unless trans_a; op(B)^T rows (= C columns) are B's rows when trans_b.
  const bool a_rows = !trans_a, b_rows = trans_b;
  float* aw = sa.get(mb * k);
  float* bw = sb.get(nb * k);
  // Loop order: the operand in the outer loop is widened once, the inner one once per outer block.
  const bool m_outer = m * k + n * k * m_blocks <= n * k + m * k * n_blocks;
  int64_t lda_w = 0, ldb_w = 0, a_done = -1, b_done = -1;
  for (int64_t outer = 0; outer < (m_outer ? m_blocks : n_blocks); ++outer)
    for (int64_t inner = 0; inner < (m_outer ? n_blocks : m_blocks); ++inner) {
      const int64_t ib = m_outer ? outer : inner, jb = m_outer ? inner : outer;
      const int64_t i0 = ib * mb, mr = std::min(mb, m - i0);
      const int64_t j0 = jb * nb, nr = std::min(nb, n - j0);
      if (a_done != ib) lda_w = widen_block(a, lda, a_rows, i0, mr, k, aw), a_done = ib;
      if (b_done != jb) ldb_w = widen_block(b, ldb, b_rows, j0, nr, k, bw), b_done = jb;
      gemm(mr, nr, aw, lda_w, bw, ldb_w, i0, j0);
    }
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta * C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  const Bf16Kernel kern = bf16_kernel(m, n);
  if (kern != Bf16Kernel::blas) {
    // oneDNN and the pair kernel multiply bf16 natively; the blocked kernel widens bf16 while packing:
    // no widened copy.
    for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      bf16_part(kern, trans_a, trans_b, r1 - r0, c1 - c0, k, alpha, a_rows_at(a, trans_a, lda, r0), lda,
                b_cols_at(b, trans_b, ldb, c0), ldb, beta, c + r0 * ldc + c0, ldc);
    });
    return;
  }
  bf16_blocks(trans_a, trans_b, m, n, k, a, lda, b, ldb,
              [&](int64_t mr, int64_t nr, const float* aw, int64_t lda_w, const float* bw, int64_t ldb_w,
                  int64_t i0, int64_t j0) {
                sgemm(trans_a, trans_b, mr, nr, k, alpha, aw, lda_w, bw, ldb_w, beta, c + i0 * ldc + j0, ldc);
              });
}

void gemm_bf16_parts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                     const GemmParts& parts) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta * C, as one part
    int64_t ld = 0;
    float* c = parts.begin(0, m, 0, n, &ld);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ld + j] = beta == 0.0f ? 0.0f : beta * c[i * ld + j];
    parts.end(0, m, 0, n, c, ld);
    return;
  }
  const Bf16Kernel kern = bf16_kernel(m, n);
  if (kern != Bf16Kernel::blas) {
    for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      int64_t ld = 0;
      float* c = parts.begin(r0, r1, c0, c1, &ld);
      bf16_part(kern, trans_a, trans_b, r1 - r0, c1 - c0, k, alpha, a_rows_at(a, trans_a, lda, r0), lda,
                b_cols_at(b, trans_b, ldb, c0), ldb, beta, c, ld);
      parts.end(r0, r1, c0, c1, c, ld);
    });
    return;
  }
  bf16_blocks(trans_a, trans_b, m, n, k, a, lda, b, ldb,
              [&](int64_t mr, int64_t nr, const float* aw, int64_t lda_w, const float* bw, int64_t ldb_w,
                  int64_t i0, int64_t j0) {
                GemmParts shifted;
                shifted.begin = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld) {
                  return parts.begin(i0 + r0, i0 + r1, j0 + c0, j0 + c1, ld);
                };
                shifted.end = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* p, int64_t ld) {
                  parts.end(i0 + r0, i0 + r1, j0 + c0, j0 + c1, p, ld);
                };
                sgemm_parts(trans_a, trans_b, mr, nr, k, alpha, aw, lda_w, bw, ldb_w, beta, shifted);
              });
}

bool gemm_bf16_linear_to_bf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w,
                              int64_t ldw, const float* bias, uint16_t* y, int64_t ldy) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  const Bf16Kernel kern = bf16_kernel(m, n);
  if (kern != Bf16Kernel::onednn) return false;
  for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const int64_t rows = r1 - r0, cols = c1 - c0;
    const float* b = bias ? bias + c0 : nullptr;
    uint16_t* yp = y + r0 * ldy + c0;
    if (onednn_linear_bf16_part(rows, cols, k, x + r0 * ldx, ldx, w + c0 * ldw, ldw, b, yp, ldy)) return;
    // Declined: f32 C = bias, + x w^T on the part's kernel, rounded once.
    thread_local std::vector<float> cbuf;
    cbuf.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) cbuf[size_t(r * cols + j)] = b ? b[j] : 0.f;
    bf16_part(kern, false, true, rows, cols, k, 1.f, x + r0 * ldx, ldx, w + c0 * ldw, ldw, b ? 1.f : 0.f,
              cbuf.data(), cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) yp[r * ldy + j] = f32_to_bf16(cbuf[size_t(r * cols + j)]);
  }, kPlainRowsPerPart);
  return true;
}

namespace {
// One part of a packed-weight linear, rows x cols of an output whose rows are `ld` apart at dst:
// compute(c, ldc) writes it where oneDNN can (its brgemm on packed weights writes dense rows only, so
// a part narrower than the output's rows goes through a dense per-thread tile, copied in after).
template <class T, class F>
bool packed_part(int64_t rows, int64_t cols, T* dst, int64_t ld, const F& compute) {
  if (ld == cols) return compute(dst, cols);
  thread_local AlignedBuffer<T> buf;  // aligned: oneDNN's AMX brgemm writes unaligned rows much slower
  T* const tile = buf.get(size_t(rows * cols));
  if (!compute(tile, cols)) return false;
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * ld, tile + r * cols, size_t(cols) * sizeof(T));
  return true;
}

// Columns of a packed weight per oneDNN call: slices of at most 16 MiB of packed B (k x cols bf16).
// One call on all of a part's columns has oneDNN 2.6's AMX brgemm walk the whole packed weight once
// per block of rows (FLUX's MLP weight is 72 MiB); much smaller slices (L2 size) re-read the rows too
// often (docs/benchmarks.md "Packed weights on AMX").
int64_t packed_cols_per_call(int64_t k) {
  constexpr int64_t kSliceBytes = int64_t(16) << 20;
  const int64_t cols = kSliceBytes / (2 * std::max<int64_t>(k, 1)) / kOnednnPackedCols * kOnednnPackedCols;
  return std::max(cols, kOnednnPackedCols);
}

// f(c0, c1) for [c0, c1) in slices of packed_cols_per_call(k) columns (c0 stays a multiple of 64).
template <class F>
bool for_each_packed_slice(int64_t c0, int64_t c1, int64_t k, const F& f) {
  const int64_t step = packed_cols_per_call(k);
  for (int64_t j = c0; j < c1; j += step)
    if (!f(j, std::min(c1, j + step))) return false;
  return true;
}
// Packed bf16 linears of at least this many rows and this K run on diffq's AMX-BF16 tiles (bf16_gemm_amx.h)
// where packed_bf16_uses_amx: measured level with oneDNN's brgemm on FLUX.1's 3072 x 3072 linears and faster
// on its and Wan's longer-K ones (bench_int8_linear's fluxw_ / wan_linear_bf16_packed; docs/benchmarks.md
// "Eleventh AMX session"), level at K 1536, slower at K 768 (FLUX-small: short blocks, whose fixed costs oneDNN
// amortises better).
constexpr int64_t kAmxBf16MinRows = 256;
constexpr int64_t kAmxBf16MinK = 3072;
}  // namespace

bool packed_bf16_uses_amx(int64_t m, int64_t k) {
  if (m < kAmxBf16MinRows || k < kAmxBf16MinK || current_tuning().gemm_kernel != GemmKernel::best) return false;
  static const bool yes = amx_bf16_usable() && onednn_bf16_packing_usable() && onednn_bf16_uses_amx();
  // (asked each time: a SIMD target forced below AVX-512 keeps oneDNN, as the int8 and attention tiles)
  return yes && simd_dispatch_is_avx512();
}

bool gemm_bf16_linear_packed(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w_packed,
                             const float* bias, uint16_t* y, int64_t ldy, std::optional<ops::UnaryFn> act) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  if (packed_bf16_uses_amx(m, k)) {
    for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      amx_bf16_packed_gemm_part(k, x, ldx, w_packed, r0, r1, c0, c1,
                                [&](const float* c, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
                                  uint16_t* const dst = y + i0 * ldy + j0;
                                  amx_bf16_block_to_bf16(c, rows, cols, bias ? bias + j0 : nullptr, dst, ldy);
                                  if (act) unary_rows_in_place(*act, DType::bf16, dst, ldy, rows, cols);
                                });
    }, kPackedRowsPerPart);
    return true;
  }
  std::atomic<bool> declined{false};
  for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const int64_t rows = r1 - r0;
    const bool ok = for_each_packed_slice(c0, c1, k, [&](int64_t j0, int64_t j1) {
      uint16_t* const dst = y + r0 * ldy + j0;
      if (!packed_part(rows, j1 - j0, dst, ldy, [&](uint16_t* c, int64_t ldc) {
            return onednn_linear_bf16_packed_part(rows, j1 - j0, k, x + r0 * ldx, ldx,
                                                  w_packed + onednn_packed_bf16_elems(j0, k), bias ? bias + j0 : nullptr,
                                                  c, ldc);
          }))
        return false;
      if (act) unary_rows_in_place(*act, DType::bf16, dst, ldy, rows, j1 - j0);
      return true;
    });
    if (!ok) declined = true;
  }, kPackedRowsPerPart);
  return !declined;
}

void gemm_bf16_linear_packed_parts(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                   const uint16_t* w_packed, const float* bias, const GemmParts& parts, bool round_bf16) {
  if (m <= 0 || n <= 0) return;
  check(k > 0, "gemm", "a packed bf16 linear needs K > 0");
  for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const int64_t rows = r1 - r0;
    int64_t ld = 0;
    float* const dst = parts.begin(r0, r1, c0, c1, &ld);
    if (packed_bf16_uses_amx(m, k)) {
      amx_bf16_packed_gemm_part(k, x, ldx, w_packed, r0, r1, c0, c1,
                                [&](const float* c, int64_t i0, int64_t nr, int64_t j0, int64_t cols) {
                                  for (int64_t i = 0; i < nr; ++i) {
                                    float* d = dst + (i0 - r0 + i) * ld + (j0 - c0);
                                    const float* s = c + i * 32;
                                    for (int64_t j = 0; j < cols; ++j) {
                                      const float v = bias ? s[j] + bias[j0 + j] : s[j];
                                      d[j] = round_bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
                                    }
                                  }
                                });
      parts.end(r0, r1, c0, c1, dst, ld);
      return;
    }
    const bool ok = for_each_packed_slice(c0, c1, k, [&](int64_t j0, int64_t j1) {
      return packed_part(rows, j1 - j0, dst + (j0 - c0), ld, [&](float* c, int64_t ldc) {
        if (!onednn_linear_bf16_packed_part_f32(rows, j1 - j0, k, x + r0 * ldx, ldx,
                                                w_packed + onednn_packed_bf16_elems(j0, k),
                                                bias ? bias + j0 : nullptr, c, ldc))
          return false;
        if (round_bf16)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < j1 - j0; ++j) c[r * ldc + j] = bf16_to_f32(f32_to_bf16(c[r * ldc + j]));
        return true;
      });
    });
    check(ok, "gemm", "oneDNN declined a packed bf16 linear part of ", rows, " x ", c1 - c0, " x ", k);
    parts.end(r0, r1, c0, c1, dst, ld);
  }, kPackedRowsPerPart);
}

void gemm_bf16_rows(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                    const uint16_t* const* b_rows, int64_t b_col0, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  // The pair kernel reads B's rows in place; oneDNN wants B contiguous, so it runs these only on AMX
  // (elsewhere the pair kernel's in-place rows beat a gather plus oneDNN's matmul).
  const Bf16Kernel kern = bf16_kernel(m, n);
  const bool rows_in_place = kern == Bf16Kernel::dot || (kern == Bf16Kernel::onednn && !onednn_bf16_uses_amx() &&
                                                         current_tuning().gemm_kernel == GemmKernel::best &&
                                                         bf16_dot_gemm_usable());
  if (k > 0 && rows_in_place) {
    for_each_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      gemm_bf16_dot_rows(trans_a, r1 - r0, c1 - c0, k, alpha, a_rows_at(a, trans_a, lda, r0), lda, b_rows,
                         b_col0 + c0, beta, c + r0 * ldc + c0, ldc);
    });
    return;
  }
  // Elsewhere: column blocks of B gathered into a contiguous [k, nb] copy (<= 4 MiB) for gemm_bf16.
  const int64_t nb = std::max<int64_t>(32, std::min<int64_t>(n, (int64_t(2) << 20) / std::max<int64_t>(k, 1)));
  AlignedBuffer<uint16_t> blocks;
  uint16_t* const block = blocks.get(size_t(std::max<int64_t>(k, 1) * nb));
  for (int64_t j0 = 0; j0 < n; j0 += nb) {
    const int64_t cols = std::min(nb, n - j0);
    parallel_for(k, std::max<int64_t>(1, 4096 / cols), [&](int64_t k0, int64_t k1) {
      for (int64_t kk = k0; kk < k1; ++kk)
        std::memcpy(block + kk * cols, b_rows[kk] + b_col0 + j0, size_t(cols) * sizeof(uint16_t));
    });
    gemm_bf16(trans_a, false, m, cols, k, alpha, a, lda, block, cols, beta, c + j0, ldc);
  }
}

void sgemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const double bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      c[i * ldc + j] = float(alpha * acc + (beta == 0.0f ? 0.0 : double(beta) * c[i * ldc + j]));
    }
}

}  // namespace diffq::backend::cpu
