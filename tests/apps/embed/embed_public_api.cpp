// An application embedding diffq, built against include/diffq only (tests/CMakeLists.txt gives this target
// include/ and links diffq_lib LINK_ONLY, so no src/ header is reachable): every public header included,
// a builtin pipeline loaded quantized through the front door and run for one step at a small size.
// tests/apps/test_public_headers.cpp runs it and checks what it prints. Usage: embed_public_api <tiny-flux folder>
#include <cmath>
#include <cstdio>
#include <exception>

#include "diffq/checkpoint.h"
#include "diffq/device.h"
#include "diffq/dtype.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/offload.h"
#include "diffq/pipeline.h"
#include "diffq/quantization.h"
#include "diffq/runtime.h"
#include "diffq/system_info.h"
#include "diffq/tensor.h"

int main(int argc, char** argv) {
  try {
    diffq::check(argc == 2, "embed", "usage: embed_public_api <tiny-flux folder>");
    diffq::set_num_threads(1);
    diffq::PipelineOptions o;
    o.dtype = diffq::DType::bf16;
    o.quantization_config_json = diffq::quantization_config_from_shorthand("q8_0", diffq::DType::bf16, {"transformer"});
    auto pipe = diffq::DiffusionPipeline::from_pretrained("builtin:flux-small", o);
    diffq::GenerateParams p = pipe->defaults();
    p.width = p.height = 32;
    p.num_inference_steps = 1;
    p.output_latents_only = true;  // a builtin has no VAE
    int64_t callbacks = 0;
    p.on_step = [&](int64_t, int64_t, float) { return ++callbacks, true; };
    const diffq::GenerateResult r = pipe->generate(p);
    const auto v = r.latents.to_f32_vector();
    bool finite = !v.empty();
    for (float x : v) finite = finite && std::isfinite(x);
    const auto bytes = pipe->component_bytes("transformer");
    std::printf("class %s\n", pipe->class_name().c_str());
    std::printf("latents %lld %lld %lld\n", (long long)r.latents.size(0), (long long)r.latents.size(1),
                (long long)r.latents.size(2));
    std::printf("finite %d steps %lld callbacks %lld\n", int(finite), (long long)r.steps_run, (long long)callbacks);
    std::printf("quantized %s bytes %d dense %d\n", pipe->quantization().at("transformer").c_str(),
                int(bytes.quantized > 0), int(bytes.dense > 0));
    std::printf("offload %s\n", diffq::check_offload_spec("group:2").c_str());
    try {
      diffq::check_offload_spec("turbo");
      std::printf("bad offload accepted\n");
    } catch (const diffq::Error&) {
      std::printf("bad offload refused\n");
    }
    std::printf("inspect %s\n", diffq::inspect_json(argv[1], -1).substr(0, 1).c_str());
    std::printf("version %s\n", diffq::system_info().version.c_str());
    std::printf("peak %d\n", int(diffq::memory_stats(diffq::Device::cpu()).peak_bytes > 0));
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
