// The dense Linear a quantized one stands for, as `diffq quantize` converts between formats: the weight
// W such that x @ W^T + bias is the layer's output with its weights dequantized (and its activations NOT
// quantized: a W4A4 / W8A8 source's activation quantization has no dense equivalent and is dropped).
//   * every scheme: QuantizedWeight::dequantize (the library's own dequantization, bit for bit);
//   * ModelOpt AWQ / SmoothQuant (ScaledWeight with pre_quant_scale): the input smoothing is folded into
//     the columns, W[n, k] = dequant[n, k] * pre_quant_scale[k] (float32 products, then the dtype);
//   * Nunchaku SVDQuant W4A4: dequantize already folds the smoothing and the low-rank branch,
//     W = code * wscale / smooth + proj_up @ proj_down^T; the bias of a packed-layout layer is stored in
//     the kernel's permuted order and comes back in logical order (dense_equivalent_bias).
#pragma once

#include "diffq/tensor.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

// [N, K] in `dtype`.
Tensor dense_equivalent(const QuantizedWeight& w, DType dtype);
// The Linear's bias as a dense Linear with dense_equivalent's weight takes it: `bias` itself for every
// scheme but a packed-layout SVDQuant W4A4 (un-permuted, in bias's dtype). Undefined stays undefined.
Tensor dense_equivalent_bias(const QuantizedWeight& w, const Tensor& bias);

}  // namespace diffq::quant
