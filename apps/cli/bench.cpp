// diffq bench: latency and peak memory of a pipeline under several "combinations" (dtype,
// quantization scheme, compile, offload mode), the table the Diffusers documents judge by.
// Each combination runs in a fresh worker process (this binary, `bench --worker`), so its peak RSS
// is its own; the parent collects one JSON line per worker and prints a markdown table or --json.
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "diffq/system_info.h"
#include "commands.h"
#include "compile_report.h"
#include "compile/compile_options.h"
#include "core/random.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/runtime.h"
#include "models/flux/flux_builtin.h"
#include "modules/quantize_on_load.h"
#include "modules/random_init.h"
#include "quant/quant_method.h"
#include "offload/offload_spec.h"
#include "offload/os_memory.h"
#include "pipelines/flux_pipeline.h"

namespace diffq::cli {

namespace {

struct BenchArgs {
  std::string model = "builtin:flux-small", combos = "fp32; bf16", size = "512x512", prompt = "a photo of a cat";
  std::string device = "cpu", combo;  // combo: the worker's one combination
  int64_t steps = 4, repeat = 3, warmup = 1;
  int threads = 0;
  bool json = false, worker = false;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!trim(item).empty()) out.push_back(trim(item));
  return out;
}

struct Combo {
  DType dtype = DType::f32;
  std::string quant;    // a --quant shorthand, applied to the transformer
  std::string offload;  // an --offload value (model, sequential, group[:N], leaf, disk), empty: none
  std::string compile;  // "" | regional ("compile": Diffusers' compile_repeated_blocks) | full
  bool autotune = false;  // "autotune": the compile's mode is max-autotune
};

// "<mode>-offload[:N]" -> the --offload value "<mode>[:N]"; empty when `tok` is not an offload token.
std::string offload_token(const std::string& tok) {
  const auto dash = tok.find("-offload");
  if (dash == std::string::npos || dash == 0) return "";
  const std::string rest = tok.substr(dash + 8);
  if (!rest.empty() && rest[0] != ':') return "";
  return tok.substr(0, dash) + rest;
}

Combo parse_combo(const std::string& text) {
  Combo c;
  for (const std::string& tok : split(text, '+')) {
    if (tok == "fp32" || tok == "f32" || tok == "float32")
      c.dtype = DType::f32;
    else if (tok == "bf16" || tok == "bfloat16")
      c.dtype = DType::bf16;
    else if (tok == "fp16" || tok == "f16" || tok == "float16")
      c.dtype = DType::f16;
    else if (std::find(quant::quant_shorthands().begin(), quant::quant_shorthands().end(), tok) !=
             quant::quant_shorthands().end()) {
      check(c.quant.empty(), "bench", "combination '", text, "' has two quantization schemes");
      c.quant = tok;
    } else if (tok == "compile" || tok == "compile-full") {
      check(c.compile.empty(), "bench", "combination '", text, "' compiles twice");
      c.compile = tok == "compile" ? "regional" : "full";
    } else if (tok == "autotune") {
      check(!c.autotune, "bench", "combination '", text, "' has autotune twice");
      c.autotune = true;
    } else if (const std::string off = offload_token(tok); !off.empty()) {
      check(c.offload.empty(), "bench", "combination '", text, "' has two offload modes");
      check(off.rfind("disk:", 0) != 0, "bench", "combination '", text,
            "': disk-offload takes no path in bench (it uses the default offload folder)");
      offload::parse_offload_spec(off);  // checks the mode and N
      c.offload = off;
    } else {
      fail("bench", "combination '", text, "': '", tok,
           "' is not available in diffq bench yet (available: fp32, bf16, fp16, the --quant schemes, "
           "compile (regional), compile-full, autotune (with a compile), and model-offload, sequential-offload, group-offload[:N], "
           "leaf-offload, disk-offload)");
    }
  }
  check(!c.autotune || !c.compile.empty(), "bench", "combination '", text,
        "': autotune tunes a compiled transformer (add compile or compile-full)");
  return c;
}

std::pair<int64_t, int64_t> parse_size(const std::string& s) {
  const auto x = s.find('x');
  int64_t w = 0, h = 0;
  try {
    check(x != std::string::npos, "bench", "");
    w = std::stoll(s.substr(0, x));
    h = std::stoll(s.substr(x + 1));
  } catch (...) {
    fail("bench", "--size must be WIDTHxHEIGHT (e.g. 512x512), got '", s, "'");
  }
  check(w > 0 && h > 0, "bench", "--size must be positive, got '", s, "'");
  return {w, h};
}

nlohmann::json stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return nullptr;
  const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return {{"median", med}, {"min", v.front()}, {"max", v.back()}, {"n", v.size()}};
}

