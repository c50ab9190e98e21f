#include "quant/bnb/bnb_state_dict.h"

#include <algorithm>
#include <set>

#include "diffq/error.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_int8.h"

namespace diffq::quant {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Diffusers keeps a parameter in float32 when one of its dotted components is a keep_in_fp32 entry.
bool keep_fp32(const std::string& key, const std::vector<std::string>& keep) {
  size_t start = 0;
  while (start <= key.size()) {
    const size_t dot = std::min(key.find('.', start), key.size());
    const std::string part = key.substr(start, dot - start);
    for (const std::string& k : keep)
      if (part == k) return true;
    start = dot + 1;
  }
  return false;
}

}  // namespace

io::NamedTensors bnb_quantize_state_dict(const io::StateDict& sd, const BitsAndBytesConfig& cfg,
                                         const BnbQuantizeOptions& opt) {
  check(cfg.is_quantizable(), "bnb", "the BitsAndBytesConfig sets neither load_in_4bit nor load_in_8bit");
  std::vector<std::string> skip = cfg.llm_int8_skip_modules.value_or(std::vector<std::string>{});
  io::NamedTensors out;
  for (const auto& [key, t] : sd) {
    if (ends_with(key, ".weight")) {
      const std::string module = key.substr(0, key.size() - 7);
      const bool linear = opt.is_linear ? opt.is_linear(module, t) : t.dim() == 2;
      if (linear && cfg.should_quantize(module, opt.keep_in_fp32)) {
        const Tensor w = t.to(opt.torch_dtype);
        if (cfg.load_in_4bit) {
          Bnb4bitOptions o = Bnb4bitOptions::from_config(cfg);
          o.sum_lanes = opt.sum_lanes;
          Bnb4bitWeight::quantize(w, o, key)->save(out, key);
        } else {
          Bnb8bitWeight::quantize(w, cfg.llm_int8_threshold, key)->save(out, module);
        }
        continue;
      }
    }
    if (is_floating(t.dtype())) {
      const bool fp32 = keep_fp32(key, opt.keep_in_fp32);
      out.emplace_back(key, t.to(fp32 ? DType::f32 : opt.torch_dtype));
    } else {
      out.emplace_back(key, t);
    }
  }
  return out;
}

std::map<std::string, std::shared_ptr<QuantizedWeight>> bnb_load_state_dict(const io::StateDict& sd,
                                                                            const BitsAndBytesConfig& cfg) {
  std::map<std::string, std::shared_ptr<QuantizedWeight>> out;
  std::set<std::string> four, eight;
  for (const auto& [key, t] : sd) {
    // A 4-bit weight shows by its quant_state blob or by its statistics (then the blob is missing,
    // which Bnb4bitWeight::load reports with Diffusers' message).
    for (const std::string suffix : {".quant_state.bitsandbytes__nf4", ".quant_state.bitsandbytes__fp4", ".absmax"})
      if (ends_with(key, suffix) && ends_with(key.substr(0, key.size() - suffix.size()), ".weight"))
        four.insert(key.substr(0, key.size() - suffix.size()));
    if (ends_with(key, ".SCB")) eight.insert(key.substr(0, key.size() - 4));
  }
  for (const std::string& wk : four) out[wk] = Bnb4bitWeight::load(sd, wk, cfg.bnb_4bit_compute_dtype);
  for (const std::string& m : eight) out[m + ".weight"] = Bnb8bitWeight::load(sd, m, cfg.llm_int8_threshold);
  return out;
}

}  // namespace diffq::quant
