#include "models/flux/flux_single_file.h"

#include <optional>

#include "diffq/error.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "models/flux/flux_keys.h"
#include "models/flux/flux_single_file_bfl_quant.h"
#include "models/flux/flux_single_file_gguf.h"
#include "quant/bfl/bfl_layers.h"

namespace diffq::models::flux {

std::unique_ptr<FluxTransformer2DModel> load_flux_single_file(const std::filesystem::path& file,
                                                              const FluxTransformerConfig& base,
                                                              const LoadOptions& opt) {
  check(std::filesystem::is_regular_file(file), "flux", file.string(), ": no such file");
  const std::string ext = file.extension().string();
  if (ext == ".gguf") return load_flux_gguf(file, base, opt);
  StateDict sd;
  std::optional<io::SafetensorsFile> st;  // kept open while loading (the tensors borrow its mapping)
  if (io::is_torch_checkpoint_name(file)) {
    // A torch.save state dict (.bin / .pt / .pth) read by the restricted unpickler: the same tensors,
    // then the same path as a .safetensors.
    io::TorchCheckpoint c = io::load_torch_checkpoint(file);
    check(c.metadata.empty(), "flux", file.string(), ": holds torchao-quantized tensors (", c.metadata.begin()->first,
          "); load such a transformer as a Diffusers folder (transformer/config.json names its quantization)");
    sd = std::move(c.tensors);
  } else {
    check(ext == ".safetensors", "flux", file.string(),
          ": a single-file transformer must be .safetensors, .gguf or a PyTorch .bin / .pt / .pth (got '", ext, "')");
    st = io::SafetensorsFile::open(file);
    sd = st->tensors();
  }
  LoadOptions o = opt;
  if (o.source.empty()) o.source = file.string();
  if (quant::has_bfl_quantized_layers(sd)) return load_flux_bfl_quantized(sd, file.string(), base, o);
  if (is_bfl_flux_state_dict(sd)) {
    const FluxTransformerConfig cfg = infer_bfl_flux_config(sd, base);
    auto model = std::make_unique<FluxTransformer2DModel>(cfg);
    load_state_dict(*model, convert_bfl_flux_to_diffusers(sd, cfg), o);
    return model;
  }
  check(sd.count("x_embedder.weight") && sd.count("proj_out.weight"), "flux", file.string(),
        ": neither BFL/ComfyUI FLUX keys (double_blocks.0.img_attn.norm.key_norm.scale) nor Diffusers "
        "FluxTransformer2DModel keys (x_embedder.weight)");
  auto model = std::make_unique<FluxTransformer2DModel>(base);
  load_state_dict(*model, sd, o);
  return model;
}

}  // namespace diffq::models::flux
