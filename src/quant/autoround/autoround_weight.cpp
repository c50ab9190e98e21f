#include "quant/autoround/autoround_weight.h"

#include "core/thread_pool.h"
#include "diffq/error.h"

namespace diffq::quant::autoround {

namespace {
constexpr const char* kCtx = "autoround";
}

AutoRoundWeight::AutoRoundWeight(const AutoRoundLayout& layout, Tensor qweight, Tensor qzeros, Tensor scales,
                                 Tensor g_idx, Shape shape)
    : l_(layout), qweight_(qweight.contiguous()), qzeros_(qzeros.contiguous()), scales_(scales.contiguous()),
      g_idx_(g_idx.defined() ? g_idx.contiguous() : Tensor()) {
  check(l_.bits == 2 || l_.bits == 4 || l_.bits == 8, kCtx, "bits=", l_.bits,
        " is not supported by diffq (2, 4, 8: the 32-bit-word packings)");
  check(shape.size() == 2, kCtx, "weight shape ", shape_str(shape), " is not [N, K]");
  n_ = shape[0];
  k_ = shape[1];
  const int per = 32 / l_.bits;
  check(k_ % per == 0 && n_ % per == 0, kCtx, "shape ", shape_str(shape), ": in_features and out_features must be ",
        "multiples of ", per, " for ", l_.bits, "-bit packing");
  check(qweight_.dtype() == DType::i32 && qweight_.shape() == Shape{k_ / per, n_}, kCtx, "qweight must be int32 [",
        k_ / per, ", ", n_, "], got ", qweight_.str());
  check(scales_.dim() == 2 && scales_.shape()[1] == n_ && is_floating(scales_.dtype()), kCtx,
        "scales must be a float [G, ", n_, "] tensor, got ", scales_.str());
  groups_ = scales_.shape()[0];
  check(qzeros_.dtype() == DType::i32 && qzeros_.shape() == Shape{groups_, n_ / per}, kCtx, "qzeros must be int32 [",
        groups_, ", ", n_ / per, "], got ", qzeros_.str());
  group_of_.resize(size_t(k_));
  if (g_idx_.defined()) {
    check(g_idx_.numel() == k_ && (g_idx_.dtype() == DType::i32 || g_idx_.dtype() == DType::i64), kCtx,
          "g_idx must be int32 [", k_, "], got ", g_idx_.str());
    const Tensor gi = g_idx_.to(DType::i64);
    for (int64_t k = 0; k < k_; ++k) {
      group_of_[size_t(k)] = int32_t(gi.data<int64_t>()[k]);
      check(group_of_[size_t(k)] >= 0 && group_of_[size_t(k)] < groups_, kCtx, "g_idx[", k, "] = ",
            group_of_[size_t(k)], " is outside [0, ", groups_, ")");
    }
  } else {
    const int64_t g = l_.group_size == -1 ? k_ : l_.group_size;
    check(g > 0 && (k_ + g - 1) / g == groups_, kCtx, "scales has ", groups_, " groups, group_size ", l_.group_size,
          " over in_features ", k_, " gives ", g > 0 ? (k_ + g - 1) / g : 0);
    for (int64_t k = 0; k < k_; ++k) group_of_[size_t(k)] = int32_t(k / g);
  }
  scale_ = scales_.to_f32_vector();
  zero_.resize(size_t(groups_ * n_));
  const uint32_t* qz = reinterpret_cast<const uint32_t*>(qzeros_.data<int32_t>());
  const uint32_t mask = (1u << l_.bits) - 1;
  for (int64_t gi = 0; gi < groups_; ++gi)
    for (int64_t n = 0; n < n_; ++n) {
      const int32_t z = int32_t((qz[gi * (n_ / per) + n / per] >> ((n % per) * l_.bits)) & mask);
      zero_[size_t(gi * n_ + n)] = z + (l_.zero_minus_one ? 1 : 0);
    }
}

void AutoRoundWeight::dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const {
  const int per = 32 / l_.bits;
  const uint32_t mask = (1u << l_.bits) - 1;
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(qweight_.data<int32_t>());
  for (int64_t n = n0; n < n1; ++n) {
    float* d = dst + (n - n0) * k_;
    for (int64_t k = 0; k < k_; ++k) {
      const int32_t q = int32_t((qw[(k / per) * n_ + n] >> ((k % per) * l_.bits)) & mask);
      const size_t gi = size_t(group_of_[size_t(k)]) * size_t(n_) + size_t(n);
      // scales (float16) * (q - zp): the product rounded once to float16 (exact in float32 first)
      // scales (cast to the compute dtype, as Diffusers' loading casts the float16 buffers) * (q - zp), in
      // that dtype: exact in float32 (11 + 9 bits)
      d[k] = round_through(out, round_through(out, scale_[gi]) * float(q - zero_[gi]));
    }
  }
}

Tensor AutoRoundWeight::dequantize(DType dtype) const {
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, kCtx, "dequantize to ",
        dtype_name(dtype), ": not float32, bfloat16 or float16");
  Tensor f = Tensor::empty({n_, k_}, DType::f32);
  float* p = f.data<float>();
  core::parallel_for(n_, 16, [&](int64_t a, int64_t b) { dequant_rows(a, b, dtype, p + a * k_); });
  return dtype == DType::f32 ? f : f.to(dtype);
}

std::vector<Tensor> AutoRoundWeight::storage_tensors() const {
  std::vector<Tensor> v{qweight_, qzeros_, scales_};
  if (g_idx_.defined()) v.push_back(g_idx_);
  return v;
}

std::optional<TileLinearPlan> AutoRoundWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  // QuantLinear in a model loaded with torch_dtype = x's dtype: scales * (q - zp) in that dtype, x @ W
  const DType out = x.dtype();
  return TileLinearPlan{x, bias, n_, k_, [this, out](int64_t a, int64_t b, float* dst) { dequant_rows(a, b, out, dst); }};
}

std::shared_ptr<AutoRoundWeight> AutoRoundWeight::load(const io::StateDict& sd, const std::string& module,
                                                       const Shape& shape, const AutoRoundLayout& layout,
                                                       std::vector<std::string>& consumed) {
  const auto qw = sd.find(module + ".qweight");
  if (qw == sd.end()) return nullptr;
  Tensor t[2];
  const char* names[2] = {".qzeros", ".scales"};
  for (int i = 0; i < 2; ++i) {
    const auto it = sd.find(module + names[i]);
    check(it != sd.end(), kCtx, module, ": has \"", module, ".qweight\" but no \"", module, names[i], "\"");
    t[i] = it->second;
    consumed.push_back(it->first);
  }
  Tensor g;
  if (const auto it = sd.find(module + ".g_idx"); it != sd.end()) {
    g = it->second;
    consumed.push_back(it->first);
  }
  consumed.push_back(qw->first);
  return std::make_shared<AutoRoundWeight>(layout, qw->second, t[0], t[1], g, shape);
}

void AutoRoundWeight::save(io::StateDict& out, const std::string& module) const {
  out[module + ".qweight"] = qweight_;
  out[module + ".qzeros"] = qzeros_;
  out[module + ".scales"] = scales_;
  if (g_idx_.defined()) out[module + ".g_idx"] = g_idx_;
}

}  // namespace diffq::quant::autoround
