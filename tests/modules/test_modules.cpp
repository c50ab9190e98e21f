#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "diffq/error.h"
#include "modules/layers.h"
#include "modules/state_dict.h"
#include "ops/ops.h"
#include "ops/trace.h"

using namespace diffq;

namespace {

Tensor randn(const Shape& s, uint32_t seed, DType dt = DType::f32) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> v(size_t(shape_numel(s)));
  for (float& x : v) x = n(g) * 0.5f;
  return Tensor::from_vector(v, s, dt);
}

// A small transformer-ish block: LayerNorm -> q/k/v -> attention -> out, residual, then RMSNorm MLP.
class TinyBlock : public Module {
 public:
  TinyBlock(int64_t dim, int64_t heads)
      : Module("TinyBlock"), heads(heads), norm1(dim, 1e-6, false), to_q(dim, dim), to_k(dim, dim),
        to_v(dim, dim), to_out(dim, dim), norm2(dim, 1e-6), fc1(dim, 2 * dim), fc2(2 * dim, dim) {
    register_module("norm1", norm1);
    register_module("to_q", to_q);
    register_module("to_k", to_k);
    register_module("to_v", to_v);
    register_module("to_out", to_out);
    register_module("norm2", norm2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x) {  // x [B, S, D]
    const int64_t B = x.size(0), S = x.size(1), D = x.size(2), hd = D / heads;
    Tensor h = norm1(x);                                                       // [B, S, D]
    auto split = [&](const Tensor& t) { return t.view({B, S, heads, hd}).transpose(1, 2); };
    Tensor a = ops::sdpa(split(to_q(h)), split(to_k(h)), split(to_v(h)));     // [B, H, S, hd]
    x_attn = ops::add(x, to_out(a.transpose(1, 2).reshape({B, S, D})));       // [B, S, D]
    Tensor m = fc2(ops::gelu(fc1(norm2(x_attn)), true));                      // [B, S, D]
    return ops::add(x_attn, m);
  }
  int64_t heads;
  LayerNorm norm1;
  Linear to_q, to_k, to_v, to_out;
  RMSNorm norm2;
  Linear fc1, fc2;
  Tensor x_attn;
};

StateDict random_state(Module& m, uint32_t seed, DType dt = DType::f32) {
  StateDict sd;
  for (auto& [name, p] : m.named_parameters()) sd[name] = randn(p->shape(), seed++, dt);
  return sd;
}

double max_rel(const Tensor& a, const Tensor& b) {
  const auto x = a.to_f64_vector(), y = b.to_f64_vector();
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(y[i]));
  }
  return num / den;
}

}  // namespace

