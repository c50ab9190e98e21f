#include "lora/lora_linear.h"

#include <sstream>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::lora {

namespace {
Tensor in_run(const Tensor& t, DType dt, Device d) {
  Tensor r = t;
  if (r.dtype() != dt) r = r.to(dt);
  if (r.device() != d) r = r.to(d);
  return r;
}
}  // namespace

LoraLinear::Slot* LoraLinear::find(const std::string& adapter) {
  for (auto& s : slots)
    if (s.adapter == adapter) return &s;
  return nullptr;
}

Tensor LoraLinear::apply(const Tensor& x, const Tensor& y) {
  if (merged) return y;
  Tensor out = y;
  for (Slot& s : slots) {
    if (!s.active || s.weight == 0.0) continue;
    if (!s.A_run.defined() || s.A_run.dtype() != x.dtype() || s.A_run.device() != x.device()) {
      s.A_run = in_run(s.A, x.dtype(), x.device());
      s.B_run = in_run(s.B, x.dtype(), x.device());
      if (s.bias.defined()) s.bias_run = in_run(s.bias, x.dtype(), x.device());
    }
    const Tensor h = ops::linear(x, s.A_run);             // [..., r]
    const Tensor d = ops::linear(h, s.B_run, s.bias_run);  // [..., out] (+ lora bias)
    out = ops::add(out, ops::mul_scalar(d, double(float(s.weight * s.scaling))));
  }
  return out;
}

std::string LoraLinear::replay_key() const {
  std::ostringstream k;
  k << std::hexfloat << (merged ? "merged" : "unmerged");
  for (const Slot& s : slots) {
    k << ';' << s.adapter << (s.active ? "+" : "-") << s.weight << '*' << s.scaling;
    for (const Tensor* t : {&s.A, &s.B, &s.bias, &s.A_run, &s.B_run, &s.bias_run})
      k << ',' << (t->defined() ? t->data_ptr() : nullptr);
  }
  return k.str();
}

bool fuse(Linear& lin, LoraLinear& l, double scale) {
  if (lin.weight.is_quantized()) return false;
  check(!l.merged, "lora", "'", lin.weight.name, "' is already fused (unfuse_lora first)");
  const Tensor w0 = lin.weight.dense();
  Tensor w = w0;
  bool any_bias = false;
  for (const auto& s : l.slots) any_bias = any_bias || (s.active && s.bias.defined());
  check(!any_bias || lin.has_bias, "lora", "'", lin.weight.name, "' has no bias to fuse the LoRA's lora_B.bias into");
  const Tensor b0 = any_bias ? lin.bias.dense() : Tensor();
  Tensor b = b0;
  for (const auto& s : l.slots) {
    if (!s.active) continue;
    if (s.bias.defined())  // PEFT: base bias += lora_B.bias * scaling
      b = ops::add(b, in_run(ops::mul_scalar(s.bias, double(float(s.weight * s.scaling * scale))), b0.dtype(), b0.device()));
    // PEFT: delta = (B @ A) * scaling in float32, cast to W's dtype, added in W's dtype.
    const Tensor delta = ops::mul_scalar(ops::matmul(s.B, s.A), double(float(s.weight * s.scaling * scale)));
    w = ops::add(w, in_run(delta, w0.dtype(), w0.device()));
  }
  l.original_weight = w0;
  l.original_residency = lin.weight.residency();
  lin.weight.set(w.contiguous(), w0.device().is_cpu() ? Residency::host : Residency::device);
  if (any_bias) {
    l.original_bias = b0;
    l.original_bias_residency = lin.bias.residency();
    lin.bias.set(b.contiguous(), b0.device().is_cpu() ? Residency::host : Residency::device);
  }
  l.merged = true;
  return true;
}

void unfuse(Linear& lin, LoraLinear& l) {
  if (!l.merged) return;
  lin.weight.set(l.original_weight, l.original_residency);
  l.original_weight = Tensor();
  if (l.original_bias.defined()) {
    lin.bias.set(l.original_bias, l.original_bias_residency);
    l.original_bias = Tensor();
  }
  l.merged = false;
}

}  // namespace diffq::lora
