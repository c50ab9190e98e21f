#include "lora/lora_file.h"

#include "diffq/error.h"
#include "io/safetensors.h"

namespace diffq::lora {

namespace {
constexpr const char* kCtx = "lora";

bool any_key(const std::map<std::string, Tensor>& sd, const std::function<bool(const std::string&)>& pred) {
  for (const auto& [k, v] : sd)
    if (pred(k)) return true;
  return false;
}
bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

std::string first_keys(const std::map<std::string, Tensor>& sd, const std::function<bool(const std::string&)>& pred) {
  std::string s;
  int n = 0;
  for (const auto& [k, v] : sd)
    if (pred(k) && n++ < 4) s += (s.empty() ? "" : ", ") + k;
  return s;
}
}  // namespace

const char* format_name(LoraFormat f) {
  switch (f) {
    case LoraFormat::diffusers: return "diffusers";
    case LoraFormat::kohya: return "kohya";
    case LoraFormat::comfyui: return "comfyui";
    case LoraFormat::xlabs: return "xlabs";
  }
  return "?";
}

LoraStateDict convert_lora_state_dict(std::map<std::string, Tensor> sd, const LoraModelInfo& info, const std::string& file) {
  LoraStateDict out;
  if (any_key(sd, [](const std::string& k) { return has(k, "dora_scale"); })) {
    for (auto it = sd.begin(); it != sd.end();) it = has(it->first, "dora_scale") ? sd.erase(it) : std::next(it);
    out.notes.push_back("DoRA: the dora_scale keys are dropped, as Diffusers drops them (the adapter runs as a plain LoRA)");
  }
  auto lycoris = [](const std::string& k) { return has(k, ".lokr_") || has(k, ".hada_"); };
  check(!any_key(sd, lycoris), kCtx, file, ": a LyCORIS LoKr/LoHa adapter (", first_keys(sd, lycoris),
        "); Diffusers 0.42.1 loads those only into Flux2 and Z-Image, not into FLUX.1 or Wan, and neither does diffq");
  const bool kohya = any_key(sd, [](const std::string& k) { return has(k, ".lora_down.weight"); });
  if (info.family == "wan") {
    if (any_key(sd, [](const std::string& k) { return k.rfind("diffusion_model.", 0) == 0; })) {
      out.format = LoraFormat::comfyui;  // the original Wan / ComfyUI naming
      out.tensors = convert_wan_original(std::move(sd), out.notes, file);
      return out;
    }
    auto musubi = [](const std::string& k) { return k.rfind("lora_unet_", 0) == 0; };
    check(!any_key(sd, musubi), kCtx, file, ": a musubi-tuner Wan LoRA (", first_keys(sd, musubi),
          "); diffq converts Diffusers-named (transformer.*.lora_A/lora_B) and original/ComfyUI-named "
          "(diffusion_model.blocks.*) Wan LoRAs so far");
  } else if (kohya) {
    out.format = any_key(sd, [](const std::string& k) { return k.rfind("diffusion_model.", 0) == 0 || k.rfind("text_encoders.", 0) == 0; })
                     ? LoraFormat::comfyui
                     : LoraFormat::kohya;
    out.tensors = convert_kohya_flux(std::move(sd), info, out.notes, file);
    return out;
  } else if (any_key(sd, [](const std::string& k) { return has(k, "processor"); })) {
    out.format = LoraFormat::xlabs;
    out.tensors = convert_xlabs_flux(std::move(sd), file);
    return out;
  }
  auto bfl_control = [](const std::string& k) { return has(k, "query_norm.scale"); };
  check(!any_key(sd, bfl_control), kCtx, file, ": a BFL control LoRA (", first_keys(sd, bfl_control),
        ": it widens x_embedder and replaces norms); not supported yet");
  auto fal = [](const std::string& k) { return has(k, "base_model"); };
  check(!any_key(sd, fal), kCtx, file, ": a fal Kontext LoRA (", first_keys(sd, fal), "); not supported yet");
  for (auto it = sd.begin(); it != sd.end();) {
    if (has(it->first, "alpha")) {
      check(is_floating(it->second.dtype()) && it->second.numel() == 1, kCtx, file, ": alpha key '", it->first,
            "' is not a float scalar (", it->second.str(), ")");
      out.network_alphas[it->first] = it->second.item();
      it = sd.erase(it);
    } else {
      ++it;
    }
  }
  out.tensors = std::move(sd);
  return out;
}

LoraStateDict read_lora_file(const std::filesystem::path& path, const LoraModelInfo& info) {
  check(path.extension() == ".safetensors", kCtx, path.string(), ": LoRA files are read as .safetensors (pickled .bin/.pt "
        "are not loaded: they can run code)");
  const auto f = io::SafetensorsFile::open(path);
  std::map<std::string, Tensor> sd;
  for (const auto& e : f.entries()) {
    check(e.dtype.has_value(), kCtx, path.string(), ": tensor '", e.name, "' has dtype ", e.dtype_name, " which diffq cannot read");
    Tensor t = f.tensor(e.name);
    sd[e.name] = is_floating(t.dtype()) ? t.to(DType::f32).contiguous() : t;
  }
  LoraStateDict out = convert_lora_state_dict(std::move(sd), info, path.string());
  const auto& md = f.metadata();
  if (auto it = md.find("lora_adapter_metadata"); it != md.end()) {
    try {
      out.adapter_metadata = nlohmann::json::parse(it->second);
    } catch (const std::exception& e) {
      fail(kCtx, path.string(), ": lora_adapter_metadata is not valid JSON: ", e.what());
    }
  }
  return out;
}

}  // namespace diffq::lora
