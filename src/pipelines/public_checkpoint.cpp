// include/diffq/checkpoint.h: thin wrappers over io/inspect, pipelines/save_quantized, the FLUX GGUF writer
// and the weight SQNR of modules/quantize_on_load, reached through detail::PipelineAccess.
#include "diffq/checkpoint.h"

#include "diffq/error.h"
#include "io/inspect.h"
#include "io/mapped_file.h"
#include "models/flux/flux_single_file_gguf.h"
#include "modules/quantize_on_load.h"
#include "pipelines/public_pipeline_access.h"
#include "pipelines/save_quantized.h"

namespace diffq {

std::string inspect_json(const std::filesystem::path& path, int indent) { return io::inspect_json(path).dump(indent); }

std::string inspect_text(const std::filesystem::path& path) { return io::inspect_text(path); }

std::string format_bytes(int64_t bytes) { return io::format_bytes(uint64_t(std::max<int64_t>(bytes, 0))); }

SavedPipeline save_quantized(const DiffusionPipeline& pipe, const std::filesystem::path& out_folder) {
  const FluxPipeline& p = detail::flux_of(pipe, "save_quantized");
  const auto rep = save_quantized_pipeline(p, detail::access_of(pipe).source_folder(), out_folder);
  SavedPipeline out;
  for (const auto& [c, n] : rep.component_bytes) out.component_bytes[c] = int64_t(n);
  return out;
}

std::string gguf_write_types() { return quant::gguf::supported_type_names(); }

std::string gguf_type_name(const std::string& type) {
  const auto t = quant::gguf::parse_type(type);
  return t ? std::string(quant::gguf::find_type(*t)->name()) : "";
}

SavedGguf save_transformer_gguf(const DiffusionPipeline& pipe, const std::filesystem::path& file,
                                const std::string& type, const std::string& name) {
  const auto t = quant::gguf::parse_type(type);
  check(t.has_value(), "save_transformer_gguf", "'", type, "' is not a GGUF type diffq writes (", gguf_write_types(), ")");
  const FluxPipeline& p = detail::flux_of(pipe, "save_transformer_gguf");
  const auto rep = models::flux::save_flux_gguf(*p.transformer, file, *t, name);
  SavedGguf out;
  out.type = gguf_type_name(type);
  out.tensors = rep.tensors;
  out.tensors_per_type = rep.tensors_per_type;
  out.file_bytes = int64_t(rep.file_bytes);
  return out;
}

std::vector<WeightSqnr> quantization_sqnr(const DiffusionPipeline& quantized, const DiffusionPipeline& reference) {
  const FluxPipeline& q = detail::flux_of(quantized, "quantization_sqnr");
  const FluxPipeline& r = detail::flux_of(reference, "quantization_sqnr");
  const std::pair<const char*, std::pair<const Module*, const Module*>> comps[] = {
      {"transformer", {q.transformer.get(), r.transformer.get()}},
      {"text_encoder", {q.text_encoder.get(), r.text_encoder.get()}},
      {"text_encoder_2", {q.text_encoder_2.get(), r.text_encoder_2.get()}},
      {"vae", {q.vae.get(), r.vae.get()}}};
  std::vector<WeightSqnr> out;
  for (const auto& [name, mods] : comps) {
    if (!mods.first || !mods.second || !q.quant_methods.count(name)) continue;
    for (const auto& l : weight_sqnr(*mods.first, *mods.second)) out.push_back({name, l.name, l.scheme, l.sqnr_db});
  }
  return out;
}

}  // namespace diffq
