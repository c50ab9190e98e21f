#include "bench_common.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "bench_cache.h"
#include "bench_quality.h"
#include "compile_report.h"
#include "lora_options.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/offload.h"
#include "diffq/quantization.h"
#include "diffq/runtime.h"
#include "diffq/system_info.h"

namespace diffq::cli {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "<mode>-offload[:N]" -> the --offload value "<mode>[:N]"; empty when `tok` is not an offload token.
std::string offload_token(const std::string& tok) {
  const auto dash = tok.find("-offload");
  if (dash == std::string::npos || dash == 0) return "";
  const std::string rest = tok.substr(dash + 8);
  if (!rest.empty() && rest[0] != ':') return "";
  return tok.substr(0, dash) + rest;
}

nlohmann::json stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return nullptr;
  const double med = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return {{"median", med}, {"min", v.front()}, {"max", v.back()}, {"n", v.size()}};
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

nlohmann::json spawn_worker(const BenchArgs& a, const std::string& combo, const std::string& quality_out) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  check(!ec, "bench", "cannot find this executable: ", ec.message());
  std::string cmd = shell_quote(exe.string()) + " bench --worker --combo " + shell_quote(combo) + " -m " +
                    shell_quote(a.model) + " --steps " + std::to_string(a.steps) +
                    " --repeat " + std::to_string(a.repeat) + " --warmup " + std::to_string(a.warmup) +
                    " --prompt " + shell_quote(a.prompt) + " --device " + shell_quote(a.device) +
                    " --threads " + std::to_string(num_threads());
  if (!a.size.empty()) cmd += " --size " + shell_quote(a.size);
  if (a.frames > 0) cmd += " --frames " + std::to_string(a.frames);
  if (!quality_out.empty()) cmd += " --quality-out " + shell_quote(quality_out);
  for (const auto& l : a.loras) cmd += " --lora " + shell_quote(l);
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
    std::printf("kernels: %s\n", k.c_str());
  }
  if (!rows.empty()) {
    const auto& r = rows.front();
    std::printf("model %s, %s", r.at("model").get<std::string>().c_str(), r.at("size").get<std::string>().c_str());
    if (r.contains("frames")) std::printf(", %lld frames", (long long)r.at("frames").get<int64_t>());
    std::printf(", %lld steps, %lld threads\n", (long long)r.at("steps").get<int64_t>(),
                (long long)r.at("threads").get<int64_t>());
    if (r.contains("note")) std::printf("%s\n", r.at("note").get<std::string>().c_str());
  }
  // Optional columns: the step cache's transformer calls, the quality readout.
  const bool cached = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.contains("cache"); });
  const bool quality = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.contains("quality"); });
  const bool adherence = std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.contains("adherence"); });
  if (quality) std::printf("%s\n", quality_note(rows).c_str());
  if (adherence)
    std::printf("adherence: prompts of the judge's fixed set drawn right (colour, shape, count and position all as "
                "asked), judged by %s, at the model's default settings\n",
                rows.front().contains("adherence") ? rows.front().at("adherence").at("judge").get<std::string>().c_str()
                                                   : "the judge next to the model");
  std::printf("\n| combination | load s | latency s (median, min-max) | s/step (median) | peak RSS GiB | "
              "generation peak RSS GiB | peak alloc GiB |%s%s%s\n",
              cached ? " transformer calls computed / skipped |" : "", quality ? " PSNR dB | SSIM |" : "",
              adherence ? " adherence |" : "");
  std::printf("|---|---|---|---|---|---|---|%s%s%s\n", cached ? "---|" : "", quality ? "---|---|" : "",
              adherence ? "---|" : "");
  for (const auto& r : rows) {
    const auto& l = r.at("latency_s");
    std::printf("| %s | %.2f | %.3f (%.3f-%.3f) | %.3f | %s | %s | %s |", r.at("combo").get<std::string>().c_str(),
                r.at("load_s").get<double>(), l.at("median").get<double>(), l.at("min").get<double>(),
                l.at("max").get<double>(), r.at("step_s").at("median").get<double>(),
                gib(r.at("peak_rss_bytes")).c_str(), gib(r.at("generate_peak_rss_bytes")).c_str(),
                gib(r.at("peak_alloc_bytes")).c_str());
    if (cached) std::printf(" %s |", cache_cell(r).c_str());
    if (quality) std::printf(" %s | %s |", psnr_cell(r).c_str(), ssim_cell(r).c_str());
    if (adherence) std::printf(" %s |", adherence_cell(r).c_str());
    std::printf("\n");
  }
  if (cached) {
    std::printf("\nstep cache (last timed generation; a call is one transformer forward):\n");
    for (const auto& n : cache_notes(rows)) std::printf("%s\n", n.c_str());
  }
}

}  // namespace

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!trim(item).empty()) out.push_back(trim(item));
  return out;
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
    else if (std::find(quant_shorthands().begin(), quant_shorthands().end(), tok) != quant_shorthands().end()) {
      check(c.quant.empty(), "bench", "combination '", text, "' has two quantization schemes");
      c.quant = tok;
    } else if (tok == "compile" || tok == "regional" || tok == "compile-full") {  // regional: the seeds' name
      check(c.compile.empty(), "bench", "combination '", text, "' compiles twice");
      c.compile = tok == "compile-full" ? "full" : "regional";
    } else if (tok == "lora") {
      check(!c.lora, "bench", "combination '", text, "' has lora twice");
      c.lora = true;
    } else if (tok == "autotune") {
      check(!c.autotune, "bench", "combination '", text, "' has autotune twice");
      c.autotune = true;
    } else if (tok == "reduce-overhead") {
      check(!c.reduce_overhead, "bench", "combination '", text, "' has reduce-overhead twice");
      c.reduce_overhead = true;
    } else if (auto cache = cache_token(text, tok)) {
      check(!c.cache, "bench", "combination '", text, "' has two step caches");
      c.cache = *cache;
    } else if (const std::string off = offload_token(tok); !off.empty()) {
      check(c.offload.empty(), "bench", "combination '", text, "' has two offload modes");
      check(off.rfind("disk:", 0) != 0, "bench", "combination '", text,
            "': disk-offload takes no path in bench (it uses the default offload folder)");
      check_offload_spec(off);  // checks the mode and N
      c.offload = off;
    } else {
      fail("bench", "combination '", text, "': '", tok,
           "' is not available in diffq bench yet (available: fp32, bf16, fp16, the --quant schemes, "
           "compile or regional (regional compile), compile-full, autotune or reduce-overhead (with a compile), lora (the --lora files), model-offload, sequential-offload, "
           "group-offload[:N], leaf-offload, disk-offload, and the step caches fbc[:T], taylorseer[:...], magcache[:...], teacache[:T])");
    }
  }
  check(!c.autotune || !c.compile.empty(), "bench", "combination '", text,
        "': autotune tunes a compiled transformer (add compile or compile-full)");
  check(!c.reduce_overhead || !c.compile.empty(), "bench", "combination '", text,
        "': reduce-overhead replays a compiled transformer's graphs (add compile or compile-full)");
  check(!(c.reduce_overhead && c.autotune), "bench", "combination '", text,
        "': autotune and reduce-overhead are two compile modes: pick one");
  return c;
}

