// The options of `diffq generate` (generate.cpp adds them to the CLI; image and video pipelines read them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diffq/pipeline.h"

namespace diffq::cli {

struct GenerateArgs {
  std::string model, prompt, prompt_2, negative, negative_2, output, latents_in, latents_out, dtype = "float32";
  std::string transformer_file, output_type = "image";
  std::string device = "cpu";  // --device cpu | cuda | cuda:N (PipelineOptions::device)
  std::string quant, quant_config, quantize;  // --quant shorthand | --quant-config file; --quantize components
  std::string offload, max_memory, max_host_memory;
  bool offload_drop_cache = false;
  std::string cache;      // --cache fbc:0.08 | taylorseer:... | magcache[:T] | teacache:0.4 (include/diffq/cache.h)
  std::string compile;    // "" | full | regional
  bool autotune = false;  // with compile: max-autotune
  std::string compile_mode = "default";  // --mode: default | reduce-overhead | max-autotune (= --autotune)
  bool stats = false;
  int64_t num_images = 1;
  double true_cfg = 1.0, guidance = 3.5, guidance_2 = 0.0;
  int64_t steps = 28, width = 0, height = 0, max_seq = 512;  // 0: the pipeline's default size
  int64_t frames = 0;                                        // video: 0 = the pipeline's default
  double fps = 16.0;                                         // video
  std::string output_frames;                                 // video: also write DIR/00000.png ...
  bool steps_given = false, guidance_given = false, guidance_2_given = false, true_cfg_given = false,
       max_seq_given = false;
  std::string sigmas;  // custom sigmas, comma-separated ("" = linspace(1, 1/steps, steps))
  int threads = 0;
  uint64_t seed = 0;
  bool json = false;
  std::vector<std::string> loras, loras_2;  // --lora FILE[:scale], --lora-2 (Wan2.2 transformer_2)
  bool lora_lenient = false, fuse_lora = false;
};

// generate_output.cpp: fills the default -o (out.png / out.mp4 / out.safetensors) and refuses options that do
// not apply to the pipeline's kind; then writes the result (PNG images, mp4 / webp + PNG frames, or latents)
// and returns the paths written.
void check_output_args(GenerateArgs& a, bool video);
std::vector<std::string> write_outputs(const GenerateArgs& a, const GenerateResult& r, bool video);

}  // namespace diffq::cli
