// diffq quantize: a Diffusers FluxPipeline folder -> the same folder with the chosen components saved
// pre-quantized (each backend's own layout + quantization_config), so that `diffq generate -m out` (and
// Diffusers with the backend's library) loads it without quantization flags.
#include <cstdio>
#include <string>

#include "commands.h"
#include "diffq/error.h"
#include "io/mapped_file.h"
#include "modules/quantize_on_load.h"
#include "pipelines/flux_pipeline.h"
#include "pipelines/save_quantized.h"
#include "quant_options.h"

namespace diffq::cli {

namespace {
struct QuantizeArgs {
  std::string model, output, quant, quant_config, quantize, dtype = "bfloat16";
};

void run(const QuantizeArgs& a) {
  const DType dtype = parse_dtype(a.dtype);
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "quantize",
        "--dtype must be float32, bfloat16 or float16, got '", a.dtype, "'");
  FluxPipelineLoadOptions lo;
  lo.quantization_config = cli_quantization_config(a.quant, a.quant_config, a.quantize, std::string(dtype_name(dtype)));
  check(lo.quantization_config.has_value(), "quantize", "give --quant <scheme> or --quant-config <file.json>");
  auto pipe = FluxPipeline::from_pretrained(a.model, dtype, lo);
  check(!pipe->quant_methods.empty(), "quantize", "the quantization config selects no component of ", a.model);
  const auto rep = save_quantized_pipeline(*pipe, a.model, a.output);
  for (const auto& [c, q] : pipe->quantization) {
    const auto it = rep.component_bytes.find(c);
    std::fprintf(stderr, "%s: %s%s\n", c.c_str(), q.c_str(),
                 it == rep.component_bytes.end() ? "" : (", " + io::format_bytes(it->second)).c_str());
  }
  std::fprintf(stderr, "wrote %s\n", a.output.c_str());
}
}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = app.add_subcommand("quantize", "Write a pre-quantized copy of a FLUX.1 Diffusers pipeline folder");
  cmd->add_option("-m,--model", a->model, "source Diffusers FluxPipeline folder")->required();
  cmd->add_option("-o,--output", a->output, "new folder (must not exist)")->required();
  cmd->add_option("--quant", a->quant, "scheme shorthand (see `diffq generate --help`)");
  cmd->add_option("--quant-config", a->quant_config, "PipelineQuantizationConfig JSON file");
  cmd->add_option("--quantize", a->quantize, "components for --quant, comma-separated (default: all)");
  cmd->add_option("--dtype", a->dtype, "dtype of the unquantized tensors (default bfloat16)");
  cmd->callback([a] { run(*a); });
}

}  // namespace diffq::cli
