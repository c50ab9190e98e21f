// bitsandbytes 4-bit (NF4 / FP4, double quant) against bitsandbytes 0.50.2 on the CPU
// (tests/fixtures/quant/bnb/cases.*, tools/reference/make_quant_bnb.py): quantize and dequantize bit
// for bit, Linear4bit's forward, the SIMD row dequantizer against its scalar reference, the fused
// linear against dequantize + ops::linear, and the errors.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/quant/bnb_4bit_dequant.h"
#include "backend/cpu/quant/dequant_rows.h"
#include "backend/cpu/threads.h"
#include "core/random.h"
#include "diffq/error.h"
#include "ops/ops.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_4bit_dequant.h"
#include "test_bnb_common.h"

namespace {

using diffq::DType;
using diffq::Shape;
using diffq::Tensor;
using diffq::quant::Bnb4bitOptions;
using diffq::quant::Bnb4bitState;
using diffq::quant::Bnb4bitWeight;
namespace bnb = diffq::quant::bnb;
using bnbtest::same_bytes;

struct Fixture {
  diffq::io::StateDict t;
  nlohmann::json j;
};

const Fixture& fx() {
  static const Fixture f = [] {
    Fixture r;
    const auto dir = bnbtest::fixtures() / "quant" / "bnb";
    r.t = diffq::io::SafetensorsFile::open(dir / "cases.safetensors").tensors();
    r.j = bnbtest::read_json(dir / "cases.json");
    return r;
  }();
  return f;
}

const Tensor& T(const std::string& k) {
  const auto it = fx().t.find(k);
  if (it == fx().t.end()) throw std::runtime_error("fixture has no " + k);
  return it->second;
}

int lanes() { return fx().j["torch_sum_lanes"].get<int>(); }

// A weight built from bitsandbytes' own tensors of case `name`.
std::shared_ptr<Bnb4bitWeight> from_fixture(const std::string& name, const nlohmann::json& c, const Shape& shape,
                                            DType compute = DType::f32) {
  Bnb4bitState st;
  st.quant_type = bnb::parse_quant_type(c["quant_type"].get<std::string>());
  st.blocksize = c["blocksize"].get<int64_t>();
  st.dtype = diffq::parse_dtype(c["dtype"].get<std::string>());
  st.shape = shape;
  st.absmax = T(name + ".absmax");
  if (c["double_quant"].get<bool>()) {
    st.nested = true;
    st.nested_absmax = T(name + ".nested_absmax");
    st.nested_quant_map = T("nested_quant_map");
    st.nested_offset = T(name + ".offset").to_f32_vector()[0];
  }
  return std::make_shared<Bnb4bitWeight>(T(name + ".packed"), st, compute, name);
}

TEST(Bnb4bit, TablesEqualBitsandbytes) {
  for (auto qt : {bnb::QuantType::nf4, bnb::QuantType::fp4}) {
    const auto& c = bnb::code_table(qt);
    const Tensor ours = Tensor::from_vector(std::vector<float>(c.begin(), c.end()), {16});
    EXPECT_TRUE(same_bytes(ours, T("quant_map." + std::string(bnb::quant_type_name(qt)))));
  }
  const auto& d = bnb::dynamic_map();
  EXPECT_TRUE(same_bytes(Tensor::from_vector(std::vector<float>(d.begin(), d.end()), {256}), T("nested_quant_map")));
}

TEST(Bnb4bit, QuantizeIsBitExact) {
  int n = 0;
  for (const auto& [name, c] : fx().j["cases"].items()) {
    if (c["kind"] != "4bit") continue;
    SCOPED_TRACE(name);
    const DType dt = diffq::parse_dtype(c["dtype"].get<std::string>());
    const Tensor w = T("in." + c["input"].get<std::string>()).to(dt);
    Bnb4bitOptions o;
    o.quant_type = bnb::parse_quant_type(c["quant_type"].get<std::string>());
    o.blocksize = c["blocksize"].get<int64_t>();
    o.double_quant = c["double_quant"].get<bool>();
    o.quant_storage = diffq::parse_dtype(c["quant_storage"].get<std::string>());
    o.sum_lanes = lanes();
    const auto q = Bnb4bitWeight::quantize(w, o, name);
    EXPECT_TRUE(same_bytes(q->packed(), T(name + ".packed")));
    EXPECT_EQ(q->packed().shape(), T(name + ".packed").shape());
    EXPECT_TRUE(same_bytes(q->state().absmax, T(name + ".absmax")));
    if (o.double_quant) {
      EXPECT_TRUE(same_bytes(q->state().nested_absmax, T(name + ".nested_absmax")));
      EXPECT_TRUE(same_bytes(Tensor::from_vector({q->state().nested_offset}, {1}), T(name + ".offset")));
      EXPECT_EQ(double(q->state().nested_offset), c["quant_state"]["nested_offset"].get<double>());
    }
    EXPECT_EQ(q->state().shape, (diffq::Shape{w.shape()}));
    ++n;
  }
  EXPECT_GE(n, 60);
}

TEST(Bnb4bit, DequantizeIsBitExact) {
  int n = 0;
  for (const auto& [name, c] : fx().j["cases"].items()) {
    if (c["kind"] != "4bit") continue;
    SCOPED_TRACE(name);
    const DType dt = diffq::parse_dtype(c["dtype"].get<std::string>());
    const Tensor& in = T("in." + c["input"].get<std::string>());
    const auto w = from_fixture(name, c, in.shape());
    const Tensor deq = w->dequantize(dt);
    EXPECT_EQ(bnbtest::sha256(deq), c["deq_sha256"].get<std::string>());
    if (fx().t.count(name + ".deq")) EXPECT_TRUE(same_bytes(deq, T(name + ".deq")));
    // The reference rows and the CPU's SIMD rows equal the dequantization.
    std::vector<float> rows(static_cast<size_t>(in.numel())), simd(rows.size());
    w->dequant_rows(0, in.shape()[0], rows.data());
    EXPECT_TRUE(same_bytes(Tensor::from_vector(rows, in.shape()), w->dequantize(DType::f32)));
    diffq::backend::cpu::bnb_4bit_dequant_rows(*w, 0, in.shape()[0], simd.data(), DType::f32);
    EXPECT_EQ(rows, simd);
    ++n;
  }
  EXPECT_GE(n, 60);
}

TEST(Bnb4bit, LinearMatchesLinear4bitForward) {
  int n = 0;
  for (const auto& [name, c] : fx().j["cases"].items()) {
    if (c["kind"] != "forward4") continue;
    SCOPED_TRACE(name);
    const DType compute = diffq::parse_dtype(c["compute_dtype"].get<std::string>());
    const auto w = from_fixture(name, c, T(name + ".w").shape(), compute);
    // The weight bitsandbytes built is ours too.
    Bnb4bitOptions o;
    o.quant_type = w->state().quant_type;
    o.double_quant = w->state().nested;
    o.sum_lanes = lanes();
    const auto q = Bnb4bitWeight::quantize(T(name + ".w").to(w->state().dtype), o);
    EXPECT_TRUE(same_bytes(q->packed(), T(name + ".packed")));
    const Tensor& x = T(name + ".x");
    const Tensor y = w->linear(x, T(name + ".bias"));
    const Tensor& ref = T(name + ".y");
    EXPECT_EQ(y.dtype(), ref.dtype());
    EXPECT_EQ(y.shape(), ref.shape());
    // float32 accumulation order only: 1e-6 relative in float32; at most one rounding step of a
    // 16-bit result otherwise.
    const bool f32_out = ref.dtype() == DType::f32 && compute == DType::f32;
    const double tol = f32_out ? 2e-6 : (compute == DType::bf16 || ref.dtype() == DType::bf16 ? 8e-3 : 1e-3);
    EXPECT_LE(bnbtest::max_rel(y, ref), tol);
    ++n;
  }
  EXPECT_EQ(n, 6);
}

TEST(Bnb4bit, SimdRowDequantizerEqualsScalar) {
  std::mt19937 rng(7);
  for (auto qt : {bnb::QuantType::nf4, bnb::QuantType::fp4}) {
    std::array<float, 512> pairs{};
    bnb::build_pair_table(bnb::code_table(qt).data(), pairs.data());
    for (int64_t bs : {32, 64, 128, 4096}) {
      const int64_t n = 3 * bs + 37;
      const int64_t nbytes = (n + 1) / 2;
      std::vector<uint8_t> packed(static_cast<size_t>(nbytes));
      for (auto& b : packed) b = uint8_t(rng());
      const int64_t nb = (n + bs - 1) / bs;
      std::vector<float> absmax(static_cast<size_t>(nb));
      for (auto& a : absmax) a = std::uniform_real_distribution<float>(0.0f, 3.0f)(rng);
      for (auto [e0, e1] : {std::pair<int64_t, int64_t>{0, n}, {1, n}, {0, n - 1}, {bs - 3, 2 * bs + 5},
                            {bs, bs + 1}, {5, 6}, {n - 9, n}, {2 * bs - 1, 3 * bs + 1}}) {
        const int64_t b0 = e0 / bs;
        std::vector<float> a(static_cast<size_t>(e1 - e0)), b(size_t(e1 - e0));
        diffq::backend::cpu::dequant_4bit_range(packed.data(), nbytes, pairs.data(), absmax.data() + b0, b0, bs, e0, e1, a.data());
        bnb::dequant_4bit_range_scalar(packed.data(), nbytes, pairs.data(), absmax.data() + b0, b0, bs, e0, e1,
                                       b.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "bs " << bs << " [" << e0 << ", " << e1 << ")";
      }
    }
  }
}

TEST(Bnb4bit, FusedLinearEqualsDequantizePlusDenseLinear) {
  diffq::Generator g(11);
  for (auto qt : {bnb::QuantType::nf4, bnb::QuantType::fp4})
    for (bool dq : {false, true})
      for (auto [M, N, K] : {std::tuple{1, 7, 65}, {5, 33, 128}, {17, 300, 190}}) {
        Bnb4bitOptions o;
        o.quant_type = qt;
        o.double_quant = dq;
        o.sum_lanes = 8;
        const Tensor w = diffq::randn_tensor({N, K}, g, DType::f32);
        const auto q = Bnb4bitWeight::quantize(w.to(DType::bf16), o);
        const Tensor b = diffq::randn_tensor({N}, g, DType::f32);
        for (DType dt : {DType::f32, DType::bf16}) {
          q->set_compute_dtype(dt);
          const Tensor x = diffq::randn_tensor({2, M, K}, g, DType::f32).to(dt);
          const Tensor y = q->linear(x, b.to(dt));
          const Tensor ref = diffq::ops::linear(x.to(DType::f32), q->dequantize(dt).to(DType::f32), b.to(dt).to(DType::f32));
          EXPECT_EQ(y.dtype(), dt);
          EXPECT_LE(bnbtest::max_rel(y, ref), dt == DType::f32 ? 1e-5 : 8e-3) << M << "x" << N << "x" << K;
        }
      }
}

TEST(Bnb4bit, QuantStateJsonIsBitsandbytesBytes) {
  // The blob bitsandbytes wrote for a double-quant weight in the Diffusers fixture, rebuilt from ours.
  const auto dir = bnbtest::fixtures() / "quant" / "bnb" / "diffusers" / "nf4_dq_bf16";
  const auto sd = diffq::io::SafetensorsFile::open(dir / "diffusion_pytorch_model.safetensors").tensors();
  const auto w = Bnb4bitWeight::load(sd, "x_embedder.weight");
  const Tensor& blob = sd.at("x_embedder.weight.quant_state.bitsandbytes__nf4");
  EXPECT_EQ(w->quant_state_json(), std::string(static_cast<const char*>(blob.data_ptr()), size_t(blob.numel())));
  EXPECT_EQ(bnb::python_float_repr(0.40234375), "0.40234375");
  EXPECT_EQ(bnb::python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(bnb::python_float_repr(-0.0001), "-0.0001");
  EXPECT_EQ(bnb::python_float_repr(double(0.1f)), "0.10000000149011612");
  EXPECT_EQ(bnb::python_float_repr(1e16), "1e+16");
  EXPECT_EQ(bnb::python_float_repr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(bnb::python_float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(bnb::python_float_repr(3.0), "3.0");
}

TEST(Bnb4bit, TorchSumMatchesSmallCases) {
  // Exact small sums, and the tail + lane order (values chosen so any other order rounds differently).
  std::vector<float> v = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(bnb::torch_sum_f32(v.data(), 3, 8), 6.0f);
  std::vector<float> big(100, 0.1f);
  float naive = 0;
  for (float f : big) naive += f;
  const float s = bnb::torch_sum_f32(big.data(), 100, 8);
  EXPECT_NEAR(s, 10.0f, 1e-5);
  (void)naive;
}

TEST(Bnb4bit, Errors) {
  const Tensor w = Tensor::zeros({4, 64}, DType::f32);
  Bnb4bitOptions o;
  o.blocksize = 48;
  EXPECT_THROW(Bnb4bitWeight::quantize(w, o), diffq::Error);
  o.blocksize = 8192;
  EXPECT_THROW(Bnb4bitWeight::quantize(w, o), diffq::Error);
  o.blocksize = 64;
  EXPECT_THROW(Bnb4bitWeight::quantize(Tensor::zeros({4, 64}, DType::i32), o), diffq::Error);
  EXPECT_THROW(Bnb4bitWeight::quantize(Tensor::zeros({256}, DType::f32), o), diffq::Error);
  EXPECT_THROW(bnb::parse_quant_type("int4"), diffq::Error);
  try {
    bnb::parse_quant_type("af4");
    FAIL();
  } catch (const diffq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("quant_type must be 'nf4' or 'fp4', got 'af4'"), std::string::npos);
  }

  // State dicts: a valid one, then damaged copies.
  diffq::Generator g(1);
  const auto q = Bnb4bitWeight::quantize(diffq::randn_tensor({6, 70}, g, DType::f32),
                                         Bnb4bitOptions{bnb::QuantType::nf4, 64, true, DType::u8, 8});
  diffq::io::NamedTensors nt;
  q->save(nt, "blk.proj.weight");
  diffq::io::StateDict sd(nt.begin(), nt.end());
  const auto ok = Bnb4bitWeight::load(sd, "blk.proj.weight");
  EXPECT_TRUE(same_bytes(ok->dequantize(DType::f32), q->dequantize(DType::f32)));

  auto expect_error = [](const diffq::io::StateDict& s, const std::string& needle) {
    try {
      Bnb4bitWeight::load(s, "blk.proj.weight");
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const diffq::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    auto s = sd;
    s.erase("blk.proj.weight.quant_state.bitsandbytes__nf4");
    expect_error(s, "Supplied state dict for blk.proj.weight does not contain `bitsandbytes__*`");
  }
  {
    auto s = sd;
    s["blk.proj.weight"] = Tensor::zeros({209, 1}, DType::u8);  // 6*70/2 = 210 bytes expected
    expect_error(s, "blk.proj.weight: 4-bit weight of shape [6, 70] needs 210 bytes");
  }
  {
    auto s = sd;
    s.erase("blk.proj.weight.absmax");
    expect_error(s, "blk.proj.weight.absmax");
  }
  {
    auto s = sd;
    s["blk.proj.weight.absmax"] = Tensor::zeros({6}, DType::u8);  // 7 blocks of 64
    expect_error(s, "blk.proj.weight.absmax must be [7]");
  }
  {
    auto s = sd;
    s.erase("blk.proj.weight.nested_quant_map");
    expect_error(s, "blk.proj.weight.nested_quant_map");
  }
  {
    auto s = sd;
    const std::string bad = "{\"quant_type\": \"nf4\", \"blocksize\": 48, \"dtype\": \"float32\", \"shape\": [6, 70]}";
    Tensor blob = Tensor::empty({int64_t(bad.size())}, DType::u8);
    std::memcpy(blob.data_ptr(), bad.data(), bad.size());
    s["blk.proj.weight.quant_state.bitsandbytes__nf4"] = blob;
    expect_error(s, "invalid blocksize 48");
  }
  // A linear with the wrong in_features names the weight.
  EXPECT_THROW(ok->linear(Tensor::zeros({2, 71}, DType::f32), {}), diffq::Error);
}

TEST(Bnb4bit, QuantStorageViewsTheSameBytes) {
  const std::string name = "q4.aligned.nf4.bfloat16.bs64.dq0.storage_bf16";
  const auto& c = fx().j["cases"][name];
  const auto w = from_fixture(name, c, T("in.aligned").shape());
  EXPECT_EQ(w->packed().dtype(), DType::bf16);
  EXPECT_EQ(bnbtest::sha256(w->dequantize(DType::bf16)), c["deq_sha256"].get<std::string>());
}

}  // namespace
