// The builtin models of include/diffq/pipeline.h (DiffusionPipeline::from_pretrained("builtin:<name>")):
// a FluxPipeline or WanPipeline built in memory from a named transformer config (models/flux/flux_builtin.h,
// models/wan/wan_builtin.h) with random weights and the family's scheduler, plus the random prompt
// embeddings it is fed in place of a text encoder. No VAE: latents only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "diffq/pipeline.h"
#include "pipelines/flux_pipeline.h"
#include "pipelines/wan_pipeline.h"

namespace diffq {

// "builtin:<name>" -> <name>; nullopt for anything else.
std::optional<std::string> builtin_name(const std::filesystem::path& model);
// "FluxPipeline" / "WanPipeline" for a builtin name; throws listing the known builtins.
std::string builtin_pipeline_class(const std::string& name);

struct BuiltinFlux {
  std::unique_ptr<FluxPipeline> pipe;
  Tensor prompt_embeds;         // [1, text_tokens, joint_attention_dim] in the dtype
  Tensor pooled_prompt_embeds;  // [1, pooled_projection_dim]
  std::string description;
};
BuiltinFlux make_builtin_flux(const std::string& name, const PipelineOptions& opt);

struct BuiltinWan {
  std::unique_ptr<WanPipeline> pipe;
  Tensor prompt_embeds, negative_prompt_embeds;  // [1, text_tokens, text_dim] each
  int64_t width = 0, height = 0, num_frames = 0;  // the builtin's default grid
  std::string description;
};
BuiltinWan make_builtin_wan(const std::string& name, const PipelineOptions& opt);

}  // namespace diffq
