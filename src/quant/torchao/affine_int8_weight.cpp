#include "quant/torchao/affine_int8_weight.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/tile_linear_plan.h"

namespace diffq::quant::torchao {

namespace {

constexpr const char* kCtx = "torchao.int8";

std::vector<float> widen(const Tensor& t) { return t.to_f32_vector(); }

std::vector<int32_t> widen_int(const Tensor& t) {
  std::vector<int32_t> out;
  if (!t.defined()) return out;
  const Tensor c = t.contiguous();
  const int8_t* p = c.data<int8_t>();
  out.assign(p, p + c.numel());
  return out;
}

nlohmann::json granularity_kwargs_json(const Granularity& g) {
  // dataclass encoding inside tensor kwargs: no "_version"
  if (g.type == Granularity::PerTensor) return {{"_type", "PerTensor"}, {"_data", nlohmann::json::object()}};
  return {{"_type", "PerRow"}, {"_data", {{"dim", g.dim}}}};
}

struct Blocks {
  int64_t bn, bk, nb, kb;  // block dims and block counts
};

// min / max of every block of a row-major [N, K] f32 matrix.
void block_min_max(const std::vector<float>& w, int64_t n, int64_t k, const Blocks& b, std::vector<float>& mn,
                   std::vector<float>& mx) {
  mn.assign(size_t(b.nb * b.kb), std::numeric_limits<float>::infinity());
  mx.assign(size_t(b.nb * b.kb), -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = size_t((r / b.bn) * b.kb + c / b.bk);
      const float v = w[size_t(r * k + c)];
      mn[i] = std::min(mn[i], v);
      mx[i] = std::max(mx[i], v);
    }
}

}  // namespace

std::pair<int64_t, int64_t> block_size_for(const Granularity& g, int64_t n, int64_t k, const char* ctx) {
  switch (g.type) {
    case Granularity::PerTensor: return {n, k};
    case Granularity::PerRow:
    case Granularity::PerAxis: return {1, k};
    case Granularity::PerGroup:
      check(g.group_size > 0 && k % g.group_size == 0, ctx, "weight [", n, ", ", k,
            "]: in_features ", k, " is not divisible by group_size ", g.group_size);
      return {1, g.group_size};
  }
  return {1, k};
}

AffineInt8Weight::AffineInt8Weight(Flavor flavor, Tensor qdata, Tensor scale, Tensor zero_point, int64_t bn,
                                   int64_t bk, DType dtype, int bits, std::optional<Granularity> act)
    : TorchaoWeight(qdata.dim() == 2 ? qdata.shape()[0] : 0, qdata.dim() == 2 ? qdata.shape()[1] : 0, dtype),
      flavor_(flavor), qdata_(qdata.contiguous()), scale_(scale.contiguous()),
      zero_point_(zero_point.defined() ? zero_point.contiguous() : zero_point), bn_(bn), bk_(bk), bits_(bits),
      act_(act) {
  check(qdata_.dim() == 2 && qdata_.dtype() == DType::i8, kCtx, "qdata must be int8 [N, K], got ", qdata_.str());
  check(bn_ > 0 && bk_ > 0 && n_ % bn_ == 0 && k_ % bk_ == 0, kCtx, "block_size [", bn_, ", ", bk_,
        "] does not divide the weight shape ", shape_str(qdata_.shape()));
  const Shape sshape{n_ / bn_, k_ / bk_};
  check(is_floating(scale_.dtype()) && scale_.numel() == shape_numel(sshape), kCtx, "scale must be a float tensor of ",
        shape_str(sshape), " elements for block_size [", bn_, ", ", bk_, "], got ", scale_.str());
  if (zero_point_.defined())
    check(zero_point_.dtype() == DType::i8 && zero_point_.numel() == shape_numel(sshape), kCtx,
          "zero_point must be int8 with ", shape_numel(sshape), " elements, got ", zero_point_.str());
  scale_f_ = widen(scale_);
  zp_ = widen_int(zero_point_);
  if (zp_.empty()) zp_.assign(scale_f_.size(), 0);
}

std::shared_ptr<AffineInt8Weight> AffineInt8Weight::quantize_int8(const Tensor& w, const Granularity& g,
                                                                  std::optional<Granularity> act) {
  check(w.dim() == 2 && (w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16), kCtx,
        "weight must be a float [N, K] tensor, got ", w.str());
  const int64_t n = w.shape()[0], k = w.shape()[1];
  auto [bn, bk] = block_size_for(g, n, k, kCtx);
  const Blocks b{bn, bk, n / bn, k / bk};
  const std::vector<float> wf = w.to_f32_vector();
  std::vector<float> mn, mx;
  block_min_max(wf, n, k, b, mn, mx);
  Tensor scale = Tensor::empty({b.nb, b.kb}, DType::f32);
  Tensor zp = Tensor::empty({b.nb, b.kb}, DType::i8);
  Tensor q = Tensor::empty({n, k}, DType::i8);
  std::vector<float> recip(mn.size());
  for (size_t i = 0; i < mn.size(); ++i) {
    const AffineParams p = choose_qparams(mn[i], mx[i], MappingType::Symmetric, -128, 127, FLT_EPSILON, w.dtype());
    scale.data<float>()[i] = p.scale;
    zp.data<int8_t>()[i] = int8_t(p.zero_point);
    recip[i] = reciprocal_in(DType::f32, p.scale);
  }
  int8_t* qp = q.data<int8_t>();
  const int8_t* zpp = zp.data<int8_t>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = size_t((r / bn) * b.kb + c / bk);
      qp[r * k + c] = int8_t(quantize_one(wf[size_t(r * k + c)], recip[i], zpp[i], -128, 127, DType::f32));
    }
  return std::make_shared<AffineInt8Weight>(Flavor::Int8Tensor, q, scale, zp, bn, bk, w.dtype(), 8, act);
}

