// OpenAI's images API: POST /v1/images/generations (b64_json or url), plus diffq's own fields (seed, steps,
// guidance, negative_prompt, true_cfg). GET /v1/models is in metrics.cpp (it serves every API).
#include <chrono>
#include <ctime>

#include "base64.h"
#include "server_state.h"

namespace diffq::serve {

using nlohmann::json;

namespace {
// "1024x768" -> {1024, 768}; "auto" or absent -> {0, 0} (the pipeline's default).
std::pair<int64_t, int64_t> parse_size_field(const std::optional<std::string>& size) {
  if (!size || *size == "auto") return {0, 0};
  const auto x = size->find('x');
  try {
    if (x != std::string::npos) {
      size_t a = 0, b = 0;
      const std::string ws = size->substr(0, x), hs = size->substr(x + 1);
      const long long w = std::stoll(ws, &a), h = std::stoll(hs, &b);
      if (a == ws.size() && b == hs.size() && w > 0 && h > 0) return {w, h};
    }
  } catch (const std::exception&) {
  }
  throw app::RequestError(400, "size", "size must be \"WIDTHxHEIGHT\" (e.g. \"1024x1024\") or \"auto\", got \"" + *size + "\"");
}

// Waits for a synchronous API's job; RequestError when it did not complete.
void wait_completed(Server::State& s, const std::shared_ptr<Job>& job) {
  while (!s.jobs->wait_final(job, std::chrono::milliseconds(1000))) {
  }
  const json d = s.jobs->describe(*job);
  const std::string st = d["status"];
  if (st == "cancelled") throw app::RequestError(409, "", "the generation was cancelled");
  if (st != "completed") throw app::RequestError(500, "", "the generation failed: " + job->error);
}
}  // namespace

void add_openai_routes(Server::State& s) {
  s.http.Post("/v1/images/generations", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const json b = parse_body(req, s.opt.max_body_bytes);
      app::GenerateRequest r;
      const auto prompt = get_string(b, "prompt");
      if (!prompt) throw app::RequestError(400, "prompt", "prompt is required");
      r.prompt = *prompt;
      const std::string model = get_string(b, "model").value_or("");
      r.n = get_int(b, "n").value_or(1);
      std::tie(r.width, r.height) = parse_size_field(get_string(b, "size"));
      const std::string fmt = get_string(b, "response_format").value_or("b64_json");
      if (fmt != "b64_json" && fmt != "url")
        throw app::RequestError(400, "response_format", "response_format must be \"b64_json\" or \"url\", got \"" + fmt + "\"");
      const std::string out = get_string(b, "output_format").value_or("png");
      if (out != "png" && out != "jpeg" && out != "webp")
        throw app::RequestError(400, "output_format", "output_format must be png, jpeg or webp, got \"" + out + "\"");
      r.seed = get_seed(b, "seed", true);
      r.steps = get_int(b, "steps");
      r.guidance = get_number(b, "guidance");
      r.true_cfg = get_number(b, "true_cfg");
      r.negative_prompt = get_string(b, "negative_prompt").value_or("");
      json params = {{"prompt", r.prompt}, {"n", r.n}, {"size", b.value("size", "auto")}, {"output_format", out}};
      auto job = make_job(s, model, r, params, out, {{"width", "size"}, {"height", "size"}});
      job->loras = get_loras(s, b);
      if (b.contains("loras")) job->params_json["loras"] = b["loras"];
      if (job->kind != "image")
        throw app::RequestError(400, "model", "model '" + job->model + "' makes videos; use POST /v1/jobs");
      s.jobs->submit(job);
      wait_completed(s, job);
      json data = json::array();
      for (size_t i = 0; i < job->results.size(); ++i) {
        if (fmt == "url") {
          const std::string host = req.get_header_value("Host");
          data.push_back({{"url", "http://" + host + "/v1/jobs/" + job->id + "/result?index=" + std::to_string(i)},
                          {"revised_prompt", r.prompt}});
        } else {
          data.push_back({{"b64_json", base64_encode(read_file(job->results[i]))}, {"revised_prompt", r.prompt}});
        }
      }
      send_json(res, 200, {{"created", int64_t(std::time(nullptr))}, {"data", data}, {"output_format", out},
                           {"seed", r.seed}, {"job_id", job->id}});
    });
  });
}

}  // namespace diffq::serve