bool unmodified_model(const Combo& c) { return c.quant.empty() && !c.cache && !c.lora; }

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

std::unique_ptr<DiffusionPipeline> load_for_combo(const BenchArgs& a, const Combo& c, double& load_s) {
  const auto t0 = std::chrono::steady_clock::now();
  PipelineOptions po;
  po.dtype = c.dtype;
  po.device = Device::parse(a.device);
  if (!c.quant.empty()) po.quantization_config_json = quantization_config_from_shorthand(c.quant, c.dtype, {"transformer"});
  auto pipe = DiffusionPipeline::from_pretrained(a.model, po);
  if (c.lora) apply_loras(*pipe, a.loras, {}, /*lenient=*/false, /*fuse=*/false, /*quiet=*/true);
  if (!c.offload.empty()) pipe->enable_offload(c.offload);
  if (!c.compile.empty()) pipe->compile(c.compile, c.autotune, c.reduce_overhead);  // after offloading, so its hooks are seen by the capture
  if (c.cache) pipe->enable_cache(*c.cache);                     // as generate --cache: after compile
  load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return pipe;
}

BenchTimings time_generations(const BenchArgs& a, const GenerateFn& generate) {
  using clock = std::chrono::steady_clock;
  BenchTimings t;
  // Peak RSS of the generations alone (after loading, and after offloading sent the weights home),
  // next to the whole process' peak: a builtin model is initialised dense in RAM before any offload.
  return_freed_memory_to_os();
  t.load_peak_rss = process_peak_rss_bytes();
  t.gen_peak_known = reset_peak_rss();
  for (int64_t r = 0; r < a.warmup + a.repeat; ++r) {
    const bool timed = r >= a.warmup;
    auto last = clock::now();
    const auto start = last;
    generate(timed ? a.steps : 1, [&](int64_t, int64_t, float) {
      const auto now = clock::now();
      if (timed) t.steps.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      return true;
    });
    if (timed) t.latencies.push_back(std::chrono::duration<double>(clock::now() - start).count());
    if (r + 1 == a.warmup) reset_op_profile();  // DIFFQ_PROFILE_OPS' table: the timed runs only
  }
  // One reading of the generations' peak for both fields: two readings (the JSON built between them
  // allocates) made the generations' peak exceed the whole process' by a few KB under ASan.
  t.gen_peak_rss = process_peak_rss_bytes();
  return t;
}

