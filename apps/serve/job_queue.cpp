#include "job_queue.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "base64.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "generate_request.h"
#include "model_registry.h"

namespace diffq::serve {

namespace {
// Thrown from the step callback when the job is cancelled: the denoise loop stops at once (no decode).
struct Cancelled {};

double secs(Job::clock::time_point a, Job::clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The job's adapters, and only those, active on the (shared, kept loaded) pipeline with the job's scales; a
// name not loaded yet is loaded from its file and stays loaded for later jobs.
void use_loras(DiffusionPipeline& pipe, const std::vector<Job::Lora>& loras) {
  if (loras.empty() && pipe.loras().empty()) return;
  std::vector<std::string> names;
  std::vector<double> scales;
  for (const auto& l : loras) {
    const auto loaded = pipe.loras();
    if (std::none_of(loaded.begin(), loaded.end(), [&](const auto& i) { return i.name == l.name; }))
      pipe.load_lora(l.file, l.name, l.scale);
    names.push_back(l.name);
    scales.push_back(l.scale);
  }
  pipe.set_adapters(names, scales);
}
}  // namespace

const char* status_name(JobStatus s) {
  switch (s) {
    case JobStatus::queued: return "queued";
    case JobStatus::running: return "running";
    case JobStatus::completed: return "completed";
    case JobStatus::failed: return "failed";
    case JobStatus::cancelled: return "cancelled";
  }
  return "?";
}

JobQueue::JobQueue(ModelRegistry& models, QueueOptions opt) : models_(models), opt_(std::move(opt)) {
  std::filesystem::create_directories(opt_.results_dir);
  worker_ = std::thread([this] { worker(); });
}

JobQueue::~JobQueue() { shutdown(false); }

std::pair<std::shared_ptr<Job>, int64_t> JobQueue::submit(std::shared_ptr<Job> job) {
  std::unique_lock lk(mu_);
  if (!accepting_) throw app::RequestError(503, "", "the server is shutting down");
  if (int64_t(queue_.size()) >= opt_.max_queue)
    throw app::RequestError(429, "queue", cat("the queue is full (", queue_.size(), " jobs waiting)"),
                            double(opt_.max_queue));
  job->created = Job::clock::now();
  job->created_wall = std::chrono::system_clock::now();
  job->status = JobStatus::queued;
  queue_.push_back(job);
  jobs_[job->id] = job;
  order_.push_back(job->id);
  ++finished_counts_.submitted;
  const int64_t pos = int64_t(queue_.size());
  push_event(*job, {"queued", {{"position", pos}}});
  forget_old_jobs();
  cv_.notify_all();
  return {job, pos};
}

std::shared_ptr<Job> JobQueue::get(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Job>> JobQueue::list() const {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<Job>> v;
  for (auto it = order_.rbegin(); it != order_.rend(); ++it)
    if (auto j = jobs_.find(*it); j != jobs_.end()) v.push_back(j->second);
  return v;
}

std::shared_ptr<Job> JobQueue::running() const {
  std::lock_guard lk(mu_);
  return running_;
}

int64_t JobQueue::position(const Job& job) const {
  for (size_t i = 0; i < queue_.size(); ++i)
    if (queue_[i].get() == &job) return int64_t(i) + 1;
  return 0;
}

bool JobQueue::cancel(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || is_final(it->second->status)) return false;
  auto job = it->second;
  job->cancel_requested = true;
  if (job->status == JobStatus::queued) {
    queue_.erase(std::remove(queue_.begin(), queue_.end(), job), queue_.end());
    finish(job, JobStatus::cancelled, {"cancelled", {{"step", job->step}}});
  }
  return true;
}

bool JobQueue::wait_final(const std::shared_ptr<Job>& job, std::chrono::milliseconds timeout) const {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return is_final(job->status); });
}

std::vector<JobEvent> JobQueue::events_since(const std::shared_ptr<Job>& job, size_t from,
                                             std::chrono::milliseconds timeout, bool& final) const {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return job->events.size() > from || is_final(job->status); });
  std::vector<JobEvent> out;
  for (size_t i = from; i < job->events.size(); ++i) out.push_back(job->events[i]);
  final = is_final(job->status);
  return out;
}

void JobQueue::push_event(Job& job, JobEvent ev) {
  job.events.push_back(std::move(ev));
  cv_.notify_all();
}

