// sdpa on CUDA as three library-sized steps, for the calls the fused kernels cannot take well:
// head dims above 256 (the VAEs' single-head mid-block attention: 512 wide in FLUX's, 384 in Wan's),
// which neither cuDNN's flash attention nor the simple kernel's registers hold, and large float32 calls,
// which the simple kernel would walk key by key. Per chunk of query rows:
//   S = Q K^T            [B, H, c, Sk]   f32 GEMM (cuBLASLt, true fp32: the CPU's f32 math)
//   S = S * scale
//   P = softmax(S)       f32, over the keys
//   O = P V              [B, H, c, Dv]   f32 GEMM, then one rounding into out's rows c
// The chunk keeps S within kScoreBytes, so a 2048x2048 image's 65536 x 65536 scores never exist at once.
// Masked calls stay on the simple kernel (its all-masked rows are torch's zeros); none has D > 256.
#include <algorithm>
#include <cmath>

#include "backend/cuda/kernels.h"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int64_t kScoreBytes = int64_t(256) << 20;

Tensor run(OpKind k, std::vector<Tensor> in, ops::Attrs a = {}) {
  return ops::execute(OpCall{k, std::move(in), std::move(a)});
}

Tensor as_f32(const Tensor& t) {
  ops::Attrs a;
  a.dtype = DType::f32;
  return t.dtype() == DType::f32 ? t : run(OpKind::cast, {t}, a);
}

}  // namespace

void sdpa_by_gemm(const OpCall& c, Tensor& out) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  check(c.inputs.size() < 4 || !c.inputs[3].defined(), "sdpa",
        "cuda: a mask with head dims above 256 is not supported (q ", q.str(), ")");
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Sk = k.size(2);
  if (out.numel() == 0) return;
  const double scale = c.attrs.f0 > 0 ? c.attrs.f0 : 1.0 / std::sqrt(double(D));
  const Tensor kt = run(OpKind::copy, {as_f32(k).transpose(2, 3)});  // [B, H, D, Sk] f32, packed once
  const Tensor vf = as_f32(v);                                      // [B, H, Sk, Dv]
  const int64_t rows = std::max<int64_t>(1, kScoreBytes / (4 * std::max<int64_t>(1, B * H * Sk)));
  ops::Attrs mul, soft, to_out;
  mul.i0 = int64_t(ops::ScalarFn::mul);
  mul.f0 = scale;
  soft.i0 = -1;
  to_out.dtype = out.dtype();
  for (int64_t i0 = 0; i0 < Sq; i0 += rows) {
    const int64_t i1 = std::min(Sq, i0 + rows);
    const Tensor s = run(OpKind::scalar, {run(OpKind::matmul, {as_f32(q.slice(2, i0, i1)), kt})}, mul);
    const Tensor o = run(OpKind::matmul, {run(OpKind::softmax, {s}, soft), vf});  // [B, H, c, Dv] f32
    Tensor dst = out.slice(2, i0, i1);
    ops::execute_into(OpCall{o.dtype() == out.dtype() ? OpKind::copy : OpKind::cast, {o}, to_out}, dst);
  }
}

}  // namespace diffq::backend::cuda
