// diffq serve: the pipelines kept loaded behind HTTP APIs (apps/serve; docs/serve.md). Without -m it serves
// the bundled demo model (models/demo-flux), as `diffq generate` does. SIGINT / SIGTERM: stop accepting, cancel the
// queued and running jobs (--drain: finish them), then exit.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "diffq/dtype.h"
#include "diffq/error.h"
#include "generate_request.h"
#include "quant_options.h"
#include "server.h"

namespace diffq::cli {

namespace {

int g_signal_pipe[2] = {-1, -1};
extern "C" void on_signal(int signo) {
  const unsigned char b = static_cast<unsigned char>(signo);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &b, 1);
}

struct ServeArgs {
  std::vector<std::string> models;
  std::string dtype = "float32", quant, quant_config, quantize, offload, compile, max_memory, device = "cpu";
  std::string host = "127.0.0.1", api_key, results_dir, lora_dir, queue, role = "all", worker_name;
  double claim_after = 60;
  int64_t max_attempts = 3;
  int port = 7860;
  int64_t max_queue = 64, max_body = 1 << 20, keep_jobs = 256, preview_every = 1;
  app::RequestLimits limits = app::RequestLimits::server_defaults();
  bool drain = false;
};

void run(const ServeArgs& a) {
  serve::ServeOptions o;
  for (const auto& m : a.models) {
    const auto eq = m.find('=');
    std::filesystem::path folder = eq == std::string::npos ? m : m.substr(eq + 1);
    std::string name = eq == std::string::npos ? std::filesystem::path(m).lexically_normal().filename().string()
                                               : m.substr(0, eq);
    if (name.empty()) name = std::filesystem::weakly_canonical(folder).filename().string();
    o.models.emplace_back(name, folder);
  }
  if (o.models.empty()) o.models.emplace_back("demo-flux", app::default_model_folder());
  const DType dtype = parse_dtype(a.dtype);
  o.load.dtype = a.dtype;
  o.load.quantization_config_json = cli_quantization_config(a.quant, a.quant_config, a.quantize, dtype);
  o.load.offload = a.offload;
  o.load.compile = a.compile;
  o.load.device = a.device;
  check_execution_device(Device::parse(a.device));  // before binding the port: no backend / no GPU
  o.host = a.host;
  o.port = a.port;
  o.api_key = a.api_key;
  o.max_queue = a.max_queue;
  if (!a.max_memory.empty()) o.max_memory_bytes = serve::parse_size(a.max_memory);
  o.max_body_bytes = a.max_body;
  o.keep_finished = a.keep_jobs;
  o.preview_every = a.preview_every;
  o.drain = a.drain;
  o.limits = a.limits;
  o.results_dir = a.results_dir;
  o.lora_dir = a.lora_dir;
  o.queue = a.queue;
  o.role = a.role;
  o.claim_after_s = a.claim_after;
  o.max_attempts = a.max_attempts;
  o.worker_name = a.worker_name;

  serve::Server server(o);
  server.bind();
  std::fprintf(stderr, "serve: %s\n", server.banner().c_str());
  // SIGINT / SIGTERM: the handler (any thread may run it) only writes the signal number to a pipe; this
  // thread reads it and stops the server (stopping is not async-signal-safe work).
  check(::pipe(g_signal_pipe) == 0, "serve", "pipe() failed");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::thread sig([&server, drain = a.drain] {
    unsigned char signo = 0;
    if (::read(g_signal_pipe[0], &signo, 1) != 1 || signo == 0) return;  // 0: the server ended by itself
    std::fprintf(stderr, "serve: %s: no new jobs; %s\n", signo == SIGINT ? "SIGINT" : "SIGTERM",
                 drain ? "finishing the queued and running ones (--drain)" : "cancelling the queued and running ones");
    server.stop(drain);
  });
  server.listen_after_bind();
  server.stop(a.drain);
  const unsigned char zero = 0;
  if (::write(g_signal_pipe[1], &zero, 1) != 1) std::perror("serve: waking the signal thread");
  sig.join();
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  std::fprintf(stderr, "serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve pipelines over HTTP: OpenAI images, A1111 sdapi, jobs with progress (SSE)");
  cmd->add_option("-m,--model", a->models,
                  "pipeline folder, or name=folder; repeat for several (the first is the default; default: the "
                  "bundled demo model models/demo-flux)");
  cmd->add_option("--dtype", a->dtype, "compute dtype: float32 | bfloat16 | float16");
  cmd->add_option("--device", a->device, "where the models run: cpu (default) | cuda | cuda:N");
  cmd->add_option("--quant", a->quant, "quantize while loading (as diffq generate --quant)");
  cmd->add_option("--quant-config", a->quant_config, "PipelineQuantizationConfig as JSON file");
  cmd->add_option("--quantize", a->quantize, "components for --quant, comma-separated");
  cmd->add_option("--offload", a->offload, "model | sequential | group[:N] | leaf | disk[:path]");
  cmd->add_option("--compile", a->compile, "compile the transformer(s): full | regional")
      ->check(CLI::IsMember({"full", "regional"}));
  cmd->add_option("--host", a->host, "address to bind (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", a->port, "port (default 7860; 0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->api_key, "require Authorization: Bearer KEY on every API call");
  cmd->add_option("--max-queue", a->max_queue, "jobs that may wait (more -> 429; default 64)")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--max-memory", a->max_memory,
                  "budget for loaded pipelines (e.g. 24GiB): more load on demand, least recently used evicted");
  cmd->add_flag("--drain", a->drain, "on SIGINT / SIGTERM finish queued and running jobs instead of cancelling them");
  cmd->add_option("--max-body", a->max_body, "request body bytes (default 1 MiB; more -> 413)");
  cmd->add_option("--lora-dir", a->lora_dir,
                  "folder of LoRA files a request may name (\"loras\": [{\"name\": \"style\", \"scale\": 0.8}] -> "
                  "DIR/style.safetensors); loaded on first use and kept; default: requests take no LoRAs");
  cmd->add_option("--max-steps", a->limits.max_steps, "steps per job (default 150)");
  cmd->add_option("--max-frames", a->limits.max_frames, "video frames per job (default 257)");
  cmd->add_option("--max-n", a->limits.max_n, "outputs per request (default 8)");
  cmd->add_option("--max-side", a->limits.max_side, "width and height each (default 4096)");
  cmd->add_option("--max-pixels", a->limits.max_pixels, "width x height (default 2048 x 2048)");
  cmd->add_option("--max-prompt", a->limits.max_prompt_chars, "prompt bytes (default 4000)");
  cmd->add_option("--preview-every", a->preview_every, "a preview in the jobs' events every K steps (0: none; default 1)");
  cmd->add_option("--keep-jobs", a->keep_jobs, "finished jobs (and result files) remembered (default 256)");
  cmd->add_option("--results-dir,--results", a->results_dir,
                  "where results are written (default: a fresh temp folder; with --queue: a folder the API and every "
                  "worker share)");
  cmd->add_option("--queue", a->queue,
                  "redis://HOST:PORT[/DB]: jobs go through Redis, shared by an API process and worker processes "
                  "(docs/serve.md); default: the in-process queue");
  cmd->add_option("--role", a->role, "with --queue: api (HTTP, enqueues) | worker (runs jobs) | all (both; default)")
      ->check(CLI::IsMember({"api", "worker", "all"}));
  cmd->add_option("--claim-after", a->claim_after,
                  "with --queue: seconds after which a job whose worker stopped is run by another (default 60)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-attempts", a->max_attempts, "with --queue: starts of one job before it fails (default 3)")
      ->check(CLI::Range(int64_t(1), int64_t(1000)));
  cmd->add_option("--worker-name", a->worker_name, "with --queue: this worker's name (default <hostname>-<pid>)");
  cmd->callback([a] { run(*a); });
}

}  // namespace diffq::cli
