// The one mapping from a user's generation request to GenerateParams, shared by `diffq generate` (its
// flags) and `diffq serve` (its JSON bodies): the same defaults (0 / nullopt = the pipeline's own, see
// DiffusionPipeline::defaults()), the same validation, the same limits (the CLI's are wide open).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "diffq/pipeline.h"

namespace diffq::app {

// A request that cannot run: which field, why, and the limit it broke (when one did). `status` is the
// HTTP status a server answers with: 400 malformed / wrong type, 413 body too large, 422 out of range.
class RequestError : public Error {
 public:
  RequestError(int status, std::string field, const std::string& message, std::optional<double> limit = std::nullopt)
      : Error("request", message), status(status), field(std::move(field)), message(message), limit(limit) {}
  int status;
  std::string field, message;
  std::optional<double> limit;
};

// Bounds a request must stay within. The CLI uses wide_open(); the server its flags (--max-steps ...).
struct RequestLimits {
  int64_t max_side = 16384;             // width and height each
  int64_t max_pixels = 16384LL * 16384;  // width x height
  int64_t max_steps = 1000;
  int64_t max_frames = 100000;
  int64_t max_n = 64;                    // images / videos per request
  int64_t max_prompt_chars = 1 << 20;    // bytes of each prompt (UTF-8)
  static RequestLimits wide_open() { return {}; }
  static RequestLimits server_defaults() { return {4096, 2048LL * 2048, 150, 257, 8, 4000}; }
};

struct GenerateRequest {
  std::string prompt, prompt_2, negative_prompt, negative_prompt_2;
  int64_t width = 0, height = 0;  // 0: the pipeline's default
  int64_t frames = 0;             // video pipelines; 0: the default
  std::optional<int64_t> steps;
  std::vector<double> sigmas;     // FLUX: custom sigmas (set the step count)
  std::optional<double> guidance, guidance_2, true_cfg;
  std::optional<int64_t> max_sequence_length;
  int64_t n = 1;
  uint64_t seed = 0;
};

// How a field is named in messages: the CLI says "--true-cfg" where the server says "true_cfg".
using FieldLabel = std::function<std::string(const std::string& field)>;

// Validates `r` for a pipeline that makes video (`video`) or images, within `lim`, and returns the call.
// RequestError::field is the request's field name ("steps", "frames", "guidance_2", ...); messages name
// it through `label` (default: the field name). Throws RequestError.
GenerateParams to_generate_params(const GenerateRequest& r, bool video, const RequestLimits& lim,
                                  const FieldLabel& label = {});

// The model `diffq generate`, `diffq serve` and `diffq bench` use without -m: the bundled demo model, a small
// FLUX pipeline trained to draw coloured shapes (models/demo-flux next to the build folder of the binary, else
// relative to the working directory).
std::filesystem::path default_model_folder();

}  // namespace diffq::app