std::shared_ptr<AffineInt8Weight> AffineInt8Weight::quantize_intx(const Tensor& w, int bits, const Granularity& g,
                                                                  MappingType mapping, std::optional<DType> sdt_opt) {
  check(w.dim() == 2 && (w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16), kCtx,
        "weight must be a float [N, K] tensor, got ", w.str());
  check(bits >= 1 && bits <= 8, kCtx, "weight_dtype must be int1..int8, got int", bits);
  const int64_t n = w.shape()[0], k = w.shape()[1];
  auto [bn, bk] = block_size_for(g, n, k, kCtx);
  const Blocks b{bn, bk, n / bn, k / bk};
  const DType hp = w.dtype();
  const int32_t qmin = qmin_bits(bits), qmax = qmax_bits(bits);
  // eps defaults to torch.finfo(input.dtype).smallest_normal
  const float eps = hp == DType::f16 ? 6.103515625e-05f : FLT_MIN;
  const std::vector<float> wf = w.to_f32_vector();
  std::vector<float> mn, mx;
  block_min_max(wf, n, k, b, mn, mx);
  const DType sdt = sdt_opt.value_or(hp);
  Tensor scale = Tensor::empty({b.nb, b.kb}, sdt);
  Tensor zp = Tensor::empty({b.nb, b.kb}, DType::i8);
  std::vector<float> sv(mn.size()), recip(mn.size());
  for (size_t i = 0; i < mn.size(); ++i) {
    const AffineParams p = choose_qparams(mn[i], mx[i], mapping, qmin, qmax, eps, hp);
    sv[i] = round_through(sdt, p.scale);  // scale.to(scale_dtype)
    zp.data<int8_t>()[i] = int8_t(p.zero_point);
    recip[i] = reciprocal_in(sdt, sv[i]);
  }
  const Tensor sf = Tensor::from_vector(sv, {b.nb, b.kb}, DType::f32);
  scale = sf.to(sdt);
  const DType pd = promote_float(hp, sdt);
  Tensor q = Tensor::empty({n, k}, DType::i8);
  int8_t* qp = q.data<int8_t>();
  const int8_t* zpp = zp.data<int8_t>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = size_t((r / bn) * b.kb + c / bk);
      qp[r * k + c] = int8_t(quantize_one(wf[size_t(r * k + c)], recip[i], zpp[i], qmin, qmax, pd));
    }
  return std::make_shared<AffineInt8Weight>(Flavor::IntxUnpacked, q, scale, zp, bn, bk, hp, bits, std::nullopt);
}

