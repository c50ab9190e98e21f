// FLUX.1's VAE decode on the CPU: AutoencoderKL with FLUX.1's config (16 latent channels, blocks 128 /
// 256 / 512 / 512, two resnets a block, mid-block attention, no quant convs), random weights
// (init_parameters_randn) in the benchmark's dtype, decoding one random latent of the image size. The
// peer is tools/bench/diffusers_vae_bench.py (same config, same sizes); bench/compare_vae.sh runs both
// in alternating rounds.
//
//   bench_vae_decode [--dtype fp32|bf16] [--size 256] [--repeat 3] [--warmup 1] [--threads 2]
//
// Prints one JSON line: {"engine": "diffq", "dtype", "size", "threads", "seconds": [...], "median",
// "min", "peak_rss_gib", "system", "kernels"} (diffq info's summary line and its kernel of each op family).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/threads.h"
#include "core/random.h"
#include "diffq/system_info.h"
#include "models/vae/autoencoder_kl.h"
#include "modules/random_init.h"
#include "offload/os_memory.h"

using namespace diffq;

namespace {

vae::AutoencoderKLConfig flux_vae_config() {
  vae::AutoencoderKLConfig c;
  c.down_block_types.assign(4, "DownEncoderBlock2D");
  c.up_block_types.assign(4, "UpDecoderBlock2D");
  c.block_out_channels = {128, 256, 512, 512};
  c.layers_per_block = 2;
  c.latent_channels = 16;
  c.norm_num_groups = 32;
  c.sample_size = 1024;
  c.scaling_factor = 0.3611;
  c.shift_factor = 0.1159;
  c.force_upcast = true;
  c.use_quant_conv = false;
  c.use_post_quant_conv = false;
  c.mid_block_add_attention = true;
  return c;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype_name = "bf16";
  int64_t size = 256, repeat = 3, warmup = 1, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dtype") dtype_name = v;
    else if (k == "--size") size = std::stoll(v);
    else if (k == "--repeat") repeat = std::stoll(v);
    else if (k == "--warmup") warmup = std::stoll(v);
    else if (k == "--threads") threads = std::stoll(v);
    else {
      std::fprintf(stderr, "bench_vae_decode: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (dtype_name != "fp32" && dtype_name != "bf16") {
    std::fprintf(stderr, "bench_vae_decode: --dtype must be fp32 or bf16, got '%s'\n", dtype_name.c_str());
    return 2;
  }
  if (size <= 0 || size % 8 != 0 || repeat < 1) {
    std::fprintf(stderr, "bench_vae_decode: --size must be a positive multiple of 8 and --repeat >= 1\n");
    return 2;
  }
  const DType dtype = dtype_name == "bf16" ? DType::bf16 : DType::f32;
  backend::cpu::set_num_threads(int(threads));
  vae::AutoencoderKL model(flux_vae_config());
  init_parameters_randn(model, dtype, 1234);
  Generator gen(0);
  const Tensor z = randn({1, 16, size / 8, size / 8}, gen, dtype);
  for (int64_t i = 0; i < warmup; ++i) (void)model.decode(z);
  offload::reset_peak_rss();
  std::vector<double> seconds;
  for (int64_t i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor img = model.decode(z);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (img.size(2) != size || img.size(3) != size) {
      std::fprintf(stderr, "bench_vae_decode: decoded %lldx%lld, expected %lld\n", (long long)img.size(2),
                   (long long)img.size(3), (long long)size);
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
  std::printf("{\"engine\": \"diffq\", \"dtype\": \"%s\", \"size\": %lld, \"threads\": %lld, \"seconds\": [%s], "
              "\"median\": %.6f, \"min\": %.6f, \"peak_rss_gib\": %.4f, \"system\": \"%s\", \"kernels\": \"%s\"}\n",
              dtype_name.c_str(), (long long)size, (long long)threads, secs.c_str(), sorted[sorted.size() / 2],
              sorted.front(), double(offload::peak_rss_bytes()) / double(1 << 30),
              json_escape(summary_line(info)).c_str(), json_escape(kernels).c_str());
  return 0;
}
