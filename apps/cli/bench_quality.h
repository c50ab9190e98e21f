// diffq bench --quality: each combination's output of the same seed compared with a reference combination's
// (the unquantized, uncached one: the first fp32 combination without quantization or cache, else the first
// without). Workers save their last timed generation's output as planes [..., H, W] (safetensors, key
// "latents"); the parent computes PSNR and SSIM (include/diffq/quality.h) and adds each row's "quality".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.h"
#include "diffq/pipeline.h"

namespace diffq::cli {

// What a worker compares: decoded pixels in [0, 1] (folders with a VAE), or the latents (builtins).
enum class QualityOn { pixels, latents };

// The output of a generation as planes [..., H, W]: FLUX pixels [N, H, W, 3] -> [N, 3, H, W]; FLUX latents
// (packed [B, S, 4C]) -> [B, C, H/8, W/8]; Wan pixels [N, F, H, W, 3] -> [N, F, 3, H, W]; Wan latents as they
// are ([B, C, F, h, w]).
Tensor quality_planes(const GenerateResult& r, bool video, QualityOn on);
// The worker: writes the planes to `path` (float32) and returns the row's "quality_output" ({"on", "shape"}).
nlohmann::json save_quality_output(const std::string& path, const Tensor& planes, QualityOn on);

// The index of the reference combination among `combos` (all parsed), or throws saying what to add.
size_t quality_reference(const std::vector<std::string>& combos);
// The parent: rows[i]'s output is in files[i]; sets every row's "quality" against rows[ref].
void add_quality(std::vector<nlohmann::json>& rows, const std::vector<std::string>& files, size_t ref);

// --quality on a model folder that has a judge next to it (models/demo-flux -> models/demo-flux-classifier):
// the prompt-adherence check of include/diffq/adherence.h run with the combination's pipeline at the model's
// default settings (the judge's 20 fixed prompts and seeds). Returns {"adherence": {...}}, or {} without a judge.
nlohmann::json adherence_fields(const BenchArgs& a, DiffusionPipeline& pipe);
std::string adherence_cell(const nlohmann::json& row);  // "14/20", "-" without

// Table helpers: the header note, and the "PSNR dB" / "SSIM" cells of a row ("inf", "-" where SSIM's window
// does not fit).
std::string quality_note(const std::vector<nlohmann::json>& rows);
std::string psnr_cell(const nlohmann::json& row);
std::string ssim_cell(const nlohmann::json& row);

}  // namespace diffq::cli
