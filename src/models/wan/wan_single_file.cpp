#include "models/wan/wan_single_file.h"

#include "diffq/error.h"
#include "io/safetensors.h"
#include "models/wan/wan_keys.h"
#include "models/wan/wan_single_file_gguf.h"

namespace diffq::models::wan {

namespace {
constexpr const char* kCtx = "wan-single-file";

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}
}  // namespace

StateDict wan_single_file_state_dict(const StateDict& sd, const std::string& source) {
  const WanCheckpointKind kind = classify_wan_checkpoint(wan_shapes_of(sd), source);
  StateDict out;
  std::string unknown;
  int n = 0;
  for (const auto& [key, t] : sd) {
    if (!kind.prefix.empty() && key.compare(0, kind.prefix.size(), kind.prefix) != 0) continue;
    const std::string k = key.substr(kind.prefix.size());
    if (kind.naming == WanNaming::diffusers) {
      out[k] = t;
      continue;
    }
    const auto d = wan_original_to_diffusers_name(k);
    if (!d) {
      if (n++ < 8) unknown += (unknown.empty() ? "" : ", ") + k;
      continue;
    }
    // A modulation saved without its leading 1 ([6, D] for [1, 6, D]) gets it back.
    out[*d] = ends_with(*d, "scale_shift_table") && t.dim() == 2 ? t.unsqueeze(0) : t;
  }
  check(n == 0, kCtx, source, ": ", n, " tensor(s) are not part of a text-to-video Wan transformer: ", unknown,
        n > 8 ? ", ..." : "");
  return out;
}

WanTransformerConfig infer_wan_config(const StateDict& sd, const std::optional<WanTransformerConfig>& base,
                                      const std::string& source) {
  const WanShapeMap shapes = wan_shapes_of(sd);
  const WanCheckpointKind kind = classify_wan_checkpoint(shapes, source);
  return infer_wan_config_from_shapes(wan_diffusers_shapes(shapes, kind, source), base, source);
}

std::unique_ptr<WanTransformer3DModel> load_wan_single_file(const std::filesystem::path& file,
                                                            const std::optional<WanTransformerConfig>& base,
                                                            const LoadOptions& opt) {
  const std::string fname = file.string();
  check(std::filesystem::is_regular_file(file), kCtx, fname, ": no such file");
  const std::string ext = file.extension().string();
  if (ext == ".gguf") return load_wan_gguf(file, base, opt);
  check(ext == ".safetensors", kCtx, fname, ": a single-file Wan transformer must be .safetensors or .gguf (got '",
        ext, "')");
  const auto st = io::SafetensorsFile::open(file);
  const StateDict sd = wan_single_file_state_dict(st.tensors(), fname);
  const WanTransformerConfig cfg = infer_wan_config_from_shapes(wan_shapes_of(sd), base, fname);
  LoadOptions o = opt;
  if (o.source.empty()) o.source = fname;
  return WanTransformer3DModel::from_state_dict(cfg, sd, o);
}

}  // namespace diffq::models::wan