void JobQueue::finish(const std::shared_ptr<Job>& job, JobStatus s, JobEvent ev) {
  job->status = s;
  job->finished = Job::clock::now();
  job->last_preview.clear();
  if (s == JobStatus::completed) ++finished_counts_.completed;
  if (s == JobStatus::failed) ++finished_counts_.failed;
  if (s == JobStatus::cancelled) ++finished_counts_.cancelled;
  push_event(*job, std::move(ev));
}

void JobQueue::forget_old_jobs() {
  // Drop the oldest finished jobs beyond keep_finished (with their files), so a long-running server's
  // memory and disk stay flat.
  int64_t finished = 0;
  for (const auto& id : order_)
    if (auto it = jobs_.find(id); it != jobs_.end() && is_final(it->second->status)) ++finished;
  while (finished > opt_.keep_finished && !order_.empty()) {
    auto it = std::find_if(order_.begin(), order_.end(), [&](const std::string& id) {
      auto j = jobs_.find(id);
      return j == jobs_.end() || is_final(j->second->status);
    });
    if (it == order_.end()) break;
    if (auto j = jobs_.find(*it); j != jobs_.end()) {
      std::error_code ec;
      for (const auto& f : j->second->results) std::filesystem::remove(f, ec);
      jobs_.erase(j);
      --finished;
    }
    order_.erase(it);
  }
}

JobQueue::Counts JobQueue::counts() const {
  std::lock_guard lk(mu_);
  Counts c = finished_counts_;
  c.queued = int64_t(queue_.size());
  c.running = running_ ? 1 : 0;
  return c;
}

void JobQueue::shutdown(bool drain) {
  {
    std::unique_lock lk(mu_);
    accepting_ = false;
    if (!drain) {
      while (!queue_.empty()) {
        auto j = queue_.front();
        queue_.pop_front();
        j->cancel_requested = true;
        finish(j, JobStatus::cancelled, {"cancelled", {{"step", 0}, {"reason", "server shutting down"}}});
      }
      if (running_) running_->cancel_requested = true;
    }
    stop_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void JobQueue::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || stop_; });
      if (queue_.empty()) return;  // stop_ and nothing left (drain finished)
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
      job->status = JobStatus::running;
      job->started = Job::clock::now();
      finished_counts_.queue_wait_sum += secs(job->created, *job->started);
      // The others moved up one place.
      for (size_t i = 0; i < queue_.size(); ++i) push_event(*queue_[i], {"queued", {{"position", int64_t(i) + 1}}});
    }
    run_job(job);
    {
      std::lock_guard lk(mu_);
      running_.reset();
      forget_old_jobs();
      cv_.notify_all();
    }
    return_freed_memory_to_os();  // a finished, failed or cancelled job's buffers leave the process
  }
}

