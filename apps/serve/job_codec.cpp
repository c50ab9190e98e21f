#include "job_codec.h"

#include "diffq/error.h"
#include "server_state.h"

namespace diffq::serve {

using nlohmann::json;

namespace {
template <class T>
void put(json& j, const char* k, const std::optional<T>& v) {
  if (v) j[k] = *v;
}
const json& object_field(const json& j, const char* f) {
  auto it = j.find(f);
  if (it == j.end() || !it->is_object()) throw app::RequestError(400, f, cat(f, " must be an object"));
  return *it;
}
}  // namespace

json request_to_json(const app::GenerateRequest& r) {
  json j = {{"prompt", r.prompt}, {"prompt_2", r.prompt_2}, {"negative_prompt", r.negative_prompt},
            {"negative_prompt_2", r.negative_prompt_2}, {"width", r.width}, {"height", r.height},
            {"frames", r.frames}, {"n", r.n}, {"seed", r.seed}};
  put(j, "steps", r.steps);
  put(j, "guidance", r.guidance);
  put(j, "guidance_2", r.guidance_2);
  put(j, "true_cfg", r.true_cfg);
  put(j, "max_sequence_length", r.max_sequence_length);
  if (!r.sigmas.empty()) j["sigmas"] = r.sigmas;
  return j;
}

app::GenerateRequest request_from_json(const json& j) {
  if (!j.is_object()) throw app::RequestError(400, "request", "the request must be a JSON object");
  app::GenerateRequest r;
  r.prompt = get_string(j, "prompt").value_or("");
  r.prompt_2 = get_string(j, "prompt_2").value_or("");
  r.negative_prompt = get_string(j, "negative_prompt").value_or("");
  r.negative_prompt_2 = get_string(j, "negative_prompt_2").value_or("");
  r.width = get_int(j, "width").value_or(0);
  r.height = get_int(j, "height").value_or(0);
  r.frames = get_int(j, "frames").value_or(0);
  r.n = get_int(j, "n").value_or(1);
  r.seed = get_seed(j, "seed", false);
  r.steps = get_int(j, "steps");
  r.guidance = get_number(j, "guidance");
  r.guidance_2 = get_number(j, "guidance_2");
  r.true_cfg = get_number(j, "true_cfg");
  r.max_sequence_length = get_int(j, "max_sequence_length");
  if (auto it = j.find("sigmas"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw app::RequestError(400, "sigmas", "sigmas must be an array of numbers");
    for (const auto& v : *it) {
      if (!v.is_number()) throw app::RequestError(400, "sigmas", "sigmas must be an array of numbers");
      r.sigmas.push_back(v.get<double>());
    }
  }
  return r;
}

json job_spec(const Job& job) {
  json loras = json::array();
  for (const auto& l : job.loras) loras.push_back({{"name", l.name}, {"scale", l.scale}});
  return {{"id", job.id}, {"model", job.model}, {"kind", job.kind}, {"request", request_to_json(job.request)},
          {"params", job.params_json}, {"output_format", job.output_format}, {"fps", job.fps},
          {"preview_every", job.preview_every}, {"loras", loras}};
}

std::shared_ptr<Job> job_from_spec(const json& spec, const app::RequestLimits& limits,
                                   const std::filesystem::path& lora_dir) {
  if (!spec.is_object()) throw app::RequestError(400, "spec", "the job's spec must be a JSON object");
  auto job = std::make_shared<Job>();
  job->id = get_string(spec, "id").value_or("");
  if (job->id.empty()) throw app::RequestError(400, "id", "the job's spec has no id");
  job->model = get_string(spec, "model").value_or("");
  job->kind = get_string(spec, "kind").value_or("image");
  if (job->kind != "image" && job->kind != "video")
    throw app::RequestError(400, "kind", "kind must be image or video, got \"" + job->kind + "\"");
  job->request = request_from_json(object_field(spec, "request"));
  job->params = app::to_generate_params(job->request, job->kind == "video", limits);
  job->params_json = spec.contains("params") && spec["params"].is_object() ? spec["params"] : json::object();
  job->output_format = get_string(spec, "output_format").value_or("png");
  if (job->output_format != "png" && job->output_format != "jpeg" && job->output_format != "webp")
    throw app::RequestError(400, "output_format", "output_format must be png, jpeg or webp");
  job->fps = get_number(spec, "fps").value_or(16.0);
  job->preview_every = std::max<int64_t>(0, get_int(spec, "preview_every").value_or(0));
  if (auto it = spec.find("loras"); it != spec.end() && it->is_array()) {
    for (const auto& l : *it) {
      if (!l.is_object()) throw app::RequestError(400, "loras", "each LoRA must be an object");
      const std::string name = get_string(l, "name").value_or("");
      const auto file = lora_dir / (name + ".safetensors");
      if (name.empty() || name.find('/') != std::string::npos || lora_dir.empty() ||
          !std::filesystem::is_regular_file(file))
        throw app::RequestError(422, "loras", "this worker has no LoRA named \"" + name + "\" (its --lora-dir)");
      job->loras.push_back({name, file, get_number(l, "scale").value_or(1.0)});
    }
  }
  return job;
}

}  // namespace diffq::serve