// One combination in this process: load, warm up, time `repeat` generations.
nlohmann::json run_worker(const BenchArgs& a) {
  using clock = std::chrono::steady_clock;
  check(a.device == "cpu", "bench", "--device ", a.device, ": only cpu runs in this build's bench so far");
  const Combo combo = parse_combo(a.combo);
  const auto [width, height] = parse_size(a.size);
  auto t0 = clock::now();
  std::unique_ptr<FluxPipeline> pipe;
  FluxCallOptions o;
  const bool builtin = a.model.rfind("builtin:", 0) == 0;
  if (builtin) {
    const auto b = models::flux::builtin_flux(a.model.substr(8));
    pipe = std::make_unique<FluxPipeline>();
    pipe->transformer = std::make_unique<models::flux::FluxTransformer2DModel>(b.transformer);
    init_parameters_randn(*pipe->transformer, combo.dtype, /*seed=*/0);
    if (!combo.quant.empty()) {
      const auto [backend, kwargs] = quant::quant_shorthand(combo.quant, std::string(dtype_name(combo.dtype)));
      quantize_module(*pipe->transformer, *quant::make_quant_method(backend, kwargs));
    }
    pipe->scheduler = std::make_unique<FlowMatchEulerDiscreteScheduler>(b.scheduler);
    Generator g(1);
    o.prompt_embeds = randn_tensor({1, b.text_tokens, b.transformer.joint_attention_dim}, g, combo.dtype);
    o.pooled_prompt_embeds = randn_tensor({1, b.transformer.pooled_projection_dim}, g, combo.dtype);
    o.output_type = "latent";  // no VAE in a builtin model
  } else {
    FluxPipelineLoadOptions lo;
    if (!combo.quant.empty()) {
      const auto [backend, kwargs] = quant::quant_shorthand(combo.quant, std::string(dtype_name(combo.dtype)));
      lo.quantization_config = PipelineQuantizationConfig(backend, kwargs, {"transformer"}, std::nullopt);
    }
    pipe = FluxPipeline::from_pretrained(a.model, combo.dtype, lo);
    o.prompt = {a.prompt};
  }
  if (!combo.offload.empty())
    offload::apply(pipe->offloader, pipe->offload_components(), FluxPipeline::model_cpu_offload_seq,
                   offload::parse_offload_spec(combo.offload));
  if (combo.compile == "full")  // after offloading, so its hooks are seen by the capture (as generate)
    pipe->transformer->compile(cli_compile_options(combo.autotune));
  else if (combo.compile == "regional")
    pipe->transformer->compile_repeated_blocks(cli_compile_options(combo.autotune));
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  // Peak RSS of the generations alone (after loading, and after offloading sent the weights home),
  // next to the whole process' peak: a builtin model is initialised dense in RAM before any offload.
  return_freed_memory_to_os();
  const int64_t load_peak_rss = offload::peak_rss_bytes();
  const bool gen_peak_known = offload::reset_peak_rss();
  o.width = width;
  o.height = height;
  o.guidance_scale = 3.5;
  o.seed = 0;

  std::vector<double> latencies, steps;
  for (int64_t r = 0; r < a.warmup + a.repeat; ++r) {
    const bool timed = r >= a.warmup;
    o.num_inference_steps = timed ? a.steps : 1;
    auto last = clock::now();
    const auto start = last;
    o.callback = [&](int64_t, int64_t, float) {
      const auto now = clock::now();
      if (timed) steps.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      return true;
    };
    (*pipe)(o);
    if (timed) latencies.push_back(std::chrono::duration<double>(clock::now() - start).count());
  }
  const auto qs = summarize_quantization(*pipe->transformer);
  // One reading of the generations' peak for both fields: two readings (the JSON built between them
  // allocates) made the generations' peak exceed the whole process' by a few KB under ASan.
  const int64_t gen_peak_rss = offload::peak_rss_bytes();
  return {{"combo", a.combo},
          {"transformer_quantized_bytes", qs.quantized_bytes},
          {"transformer_dense_bytes", qs.dense_bytes},
          {"engine", "diffq"},
          {"model", a.model},
          {"dtype", std::string(dtype_name(combo.dtype))},
          {"offload", combo.offload.empty() ? nlohmann::json(nullptr) : nlohmann::json(combo.offload)},
          {"compile", combo.compile.empty() ? nlohmann::json(nullptr) : nlohmann::json(combo.compile)},
          {"autotune", combo.autotune},
          // compile and tuning happen in the first generation (the warm-up unless --warmup 0)
          {"compile_stats", compile_report(*pipe->transformer, combo.autotune)},
          {"size", a.size},
          {"steps", a.steps},
          {"threads", num_threads()},
          {"load_s", load_s},
          {"latency_s", stats(latencies)},
          {"step_s", stats(steps)},
          {"peak_rss_bytes", std::max(load_peak_rss, gen_peak_rss)},
          {"generate_peak_rss_bytes", gen_peak_known ? nlohmann::json(gen_peak_rss) : nlohmann::json(nullptr)},
          {"peak_alloc_bytes", memory_stats(Device::cpu()).peak_bytes},
          {"peak_device_bytes", nullptr},
          // The machine and kernels behind these figures (diffq info), as this worker ran them.
          {"system", nlohmann::json::parse(to_json(system_info()))}};
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

nlohmann::json spawn_worker(const BenchArgs& a, const std::string& combo) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  check(!ec, "bench", "cannot find this executable: ", ec.message());
  std::string cmd = shell_quote(exe.string()) + " bench --worker --combo " + shell_quote(combo) + " -m " +
                    shell_quote(a.model) + " --size " + shell_quote(a.size) + " --steps " + std::to_string(a.steps) +
                    " --repeat " + std::to_string(a.repeat) + " --warmup " + std::to_string(a.warmup) +
                    " --prompt " + shell_quote(a.prompt) + " --device " + shell_quote(a.device) +
                    " --threads " + std::to_string(num_threads());
  FILE* p = popen(cmd.c_str(), "r");
  check(p != nullptr, "bench", "cannot start a worker for '", combo, "'");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bench", "combination '", combo, "' failed (see its error above)");
  try {
    return nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    fail("bench", "combination '", combo, "': unreadable worker output: ", e.what());
  }
}

