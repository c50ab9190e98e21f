// diffq quantize: a Diffusers FluxPipeline folder -> the same folder with the chosen components saved
// pre-quantized (each backend's own layout + quantization_config), so that `diffq generate -m out` (and
// Diffusers with the backend's library) loads it without quantization flags. `--format gguf` instead
// writes the FLUX transformer as one BFL-named GGUF file. All through diffq/checkpoint.h.
// Sources already quantized (a pre-quantized folder, or --transformer with a GGUF / BFL fp8r / nvfp4 file)
// are converted: their quantized weights are dequantized with each library's math and quantized again
// with the target (PipelineOptions::convert_pre_quantized; docs/quantization.md "Converting between formats").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include "commands.h"
#include "diffq/checkpoint.h"
#include "diffq/error.h"
#include "diffq/pipeline.h"
#include "quant_options.h"

namespace diffq::cli {

namespace {
struct QuantizeArgs {
  std::string model, output, quant, quant_config, quantize, dtype = "bfloat16";
  std::string format = "diffusers", type, transformer_file;
  bool report = false;
  std::string report_prompt = "a photo of a cat";
  uint64_t seed = 0;
  int64_t report_steps = 1, report_size = 256;
};

// --report: each quantized layer's weight SQNR, and the final latents of a short generation against the
// unquantized pipeline (same prompt, seed, steps, size).
void print_report(const QuantizeArgs& a, DiffusionPipeline& q, DType dtype) {
  PipelineOptions ro;
  ro.dtype = dtype;
  auto ref = DiffusionPipeline::from_pretrained(a.model, ro);
  const auto layers = quantization_sqnr(q, *ref);
  const auto quantized = q.quantization();
  std::printf("| component | layer | scheme | weight SQNR dB |\n|---|---|---|---|\n");
  for (const char* name : {"transformer", "text_encoder", "text_encoder_2", "vae"}) {
    if (!quantized.count(name)) continue;
    double worst = std::numeric_limits<double>::infinity();
    for (const auto& l : layers) {
      if (l.component != name) continue;
      std::printf("| %s | %s | %s | %.2f |\n", name, l.layer.c_str(), l.scheme.c_str(), l.sqnr_db);
      worst = std::min(worst, l.sqnr_db);
    }
    std::printf("| %s | (lowest) | | %.2f |\n", name, worst);
  }
  GenerateParams p;
  p.prompt = a.report_prompt;
  p.seed = a.seed;
  p.num_inference_steps = a.report_steps;
  p.height = p.width = a.report_size;
  p.output_latents_only = true;
  const auto lq = q.generate(p).latents.to_f32_vector(), lr = ref->generate(p).latents.to_f32_vector();
  double num = 0, den = 0;
  for (size_t i = 0; i < lq.size(); ++i) {
    num = std::max(num, std::abs(double(lq[i]) - lr[i]));
    den = std::max(den, std::abs(double(lr[i])));
  }
  std::printf("\nfinal latents vs unquantized (prompt \"%s\", seed %llu, %lld step(s), %lldx%lld): max rel error %.3g\n",
              a.report_prompt.c_str(), (unsigned long long)a.seed, (long long)a.report_steps,
              (long long)a.report_size, (long long)a.report_size, num / std::max(den, 1e-30));
  std::fflush(stdout);  // before the stderr summary: whole lines when both go to one pipe
}

// diffq quantize writes FluxPipeline folders (and FLUX GGUF transformers) so far.
void check_flux_folder(const QuantizeArgs& a) {
  const std::string cls = DiffusionPipeline::pipeline_class_of(a.model);
  check(cls == "FluxPipeline", "quantize", a.model, " is a ", cls, "; diffq quantize writes FluxPipeline folders so far");
}

// --format gguf: the transformer (the folder's, or --transformer's file) as one BFL-named GGUF file.
void run_gguf(const QuantizeArgs& a, DType dtype) {
  check(!a.type.empty(), "quantize", "--format gguf needs --type (", gguf_write_types(), ")");
  check(!gguf_type_name(a.type).empty(), "quantize", "--type '", a.type, "' is not a GGUF type diffq writes (",
        gguf_write_types(), ")");
  check(a.quant.empty() && a.quant_config.empty() && !a.report, "quantize",
        "--format gguf takes --type, not --quant / --quant-config / --report");
  check(a.quantize.empty() || a.quantize == "transformer", "quantize", "--format gguf writes only the FLUX transformer; '",
        a.quantize, "' is not (GGUF single files hold one FluxTransformer2DModel)");
  const std::filesystem::path out(a.output);
  check(out.extension() == ".gguf", "quantize", "--format gguf writes a .gguf file, got -o ", a.output);
  check(!std::filesystem::exists(out), "quantize", a.output, " already exists");
  check_flux_folder(a);
  PipelineOptions po;
  po.dtype = dtype;
  po.load_text_encoders = false;
  po.transformer_file = a.transformer_file;
  auto pipe = DiffusionPipeline::from_pretrained(a.model, po);
  const std::string name = std::filesystem::path(a.transformer_file.empty() ? a.model : a.transformer_file)
                               .filename().replace_extension().string();
  const auto rep = save_transformer_gguf(*pipe, out, a.type, name);
  std::string types;
  for (const auto& [t, n] : rep.tensors_per_type) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + t;
  std::fprintf(stderr, "transformer: gguf %s, %lld tensors (%s), %s\nwrote %s\n", rep.type.c_str(),
               (long long)rep.tensors, types.c_str(), format_bytes(rep.file_bytes).c_str(), a.output.c_str());
}

void run(const QuantizeArgs& a) {
  const DType dtype = parse_dtype(a.dtype);
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "quantize",
        "--dtype must be float32, bfloat16 or float16, got '", a.dtype, "'");
  check(a.format == "diffusers" || a.format == "gguf", "quantize", "--format must be diffusers or gguf, got '",
        a.format, "'");
  if (a.format == "gguf") return run_gguf(a, dtype);
  check(a.type.empty(), "quantize", "--type goes with --format gguf");
  PipelineOptions po;
  po.dtype = dtype;
  po.quantization_config_json = cli_quantization_config(a.quant, a.quant_config, a.quantize, dtype);
  check(!po.quantization_config_json.empty(), "quantize", "give --quant <scheme> or --quant-config <file.json>");
  po.transformer_file = a.transformer_file;
  po.convert_pre_quantized = true;
  check_flux_folder(a);
  auto pipe = DiffusionPipeline::from_pretrained(a.model, po);
  const auto quantized = pipe->quantization();
  check(!quantized.empty(), "quantize", "the quantization config selects no component of ", a.model);
  // (a pre-quantized single file the config does not select keeps its label "... (pre-quantized, <file>)")
  check(a.transformer_file.empty() ||
            (quantized.count("transformer") && quantized.at("transformer").find("(pre-quantized") == std::string::npos),
        "quantize", "--transformer ", a.transformer_file,
        " is written only quantized: the quantization config must select the transformer");
  const auto rep = save_quantized(*pipe, a.output);
  if (a.report) print_report(a, *pipe, dtype);
  for (const auto& [c, q] : quantized) {
    const auto it = rep.component_bytes.find(c);
    std::fprintf(stderr, "%s: %s%s\n", c.c_str(), q.c_str(),
                 it == rep.component_bytes.end() ? "" : (", " + format_bytes(it->second)).c_str());
  }
  std::fprintf(stderr, "wrote %s\n", a.output.c_str());
}
}  // namespace

