// The parts of `diffq bench` every pipeline shares (bench.cpp: FLUX and the command; bench_wan.cpp: Wan):
// the arguments, the combination syntax ("bf16+nf4+leaf-offload+compile"), loading a pipeline with a
// combination's dtype / quantization / offload / compile through the public DiffusionPipeline, the timed
// generations of a worker, its JSON row, and the parent that runs each combination in a fresh worker
// process and prints the table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diffq/cache.h"
#include "diffq/dtype.h"
#include "diffq/pipeline.h"

namespace diffq::cli {

struct BenchArgs {
  // model: a folder or builtin:<name>; empty = the bundled demo model (models/demo-flux)
  std::string model, combos = "fp32; bf16", prompt = "two red circles on the left on a white background";
  std::string size;                  // WIDTHxHEIGHT; empty: the model's default (FLUX 512x512, Wan: see bench_wan.cpp)
  std::string device = "cpu", combo;  // combo: the worker's one combination
  int64_t steps = 4, repeat = 3, warmup = 1;
  int64_t frames = 0;  // Wan only; 0: the model's default
  int threads = 0;
  bool json = false, worker = false;
  bool quality = false;     // --quality: PSNR / SSIM against the reference combination (bench_quality.h)
  std::string quality_out;  // the worker's: where to save its output for the parent's comparison
  std::vector<std::string> loras;  // --lora FILE[:scale], applied by combinations with "+lora"
};

struct Combo {
  DType dtype = DType::f32;
  std::string quant;    // a --quant shorthand, applied to the transformer
  std::string offload;  // an --offload value (model, sequential, group[:N], leaf, disk), empty: none
  std::string compile;  // "" | regional ("compile": Diffusers' compile_repeated_blocks) | full
  bool autotune = false;  // "autotune": the compile's mode is max-autotune
  bool reduce_overhead = false;  // "reduce-overhead": device graphs captured and replayed (compile's mode)
  std::optional<CacheOptions> cache;  // "+fbc[:T]", "+taylorseer[:...]", "+magcache[:...]", "+teacache[:T]" (bench_cache.h)
  bool lora = false;      // "lora": the --lora adapters loaded (before offloading and compiling), unfused
};

// The model as its checkpoint computes it (no quantization, no step cache): what --quality compares with.
bool unmodified_model(const Combo& c);

std::vector<std::string> split(const std::string& s, char sep);  // trimmed, empty items dropped
Combo parse_combo(const std::string& text);                       // checks every token
std::pair<int64_t, int64_t> parse_size(const std::string& s);     // "WxH" -> {W, H}

// `a.model` (a folder or builtin:<name>) loaded with the combination: its dtype, its quantization scheme on
// the transformer only, its LoRAs (a.loras), its offload mode, then its compile (after offloading, so the hooks are captured).
// `load_s`: the wall time of all that.
std::unique_ptr<DiffusionPipeline> load_for_combo(const BenchArgs& a, const Combo& c, double& load_s);

// A worker's generations after loading: `warmup` 1-step ones, then `repeat` timed ones of `steps`
// steps, timed whole and per denoising step (from the step callback), with the peak RSS of loading
// and of the generations alone.
struct BenchTimings {
  std::vector<double> latencies, steps;
  int64_t load_peak_rss = 0, gen_peak_rss = 0;
  bool gen_peak_known = false;
};
using StepCallback = decltype(GenerateParams::on_step);
using GenerateFn = std::function<void(int64_t num_steps, const StepCallback& callback)>;
BenchTimings time_generations(const BenchArgs& a, const GenerateFn& generate);

// The worker's JSON row (the fields bench/compare.sh and tools/bench/bench_table.py read); `extra` is
// merged in (pipeline-specific fields). The transformer's bytes and compile report come from `pipe`.
nlohmann::json worker_row(const BenchArgs& a, const Combo& c, double load_s, const BenchTimings& t,
                          const DiffusionPipeline& pipe, const nlohmann::json& extra = {});

// What the final timed generation `last` leaves in the worker's row: its step cache's report ("cache", see
// bench_cache.h) and, with --quality, its output saved to a.quality_out ("quality_output"). `video`: Wan.
nlohmann::json last_run_fields(const BenchArgs& a, const Combo& c, const GenerateResult& last, bool video);

// Checks --combos (every combination parses), --lora and --size; returns the combinations.
std::vector<std::string> check_bench_args(const BenchArgs& a);
// The parent: every combination checked, then run in its own worker process (this binary, `bench
// --worker`, so that each peak RSS is its own); prints the markdown table or --json.
void run_bench_parent(const BenchArgs& a);

}  // namespace diffq::cli