void JobQueue::run_job(const std::shared_ptr<Job>& job) {
  try {
    if (job->cancel_requested) throw Cancelled{};
    std::shared_ptr<DiffusionPipeline> pipe = models_.acquire(job->model);
    use_loras(*pipe, job->loras);
    GenerateParams p = job->params;
    const auto t_start = Job::clock::now();
    auto t_last = t_start;
    p.on_step = [this, job, t_start, &t_last](int64_t step, int64_t total, float) {
      const auto now = Job::clock::now();
      const double el = secs(t_start, now), dt = secs(t_last, now);
      t_last = now;
      {
        std::lock_guard lk(mu_);
        job->step = step + 1;
        job->steps = total;
        job->step_seconds.push_back(dt);
        finished_counts_.step_seconds_sum += dt;
        ++finished_counts_.step_count;
        nlohmann::json d = {{"step", step + 1}, {"steps", total}, {"elapsed_s", el},
                            {"eta_s", el / double(step + 1) * double(total - step - 1)}};
        if (!job->last_preview.empty() && job->preview_every > 0 && (step + 1) % job->preview_every == 0)
          d["preview"] = job->last_preview;
        if (!job->last_preview.empty() && step + 1 == total && job->preview_every > 0) d["preview"] = job->last_preview;
        push_event(*job, {"step", std::move(d)});
      }
      if (job->cancel_requested) throw Cancelled{};
      return true;
    };
    if (job->preview_every > 0) {
      p.preview_every = job->preview_every;
      p.on_preview = [this, job](int64_t, const Tensor& rgb) {
        const auto png = encode_image(rgb, "png");
        std::string url = "data:image/png;base64," + base64_encode(png.data(), png.size());
        std::lock_guard lk(mu_);
        job->last_preview = std::move(url);
      };
    }
    {
      std::lock_guard lk(mu_);
      job->steps = p.num_inference_steps > 0 ? p.num_inference_steps : pipe->defaults().num_inference_steps;
      if (!p.sigmas.empty()) job->steps = int64_t(p.sigmas.size());
    }
    GenerateResult r = pipe->generate(p);
    const auto t_gen = Job::clock::now();
    // Results: files written atomically (save_image / save_video rename a finished temporary).
    std::vector<std::filesystem::path> files;
    const bool video = job->kind == "video";
    const Tensor& all = video ? r.videos_u8 : r.images_u8;
    std::vector<std::pair<std::string, std::string>> md = {
        {"prompt", p.prompt},
        {"seed", std::to_string(p.seed)},
        {"steps", std::to_string(r.used.num_inference_steps)},
        {"size", std::to_string(r.used.width) + "x" + std::to_string(r.used.height)},
        {"model", job->model},
        {"software", std::string("diffq ") + DIFFQ_VERSION}};
    for (int64_t i = 0; i < all.size(0); ++i) {
      if (video) {
        const auto path = opt_.results_dir / (job->id + "-" + std::to_string(i) + ".mp4");
        save_video(path, all.select(0, i), {.fps = job->fps, .metadata = {md.begin(), md.end()}});
        files.push_back(path);
      } else {
        const std::string ext = job->output_format == "jpeg" ? ".jpg" : "." + job->output_format;
        const auto path = opt_.results_dir / (job->id + "-" + std::to_string(i) + ext);
        if (job->output_format == "png") {
          save_image(path, all.select(0, i), opt_.write_png_metadata ? md : decltype(md){});
        } else {
          const auto bytes = encode_image(all.select(0, i), job->output_format);
          const auto tmp = path.string() + ".part";
          {
            std::ofstream f(tmp, std::ios::binary);
            f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
            check(bool(f), "serve", "cannot write ", tmp);
          }
          std::filesystem::rename(tmp, path);
        }
        files.push_back(path);
      }
    }
    std::lock_guard lk(mu_);
    job->used = r.used;
    // r.used is the call as made, callbacks included, and those capture this job: kept on the job they
    // would make a reference cycle (Job -> used.on_step -> Job) and every finished job would leak.
    job->used.on_step = nullptr;
    job->used.on_preview = nullptr;
    job->results = std::move(files);
    job->params_json["timings"] = {{"encode_prompt_s", r.encode_prompt_s}, {"denoise_s", r.denoise_s},
                                   {"decode_s", r.decode_s}, {"write_s", secs(t_gen, Job::clock::now())}};
    finish(job, JobStatus::completed, {"done", {{"result_url", "/v1/jobs/" + job->id + "/result"},
                                                {"outputs", int64_t(job->results.size())}}});
  } catch (const Cancelled&) {
    std::lock_guard lk(mu_);
    finish(job, JobStatus::cancelled, {"cancelled", {{"step", job->step}}});
  } catch (const std::exception& e) {
    std::lock_guard lk(mu_);
    job->error = e.what();
    finish(job, JobStatus::failed, {"error", {{"message", job->error}}});
  }
}

nlohmann::json JobQueue::describe(const Job& job) const {
  std::lock_guard lk(mu_);
  const auto now = Job::clock::now();
  nlohmann::json timings = {{"queued_s", secs(job.created, job.started.value_or(job.finished.value_or(now)))}};
  if (job.started) timings["running_s"] = secs(*job.started, job.finished.value_or(now));
  if (job.params_json.contains("timings")) timings.update(job.params_json["timings"]);
  nlohmann::json params = job.params_json;
  params.erase("timings");
  nlohmann::json j = {{"id", job.id},        {"object", "job"},   {"status", status_name(job.status)},
                      {"kind", job.kind},    {"model", job.model}, {"step", job.step},
                      {"steps", job.steps},  {"params", params},   {"timings", timings},
                      {"created", std::chrono::duration_cast<std::chrono::seconds>(job.created_wall.time_since_epoch()).count()}};
  if (job.status == JobStatus::queued) j["position"] = position(job);
  if (!job.error.empty()) j["error"] = job.error;
  if (job.status == JobStatus::completed) {
    j["result_url"] = "/v1/jobs/" + job.id + "/result";
    nlohmann::json urls = nlohmann::json::array();
    for (size_t i = 0; i < job.results.size(); ++i) urls.push_back("/v1/jobs/" + job.id + "/result?index=" + std::to_string(i));
    j["result_urls"] = urls;
  }
  return j;
}

}  // namespace diffq::serve
