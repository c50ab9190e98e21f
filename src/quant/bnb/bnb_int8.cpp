#include "quant/bnb/bnb_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/dequant_linear.h"

namespace diffq::quant {


namespace {

constexpr const char* kCtx = "bnb";
constexpr float kInv127 = float(7.874015718698502e-3);  // the literal bitsandbytes multiplies by
constexpr float kInv127Sq = float(6.200124e-05);         // int8_mm_dequant's 1 / (127 * 127)

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

Tensor Bnb8bitWeight::cpu_linear(const Tensor& x, const Tensor& bias) const {
  check_input(x, bias);
  return mode_ == Int8LinearMode::llm_int8 ? linear_llm_int8(x, bias) : QuantizedWeight::cpu_linear(x, bias);
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

Tensor Bnb8bitWeight::linear_llm_int8(const Tensor& x, const Tensor& bias) const {
  const int64_t N = cb_.shape()[0], K = cb_.shape()[1];
  const DType dt = x.dtype();
  const int64_t M = x.numel() / K;
  Shape out_shape = x.shape();
  out_shape.back() = N;
  const Tensor xf = x.to(DType::f32).contiguous();             // x's own values
  const Tensor xh = x.to(DType::f16).to(DType::f32).contiguous();  // A.to(float16)
  const float* xp = xf.data<float>();

  std::vector<int8_t> ca(static_cast<size_t>(M * K));
  std::vector<float> rs(static_cast<size_t>(M));
  std::vector<int64_t> cols;
  bnb::int8_vectorwise_quant(xh.data<float>(), M, K, threshold_, ca.data(), rs.data(), &cols);

  // int32 product q_x q_w^T through the float32 GEMM (exact below 2^24, as bitsandbytes' own).
  Tensor caf = Tensor::empty({M, K}, DType::f32);
  float* cap = caf.data<float>();
  for (int64_t i = 0; i < M * K; ++i) cap[i] = float(ca[size_t(i)]);
  const int8_t* q = cb_.data<int8_t>();
  const Tensor acc = dequant_tile_linear(caf, {}, N, K, [q, K](int64_t n0, int64_t n1, float* dst) {
    for (int64_t i = n0 * K; i < n1 * K; ++i) *dst++ = float(q[i]);
  });
  const float* ap = acc.data<float>();
  const float* scb = scb_.data<float>();
  std::vector<float> bf;
  if (bias.defined()) bf = bias.to(dt).to_f32_vector();  // Linear8bitLt casts the bias to x's dtype

  // Outlier columns: x[:, cols] (x's dtype) against the dequantized weight columns rounded to x's dtype.
  std::vector<float> subb;
  if (!cols.empty()) {
    subb.resize(size_t(N) * cols.size());
    for (int64_t n = 0; n < N; ++n)
      for (size_t c = 0; c < cols.size(); ++c) {
        const float v = float(q[n * K + cols[c]]) * scb[n];
        subb[size_t(n) * cols.size() + c] = round_through(dt, v * kInv127);
      }
  }
  Tensor y = Tensor::empty(out_shape, DType::f32);
  float* yp = y.data<float>();
  core::parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float c32 = float(int32_t(ap[m * N + n]));
        float v = c32 * (rs[size_t(m)] * scb[n]);
        v = v * kInv127Sq;
        if (!bf.empty()) v = v + bf[size_t(n)];
        v = round_through(dt, v);
        if (!cols.empty()) {
          float s = 0.0f;
          for (size_t c = 0; c < cols.size(); ++c) s += xp[m * K + cols[c]] * subb[size_t(n) * cols.size() + c];
          v = round_through(dt, v + s);
        }
        yp[m * N + n] = v;
      }
  });
  return dt == DType::f32 ? y : y.to(dt);
}

}  // namespace diffq::quant
