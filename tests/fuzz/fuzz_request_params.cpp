// libFuzzer target: a request body as `diffq serve` reads it, to the generation parameters a worker runs.
// parse_body (size limit, UTF-8, JSON), request_from_json (the Redis job codec: each field's type) and
// app::to_generate_params (the server's limits), for an image and a video pipeline, must each succeed or
// throw app::RequestError with a 4xx status and the field it names; any other exception escapes and is
// reported. What passes stays within the server's limits.
#include <httplib.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "generate_request.h"
#include "job_codec.h"
#include "server_state.h"

using namespace diffq;

namespace {

void check_error(const app::RequestError& e) {
  if (e.status < 400 || e.status > 499) std::abort();
  if (e.message.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Request req;
  req.body.assign(reinterpret_cast<const char*>(data), size);
  const app::RequestLimits lim = app::RequestLimits::server_defaults();
  nlohmann::json body;
  try {
    body = serve::parse_body(req, 1 << 16);
  } catch (const app::RequestError& e) {
    check_error(e);
    return 0;
  }
  for (const bool video : {false, true}) {
    try {
      const app::GenerateRequest r = serve::request_from_json(body);
      const GenerateParams p = app::to_generate_params(r, video, lim);
      if (p.width < 0 || p.height < 0 || p.width > lim.max_side || p.height > lim.max_side) std::abort();
      if (p.width * p.height > lim.max_pixels) std::abort();
      if (p.num_inference_steps < 0 || p.num_inference_steps > lim.max_steps) std::abort();
      if (p.num_outputs < 1 || p.num_outputs > lim.max_n) std::abort();
      if (video && (p.num_frames < 0 || p.num_frames > lim.max_frames)) std::abort();
      if (int64_t(p.prompt.size()) > lim.max_prompt_chars) std::abort();
    } catch (const app::RequestError& e) {
      check_error(e);
    }
  }
  return 0;
}
