// GEMM through OpenBLAS (cblas). bf16 inputs are widened to f32 first (exact), then sgemm.
#include "backend/cpu/gemm.h"

#include <cblas.h>

#include <vector>

#include "backend/cpu/threads.h"
#include "diffq/dtype.h"

namespace diffq::backend::cpu {

namespace {
void sync_blas_threads() {
  static int configured = -1;
  const int n = num_threads();
  if (n != configured) {
    openblas_set_num_threads(n);
    configured = n;
  }
}

std::vector<float> widen(const uint16_t* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = bf16_to_f32(x[r * ld + c]);
  return out;
}
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sync_blas_threads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  const int64_t ar = trans_a ? k : m, ac = trans_a ? m : k;
  const int64_t br = trans_b ? n : k, bc = trans_b ? k : n;
  const auto af = widen(a, ar, ac, lda), bf = widen(b, br, bc, ldb);
  sgemm(trans_a, trans_b, m, n, k, alpha, af.data(), ac, bf.data(), bc, beta, c, ldc);
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
