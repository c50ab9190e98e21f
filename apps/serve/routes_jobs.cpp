// diffq's jobs API: POST /v1/jobs (202 + id), GET /v1/jobs, GET /v1/jobs/{id}, GET /v1/jobs/{id}/events
// (server-sent events), GET /v1/jobs/{id}/result, DELETE /v1/jobs/{id}.
#include "server_state.h"
#include "sse.h"

namespace diffq::serve {

using nlohmann::json;

namespace {
// The jobs API body -> a request (also what the page sends).
app::GenerateRequest jobs_request(const json& b, json& params) {
  app::GenerateRequest r;
  const auto prompt = get_string(b, "prompt");
  if (!prompt) throw app::RequestError(400, "prompt", "prompt is required");
  r.prompt = *prompt;
  r.prompt_2 = get_string(b, "prompt_2").value_or("");
  r.negative_prompt = get_string(b, "negative_prompt").value_or("");
  r.negative_prompt_2 = get_string(b, "negative_prompt_2").value_or("");
  r.width = get_int(b, "width").value_or(0);
  r.height = get_int(b, "height").value_or(0);
  if (r.width < 0) throw app::RequestError(422, "width", "width must be >= 1", 1.0);
  if (r.height < 0) throw app::RequestError(422, "height", "height must be >= 1", 1.0);
  r.frames = get_int(b, "frames").value_or(0);
  if (r.frames < 0) throw app::RequestError(422, "frames", "frames must be >= 1", 1.0);
  r.steps = get_int(b, "steps");
  r.guidance = get_number(b, "guidance");
  r.guidance_2 = get_number(b, "guidance_2");
  r.true_cfg = get_number(b, "true_cfg");
  r.n = get_int(b, "n").value_or(1);
  r.seed = get_seed(b, "seed", false);
  params = {{"prompt", r.prompt}, {"negative_prompt", r.negative_prompt}};
  for (const char* f : {"width", "height", "steps", "guidance", "frames", "n", "true_cfg", "guidance_2"})
    if (b.contains(f) && !b[f].is_null()) params[f] = b[f];
  return r;
}
}  // namespace

void add_jobs_routes(Server::State& s) {
  auto& http = s.http;
  http.Post("/v1/jobs", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const json b = parse_body(req, s.opt.max_body_bytes);
      const std::string model = get_string(b, "model").value_or("");
      json params;
      const app::GenerateRequest r = jobs_request(b, params);
      auto job_in = make_job(s, model, r, params);
      job_in->loras = get_loras(s, b);
      if (b.contains("loras")) job_in->params_json["loras"] = b["loras"];
      auto [job, pos] = s.jobs->submit(job_in);
      res.set_header("Location", "/v1/jobs/" + job->id);
      send_json(res, 202, {{"id", job->id}, {"object", "job"}, {"status", "queued"}, {"position", pos},
                           {"kind", job->kind}, {"events_url", "/v1/jobs/" + job->id + "/events"}});
    });
  });
  http.Get("/v1/jobs", [&s](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& j : s.jobs->list()) data.push_back(s.jobs->describe(*j));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });
  http.Get(R"(/v1/jobs/([A-Za-z0-9_]+))", [&s](const httplib::Request& req, httplib::Response& res) {
    auto job = s.jobs->get(req.matches[1]);
    if (!job) return send_error(res, 404, "no job " + std::string(req.matches[1]), "id");
    send_json(res, 200, s.jobs->describe(*job));
  });
  http.Delete(R"(/v1/jobs/([A-Za-z0-9_]+))", [&s](const httplib::Request& req, httplib::Response& res) {
    auto job = s.jobs->get(req.matches[1]);
    if (!job) return send_error(res, 404, "no job " + std::string(req.matches[1]), "id");
    const bool was = s.jobs->cancel(job->id);
    json d = s.jobs->describe(*job);
    d["cancel_requested"] = was;
    send_json(res, 200, d);
  });
  http.Get(R"(/v1/jobs/([A-Za-z0-9_]+)/result)", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      auto job = s.jobs->get(req.matches[1]);
      if (!job) return send_error(res, 404, "no job " + std::string(req.matches[1]), "id");
      const json d = s.jobs->describe(*job);
      if (d["status"] != "completed")
        return send_error(res, 409, "job " + job->id + " is " + d["status"].get<std::string>() + ", not completed",
                          "status");
      int64_t index = 0;
      if (req.has_param("index")) {
        try {
          index = std::stoll(req.get_param_value("index"));
        } catch (const std::exception&) {
          return send_error(res, 400, "index must be an integer", "index");
        }
      }
      if (index < 0 || index >= int64_t(job->results.size()))
        return send_error(res, 404, "job " + job->id + " has " + std::to_string(job->results.size()) + " output(s)",
                          "index", double(job->results.size()));
      const auto& path = job->results[size_t(index)];
      const std::string ext = path.extension().string();
      const char* type = ext == ".mp4" ? "video/mp4" : ext == ".jpg" ? "image/jpeg" : ext == ".webp" ? "image/webp" : "image/png";
      res.set_content(read_file(path), type);
    });
  });
  http.Get(R"(/v1/jobs/([A-Za-z0-9_]+)/events)", [&s](const httplib::Request& req, httplib::Response& res) {
    auto job = s.jobs->get(req.matches[1]);
    if (!job) return send_error(res, 404, "no job " + std::string(req.matches[1]), "id");
    stream_job_events(*s.jobs, job, res);
  });
}

}  // namespace diffq::serve