std::string AffineInt8Weight::scheme() const {
  if (flavor_ == Flavor::IntxUnpacked) return "torchao_int" + std::to_string(bits_) + "wo";
  return act_ ? "torchao_int8dq" : "torchao_int8wo";
}

std::string AffineInt8Weight::tensor_class() const {
  return flavor_ == Flavor::Int8Tensor ? "Int8Tensor" : "IntxUnpackedToInt8Tensor";
}

nlohmann::json AffineInt8Weight::tensor_attributes() const {
  nlohmann::json block = {bn_, bk_};
  if (flavor_ == Flavor::IntxUnpacked)
    return {{"target_dtype", {{"_type", "torch.dtype"}, {"_data", "int" + std::to_string(bits_)}}},
            {"block_size", block},
            {"dtype", torch_dtype_json(dtype_)},
            {"activation_quantization", nullptr}};
  nlohmann::json act = nullptr;
  if (act_)
    act = {{"_type", "QuantizeTensorToInt8Kwargs"},
           {"_data", {{"granularity", granularity_kwargs_json(*act_)},
                      {"mapping_type", {{"_type", "MappingType"}, {"_data", "SYMMETRIC"}}},
                      {"reduce_range", false}}}};
  return {{"act_quant_kwargs", act}, {"reduce_range", false}, {"block_size", block}, {"dtype", torch_dtype_json(dtype_)}};
}

std::vector<std::pair<std::string, Tensor>> AffineInt8Weight::tensor_data() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (flavor_ == Flavor::Int8Tensor) {
    if (zero_point_.defined()) out.emplace_back("zero_point", zero_point_);
    out.emplace_back("qdata", qdata_);
    out.emplace_back("scale", scale_);
  } else {
    out.emplace_back("qdata", qdata_);
    out.emplace_back("scale", scale_);
    out.emplace_back("zero_point", zero_point_);
  }
  return out;
}

void AffineInt8Weight::dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const {
  const int8_t* q = qdata_.data<int8_t>();
  const DType sdt = scale_.dtype();
  const DType pd = promote_float(out, sdt);
  const int64_t kb = k_ / bk_;
  for (int64_t r = n0; r < n1; ++r) {
    const int8_t* qr = q + r * k_;
    float* d = dst + (r - n0) * k_;
    for (int64_t c0 = 0; c0 < k_; c0 += bk_) {
      const size_t i = size_t((r / bn_) * kb + c0 / bk_);
      const float s = scale_f_[i];
      const int32_t z = zp_[i];
      if (pd == DType::f32 && out == DType::f32) {  // the common linear path: one exact product
        for (int64_t c = c0; c < c0 + bk_; ++c) d[c] = float(int32_t(qr[c]) - z) * s;
      } else {
        for (int64_t c = c0; c < c0 + bk_; ++c) d[c] = dequantize_one(qr[c], z, s, sdt, out);
      }
    }
  }
}

std::optional<TileLinearPlan> AffineInt8Weight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  if (act_) return std::nullopt;  // int8 x int8 GEMM
  return TileLinearPlan{x, bias, n_, k_, [this](int64_t a, int64_t b, float* dst) { dequant_rows(a, b, DType::f32, dst); }};
}

}  // namespace diffq::quant::torchao
