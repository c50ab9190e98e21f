// AUTOMATIC1111's web UI API (/sdapi/v1): txt2img, progress (with the live preview), interrupt, and the two
// model queries its clients make first (sd-models, options).
#include "base64.h"
#include "server_state.h"

namespace diffq::serve {

using nlohmann::json;

void add_a1111_routes(Server::State& s) {
  auto& http = s.http;
  http.Post("/sdapi/v1/txt2img", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      const json b = parse_body(req, s.opt.max_body_bytes);
      app::GenerateRequest r;
      r.prompt = get_string(b, "prompt").value_or("");
      r.negative_prompt = get_string(b, "negative_prompt").value_or("");
      r.width = get_int(b, "width").value_or(0);
      r.height = get_int(b, "height").value_or(0);
      if (r.width < 0) throw app::RequestError(422, "width", "width must be >= 1", 1.0);
      if (r.height < 0) throw app::RequestError(422, "height", "height must be >= 1", 1.0);
      r.steps = get_int(b, "steps");
      r.guidance = get_number(b, "cfg_scale");
      r.n = get_int(b, "batch_size").value_or(1);
      r.seed = get_seed(b, "seed", true);
      std::string model;
      if (b.contains("override_settings") && b["override_settings"].is_object())
        model = get_string(b["override_settings"], "sd_model_checkpoint").value_or("");
      json params = {{"prompt", r.prompt}, {"negative_prompt", r.negative_prompt}};
      auto job = make_job(s, model, r, params, "png", {{"n", "batch_size"}, {"guidance", "cfg_scale"}});
      if (job->kind != "image")
        throw app::RequestError(400, "model", "model '" + job->model + "' makes videos; use POST /v1/jobs");
      s.jobs->submit(job);
      while (!s.jobs->wait_final(job, std::chrono::milliseconds(1000))) {
      }
      const json d = s.jobs->describe(*job);
      if (d["status"] == "failed") throw app::RequestError(500, "", "the generation failed: " + job->error);
      json images = json::array();
      for (const auto& f : job->results) images.push_back(base64_encode(read_file(f)));  // interrupted: none
      const GenerateParams& u = job->used;
      json parameters = b;
      parameters["seed"] = r.seed;
      json all_seeds = json::array();
      for (int64_t i = 0; i < r.n; ++i) all_seeds.push_back(r.seed);  // one batch of noise from one seed
      json info = {{"prompt", r.prompt},       {"all_prompts", json::array({r.prompt})},
                   {"negative_prompt", r.negative_prompt}, {"seed", r.seed},
                   {"all_seeds", all_seeds},   {"width", u.width},
                   {"height", u.height},       {"steps", u.num_inference_steps},
                   {"cfg_scale", u.guidance_scale.value_or(0.0)}, {"batch_size", r.n},
                   {"sd_model_name", job->model}, {"job_id", job->id},
                   {"interrupted", d["status"] == "cancelled"}};
      send_json(res, 200, {{"images", images}, {"parameters", parameters}, {"info", info.dump()}});
    });
  });
  http.Get("/sdapi/v1/progress", [&s](const httplib::Request& req, httplib::Response& res) {
    auto job = s.jobs->running();
    const auto c = s.jobs->counts();
    json state = {{"skipped", false}, {"interrupted", false}, {"job", ""}, {"job_count", c.queued + c.running},
                  {"job_timestamp", "0"}, {"job_no", 0}, {"sampling_step", 0}, {"sampling_steps", 0}};
    json out = {{"progress", 0.0}, {"eta_relative", 0.0}, {"current_image", nullptr}, {"textinfo", nullptr}};
    if (job) {
      const json d = s.jobs->describe(*job);
      const int64_t step = d["step"], steps = d["steps"];
      const double el = d["timings"].value("running_s", 0.0);
      state["job"] = job->id;
      state["interrupted"] = job->cancel_requested.load();
      state["sampling_step"] = step;
      state["sampling_steps"] = steps;
      out["progress"] = steps > 0 ? double(step) / double(steps) : 0.0;
      out["eta_relative"] = step > 0 ? el / double(step) * double(steps - step) : 0.0;
      out["textinfo"] = "step " + std::to_string(step) + "/" + std::to_string(steps);
      const bool skip = req.has_param("skip_current_image") && req.get_param_value("skip_current_image") == "true";
      if (!skip) {
        std::string preview = s.jobs->preview_of(*job);
        const std::string prefix = "data:image/png;base64,";
        if (preview.rfind(prefix, 0) == 0) out["current_image"] = preview.substr(prefix.size());
      }
    }
    out["state"] = state;
    send_json(res, 200, out);
  });
  http.Post("/sdapi/v1/interrupt", [&s](const httplib::Request&, httplib::Response& res) {
    if (auto job = s.jobs->running()) s.jobs->cancel(job->id);
    send_json(res, 200, json::object());
  });
  http.Get("/sdapi/v1/sd-models", [&s](const httplib::Request&, httplib::Response& res) {
    json out = json::array();
    for (const auto& m : s.models->list())
      out.push_back({{"title", m["id"]}, {"model_name", m["id"]}, {"hash", nullptr}, {"filename", m["id"]}});
    send_json(res, 200, out);
  });
  http.Get("/sdapi/v1/options", [&s](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"sd_model_checkpoint", s.models->resolve("")}});
  });
}

}  // namespace diffq::serve
