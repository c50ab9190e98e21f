// Where a pipeline placed on an accelerator (PipelineOptions::device) runs each op, checked host-side on
// a fake device (fake_device.h: "cuda:0" backed by host memory and the CPU kernels, every op recorded).
// The placed run must give the CPU run's bits, run every model op on the device, upload the weights
// once at load (none during generation), keep the latents there, and bring back only small per-step
// copies (the host scheduler maths) and the image once. What this cannot show: that the CUDA kernels
// are right (the GPU op tables do that) or fast (the device check).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <map>

#include "common/error_of.h"
#include "diffq/error.h"
#include "diffq/pipeline.h"
#include "diffq/quantization.h"
#include "fake_device.h"
#include "placement_test_util.h"
#include "ops/ops.h"
#include "pipeline_test_util.h"

namespace diffq {
namespace {

using testing::error_of;
const std::filesystem::path kFixtures = "tests/fixtures";

using testing::expect_all_on_device;
using testing::run_on_cpu;
using testing::small_call;

// Bytes uploaded (host -> device) and downloaded by the generation's to_device calls.
std::pair<size_t, size_t> transfer_bytes(const std::vector<testing::FakeOpRecord>& ops) {
  size_t up = 0, down = 0;
  for (const auto& r : ops)
    if (r.kind == ops::OpKind::to_device) (r.out.is_cpu() ? down : up) += r.out_bytes;
  return {up, down};
}


// FLUX (dev, schnell, bfloat16 with true CFG) and Wan (2.1, 2.2's two experts, TI2V's per-token timesteps)
// placed on the fake device: the CPU's bits, every op on the device, the weights uploaded once at load
// (the generation uploads activations-sized tensors only), results handed out on the host, no device
// memory left behind.
struct Variant {
  const char* folder;
  bool video;
  DType dtype;
  double true_cfg;
};
class PlacementVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(PlacementVariants, MatchTheCpuBitForBitWithEveryOpOnTheDevice) {
  const Variant& v = GetParam();
  GenerateParams g = small_call(v.video);
  if (v.true_cfg > 1) {
    g.negative_prompt = "blurry";
    g.true_cfg_scale = v.true_cfg;
  }
  PipelineOptions po;
  po.dtype = v.dtype;
  const GenerateResult cpu = DiffusionPipeline::from_pretrained(kFixtures / v.folder, po)->generate(g);
  testing::FakeDevice dev;
  {
    po.device = Device::cuda(0);
    auto pipe = DiffusionPipeline::from_pretrained(kFixtures / v.folder, po);
    EXPECT_EQ(pipe->device(), Device::cuda(0));
    const size_t weights = transfer_bytes(dev.records()).first;
    EXPECT_GT(weights, size_t(10000)) << v.folder;
    dev.clear_records();
    const GenerateResult r = pipe->generate(g);
    expect_all_on_device(dev.records(), v.folder);
    const auto [up, down] = transfer_bytes(dev.records());
    std::string sizes;
    for (const auto& rec : dev.records())
      if (rec.kind == ops::OpKind::to_device && rec.out.is_cuda()) sizes += " " + std::to_string(rec.out_bytes);
    EXPECT_LT(up, weights / 4) << v.folder << ": the generation uploaded " << up << " bytes (weights " << weights
                               << "):" << sizes;
    // Down: the latents per step for the host scheduler maths, and the image or video once.
    EXPECT_LT(down, size_t(512) * 1024) << v.folder << ": " << down;
    const Tensor& a = v.video ? r.videos_u8 : r.images_u8;
    const Tensor& b = v.video ? cpu.videos_u8 : cpu.images_u8;
    ASSERT_TRUE(a.defined()) << v.folder;
    EXPECT_TRUE(a.device().is_cpu() && r.latents.device().is_cpu());
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0) << v.folder;
    EXPECT_EQ(testing::psnr_u8(a, b), std::numeric_limits<double>::infinity()) << v.folder;
  }
  EXPECT_EQ(dev.live_bytes(), 0) << v.folder << ": device memory still held after the pipeline is gone";
}

INSTANTIATE_TEST_SUITE_P(Pipelines, PlacementVariants,
                         ::testing::Values(Variant{"tiny-flux", false, DType::f32, 1.0},
                                           Variant{"tiny-wan", true, DType::f32, 1.0},
                                           Variant{"tiny-flux-schnell", false, DType::f32, 1.0},
                                           Variant{"tiny-flux", false, DType::bf16, 2.0},
                                           Variant{"tiny-wan22", true, DType::f32, 1.0},
                                           Variant{"tiny-wan-ti2v", true, DType::bf16, 1.0}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.folder) + "_" + std::string(dtype_name(info.param.dtype));
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(PipelinePlacement, ModelOffloadOntoTheDeviceMatchesTheCpu) {
  // Diffusers' pipe.to("cuda") then enable_model_cpu_offload(): the weights go home and each component
  // is onloaded to the execution device when called.
  const auto folder = kFixtures / "tiny-flux";
  const GenerateParams g = small_call(false);
  const GenerateResult cpu = run_on_cpu(folder, g);
  testing::FakeDevice dev;
  {
    PipelineOptions po;
    po.dtype = DType::f32;
    po.device = Device::cuda(0);
    auto pipe = DiffusionPipeline::from_pretrained(folder, po);
    pipe->enable_offload("model");
    dev.clear_records();
    const GenerateResult r = pipe->generate(g);
    expect_all_on_device(dev.records(), "flux + model offload");
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0);
    EXPECT_EQ(testing::psnr_u8(r.images_u8, cpu.images_u8), std::numeric_limits<double>::infinity());
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(PipelinePlacement, QuantizedSchemeWithoutADeviceKernelIsAClearErrorAtLoad) {
  testing::FakeDevice dev;
  PipelineOptions po;
  po.dtype = DType::f32;
  po.device = Device::cuda(0);
  po.quantization_config_json = quantization_config_from_shorthand("int8wo", DType::f32, {"transformer"});
  const std::string e = error_of([&] { DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po); });
  EXPECT_NE(e.find("has no kernel for cuda:0"), std::string::npos) << e;
  EXPECT_NE(e.find("transformer."), std::string::npos) << e;
  EXPECT_NE(e.find("scheme"), std::string::npos) << e;
  EXPECT_EQ(dev.live_bytes(), 0) << "nothing may be uploaded before the refusal";
}

TEST(PipelinePlacement, AnOpWithoutADeviceKernelIsAClearErrorBeforeLoading) {
  testing::FakeDevice dev;
  // Take one kernel away from the fake device, as a backend lacking it would.
  const ops::KernelFn conv = ops::find_kernel(ops::OpKind::conv2d, DeviceKind::cuda);
  ops::register_kernel(ops::OpKind::conv2d, DeviceKind::cuda, nullptr);
  PipelineOptions po;
  po.dtype = DType::f32;
  po.device = Device::cuda(0);
  const std::string e = error_of([&] { DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po); });
  ops::register_kernel(ops::OpKind::conv2d, DeviceKind::cuda, conv);
  EXPECT_NE(e.find("op conv2d has no kernel for cuda:0"), std::string::npos) << e;
  EXPECT_EQ(dev.live_bytes(), 0);
}

// The CUDA kernels' own limits (backend/cuda_kernel_rules.h) hold on the fake device: the variants above
// run every op of the tiny pipelines under them, and a call the GPU would refuse fails here with the
// reason (on the H200 Wan stopped at an int64 -> float32 cast the kernel lacked; FLUX's VAE at a 512-wide
// attention head: both would now have failed in CI first).
TEST(PipelinePlacement, ACallTheCudaKernelsRefuseFailsAsOnTheGpu) {
  testing::FakeDevice dev;
  {
    const Tensor ints = Tensor::full({2, 3}, 2.0, DType::i64, Device::cuda(0));
    // Casts with integer dtypes run (Wan's positions and timesteps); a float8 cast, which the CPU makes,
    // does not.
    EXPECT_EQ(ints.to(DType::f32).to(Device::cpu()).to_f32_vector(), std::vector<float>(6, 2.0f));
    std::string e = error_of([&] { ints.to(DType::f8_e4m3fn); });
    EXPECT_NE(e.find("[cast] no kernel for this call on cuda:0: a cast int64 -> float8_e4m3fn"), std::string::npos) << e;
    EXPECT_NO_THROW(ints.to(Device::cpu()).to(DType::f8_e4m3fn));
    // A 512-wide head runs unmasked (the VAE's attention), not with a mask.
    const Tensor q = Tensor::full({1, 1, 4, 512}, 0.5, DType::f32, Device::cuda(0));
    EXPECT_EQ(ops::sdpa(q, q, q).shape(), (Shape{1, 1, 4, 512}));
    const Tensor mask = Tensor::full({4, 4}, 0.0, DType::f32, Device::cuda(0));
    e = error_of([&] { ops::sdpa(q, q, q, mask); });
    EXPECT_NE(e.find("masked attention takes head dims up to 256"), std::string::npos) << e;
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

// Compile on the device (the fake device's compile backend offers what CUDA's does: elementwise fusion):
// the fused nodes run on the device, the other passes (norm / GEMM prologues, RoPE fusion, concat
// elision, memory planning, autotune) decline and compile_report says which and why; everything else
// runs op by op through the device's kernels: every op on the device, the CPU's bits.
TEST(PipelinePlacement, CompileOnTheDeviceFusesElementwiseAndDeclinesTheRest) {
  const auto folder = kFixtures / "tiny-flux";
  const GenerateParams g = small_call(false);
  const GenerateResult cpu = run_on_cpu(folder, g);
  testing::FakeDevice dev;
  for (const char* mode : {"full", "regional"}) {
    PipelineOptions po;
    po.dtype = DType::f32;
    po.device = Device::cuda(0);
    auto pipe = DiffusionPipeline::from_pretrained(folder, po);
    pipe->compile(mode, /*autotune=*/true);
    dev.clear_records();
    const GenerateResult r = pipe->generate(g);
    expect_all_on_device(dev.records(), mode);
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0) << mode;
    EXPECT_EQ(testing::psnr_u8(r.images_u8, cpu.images_u8), std::numeric_limits<double>::infinity()) << mode;
    const auto rep = pipe->compile_report();
    EXPECT_TRUE(rep.compiled) << mode;
    EXPECT_GT(rep.graphs, 0) << mode;
    EXPECT_GT(rep.cache_hits, 0) << mode;  // the graphs ran (no eager fallback)
    EXPECT_EQ(rep.eager_fallbacks, 0) << mode;
    EXPECT_EQ(rep.declined_passes, (std::vector<std::string>{"fuse_norm", "fuse_epilogue", "fuse_dequant", "fuse_rope",
                                                             "elide_concat", "plan", "inplace", "autotune"}))
        << mode;
    EXPECT_NE(rep.declined_why.find("cuda:0's compile backend does not offer them"), std::string::npos) << rep.declined_why;
    EXPECT_EQ(rep.autotune_nodes, 0) << mode;
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(PipelinePlacement, NoGpuIsAClearErrorAtLoad) {
  // The real device interface: in a CPU-only build there is no CUDA backend; in a CUDA build on a
  // machine without a GPU there is no device. On a machine with a GPU this test has nothing to show.
  std::string why;
  const backend::DeviceInterface* cuda = backend::device_interface(DeviceKind::cuda);
  if (cuda && cuda->device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  PipelineOptions po;
  po.dtype = DType::f32;
  po.device = Device::cuda(0);
  const std::string e = error_of([&] { DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po); });
  EXPECT_NE(e.find(cuda ? "no CUDA device present" : "has no CUDA backend"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda:0"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { check_execution_device(Device::cuda(3)); }).find("cuda:3"), std::string::npos);
}

}  // namespace
}  // namespace diffq
