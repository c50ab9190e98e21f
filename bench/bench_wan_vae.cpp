// Wan2.1's video VAE decode on the CPU: AutoencoderKLWan with Wan2.1's config (base_dim 96, z_dim 16,
// dim_mult [1, 2, 4, 4], num_res_blocks 2, temperal_downsample [false, true, true]), random weights
// (init_parameters_randn) in the benchmark's dtype, decoding one random latent [1, 16, 1 + (F-1)/4, H/8, W/8]
// into F frames of H x W. The peer is tools/bench/diffusers_wan_vae_bench.py (same config, same sizes);
// bench/compare_wan_vae.sh runs both in alternating rounds.
//
//   bench_wan_vae [--dtype fp32|bf16] [--frames 9] [--height 240] [--width 416] [--repeat 3] [--warmup 1]
//                 [--threads 2] [--tiling 0|1]
//
// Prints one JSON line: {"engine": "diffq", "dtype", "frames", "height", "width", "threads", "tiling",
// "seconds": [...], "median", "min", "peak_rss_gib" (process peak over the timed decodes, weights
// included), "alloc_peak_gib" (the allocator's peak over the same span), "system", "kernels"}.
// For a memory figure run --warmup 0 --repeat 1: the peak then covers loading-free decoding only once.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/threads.h"
#include "core/random.h"
#include "diffq/memory.h"
#include "diffq/system_info.h"
#include "models/vae/autoencoder_kl_wan.h"
#include "modules/random_init.h"
#include "offload/os_memory.h"

using namespace diffq;

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

int usage(const char* msg) {
  std::fprintf(stderr, "bench_wan_vae: %s\n", msg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype_name = "bf16";
  int64_t frames = 9, height = 240, width = 416, repeat = 3, warmup = 1, threads = 2, tiling = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dtype") dtype_name = v;
    else if (k == "--frames") frames = std::stoll(v);
    else if (k == "--height") height = std::stoll(v);
    else if (k == "--width") width = std::stoll(v);
    else if (k == "--repeat") repeat = std::stoll(v);
    else if (k == "--warmup") warmup = std::stoll(v);
    else if (k == "--threads") threads = std::stoll(v);
    else if (k == "--tiling") tiling = std::stoll(v);
    else return usage(("unknown option " + k).c_str());
  }
  if (dtype_name != "fp32" && dtype_name != "bf16") return usage("--dtype must be fp32 or bf16");
  if (frames < 1 || (frames - 1) % 4 != 0) return usage("--frames must be 1 + 4k");
  if (height <= 0 || width <= 0 || height % 8 || width % 8) return usage("--height/--width: positive multiples of 8");
  if (repeat < 1 || warmup < 0) return usage("--repeat >= 1, --warmup >= 0");
  const DType dtype = dtype_name == "bf16" ? DType::bf16 : DType::f32;
  backend::cpu::set_num_threads(int(threads));

  vae::AutoencoderKLWanConfig cfg;  // Diffusers' defaults are Wan2.1's VAE
  vae::AutoencoderKLWan model(cfg);
  init_parameters_randn(model, dtype, 1234);
  model.prepare();
  if (tiling) model.enable_tiling();
  Generator gen(0);
  const int64_t T = 1 + (frames - 1) / 4;
  const Tensor z = randn({1, cfg.z_dim, T, height / 8, width / 8}, gen, dtype);

  for (int64_t i = 0; i < warmup; ++i) (void)model.decode(z);
  offload::reset_peak_rss();
  reset_peak_memory_stats(Device::cpu());
  std::vector<double> seconds;
  for (int64_t i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor video = model.decode(z);  // [1, 3, F, H, W]
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (video.size(2) != frames || video.size(3) != height || video.size(4) != width) {
      std::fprintf(stderr, "bench_wan_vae: decoded %s, expected %lld frames of %lldx%lld\n",
                   shape_str(video.shape()).c_str(), (long long)frames, (long long)height, (long long)width);
      return 1;
    }
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const SystemInfo info = system_info();
  std::string kernels;
  for (const auto& [op, kernel] : info.kernels) kernels += (kernels.empty() ? "" : "; ") + op + ": " + kernel;
  std::string secs;
  for (const double s : seconds) secs += (secs.empty() ? "" : ", ") + std::to_string(s);
  const double gib = double(1 << 30);
  std::printf("{\"engine\": \"diffq\", \"dtype\": \"%s\", \"frames\": %lld, \"height\": %lld, \"width\": %lld, "
              "\"threads\": %lld, \"tiling\": %lld, \"seconds\": [%s], \"median\": %.6f, \"min\": %.6f, "
              "\"peak_rss_gib\": %.4f, \"alloc_peak_gib\": %.4f, \"system\": \"%s\", \"kernels\": \"%s\"}\n",
              dtype_name.c_str(), (long long)frames, (long long)height, (long long)width, (long long)threads,
              (long long)tiling, secs.c_str(), sorted[sorted.size() / 2], sorted.front(),
              double(offload::peak_rss_bytes()) / gib, double(memory_stats(Device::cpu()).peak_bytes) / gib,
              json_escape(summary_line(info)).c_str(), json_escape(kernels).c_str());
  return 0;
}
