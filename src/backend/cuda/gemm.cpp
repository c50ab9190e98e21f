// linear and matmul on CUDA through cuBLASLt (host code only). Operands of one float dtype (float32,
// bfloat16 or float16) go to cuBLASLt as they are (made contiguous first when they are views), with
// f32 accumulation (CUBLAS_COMPUTE_32F: true fp32 for float32, no TF32) and the bias added by the
// BIAS epilogue before the single rounding to the output dtype. Mixed dtypes are cast to float32, multiplied
// in float32 and the result cast once to the output dtype, as the CPU backend does. matmul's batch
// dims broadcast: a 2-D right operand folds the batch into M (one GEMM); otherwise both operands are
// expanded to the common batch shape (a copy) and run as one strided-batched GEMM.
// The column-major layouts given to cuBLASLt come from gemm_plan.h (checked on the CPU by a test); the
// built plans (descriptor, layouts, algorithm) are cached per shape (GemmKey), so the heuristic runs once
// per shape, not per call. gemm_s8s8_s32 is the integer GEMM (IMMA) of the dynamically quantized linears.
#include <cublasLt.h>

#include <array>
#include <atomic>
#include <memory>
#include <climits>
#include <cstdio>
#include <string>
#include <cstdint>
#include <mutex>

#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr int kMaxDevices = 16;

void check_lt(cublasStatus_t st, const char* ctx, const char* what, int idx) {
  check(st == CUBLAS_STATUS_SUCCESS, ctx, "cuda:", idx, ": ", what, " failed: ", cublasLtGetStatusString(st),
        " (", cublasLtGetStatusName(st), ")");
}

// One cuBLASLt handle and workspace per device, created on first use and kept for the process.
struct LtDevice {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

LtDevice& lt_device(int idx, const char* ctx) {
  static std::array<LtDevice, kMaxDevices> devices;
  static std::mutex mu;
  check(idx >= 0 && idx < kMaxDevices, ctx, "cuda: device index ", idx, " out of range");
  std::lock_guard<std::mutex> lock(mu);
  LtDevice& d = devices[size_t(idx)];
  if (!d.handle) {
    check_lt(cublasLtCreate(&d.handle), ctx, "cublasLtCreate", idx);
    check_cuda(cudaMalloc(&d.workspace, kWorkspaceBytes), "cuBLASLt workspace cudaMalloc", idx);
  }
  return d;
}

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// RAII owners of the cuBLASLt descriptors.
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld, int32_t batch, int64_t stride,
         const char* ctx, int idx) {
    check_lt(cublasLtMatrixLayoutCreate(&h, t, rows, cols, ld), ctx, "cublasLtMatrixLayoutCreate", idx);
    if (batch > 1) {
      cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
      cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// A built cuBLASLt plan: descriptor, the three layouts and the heuristic's algorithm for one GemmKey.
// The bias pointer changes per call: it is set on the descriptor right before the matmul is queued,
// under the plan's own lock (cublasLtMatmul reads the descriptor when it is called).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  std::unique_ptr<Layout> la, lb, ld;
  cublasLtMatmulAlgo_t algo{};
  std::mutex mu;
  ~LtPlan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

PlanCache<GemmKey, LtPlan, GemmKeyHash>& gemm_plans() {
  static PlanCache<GemmKey, LtPlan, GemmKeyHash> cache;
  return cache;
}

std::shared_ptr<LtPlan> build_plan(const char* ctx, const GemmKey& key, LtDevice& dev) {
  const int idx = key.device;
  auto plan = std::make_shared<LtPlan>();
  // int8 x int8 -> int32 (IMMA, "TN": the weight transposed, K a multiple of 4) keys as DType::i8;
  // float8_e4m3fn x float8_e4m3fn -> float32 (Hopper / Ada's fp8 tensor cores, "TN", unit scales) as
  // DType::f8_e4m3fn.
  const bool imma = DType(key.dtype) == DType::i8, fp8 = DType(key.dtype) == DType::f8_e4m3fn;
  const cudaDataType_t t = imma ? CUDA_R_8I : fp8 ? CUDA_R_8F_E4M3 : lt_type(DType(key.dtype));
  const cudaDataType_t td = imma ? CUDA_R_32I : fp8 ? CUDA_R_32F : t;
  check_lt(imma ? cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32I, CUDA_R_32I)
                : cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
           ctx, "cublasLtMatmulDescCreate", idx);
  const GemmPlan p = plan_gemm(key.m, key.n, key.k, key.w_nk, key.w_batched, key.batch);
  const cublasOperation_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (key.bias) {
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)), ctx,
             "set epilogue BIAS", idx);
    const cudaDataType_t bt = t;
    cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
  }
  const int32_t nb = int32_t(key.batch);
  plan->la = std::make_unique<Layout>(t, p.a.rows, p.a.cols, p.a.ld, key.w_batched ? nb : 1, p.a.batch_stride, ctx, idx);
  plan->lb = std::make_unique<Layout>(t, p.b.rows, p.b.cols, p.b.ld, nb, p.b.batch_stride, ctx, idx);
  plan->ld = std::make_unique<Layout>(td, p.d.rows, p.d.cols, p.d.ld, nb, p.d.batch_stride, ctx, idx);
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), ctx, "cublasLtMatmulPreferenceCreate", idx);
  struct PrefOwner {
    cublasLtMatmulPreference_t h;
    ~PrefOwner() { cublasLtMatmulPreferenceDestroy(h); }
  } pref_owner{pref};
  const uint64_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_w, sizeof(key.align_w));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_x, sizeof(key.align_x));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_d, sizeof(key.align_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d, sizeof(key.align_d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(dev.handle, plan->desc, plan->la->h, plan->lb->h, plan->ld->h, plan->ld->h,
                                          pref, 1, &result, &found),
           ctx, "cublasLtMatmulAlgoGetHeuristic", idx);
  check(found > 0, ctx, "cuda:", idx, ": cuBLASLt has no algorithm for ", dtype_name(DType(key.dtype)), " M=", key.m,
        " N=", key.n, " K=", key.k, " batch=", key.batch);
  plan->algo = result.algo;
  return plan;
}

