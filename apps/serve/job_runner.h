// Runs one job's generation and writes its result files: the one code path of the in-process queue and the
// Redis workers. The caller keeps the job's state; the hooks tell it the step count, each step's event
// (with the preview due at that step) and the latest preview, and may stop the job by throwing JobCancelled.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "job.h"

namespace diffq::serve {

class ModelRegistry;

struct JobCancelled {};  // thrown from a hook: the denoise loop stops at once (no decode, no files)

struct RunHooks {
  std::function<void(int64_t steps)> on_start;  // the step count, once the pipeline's defaults are known
  // Each step: its event ({step, steps, elapsed_s, eta_s, preview?}) and the seconds since the last one.
  std::function<void(JobEvent step_event, int64_t step, int64_t steps, double step_seconds)> on_step;
  std::function<void(const std::string& data_url)> on_preview;  // the latest preview (data:image/png;base64,...)
};

struct RunOutput {
  std::vector<std::filesystem::path> files;  // one per output: <dir>/<job id>-<i>.<ext>, written atomically
  GenerateParams used;                       // as run (defaults filled in; no callbacks)
  nlohmann::json timings;                    // encode_prompt_s, denoise_s, decode_s, write_s
};

// Acquires the job's pipeline from `models`, makes exactly the job's LoRAs active, generates and writes
// the outputs to `dir` under names that depend on the job id only (a rerun of the same job writes the
// same files). Throws JobCancelled, or the pipeline's error.
RunOutput run_job_generation(ModelRegistry& models, const Job& job, const std::filesystem::path& dir,
                             bool png_metadata, const RunHooks& hooks);

}  // namespace diffq::serve
