// Group offloading from disk on the CPU: step time and peak RSS against no offloading, one mode per
// process (peak RSS is per process). Random-weight FLUX transformer from the builtin flux-small
// config with more blocks (default 16 double + 24 single: 1.1 GB in bf16).
//
//   bench_offload <mode> [--double N] [--single N] [--quant int4] [--res 256] [--steps 4] [--dir D]
//   mode: none | disk (group:1 from disk, prefetch) | disk-sync (no prefetch) | disk:N | leaf
//
// Peak RSS is measured over the denoising steps only (VmHWM reset after setup, so the random
// initialisation of the weights in RAM is not counted); step time is the median of steps 2..K (step
// 1 records the execution order). Prints one line of key=value pairs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "diffq/memory.h"
#include "models/flux/flux_builtin.h"
#include "modules/random_init.h"
#include "offload/group_offloader.h"
#include "offload/os_memory.h"
#include "pipelines/flux_latents.h"
#include "quant/torchao/torchao.h"

using namespace diffq;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_offload none|disk|disk-sync|disk:N|leaf [--double N] [--single N] "
                         "[--quant int4] [--res R] [--steps K] [--dir D] [--drop-cache 1]\n");
    return 2;
  }
  const std::string mode = argv[1];
  int64_t n_double = 16, n_single = 24, res = 256, steps = 4;
  std::string quant, dir = "/tmp/diffq-bench-offload";
  bool drop_cache = false;  // --drop-cache 1: GroupOffloadOptions::drop_page_cache (reads hit the disk)
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--double") n_double = std::stoll(v);
    else if (k == "--single") n_single = std::stoll(v);
    else if (k == "--res") res = std::stoll(v);
    else if (k == "--steps") steps = std::stoll(v);
    else if (k == "--quant") quant = v;
    else if (k == "--dir") dir = v;
    else if (k == "--drop-cache") drop_cache = v == "1";
  }
  try {
    auto b = models::flux::builtin_flux("flux-small");
    b.transformer.num_layers = n_double;
    b.transformer.num_single_layers = n_single;
    models::flux::FluxTransformer2DModel model(b.transformer);
    init_parameters_randn(model, DType::bf16, 0);
    int64_t weight_bytes = 0;
    if (quant == "int4") {
      quant::torchao::Config cfg;
      cfg.kind = quant::torchao::Kind::Int4WeightOnly;
      for (auto& [name, m] : model.named_modules())
        if (auto* lin = dynamic_cast<Linear*>(m); lin && quant::torchao::should_quantize(name, lin->weight.shape(), cfg))
          lin->weight.set(quant::torchao::quantize(lin->weight.dense(), cfg), Residency::host);
    }
    for (const auto& [n, p] : model.named_parameters()) weight_bytes += int64_t(p->nbytes());

    std::shared_ptr<offload::GroupOffloader> e;
    if (mode != "none") {
      offload::GroupOffloadOptions o;
      o.offload_to_disk_path = dir;
      o.config_fingerprint = "bench " + quant;
      o.drop_page_cache = drop_cache;
      if (mode == "leaf") {
        o.offload_type = offload::OffloadType::leaf_level;
        o.use_stream = true;
      } else {
        o.num_blocks_per_group = mode.rfind("disk:", 0) == 0 ? std::stoll(mode.substr(5)) : 1;
        o.use_stream = mode != "disk-sync";
      }
      e = offload::GroupOffloader::apply(model, o);
    }
    return_freed_memory_to_os();

    const auto& c = b.transformer;
    const int64_t h2 = res / 16, w2 = res / 16, n_img = h2 * w2, n_txt = b.text_tokens;
    auto randn = [](Shape s, uint64_t seed) {
      Tensor t = Tensor::empty(s, DType::f32);
      float* d = t.data<float>();
      uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
      for (int64_t i = 0; i < t.numel(); ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d[i] = float(int64_t(x % 2001) - 1000) / 1000.0f;
      }
      return t.to(DType::bf16);
    };
    const Tensor hidden = randn({1, n_img, c.in_channels}, 1), enc = randn({1, n_txt, c.joint_attention_dim}, 2),
                 pooled = randn({1, c.pooled_projection_dim}, 3);
    const Tensor t = Tensor::full({1}, 0.5, DType::bf16), g = Tensor::full({1}, 3.5, DType::f32);
    const Tensor txt_ids = flux::prepare_text_ids(n_txt), img_ids = flux::prepare_latent_image_ids(h2, w2);

    const bool reset = offload::reset_peak_rss();
    reset_peak_memory_stats(Device::cpu());
    const int64_t rss_before = offload::current_rss_bytes();
    std::vector<double> times;
    Tensor out;
    for (int64_t s = 0; s < steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      out = model(hidden, enc, pooled, t, g, txt_ids, img_ids);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> later(times.begin() + (times.size() > 1 ? 1 : 0), times.end());
    std::sort(later.begin(), later.end());
    const double median = later[later.size() / 2];
    double checksum = 0;
    for (float v : out.to_f32_vector()) checksum += v;
    std::printf("mode=%s%s quant=%s weights_mb=%.1f step1_s=%.3f step_s=%.3f rss_before_mb=%.1f peak_rss_mb=%.1f "
                "alloc_peak_mb=%.1f rss_reset=%d checksum=%.6f",
                mode.c_str(), drop_cache ? "+drop-cache" : "", quant.empty() ? "bf16" : quant.c_str(), weight_bytes / 1048576.0, times[0], median,
                rss_before / 1048576.0, offload::peak_rss_bytes() / 1048576.0,
                memory_stats(Device::cpu()).peak_bytes / 1048576.0, int(reset), checksum);
    if (e) {
      const auto s = e->stats();
      std::printf(" groups=%zu max_onloaded_mb=%.1f prefetched=%lld sync=%lld read_mb=%.1f written=%lld reused=%lld",
                  e->groups().size(), s.max_onloaded_bytes / 1048576.0, (long long)s.prefetched_onloads,
                  (long long)s.sync_onloads, s.disk_bytes_read / 1048576.0, (long long)s.files_written,
                  (long long)s.files_reused);
    }
    std::printf("\n");
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_offload: %s\n", ex.what());
    return 1;
  }
  return 0;
}