TEST(Module, ParameterNamesAreStateDictKeys) {
  TinyBlock b(8, 2);
  std::vector<std::string> names;
  for (auto& [n, p] : b.named_parameters()) names.push_back(n);
  const std::vector<std::string> expected = {
      "to_q.weight", "to_q.bias", "to_k.weight", "to_k.bias", "to_v.weight", "to_v.bias",
      "to_out.weight", "to_out.bias", "norm2.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  EXPECT_EQ(names, expected);  // norm1 has no affine parameters
  EXPECT_EQ(b.find_module("fc1"), &b.fc1);
  EXPECT_EQ(b.num_parameters(), 4 * (64 + 8) + 8 + (8 * 16 + 16) + (16 * 8 + 8));
}

// Parameter::name (used in error messages) is the full dotted path from the root; listing a submodule's
// parameters (offloading and compile do) must not cut it down to the submodule-relative path.
TEST(Module, SubmoduleListingKeepsFullParameterNames) {
  TinyBlock b(8, 2);
  (void)b.named_parameters();
  EXPECT_EQ(b.fc1.weight.name, "fc1.weight");
  for (auto& [n, p] : b.fc1.named_parameters()) EXPECT_EQ(p->name, "fc1." + n);
  EXPECT_EQ(b.fc1.weight.name, "fc1.weight");
}

TEST(Module, TraceReplayMatchesEager) {
  TinyBlock b(16, 2);
  load_state_dict(b, random_state(b, 1));
  const Tensor x = randn({2, 5, 16}, 99);
  const Tensor eager = b(x);

  ops::Graph g;
  {
    ops::Trace t;
    Tensor in = t.input({2, 5, 16}, DType::f32);
    Tensor out = b(in);
    EXPECT_TRUE(out.is_symbolic());
    g = t.finish({out});
  }
  EXPECT_GE(g.nodes.size(), 10u);  // linears, norms, sdpa, gelu, adds, copies
  const Tensor replay = g.run({x})[0];
  EXPECT_EQ(replay.shape(), eager.shape());
  EXPECT_LE(max_rel(replay, eager), 1e-6);

  // The graph captured the parameters' Storage objects: new weights are seen without re-tracing.
  const Tensor w2 = randn({16, 16}, 1234);
  std::memcpy(b.to_out.weight.dense().data_ptr(), w2.data_ptr(), w2.nbytes());
  EXPECT_LE(max_rel(g.run({x})[0], b(x)), 1e-6);
  EXPECT_GT(max_rel(g.run({x})[0], eager), 1e-4);
}

TEST(Module, SymbolicTensorOutsideTraceIsAnError) {
  Tensor leaked;
  {
    ops::Trace t;
    leaked = ops::silu(t.input({4}, DType::f32));
    t.finish({leaked});
  }
  EXPECT_THROW(ops::silu(leaked), Error);
}

namespace {
struct CountingHook : ModuleHook {
  std::vector<std::string>* log;
  std::string tag;
  void pre_forward(Module& m) override { log->push_back("pre " + tag + " " + m.type_name()); }
  void post_forward(Module& m) override { log->push_back("post " + tag + " " + m.type_name()); }
};
}  // namespace

TEST(Module, HooksRunAroundEveryCall) {
  TinyBlock b(8, 2);
  load_state_dict(b, random_state(b, 3));
  std::vector<std::string> log;
  auto h1 = std::make_shared<CountingHook>();
  h1->log = &log;
  h1->tag = "a";
  auto h2 = std::make_shared<CountingHook>();
  h2->log = &log;
  h2->tag = "b";
  b.fc1.add_hook(h1);
  b.fc1.add_hook(h2);
  b(randn({1, 3, 8}, 5));
  EXPECT_EQ(log, (std::vector<std::string>{"pre a Linear", "pre b Linear", "post b Linear", "post a Linear"}));
  b.fc1.remove_hook(h1.get());
  log.clear();
  b(randn({1, 3, 8}, 5));
  EXPECT_EQ(log.size(), 2u);
}

TEST(StateDict, StrictErrorListsMissingAndUnexpected) {
  TinyBlock b(8, 2);
  StateDict sd = random_state(b, 1);
  sd.erase("fc2.bias");
  sd["fc3.weight"] = randn({2, 2}, 1);
  try {
    load_state_dict(b, sd, {.source = "model.safetensors"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[load]"), std::string::npos) << m;
    EXPECT_NE(m.find("missing keys (1): fc2.bias"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected keys (1): fc3.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
  }
  // Non-strict reports instead of throwing.
  LoadOptions o;
  o.strict = false;
  const LoadReport r = load_state_dict(b, sd, o);
  EXPECT_EQ(r.missing, std::vector<std::string>{"fc2.bias"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"fc3.weight"});
}

TEST(StateDict, ShapeMismatchNamesTheKey) {
  Linear l(4, 3);
  StateDict sd{{"weight", randn({3, 5}, 1)}, {"bias", randn({3}, 2)}};
  try {
    load_state_dict(l, sd);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'weight' has shape [3, 5] but the model expects [3, 4]"),
              std::string::npos)
        << e.what();
  }
}

TEST(StateDict, ZeroCopyWhenDtypeMatchesAndConversionOtherwise) {
  // Simulate an mmap'd file: one borrowed buffer holding both tensors back to back.
  auto buf = std::make_shared<std::vector<uint16_t>>(12 + 3);
  for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = f32_to_bf16(float(i) * 0.25f);
  auto file = Storage::borrow(buf->data(), buf->size() * 2, Device::cpu(), buf);
  StateDict sd{{"weight", Tensor(file, {3, 4}, {4, 1}, 0, DType::bf16)},
               {"bias", Tensor(file, {3}, {1}, 12, DType::bf16)}};

  Linear keep(4, 3);
  LoadReport r = load_state_dict(keep, sd);
  EXPECT_EQ(r.zero_copy, 2);
  EXPECT_EQ(keep.bias.dense().data_ptr(), buf->data() + 12);  // no copy
  EXPECT_EQ(keep.bias.residency(), Residency::mmap);
  EXPECT_NE(keep.bias.dense().storage(), keep.weight.dense().storage());  // own Storage each

  Linear f32(4, 3);
  r = load_state_dict(f32, sd, {.dtype = DType::f32});
  EXPECT_EQ(r.converted, 2);
  EXPECT_EQ(f32.weight.dtype(), DType::f32);
  EXPECT_EQ(f32.weight.dense().to_f32_vector()[5], 1.25f);

  Linear mixed(4, 3);
  load_state_dict(mixed, sd, {.dtype = DType::bf16, .keep_in_fp32 = {"bias"}});
  EXPECT_EQ(mixed.weight.dtype(), DType::bf16);
  EXPECT_EQ(mixed.bias.dtype(), DType::f32);
}

TEST(StateDict, ModuleNameMatchingFollowsDiffusers) {
  EXPECT_TRUE(module_name_matches("blocks.0.norm1.weight", {"norm1"}));
  EXPECT_TRUE(module_name_matches("scale_shift_table", {"scale_shift_table"}));
  EXPECT_TRUE(module_name_matches("time_embedder.linear_1.weight", {"time_embedder"}));
  EXPECT_FALSE(module_name_matches("blocks.0.norm10.weight", {"norm1"}));
}

namespace {
// A toy quantized weight (int8 per row, scale = absmax/127) to prove a Linear accepts any scheme.
class ToyInt8 : public QuantizedWeight {
 public:
  explicit ToyInt8(const Tensor& w) : shape_(w.shape()) {
    const auto v = w.to_f32_vector();
    const int64_t n = w.size(0), k = w.size(1);
    std::vector<float> q(v.size()), s(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(v[r * k + c]));
      s[r] = amax / 127.f;
      for (int64_t c = 0; c < k; ++c) q[r * k + c] = std::nearbyint(v[r * k + c] / s[r]);
    }
    codes_ = Tensor::from_vector(q, shape_, DType::i8);
    scales_ = Tensor::from_vector(s, {n, 1});
  }
  std::string scheme() const override { return "toy_int8"; }
  Shape shape() const override { return shape_; }
  Tensor dequantize(DType dt) const override { return ops::mul(codes_.to(DType::f32), scales_).to(dt); }
  std::vector<Tensor> storage_tensors() const override { return {codes_, scales_}; }

 private:
  Shape shape_;
  Tensor codes_, scales_;
};
}  // namespace

TEST(Linear, DenseOrQuantizedBehindOneInterface) {
  Linear dense(16, 8), quant(16, 8);
  StateDict sd = random_state(dense, 11);
  load_state_dict(dense, sd);
  load_state_dict(quant, sd);
  quant.weight.set(std::make_shared<ToyInt8>(sd["weight"]), Residency::host);
  EXPECT_TRUE(quant.weight.is_quantized());
  EXPECT_EQ(quant.weight.nbytes(), 8u * 16u + 8u * 4u);
  EXPECT_THROW(quant.weight.dense(), Error);
  const Tensor x = randn({3, 16}, 4);
  const double err = max_rel(quant(x), dense(x));
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 2e-2);  // int8 weight error
}

TEST(Residency, MovingBytesKeepsTheStorageObject) {
  Linear l(4, 2);
  load_state_dict(l, random_state(l, 2));
  const auto st = l.weight.dense().storage();
  const auto before = l.weight.dense().to_f32_vector();
  Tensor fresh = l.weight.dense().clone();
  st->take_bytes_from(*fresh.storage());  // what an offload/onload does, device to device
  EXPECT_EQ(l.weight.dense().storage(), st);
  EXPECT_EQ(l.weight.dense().to_f32_vector(), before);
  EXPECT_EQ(fresh.storage()->data(), nullptr);
}
