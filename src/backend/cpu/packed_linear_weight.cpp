#include "backend/cpu/packed_linear_weight.h"

#include "backend/cpu/gemm.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/tuning.h"
#include "diffq/error.h"
#include "ops/linear_q.h"
#include "ops/ops.h"
#include "ops/weight_packing.h"

namespace diffq::backend::cpu {

PackedBf16Weight::PackedBf16Weight(const Tensor& w) : n_(w.size(0)), k_(w.size(1)) {
  check(w.device().is_cpu() && w.dtype() == DType::bf16 && w.dim() == 2 && (w.strides()[1] == 1 || k_ <= 1) &&
            w.strides()[0] >= k_,
        "pack", "a packed bf16 weight needs CPU bf16 [N, K] rows, got ", w.str());
  packed_ = Tensor::empty({onednn_packed_bf16_elems(n_, k_)}, DType::bf16);
  onednn_pack_bf16_weight(n_, k_, w.data<uint16_t>(), w.strides()[0], packed_.data<uint16_t>());
}

Tensor PackedBf16Weight::dequantize(DType dtype) const {
  Tensor w = Tensor::empty({n_, k_}, DType::bf16);
  onednn_unpack_bf16_weight(n_, k_, packed_.data<uint16_t>(), w.data<uint16_t>());
  return dtype == DType::bf16 ? w : w.to(dtype);
}

bool cpu_packs_linear_weight(const Tensor& w, DType x_dtype) {
  const Tuning& t = current_tuning();
  if (t.weight_packing == WeightPacking::off) return false;
  if (!w.device().is_cpu() || w.dtype() != DType::bf16 || x_dtype != DType::bf16 ||
      w.dim() != 2 || w.size(0) < 16 || w.size(1) < 16 || (w.strides()[1] != 1) || w.strides()[0] < w.size(1))
    return false;
  if (!onednn_bf16_packing_usable()) return false;
  return t.weight_packing == WeightPacking::on || gemm_bf16_uses_onednn(1024, w.size(0), t);
}

std::string weight_packing_description() {
  const Tuning& t = current_tuning();
  if (!onednn_bf16_packing_usable()) return "dense (oneDNN reads no packed bf16 weights here: " + onednn_bf16_impl() + ")";
  if (t.weight_packing == WeightPacking::off) return "dense (DIFFQ_PACK_WEIGHTS=off)";
  if (t.weight_packing == WeightPacking::best && !gemm_bf16_uses_onednn(1024, 1024, t))
    return "dense (oneDNN is not the bf16 GEMM here; DIFFQ_PACK_WEIGHTS=on packs them)";
  std::string d = "packed once for oneDNN (BA16a64b2a) at their first bf16 linear";
  if (packed_bf16_uses_amx(1 << 20, 1 << 20))
    d += "; linears of >= 256 rows and K >= 3072 on diffq's AMX-BF16 tiles (K-blocked, the packed weight read in place)";
  return d;
}

namespace {

void packed_bf16_linear(const ops::OpCall& c, Tensor& out) {
  const auto* w = dynamic_cast<const PackedBf16Weight*>(c.attrs.packed);
  check(w != nullptr, "linear_q", "cpu: the ", kPackedBf16Scheme, " kernel was given a ", c.attrs.packed->scheme(),
        " weight");
  const Tensor& x = c.inputs[0];
  const Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  const Shape s = w->shape();
  const std::optional<ops::UnaryFn> act = ops::linear_q_activation(c);
  if (linear_bf16_packed(x, w->data(), s[0], s[1], bias, out, act)) return;
  // Not bf16 GEMM rows (or a part oneDNN declines): the dense linear on the weight unpacked for this call.
  out = ops::linear(x, w->dequantize(DType::bf16), bias);
  if (act) out = ops::unary(out, *act);
}

}  // namespace

void register_packed_linear_weight() {
  ops::register_linear_q_kernel(DeviceKind::cpu, kPackedBf16Scheme, packed_bf16_linear, /*applies_activation=*/true);
  ops::register_weight_packer(DeviceKind::cpu, [](const Tensor& w, DType x_dtype) -> std::shared_ptr<ops::PackedWeight> {
    if (!cpu_packs_linear_weight(w, x_dtype)) return nullptr;
    return std::make_shared<PackedBf16Weight>(w);
  });
}

}  // namespace diffq::backend::cpu
