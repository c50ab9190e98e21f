// A job as the API process hands it to a worker process through Redis: the request as asked (not the
// mapped GenerateParams), so the worker maps it with the same app::to_generate_params the in-process queue
// and `diffq generate` use. Bad or foreign JSON is a RequestError naming the field, never a crash.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "generate_request.h"
#include "job.h"

namespace diffq::serve {

nlohmann::json request_to_json(const app::GenerateRequest& r);
// Throws RequestError 400 naming the field when a field has the wrong type.
app::GenerateRequest request_from_json(const nlohmann::json& j);

// id, model, kind, request, params (as reported), output_format, fps, preview_every, loras (name, scale).
nlohmann::json job_spec(const Job& job);
// The job a worker runs: its GenerateParams mapped again within `limits`; a LoRA's file is
// `lora_dir`/<name>.safetensors (RequestError 422 naming "loras" when the worker has no such file).
std::shared_ptr<Job> job_from_spec(const nlohmann::json& spec, const app::RequestLimits& limits,
                                   const std::filesystem::path& lora_dir);

}  // namespace diffq::serve