nlohmann::json worker_row(const BenchArgs& a, const Combo& c, double load_s, const BenchTimings& t,
                          const DiffusionPipeline& pipe, const nlohmann::json& extra) {
  auto qs = pipe.component_bytes("transformer");
  if (qs.quantized == 0 && qs.dense == 0) qs = pipe.component_bytes("transformer_2");  // Wan2.2 low-noise expert only
  nlohmann::json row = {
      {"combo", a.combo},
      {"transformer_quantized_bytes", qs.quantized},
      {"transformer_dense_bytes", qs.dense},
      {"engine", "diffq"},
      {"model", a.model},
      {"dtype", std::string(dtype_name(c.dtype))},
      {"offload", c.offload.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.offload)},
      {"compile", c.compile.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.compile)},
      {"autotune", c.autotune},
      {"reduce_overhead", c.reduce_overhead},
      // compile and tuning happen in the first generation (the warm-up unless --warmup 0)
      {"compile_stats", compile_report(pipe.compile_report())},
      {"size", a.size},
      {"steps", a.steps},
      {"threads", num_threads()},
      {"load_s", load_s},
      {"latency_s", stats(t.latencies)},
      {"step_s", stats(t.steps)},
      {"peak_rss_bytes", std::max(t.load_peak_rss, t.gen_peak_rss)},
      {"generate_peak_rss_bytes", t.gen_peak_known ? nlohmann::json(t.gen_peak_rss) : nlohmann::json(nullptr)},
      {"peak_alloc_bytes", memory_stats(Device::cpu()).peak_bytes},
      {"device", pipe.device().str()},
      {"peak_device_bytes", pipe.device().is_cpu() ? nlohmann::json(nullptr)
                                                    : nlohmann::json(memory_stats(pipe.device()).peak_bytes)},
      // The machine and kernels behind these figures (diffq info), as this worker ran them.
      {"system", nlohmann::json::parse(to_json(system_info()))}};
  nlohmann::json loras = nlohmann::json::array();
  for (const auto& l : pipe.loras()) loras.push_back({{"name", l.name}, {"file", l.file}, {"weight", l.weight}});
  row["lora"] = loras;
  if (extra.is_object()) row.update(extra);
  return row;
}

nlohmann::json last_run_fields(const BenchArgs& a, const Combo& c, const GenerateResult& last, bool video) {
  nlohmann::json j = nlohmann::json::object();
  if (c.cache) j["cache"] = cache_json(last.cache);
  if (!a.quality_out.empty()) {
    const QualityOn on = a.model.rfind("builtin:", 0) == 0 ? QualityOn::latents : QualityOn::pixels;
    j["quality_output"] = save_quality_output(a.quality_out, quality_planes(last, video, on), on);
  }
  return j;
}

std::vector<std::string> check_bench_args(const BenchArgs& a) {
  const auto combos = split(a.combos, ';');
  check(!combos.empty(), "bench", "--combos is empty");
  for (const auto& c : combos)  // every combination is checked before any runs
    check(!parse_combo(c).lora || !a.loras.empty(), "bench", "combination '", c, "' has +lora: give --lora FILE[:scale]");
  for (const auto& l : a.loras) parse_lora_arg(l);
  if (!a.size.empty()) parse_size(a.size);
  return combos;
}

void run_bench_parent(const BenchArgs& a) {
  const auto combos = check_bench_args(a);
  const size_t ref = a.quality ? quality_reference(combos) : 0;
  // --quality: each worker's output goes to a file of its own in a fresh folder, removed at the end.
  std::filesystem::path qdir;
  std::vector<std::string> qfiles;
  if (a.quality) {
    qdir = std::filesystem::temp_directory_path() / ("diffq-bench-quality-" + std::to_string(getpid()));
    std::filesystem::remove_all(qdir);
    std::filesystem::create_directories(qdir);
    for (size_t i = 0; i < combos.size(); ++i) qfiles.push_back((qdir / (std::to_string(i) + ".safetensors")).string());
  }
  std::vector<nlohmann::json> rows;
  try {
    for (size_t i = 0; i < combos.size(); ++i) {
      if (!a.json) std::fprintf(stderr, "bench: %s ...\n", combos[i].c_str());
      rows.push_back(spawn_worker(a, combos[i], a.quality ? qfiles[i] : ""));
    }
    if (a.quality) add_quality(rows, qfiles, ref);
  } catch (...) {
    if (!qdir.empty()) std::filesystem::remove_all(qdir);
    throw;
  }
  if (!qdir.empty()) std::filesystem::remove_all(qdir);
  if (a.json)
    std::printf("%s\n", nlohmann::json(rows).dump(2).c_str());
  else
    print_table(rows);
}

}  // namespace diffq::cli
