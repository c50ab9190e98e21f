#include "quant/bnb/bnb_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/tile_linear_plan.h"

namespace diffq::quant {

using bnb::kInv127;

namespace {

constexpr const char* kCtx = "bnb";

int8_t code_of(float prod) {
  // torch.round (half to even) then .to(int8); NaN (0 * inf of an all-zero row) becomes 0 as on x86.
  if (std::isnan(prod)) return 0;
  const float r = std::nearbyint(prod);
  return int8_t(int32_t(r));
}

}  // namespace

namespace bnb {

void int8_vectorwise_quant(const float* a, int64_t rows, int64_t cols, double threshold, int8_t* codes,
                           float* row_stats, std::vector<int64_t>* outlier_cols) {
  std::vector<uint8_t> is_out;
  std::vector<uint8_t> col_has;
  const bool sparse = threshold > 0.0;
  const float thr = f16_to_f32(f32_to_f16(float(threshold)));  // the comparison runs in float16
  if (sparse) {
    is_out.assign(size_t(rows * cols), 0);
    col_has.assign(size_t(cols), 0);
    for (int64_t i = 0; i < rows * cols; ++i)
      if (std::fabs(a[i]) >= thr) {
        is_out[size_t(i)] = 1;
        col_has[size_t(i % cols)] = 1;
      }
  }
  core::parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = a + r * cols;
      float am = 0.0f;
      for (int64_t c = 0; c < cols; ++c) {
        const float v = (sparse && is_out[size_t(r * cols + c)]) ? 0.0f : std::fabs(row[c]);
        am = std::max(am, v);
      }
      row_stats[r] = am;
      const float mult = (1.0f / am) * 127.0f;  // 127.0 / t == t.reciprocal() * 127.0
      for (int64_t c = 0; c < cols; ++c) {
        const float v = (sparse && is_out[size_t(r * cols + c)]) ? 0.0f : row[c];
        codes[r * cols + c] = code_of(v * mult);
      }
    }
  });
  if (outlier_cols) outlier_cols->clear();
  if (sparse) {
    for (int64_t c = 0; c < cols; ++c)
      if (col_has[size_t(c)]) {
        if (outlier_cols) outlier_cols->push_back(c);
        if (rows > 1)
          for (int64_t r = 0; r < rows; ++r) codes[r * cols + c] = 0;
      }
  }
}

}  // namespace bnb

Bnb8bitWeight::Bnb8bitWeight(Tensor cb, Tensor scb, double threshold, std::string name)
    : cb_(std::move(cb)), scb_(std::move(scb)), threshold_(threshold), name_(std::move(name)) {
  check(cb_.defined() && cb_.dim() == 2 && cb_.dtype() == DType::i8, kCtx, name_,
        ": an LLM.int8 weight must be int8 [out_features, in_features], got ",
        cb_.defined() ? shape_str(cb_.shape()) + " " + std::string(dtype_name(cb_.dtype())) : std::string("nothing"));
  check(scb_.defined() && scb_.numel() == cb_.shape()[0] && scb_.dtype() == DType::f32, kCtx, name_,
        ": SCB must be float32 [", cb_.shape()[0], "], got ",
        scb_.defined() ? shape_str(scb_.shape()) + " " + std::string(dtype_name(scb_.dtype())) : std::string("nothing"));
  check(cb_.device().is_cpu() && scb_.device().is_cpu(), kCtx, name_, ": the weight must be on the CPU");
  cb_ = cb_.contiguous();
  scb_ = scb_.contiguous().reshape({cb_.shape()[0]});
}

std::shared_ptr<Bnb8bitWeight> Bnb8bitWeight::quantize(const Tensor& w, double threshold, std::string_view name) {
  check(w.dim() == 2 && is_floating(w.dtype()), kCtx, name, ": a Linear weight must be a 2-D float tensor, got ",
        shape_str(w.shape()), " ", dtype_name(w.dtype()));
  const int64_t O = w.shape()[0], I = w.shape()[1];
  const Tensor h = w.to(DType::f16).to(DType::f32).contiguous();
  Tensor cb = Tensor::empty({O, I}, DType::i8);
  Tensor scb = Tensor::empty({O}, DType::f32);
  bnb::int8_vectorwise_quant(h.data<float>(), O, I, 0.0, cb.data<int8_t>(), scb.data<float>(), nullptr);
  return std::make_shared<Bnb8bitWeight>(cb, scb, threshold, std::string(name));
}

