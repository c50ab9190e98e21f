#include "job_queue.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "generate_request.h"
#include "job_runner.h"
#include "model_registry.h"

namespace diffq::serve {

namespace {
double secs(Job::clock::time_point a, Job::clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
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
    if (job->cancel_requested) throw JobCancelled{};
    RunHooks hooks;
    hooks.on_start = [this, &job](int64_t steps) {
      std::lock_guard lk(mu_);
      job->steps = steps;
    };
    hooks.on_step = [this, &job](JobEvent ev, int64_t step, int64_t steps, double dt) {
      {
        std::lock_guard lk(mu_);
        job->step = step;
        job->steps = steps;
        job->step_seconds.push_back(dt);
        finished_counts_.step_seconds_sum += dt;
        ++finished_counts_.step_count;
        push_event(*job, std::move(ev));
      }
      if (job->cancel_requested) throw JobCancelled{};
    };
    hooks.on_preview = [this, &job](const std::string& url) {
      std::lock_guard lk(mu_);
      job->last_preview = url;
    };
    RunOutput out = run_job_generation(models_, *job, opt_.results_dir, opt_.write_png_metadata, hooks);
    std::lock_guard lk(mu_);
    job->used = std::move(out.used);
    job->results = std::move(out.files);
    job->params_json["timings"] = std::move(out.timings);
    finish(job, JobStatus::completed, {"done", {{"result_url", "/v1/jobs/" + job->id + "/result"},
                                                {"outputs", int64_t(job->results.size())}}});
  } catch (const JobCancelled&) {
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
  return describe_job(job, job.status == JobStatus::queued ? position(job) : 0);
}

nlohmann::json describe_job(const Job& job, int64_t position) {
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
  if (job.status == JobStatus::queued) j["position"] = position;
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
