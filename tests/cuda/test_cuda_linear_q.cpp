// linear_q on CUDA (src/backend/cuda/quant): a quantized weight moved to the GPU computes its linear there
// with its scheme's CUDA kernel, equal to the CPU's kernel on the same packed weight within the op table's
// tolerance for the dtype; schemes without a CUDA kernel have none registered (placement refuses them at
// load, tests/pipelines/test_pipeline_placement.cpp).
#include <cmath>

#include "gpu_test.h"
#include "modules/parameter.h"
#include "ops/linear_q.h"
#include "quant/torchao/torchao.h"

using namespace diffq;
using namespace diffq::cudatest;
namespace tao = diffq::quant::torchao;

namespace {

std::shared_ptr<QuantizedWeight> int8wo(const Tensor& w, const char* granularity) {
  nlohmann::json data = nlohmann::json::object();
  if (granularity) data["granularity"] = {{"_type", granularity}, {"_version", 2}, {"_data", nlohmann::json::object()}};
  return tao::quantize(w, tao::Config::from_json({{"_type", "Int8WeightOnlyConfig"}, {"_version", 2}, {"_data", data}}));
}

double rel_err(const Tensor& got, const Tensor& want) {
  const std::vector<float> a = got.to_f32_vector(), b = want.to_f32_vector();
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace

TEST(LinearQOnCuda, KernelsRegisteredPerScheme) {  // needs no GPU
  for (const char* s : {"torchao_int8wo", "torchao_float8wo"})
    EXPECT_NE(ops::find_linear_q_kernel(DeviceKind::cuda, s), nullptr) << s;
  for (const char* s : {"bnb_nf4", "torchao_int8dq", "torchao_float8dq", "gguf_q4_0"})
    EXPECT_EQ(ops::find_linear_q_kernel(DeviceKind::cuda, s), nullptr) << s << ": no CUDA kernel yet (issue 37)";
}

TEST(LinearQOnCuda, TorchaoInt8WeightOnlyMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (const char* g : {"PerRow", "PerTensor"}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + g);
      const Tensor w = random_values({96, 256}, dt, 1), x = random_values({7, 256}, dt, 2),
                   b = random_values({96}, dt, 3);
      const auto on_cpu = int8wo(w, g), on_gpu = int8wo(w, g);
      Parameter p({96, 256});
      p.set(on_gpu, Residency::host);
      p.move_to(gpu());
      ASSERT_EQ(on_gpu->storage_tensors()[0].device(), gpu());
      const Tensor y = p.quantized().linear(x.to(gpu()), b.to(gpu()));
      ASSERT_EQ(y.device(), gpu());
      ASSERT_EQ(y.dtype(), dt);
      const Tensor want = on_cpu->linear(x, b);
      EXPECT_LE(rel_err(y.to(Device::cpu()), want), dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1e-2 : 2e-3);
    }
  }
}

TEST(LinearQOnCuda, TorchaoFloat8WeightOnlyMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const char* g : {"PerRow", "PerTensor"}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + g);
      const Tensor w = random_values({80, 192}, dt, 4), x = random_values({9, 192}, dt, 5);
      nlohmann::json data = {{"granularity", {{"_type", g}, {"_version", 2}, {"_data", nlohmann::json::object()}}}};
      const auto cfg = tao::Config::from_json({{"_type", "Float8WeightOnlyConfig"}, {"_version", 2}, {"_data", data}});
      const auto on_cpu = tao::quantize(w, cfg), on_gpu = tao::quantize(w, cfg);
      ASSERT_EQ(on_gpu->scheme(), "torchao_float8wo");
      Parameter p({80, 192});
      p.set(on_gpu, Residency::host);
      p.move_to(gpu());
      const Tensor y = p.quantized().linear(x.to(gpu()), Tensor());
      ASSERT_EQ(y.dtype(), dt);
      EXPECT_LE(rel_err(y.to(Device::cpu()), on_cpu->linear(x, Tensor())), dt == DType::f32 ? 1e-5 : 1e-2);
    }
  }
}