std::shared_ptr<Bnb8bitWeight> Bnb8bitWeight::load(const io::StateDict& sd, const std::string& module, double threshold) {
  const std::string wk = module + ".weight", sk = module + ".SCB", fk = module + ".weight_format";
  const auto w = sd.find(wk);
  check(w != sd.end(), kCtx, "the state dict has no tensor '", wk, "'");
  check(sd.count(sk), kCtx, "Missing quantization component `SCB` for ", wk, " (expected '", sk, "')");
  if (const auto f = sd.find(fk); f != sd.end()) {
    check(f->second.numel() == 1 && !is_floating(f->second.dtype()), kCtx, fk,
          " must be an integer scalar, got ", shape_str(f->second.shape()), " ", dtype_name(f->second.dtype()));
    const int64_t v = int64_t(f->second.item());
    check(v >= 0 && v <= 3, kCtx, fk, ": Expected supported weight format - got ", v);
    static const char* names[] = {"row", "col32", "col_turing", "col_ampere"};
    check(v == 0, kCtx, fk, ": Only 'row' weight format is supported, got ", names[v]);
  }
  check(w->second.dtype() == DType::i8, kCtx, wk, " must be int8 for LLM.int8, got ", dtype_name(w->second.dtype()));
  return std::make_shared<Bnb8bitWeight>(w->second, sd.at(sk), threshold, wk);
}

void Bnb8bitWeight::save(io::NamedTensors& out, const std::string& module) const {
  out.emplace_back(module + ".weight", cb_);
  out.emplace_back(module + ".SCB", scb_);
  out.emplace_back(module + ".weight_format", Tensor::zeros({}, DType::u8));
}

void Bnb8bitWeight::dequant_rows(int64_t n0, int64_t n1, float* dst) const {
  const int64_t K = cb_.shape()[1];
  const int8_t* q = cb_.data<int8_t>();
  const float* s = scb_.data<float>();
  for (int64_t n = n0; n < n1; ++n) {
    const float sc = s[n];
    for (int64_t k = 0; k < K; ++k) {
      const float v = float(q[n * K + k]) * sc;
      *dst++ = v * kInv127;
    }
  }
}

Tensor Bnb8bitWeight::dequantize(DType dtype) const {
  Tensor out = Tensor::empty(cb_.shape(), DType::f32);
  dequant_rows(0, cb_.shape()[0], out.data<float>());
  return dtype == DType::f32 ? out : out.to(dtype);
}

void Bnb8bitWeight::check_input(const Tensor& x, const Tensor& bias) const {
  const int64_t N = cb_.shape()[0], K = cb_.shape()[1];
  check(x.dim() >= 1 && x.shape().back() == K, kCtx, name_, ": input's last dimension is ",
        x.dim() ? x.shape().back() : 0, ", the weight has in_features ", K);
  check(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16, kCtx, name_,
        ": input dtype ", dtype_name(x.dtype()), " is not float32, bfloat16 or float16");
  if (bias.defined()) check(bias.numel() == N, kCtx, name_, ": bias must have ", N, " elements");
}

// The dequantize-to-x's-dtype mode: W rounded to x's dtype, the f32 tiled GEMM, the bias in x's dtype.
std::optional<TileLinearPlan> Bnb8bitWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  if (mode_ == Int8LinearMode::llm_int8) return std::nullopt;
  check_input(x, bias);
  const int64_t N = cb_.shape()[0], K = cb_.shape()[1];
  const DType dt = x.dtype();
  const Tensor b = bias.defined() ? bias.to(dt) : Tensor();
  return TileLinearPlan{x, b, N, K, [this, K, dt](int64_t n0, int64_t n1, float* dst) {
                          const int8_t* q = cb_.data<int8_t>();
                          const float* s = scb_.data<float>();
                          for (int64_t n = n0; n < n1; ++n) {
                            const float sc = s[n] * kInv127;  // SCB.mul(1.0 / 127.0)
                            for (int64_t k = 0; k < K; ++k) *dst++ = round_through(dt, float(q[n * K + k]) * sc);
                          }
                        }};
}

}  // namespace diffq::quant