std::string gib(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v.get<double>() / double(1 << 30));
  return b;
}

void print_table(const std::vector<nlohmann::json>& rows) {
  if (!rows.empty() && rows.front().contains("system")) {
    const auto& sys = rows.front().at("system");
    std::printf("diffq info: %s\n", sys.at("summary").get<std::string>().c_str());
    std::string k;
    for (const auto& [name, v] : sys.at("kernels").items()) k += (k.empty() ? "" : "; ") + name + ": " + v.get<std::string>();
    std::printf("kernels: %s\n\n", k.c_str());
  }
  std::printf("| combination | load s | latency s (median, min-max) | s/step (median) | peak RSS GiB | "
              "generation peak RSS GiB | peak alloc GiB |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    const auto& l = r.at("latency_s");
    std::printf("| %s | %.2f | %.3f (%.3f-%.3f) | %.3f | %s | %s | %s |\n", r.at("combo").get<std::string>().c_str(),
                r.at("load_s").get<double>(), l.at("median").get<double>(), l.at("min").get<double>(),
                l.at("max").get<double>(), r.at("step_s").at("median").get<double>(),
                gib(r.at("peak_rss_bytes")).c_str(), gib(r.at("generate_peak_rss_bytes")).c_str(),
                gib(r.at("peak_alloc_bytes")).c_str());
  }
}

void run(const BenchArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  check(a.repeat >= 1 && a.steps >= 1 && a.warmup >= 0, "bench", "--repeat and --steps must be >= 1, --warmup >= 0");
  if (a.worker) {
    std::printf("%s\n", run_worker(a).dump().c_str());
    return;
  }
  const auto combos = split(a.combos, ';');
  check(!combos.empty(), "bench", "--combos is empty");
  for (const auto& c : combos) parse_combo(c);  // every combination is checked before any runs
  parse_size(a.size);
  std::vector<nlohmann::json> rows;
  for (const auto& c : combos) {
    if (!a.json) std::fprintf(stderr, "bench: %s ...\n", c.c_str());
    rows.push_back(spawn_worker(a, c));
  }
  if (a.json)
    std::printf("%s\n", nlohmann::json(rows).dump(2).c_str());
  else
    print_table(rows);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Latency and peak memory per combination (dtype, ...), as a markdown table");
  cmd->add_option("-m,--model", a->model, "builtin:flux-small | builtin:flux-medium | builtin:flux-dev-shape | builtin:flux-dev-width | a FluxPipeline folder");
  cmd->add_option("--combos", a->combos, "combinations separated by ';' (e.g. \"fp32; bf16\")");
  cmd->add_option("--steps", a->steps, "denoising steps per generation (default 4)");
  cmd->add_option("--size", a->size, "WIDTHxHEIGHT (default 512x512)");
  cmd->add_option("--repeat", a->repeat, "timed generations per combination (default 3)");
  cmd->add_option("--warmup", a->warmup, "untimed 1-step generations first (default 1)");
  cmd->add_option("--prompt", a->prompt, "prompt for folder models");
  cmd->add_option("--device", a->device, "cpu");
  cmd->add_option("--threads", a->threads, "CPU threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", a->json, "print JSON instead of the table");
  cmd->add_flag("--worker", a->worker)->group("");  // internal: run one combination in this process
  cmd->add_option("--combo", a->combo)->group("");
  cmd->callback([a] { run(*a); });
}

}  // namespace diffq::cli