// D[batch][M, N] (row-major, contiguous) = X[batch][M, K] * W^T (w_nk: W stored [N, K]) or X * W
// (W stored [K, N]), + bias[N]. All operands contiguous, of dtype dt; W has the batch too when
// w_batched (else batch must be 1). The plan of this shape comes from the cache (built on first use).
void gemm(const char* ctx, int idx, DType dt, const void* x, const void* w, bool w_nk, bool w_batched,
          const void* bias, void* d, int64_t M, int64_t N, int64_t K, int64_t batch) {
  // First: the handle, its workspace and every call below belong to cuda:idx, not the current device.
  DeviceGuard guard(idx);
  LtDevice& dev = lt_device(idx, ctx);
  check(w_batched || batch == 1, ctx, "cuda: an unbatched weight needs batch 1");
  check(batch <= INT32_MAX, ctx, "cuda: batch ", batch, " too large for cuBLASLt");
  const GemmKey key{idx, int(dt), M, N, K, batch, w_nk, w_batched, bias != nullptr,
                    uint32_t(address_alignment(w)), uint32_t(address_alignment(x)),
                    uint32_t(address_alignment(d))};
  const std::shared_ptr<LtPlan> plan = gemm_plans().get_or_build(key, [&] { return build_plan(ctx, key, dev); });
  const float alpha = 1.0f, beta = 0.0f;
  const int32_t ialpha = 1, ibeta = 0;
  const bool imma = dt == DType::i8;
  std::lock_guard<std::mutex> lock(plan->mu);
  if (bias)
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             ctx, "set bias pointer", idx);
  check_lt(cublasLtMatmul(dev.handle, plan->desc, imma ? static_cast<const void*>(&ialpha) : &alpha, w, plan->la->h, x,
                          plan->lb->h, imma ? static_cast<const void*>(&ibeta) : &beta, d, plan->ld->h, d, plan->ld->h,
                          &plan->algo, dev.workspace, kWorkspaceBytes, current_stream()),
           ctx, "cublasLtMatmul", idx);
}

bool is_gemm_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// The common compute dtype of the operands: theirs when they share one, else float32.
DType compute_dtype(const std::vector<const Tensor*>& ts) {
  const DType d = ts[0]->dtype();
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() != d) return DType::f32;
  return d;
}

// Writes `res` (contiguous, on out's device) into out, casting when the dtypes differ.
void write_out(const Tensor& res, Tensor& out) {
  const Tensor r = res.dtype() == out.dtype() ? res : packed_operand(res, out.dtype());
  check_cuda(cudaMemcpyAsync(out.data_ptr(), r.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice, current_stream()),
             "gemm: result cudaMemcpy", out.device().index);
}

void linear(const OpCall& c, Tensor& out) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const Tensor b = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  for (const Tensor* t : {&x, &w, &b, static_cast<const Tensor*>(&out)})
    check(!t->defined() || is_gemm_float(t->dtype()), "linear", "cuda: ", t->str(),
          " is not supported yet (float32, float16, bfloat16 are)");
  const int64_t K = x.size(-1), N = w.size(0), M = K ? x.numel() / K : out.numel() / std::max<int64_t>(N, 1);
  if (out.numel() == 0) return;
  const int idx = out.device().index;
  const DType dt = compute_dtype({&x, &w, &b});
  if (K == 0) {  // empty sum: bias (or zeros)
    check_cuda(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), current_stream()), "linear: cudaMemset", idx);
    check(!b.defined(), "linear", "cuda: K = 0 with a bias is not supported");
    return;
  }
  const Tensor xc = packed_operand(x, dt), wc = packed_operand(w, dt);
  const Tensor bc = b.defined() ? packed_operand(b, dt) : Tensor();
  const bool direct = dt == out.dtype();
  const Tensor res = direct ? out : Tensor::empty(out.shape(), dt, out.device());
  gemm("linear", idx, dt, xc.data_ptr(), wc.data_ptr(), true, false, bc.defined() ? bc.data_ptr() : nullptr,
       res.data_ptr(), M, N, K, 1);
  if (!direct) write_out(res, out);
}

