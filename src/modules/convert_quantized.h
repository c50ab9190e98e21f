// Converting a loaded module's pre-quantized weights to another format (`diffq quantize` from a
// pre-quantized folder or single file): each quantized Linear weight that `keep` does not list is
// replaced by its dense equivalent (quant/dense_equivalent.h: the library's dequantization in `dtype`,
// ModelOpt's pre_quant_scale folded into the columns, Nunchaku's low-rank branch folded into the weight,
// a permuted bias un-permuted) and, when `target` quantizes that Linear (should_quantize, outside
// `keep_in_fp32`), quantized again with it: target.quantize_named(module, dense) — the same call
// quantize-on-load makes for a dense checkpoint, so the result equals quantizing the dequantized weight.
// One weight at a time: the peak is the converted weights plus one dense weight (plus the dense Linears
// the target leaves unquantized).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "modules/module.h"
#include "quant/quant_method.h"

namespace diffq {

struct ConvertReport {
  int64_t requantized = 0;  // source weights quantized again with the target
  int64_t dequantized = 0;  // source weights left dense (the target does not quantize them, or no target)
  std::set<std::string> source_schemes;  // the converted weights' schemes before
};

// `target` null: every quantized weight not in `keep` becomes dense.
ConvertReport convert_quantized_module(Module& m, const quant::QuantMethod* target, DType dtype,
                                       const std::set<const QuantizedWeight*>& keep = {},
                                       const std::vector<std::string>& keep_in_fp32 = {});

}  // namespace diffq
