// Peak RSS of quantizing while loading (issue 4: "peak RSS during load ~ quantized size + the largest
// single weight at full precision"). Two steps, each its own process so each peak is its own:
//
//   bench_quant_load write DIR [--model flux-medium] [--dtype bf16]
//       writes DIR/config.json + DIR/diffusion_pytorch_model.safetensors: a builtin FLUX transformer
//       with random weights (flux-medium: 1.12 GB in bf16), as a Diffusers component folder.
//   bench_quant_load load DIR [--quant nf4|int8wo|q4_K|...|none] [--dtype bf16]
//       FluxTransformer2DModel::from_pretrained(DIR) quantizing tensor by tensor; prints one line of
//       key=value: the process' peak RSS, the loaded model's quantized and dense bytes, the largest
//       single weight at full precision, and peak / (quantized + dense + largest).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/dtype.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "io/safetensors.h"
#include "models/flux/flux_builtin.h"
#include "modules/quantize_on_load.h"
#include "modules/random_init.h"
#include "offload/os_memory.h"
#include "quant/quant_method.h"

using namespace diffq;

namespace {

double mb(double b) { return b / (1 << 20); }

std::string arg(int argc, char** argv, const std::string& key, const std::string& def) {
  for (int i = 3; i + 1 < argc; i += 2)
    if (argv[i] == key) return argv[i + 1];
  return def;
}

void write_folder(const std::filesystem::path& dir, const std::string& model, DType dtype) {
  const auto b = models::flux::builtin_flux(model);
  models::flux::FluxTransformer2DModel m(b.transformer);
  init_parameters_randn(m, dtype, /*seed=*/0);
  io::NamedTensors tensors;
  for (const auto& [name, p] : m.named_parameters()) tensors.emplace_back(name, p->dense());
  std::filesystem::create_directories(dir);
  io::save_safetensors(dir / "diffusion_pytorch_model.safetensors", tensors);
  const auto& c = b.transformer;
  const nlohmann::json cfg = {{"_class_name", "FluxTransformer2DModel"}, {"patch_size", c.patch_size},
                              {"in_channels", c.in_channels}, {"out_channels", nullptr},
                              {"num_layers", c.num_layers}, {"num_single_layers", c.num_single_layers},
                              {"attention_head_dim", c.attention_head_dim},
                              {"num_attention_heads", c.num_attention_heads},
                              {"joint_attention_dim", c.joint_attention_dim},
                              {"pooled_projection_dim", c.pooled_projection_dim},
                              {"guidance_embeds", c.guidance_embeds}, {"axes_dims_rope", c.axes_dims_rope}};
  std::ofstream(dir / "config.json") << cfg.dump(2) << "\n";
  std::printf("wrote %s (%zu tensors)\n", dir.string().c_str(), tensors.size());
}

void load_folder(const std::filesystem::path& dir, const std::string& quant, DType dtype) {
  LoadOptions opt;
  opt.dtype = dtype;
  if (quant != "none") {
    const auto [backend, kwargs] = quant::quant_shorthand(quant, std::string(dtype_name(dtype)));
    attach_quantization(opt, quant::make_quant_method(backend, kwargs), /*pre_quantized=*/false);
  }
  const auto m = models::flux::FluxTransformer2DModel::from_pretrained(dir, opt);
  const int64_t peak = offload::peak_rss_bytes();
  const int64_t after = offload::current_rss_bytes();
  return_freed_memory_to_os();
  const int64_t trimmed = offload::current_rss_bytes();
  const auto s = summarize_quantization(*m);
  int64_t largest = 0;  // the largest parameter at full precision (the compute dtype)
  for (const auto& [name, p] : m->named_parameters()) {
    int64_t n = 1;
    for (const int64_t d : p->shape()) n *= d;
    largest = std::max<int64_t>(largest, n * int64_t(dtype_size(dtype)));
  }
  const double bound = double(s.quantized_bytes + s.dense_bytes + largest);
  std::printf("quant=%s peak_rss_mb=%.1f quantized_mb=%.1f dense_mb=%.1f largest_weight_mb=%.1f "
              "bound_mb=%.1f peak_over_bound=%.2f file_mb=%.1f rss_after_mb=%.1f rss_after_trim_mb=%.1f\n",
              quant.c_str(), mb(double(peak)), mb(double(s.quantized_bytes)), mb(double(s.dense_bytes)),
              mb(double(largest)), mb(bound), double(peak) / bound,
              mb(double(std::filesystem::file_size(dir / "diffusion_pytorch_model.safetensors"))),
              mb(double(after)), mb(double(trimmed)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_quant_load write|load DIR [--model M] [--quant Q] [--dtype D]\n");
    return 2;
  }
  try {
    const std::string what = argv[1];
    const DType dtype = parse_dtype(arg(argc, argv, "--dtype", "bfloat16"));
    if (what == "write")
      write_folder(argv[2], arg(argc, argv, "--model", "flux-medium"), dtype);
    else if (what == "load")
      load_folder(argv[2], arg(argc, argv, "--quant", "nf4"), dtype);
    else
      fail("bench_quant_load", "unknown step '", what, "' (write | load)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