void matmul(const OpCall& c, Tensor& out) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&out)})
    check(is_gemm_float(t->dtype()), "matmul", "cuda: ", t->str(),
          " is not supported yet (float32, float16, bfloat16 are)");
  if (out.numel() == 0) return;
  const int idx = out.device().index;
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (K == 0) {
    check_cuda(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), current_stream()), "matmul: cudaMemset", idx);
    return;
  }
  const DType dt = compute_dtype({&a, &b});
  Shape batch(out.shape().begin(), out.shape().end() - 2);
  const int64_t nbatch = shape_numel(batch);
  const bool direct = dt == out.dtype();
  const Tensor res = direct ? out : Tensor::empty(out.shape(), dt, out.device());
  Shape ash = batch, bsh = batch;
  ash.insert(ash.end(), {M, K});
  bsh.insert(bsh.end(), {K, N});
  const Tensor ac = packed_operand(a.expand(ash), dt);
  if (b.dim() == 2) {  // one weight for every batch entry: fold the batch into M
    const Tensor bc = packed_operand(b, dt);
    gemm("matmul", idx, dt, ac.data_ptr(), bc.data_ptr(), false, false, nullptr, res.data_ptr(), nbatch * M, N,
         K, 1);
  } else {
    const Tensor bc = packed_operand(b.expand(bsh), dt);
    gemm("matmul", idx, dt, ac.data_ptr(), bc.data_ptr(), false, true, nullptr, res.data_ptr(), M, N, K, nbatch);
  }
  if (!direct) write_out(res, out);
}

}  // namespace

void gemm_s8s8_s32(int idx, const int8_t* x, const int8_t* w, int32_t* d, int64_t M, int64_t N, int64_t K) {
  check(K % 4 == 0, "linear_q", "cuda: the int8 GEMM needs K a multiple of 4, got ", K);
  gemm("linear_q", idx, DType::i8, x, w, /*w_nk=*/true, false, nullptr, d, M, N, K, 1);
}

namespace {
std::atomic<int64_t> fp8_runs{0};
}  // namespace

int64_t gemm_e4m3_runs() { return fp8_runs.load(); }

std::string gemm_e4m3_f32(int idx, const uint8_t* x, const uint8_t* w, float* d, int64_t M, int64_t N, int64_t K) {
  if (K % 16 != 0 || N % 16 != 0) return cat("K = ", K, " and N = ", N, " must be multiples of 16");
  static std::array<std::string, kMaxDevices> unavailable;  // per device, once known
  static std::mutex mu;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (idx >= 0 && idx < kMaxDevices && !unavailable[size_t(idx)].empty()) return unavailable[size_t(idx)];
  }
  try {
    gemm("linear_q", idx, DType::f8_e4m3fn, x, w, /*w_nk=*/true, false, nullptr, d, M, N, K, 1);
    fp8_runs.fetch_add(1);
    return "";
  } catch (const Error& e) {  // no fp8 algorithm on this GPU (before sm_89) or for these operands
    if (M * N * K == 0) throw;
    std::lock_guard<std::mutex> lock(mu);
    if (idx >= 0 && idx < kMaxDevices) unavailable[size_t(idx)] = e.what();
    std::fprintf(stderr, "[linear_q] cuda:%d: cuBLASLt's float8 GEMM is unavailable (%s): fp8dq dequantizes instead\n",
                 idx, e.what());
    return e.what();
  }
}

// A view that starts off a 16-byte boundary (a slice) is copied too, so every operand is 16-byte aligned.
Tensor packed_operand(const Tensor& t, DType dt) {
  Tensor r = t;
  if (r.dtype() != dt) {
    Attrs a;
    a.dtype = dt;
    r = ops::execute(ops::OpCall{OpKind::cast, {r}, a});
  }
  if (!r.is_contiguous() || address_alignment(r.data_ptr()) < 16) r = ops::execute(ops::OpCall{OpKind::copy, {r}, {}});
  return r;
}

PlanCacheStats gemm_plan_cache_stats() { return gemm_plans().stats(); }

void register_gemm_kernels() {
  ops::register_kernel(OpKind::linear, DeviceKind::cuda, linear);
  ops::register_kernel(OpKind::matmul, DeviceKind::cuda, matmul);
}

}  // namespace diffq::backend::cuda
