// Writes a loaded (quantized) FluxPipeline back as a Diffusers folder: every quantized component in its
// backend's on-disk layout with the quantization_config in its config.json (what Diffusers'
// save_pretrained writes after from_pretrained(quantization_config=...)); the other components and
// every non-weight file (tokenizers, scheduler, model_index.json) copied unchanged. The folder is
// assembled under a temporary name and renamed into place at the end: an error leaves nothing behind.
#pragma once

#include <filesystem>

#include "pipelines/flux_pipeline.h"

namespace diffq {

struct SaveQuantizedReport {
  std::map<std::string, size_t> component_bytes;  // bytes of each written weight file
};

SaveQuantizedReport save_quantized_pipeline(const FluxPipeline& pipe, const std::filesystem::path& source_folder,
                                            const std::filesystem::path& out_folder);

}  // namespace diffq