void add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = app.add_subcommand("quantize", "Write a pre-quantized copy of a FLUX.1 Diffusers pipeline folder, or its "
                                             "transformer as one GGUF file; pre-quantized sources are converted");
  cmd->add_option("-m,--model", a->model, "source Diffusers FluxPipeline folder")->required();
  cmd->add_option("-o,--output", a->output, "new folder, or .gguf file with --format gguf (must not exist)")->required();
  cmd->add_option("--format", a->format,
                  "diffusers (default: a pre-quantized Diffusers folder) or gguf (the transformer as one BFL-named "
                  "GGUF file, as city96's FLUX.1-dev-gguf)");
  cmd->add_option("--type", a->type, "GGUF type for --format gguf: q8_0, q4_0, q4_1, q5_0, q5_1, q2_K ... q6_K, iq4_nl, iq4_xs, f16, bf16");
  cmd->add_option("--transformer", a->transformer_file,
                  "take the transformer from this single file (.safetensors incl. BFL fp8r/nvfp4, .bin, .gguf) "
                  "instead of the folder's; pre-quantized weights are converted to the target");
  cmd->add_option("--quant", a->quant, "scheme shorthand (see `diffq generate --help`)");
  cmd->add_option("--quant-config", a->quant_config, "PipelineQuantizationConfig JSON file");
  cmd->add_option("--quantize", a->quantize, "components for --quant, comma-separated (default: all)");
  cmd->add_option("--dtype", a->dtype, "dtype of the unquantized tensors (default bfloat16)");
  cmd->add_flag("--report", a->report,
                "print each quantized layer's weight SQNR and the latent error of a short generation vs the "
                "unquantized pipeline");
  cmd->add_option("--report-prompt", a->report_prompt, "prompt of the --report generation");
  cmd->add_option("--seed", a->seed, "seed of the --report generation (default 0)");
  cmd->add_option("--report-steps", a->report_steps, "steps of the --report generation (default 1)")->check(CLI::Range(1, 100));
  cmd->add_option("--report-size", a->report_size, "width = height of the --report generation (default 256)");
  cmd->callback([a] { run(*a); });
}

}  // namespace diffq::cli
