// What the public functions beyond DiffusionPipeline's own methods (include/diffq/checkpoint.h:
// save_quantized, save_transformer_gguf, quantization_sqnr) need from a pipeline: the concrete pipeline
// behind the adapter of diffusion_pipeline.cpp and the folder it was loaded from.
#pragma once

#include <filesystem>
#include <string>

#include "diffq/pipeline.h"
#include "pipelines/flux_pipeline.h"
#include "pipelines/wan_pipeline.h"

namespace diffq::detail {

class PipelineAccess {
 public:
  virtual ~PipelineAccess() = default;
  virtual const FluxPipeline* flux_pipeline() const { return nullptr; }
  virtual const WanPipeline* wan_pipeline() const { return nullptr; }
  virtual const std::filesystem::path& source_folder() const = 0;  // "builtin:<name>" for builtins
  virtual bool builtin() const = 0;
};

// The loaded-from-a-folder FluxPipeline behind `p`; throws naming `what` for other pipelines and builtins.
const FluxPipeline& flux_of(const DiffusionPipeline& p, const char* what);
const PipelineAccess& access_of(const DiffusionPipeline& p);

}  // namespace diffq::detail
