// include/diffq/quantization.h and include/diffq/offload.h: the CLI's option values checked and turned into
// what DiffusionPipeline takes, without a pipeline.
#include "diffq/offload.h"
#include "diffq/quantization.h"
#include "offload/offload_spec.h"
#include "pipelines/pipeline_quantization_config.h"
#include "quant/quant_method.h"

namespace diffq {

const std::vector<std::string>& quant_shorthands() { return quant::quant_shorthands(); }

std::string quantization_config_from_shorthand(const std::string& shorthand, DType dtype,
                                               const std::vector<std::string>& components) {
  const auto [backend, kwargs] = quant::quant_shorthand(shorthand, std::string(dtype_name(dtype)));
  return PipelineQuantizationConfig(backend, kwargs, components, std::nullopt).to_json().dump();
}

std::string quantization_config_from_file(const std::filesystem::path& file) {
  return PipelineQuantizationConfig::from_file(file.string()).to_json().dump();
}

std::string check_offload_spec(const std::string& spec) { return offload::parse_offload_spec(spec).str(); }

}  // namespace diffq
