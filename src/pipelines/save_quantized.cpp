#include "pipelines/save_quantized.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/safetensors.h"

namespace diffq {

namespace {
namespace fs = std::filesystem;
constexpr const char* kCtx = "save_quantized";

const Module* component_module(const FluxPipeline& p, const std::string& name) {
  if (name == "transformer") return p.transformer.get();
  if (name == "vae") return p.vae.get();
  if (name == "text_encoder") return p.text_encoder.get();
  if (name == "text_encoder_2") return p.text_encoder_2.get();
  return nullptr;
}

bool is_weight_file(const fs::path& f) {
  const std::string n = f.filename().string();
  return f.extension() == ".safetensors" || f.extension() == ".bin" || n.find(".safetensors.index.json") != std::string::npos ||
         n.find(".bin.index.json") != std::string::npos;
}

// The transformer's config.json when its weights came from a single file: the folder's, with the fields the
// file's shapes decided.
nlohmann::json single_file_transformer_config(const FluxPipeline& p, const io::Component& c) {
  nlohmann::json cfg = c.config.json();
  const auto& t = p.transformer->config;
  cfg["in_channels"] = t.in_channels;
  cfg["out_channels"] = t.out_channels;
  cfg["num_layers"] = t.num_layers;
  cfg["num_single_layers"] = t.num_single_layers;
  cfg["attention_head_dim"] = t.attention_head_dim;
  cfg["num_attention_heads"] = t.num_attention_heads;
  cfg["joint_attention_dim"] = t.joint_attention_dim;
  cfg["pooled_projection_dim"] = t.pooled_projection_dim;
  cfg["guidance_embeds"] = t.guidance_embeds;
  cfg.erase("quantization_config");
  return cfg;
}

// `q` null: a dense component (a dense single-file transformer the config does not quantize).
void write_component(const Module& m, const quant::QuantMethod* q, const io::Component& c, nlohmann::json cfg,
                     const fs::path& dir, SaveQuantizedReport& rep) {
  io::StateDict out;
  io::Metadata md;
  for (const auto& [name, mod] : m.named_modules())
    for (const auto& [pn, p] : mod->own_parameters()) {
      const std::string full = name.empty() ? pn : name + "." + pn;
      check(p->defined(), kCtx, c.name, ": parameter ", full, " is not loaded");
      if (p->is_quantized()) {
        check(pn == "weight", kCtx, c.name, ": quantized parameter ", full, " is not a Linear weight");
        check(q != nullptr, kCtx, c.name, ": ", full, " is quantized (", p->quantized().scheme(),
              ") but the component has no quantization config to save it with");
        q->save(p->quantized(), name, out, md);
      } else {
        out[full] = p->dense();
      }
    }
  if (q) q->finish_file(out, md);
  const std::string file = c.library == "transformers" ? "model.safetensors" : "diffusion_pytorch_model.safetensors";
  io::save_safetensors(dir / file, out, md.empty() ? std::nullopt : std::optional<io::Metadata>(md));
  rep.component_bytes[c.name] = fs::file_size(dir / file);
  if (q) cfg["quantization_config"] = q->quantization_config();
  std::ofstream(dir / "config.json") << cfg.dump(2) << "\n";
}
}  // namespace

SaveQuantizedReport save_quantized_pipeline(const FluxPipeline& pipe, const fs::path& source, const fs::path& out) {
  check(!fs::exists(out), kCtx, out.string(), " already exists (refusing to overwrite)");
  const auto folder = io::DiffusersFolder::open(source);
  check(pipe.transformer_file.empty() || folder.has_component("transformer"), kCtx, source.string(),
        " has no transformer component: the transformer from ", pipe.transformer_file.string(),
        " needs the folder's transformer/config.json to be written as a Diffusers component");
  const fs::path tmp = out.parent_path() / (out.filename().string() + ".tmp-diffq");
  fs::remove_all(tmp);
  SaveQuantizedReport rep;
  try {
    fs::create_directories(tmp);
    for (const auto& entry : fs::directory_iterator(source))  // model_index.json and loose files
      if (entry.is_regular_file()) fs::copy_file(entry.path(), tmp / entry.path().filename());
    for (const auto& c : folder.components()) {
      const fs::path dst = tmp / c.name;
      fs::create_directories(dst);
      const auto qit = pipe.quant_methods.find(c.name);
      const Module* m = component_module(pipe, c.name);
      const bool from_file = c.name == "transformer" && !pipe.transformer_file.empty();
      // A component saved pre-quantized and not converted is copied as saved.
      const bool as_saved = c.quantization_config() != nullptr && !pipe.converted_from.count(c.name) && !from_file;
      const bool requantize = m != nullptr && !as_saved && (qit != pipe.quant_methods.end() || from_file);
      const quant::QuantMethod* q = qit != pipe.quant_methods.end() ? qit->second.get() : nullptr;
      for (const auto& entry : fs::directory_iterator(c.dir)) {
        if (!entry.is_regular_file()) continue;
        if (requantize && (is_weight_file(entry.path()) || entry.path().filename() == "config.json")) continue;
        fs::copy_file(entry.path(), dst / entry.path().filename());
      }
      if (requantize) {
        check(!q || q->backend() != "gguf", kCtx, c.name,
              ": GGUF-quantized components are written as .gguf files (diffq quantize --format gguf), not into a "
              "Diffusers folder");
        nlohmann::json cfg = from_file ? single_file_transformer_config(pipe, c) : c.config.json();
        cfg.erase("quantization_config");
        write_component(*m, q, c, std::move(cfg), dst, rep);
      }
    }
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return rep;
}

}  // namespace diffq
