// Host checks (no GPU needed) of the per-element decoding the CUDA linear_q kernels run
// (src/backend/cuda/quant/block_values.cuh, compiled here for the host): every element of every GGUF block
// type, of bitsandbytes' 4-bit layouts, of torchao's int4, quanto, SDNQ, AutoRound and the BFL / ModelOpt scaled weights equals, bit for bit, the scalar reference dequantization in
// src/quant on the same packed bytes. The kernels add nothing but the element index map checked here
// (row, block, element within the block) and the store to the output dtype (convert.cuh, checked by the
// op table on a GPU).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")  // the reference's order, as the kernels' __fmul_rn & co. keep it
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/quant/block_values.cuh"
#include "backend/cuda/quant/dynamic_act.cuh"
#include "backend/cuda/quant/scheme_params.h"
#include "quant/autoround/autoround_weight.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/gguf/gguf_quants.h"
#include "quant/modelopt/int4_awq_weight.h"
#include "quant/modelopt/int8_channel_weight.h"
#include "quant/quanto/quanto.h"
#include "quant/sdnq/sdnq_dtypes.h"
#include "quant/sdnq/sdnq_weight.h"
#include "quant/torchao/affine_int8_weight.h"
#include "quant/torchao/float8_weight.h"
#include "quant/torchao/int4_weight.h"
#include "quant/torchao/torchao.h"
#include "torchao_test_config.h"

using namespace diffq;
namespace blockq = diffq::backend::cuda::blockq;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

Tensor int32_tensor(const std::vector<int32_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::memcpy(t.data_ptr(), v.data(), v.size() * 4);
  return t;
}

}  // namespace

TEST(CudaBlockValues, EveryGgufTypeDecodesAsTheReference) {
  int checked = 0;
  for (const quant::gguf::TypeTraits& t : quant::gguf::supported_types()) {
    SCOPED_TRACE(std::string(t.name()));
    ASSERT_TRUE(blockq::gguf_type_decodable(uint32_t(t.type))) << "a GGUF type the CUDA kernels cannot decode";
    // Random bytes are valid blocks of every type (any scale bits, NaN and inf included: both sides form the
    // same float operations on them); 3 rows of 2 super-blocks.
    const int64_t K = 2 * 256, rows = 3, row_bytes = t.row_bytes(K);
    std::vector<uint8_t> data(size_t(rows * row_bytes));
    std::mt19937 rng(uint32_t(t.type) + 7);
    for (auto& b : data) b = uint8_t(rng());
    if (t.type == quant::gguf::GGMLType::F32)  // keep f32 values finite so a NaN's payload is not the question
      for (size_t i = 3; i < data.size(); i += 4) data[i] &= 0x3f;
    std::vector<float> want(size_t(rows * K));
    for (int64_t r = 0; r < rows; ++r) t.dequantize_ref(data.data() + r * row_bytes, want.data() + r * K, K);
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const uint8_t* block = data.data() + n * row_bytes + (k / t.block_size()) * t.type_size();
        const float got = blockq::gguf_value(uint32_t(t.type), block, int(k % t.block_size()));
        ASSERT_EQ(bits(got), bits(want[size_t(n * K + k)])) << "row " << n << " element " << k;
      }
    ++checked;
  }
  EXPECT_GE(checked, 15);
  EXPECT_FALSE(blockq::gguf_type_decodable(9));  // Q8_1: no such type in diffq
}

TEST(CudaBlockValues, Bnb4bitDecodesAsTheReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor w = Tensor::empty({24, 300}, DType::f32);  // 7200 elements: a partial last block of 64 and of 256
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = nd(rng);
  int checked = 0;
  for (auto type : {quant::bnb::QuantType::nf4, quant::bnb::QuantType::fp4})
    for (bool nested : {false, true})
      for (int64_t bs : {64, 128}) {
        SCOPED_TRACE(std::to_string(int(type)) + (nested ? " nested" : "") + " blocksize " + std::to_string(bs));
        quant::Bnb4bitOptions o;
        o.quant_type = type;
        o.double_quant = nested;
        o.blocksize = bs;
        const auto q = quant::Bnb4bitWeight::quantize(w, o);
        const quant::Bnb4bitState& st = q->state();
        blockq::Bnb4Params p;
        std::memcpy(p.code, q->code(), sizeof(p.code));
        p.blocksize = st.blocksize;
        p.nested = st.nested;
        p.nested_blocksize = st.nested_blocksize;
        p.nested_offset = st.nested_offset;
        ASSERT_EQ(st.nested, nested);
        const Tensor want = q->dequantize(DType::f32);
        const auto* packed = static_cast<const uint8_t*>(q->packed().data_ptr());
        for (int64_t i = 0; i < w.numel(); ++i) {
          const float got = blockq::bnb4_value(p, packed, st.absmax.data_ptr(),
                                               nested ? st.nested_absmax.data<float>() : nullptr,
                                               nested ? st.nested_quant_map.data<float>() : nullptr, i);
          ASSERT_EQ(bits(got), bits(want.data<float>()[i])) << "element " << i;
        }
        ++checked;
      }
  EXPECT_EQ(checked, 8);
}

TEST(CudaBlockValues, TorchaoInt4DecodesAsTheReference) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(40 * 256);
    for (float& x : v) x = nd(rng);
    const Tensor w = Tensor::from_vector(v, {40, 256}, dt);
    const auto q = quant::torchao::Int4Weight::quantize(w, 64);
    const auto parts = q->tensor_data();
    const Tensor& qd = parts.at(0).second;
    const Tensor& scale = parts.at(1).second;
    const Tensor& zero = parts.at(2).second;
    std::vector<float> want(40 * 256);
    q->dequant_rows(0, 40, DType::f32, want.data());
    for (int64_t n = 0; n < 40; ++n)
      for (int64_t k = 0; k < 256; ++k) {
        const float got = blockq::torchao_int4_value(static_cast<const uint8_t*>(qd.data_ptr()), scale.data_ptr(),
                                                     zero.data_ptr(), scale.dtype(), 40, 256, 64, n, k);
        ASSERT_EQ(bits(got), bits(want[size_t(n * 256 + k)])) << n << "," << k;
      }
  }
}

TEST(CudaBlockValues, QuantoDecodesAsTheReference) {
  float f8[256];
  for (int i = 0; i < 256; ++i) f8[i] = f8_e4m3fn_to_f32(uint8_t(i));
  int checked = 0;
  for (auto qt : {quant::QuantoQType::int8, quant::QuantoQType::float8, quant::QuantoQType::int4, quant::QuantoQType::int2})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(quant::quanto_qtype_name(qt)) + " " + std::string(dtype_name(dt)));
      std::mt19937 rng(9);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      const int64_t N = 96, K = 256;  // int4 / int2: groups of 128 columns (QModuleMixin's choice for this shape)
      std::vector<float> v(size_t(N * K));
      for (float& x : v) x = nd(rng);
      const auto q = quant::QuantoWeight::quantize(Tensor::from_vector(v, {N, K}, dt), qt);
      const blockq::QuantoParams p = backend::cuda::quanto_params(*q);
      std::vector<float> want(size_t(N * K));
      q->dequant_rows(0, N, want.data());
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < K; ++c) {
          const float got = blockq::quanto_value(p, static_cast<const uint8_t*>(q->data().data_ptr()),
                                                 q->scale().data_ptr(), q->shift().defined() ? q->shift().data_ptr() : nullptr,
                                                 f8, n, c);
          ASSERT_EQ(bits(got), bits(want[size_t(n * K + c)])) << n << "," << c;
        }
      ++checked;
    }
  EXPECT_EQ(checked, 12);
}

TEST(CudaBlockValues, SdnqDecodesAsTheReference) {
  float f8[2][256];
  for (int i = 0; i < 256; ++i) f8[0][i] = f8_e4m3fn_to_f32(uint8_t(i)), f8[1][i] = f8_e5m2_to_f32(uint8_t(i));
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t N = 48, K = 256;
  std::vector<float> v(size_t(N * K));
  for (float& x : v) x = nd(rng);
  int checked = 0;
  for (const std::string& name : quant::sdnq::sdnq_supported_dtypes())
    for (int64_t group : {int64_t(0), int64_t(-1), int64_t(-2)})
      for (DType sdt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(name + " group_size " + std::to_string(group) + " scale " + std::string(dtype_name(sdt)));
        const quant::sdnq::SdnqDtype& d = quant::sdnq::sdnq_dtype(name);
        const auto q = quant::sdnq::SdnqWeight::quantize(Tensor::from_vector(v, {N, K}, DType::bf16), d, group, sdt);
        const std::vector<Tensor> st = q->storage_tensors();
        const blockq::SdnqParams p = backend::cuda::sdnq_params(*q);
        std::vector<float> want(size_t(N * K));
        q->dequant_rows(0, N, p.scale_dtype, want.data());  // rounding to the scale's dtype: the value itself
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < K; ++c) {
            const float got = blockq::sdnq_value(p, static_cast<const uint8_t*>(st[0].data_ptr()), st[1].data_ptr(),
                                                 st.size() > 2 ? st[2].data_ptr() : nullptr,
                                                 f8[d.storage == DType::f8_e5m2 ? 1 : 0], n, c);
            ASSERT_EQ(bits(got), bits(want[size_t(n * K + c)])) << n << "," << c;
          }
        ++checked;
      }
  EXPECT_GE(checked, 6 * 8);
}

TEST(CudaBlockValues, AutoRoundDecodesAsTheReference) {
  std::mt19937 rng(17);
  const int64_t N = 64, K = 256, group = 64, G = K / group;
  int checked = 0;
  for (int nb : {2, 4, 8})
    for (bool minus_one : {false, true})
      for (bool with_g_idx : {false, true})
        for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
          SCOPED_TRACE(std::to_string(nb) + " bits" + (minus_one ? " gptq" : "") + (with_g_idx ? " g_idx " : " ") +
                       std::string(dtype_name(compute)));
          const int per = 32 / nb;
          std::vector<int32_t> qw(size_t(K / per * N)), qz(size_t(G * (N / per))), groups(size_t(K), 0);
          for (auto& w : qw) w = int32_t(rng());
          for (auto& w : qz) w = int32_t(rng());
          for (int64_t k = 0; k < K; ++k) groups[size_t(k)] = int32_t((k * 7) % G);  // an act-order permutation of groups
          std::vector<float> sc(size_t(G * N));
          std::uniform_real_distribution<float> ud(0.001f, 0.05f);
          for (float& s : sc) s = ud(rng);
          quant::autoround::AutoRoundLayout l;
          l.bits = nb;
          l.group_size = group;
          l.zero_minus_one = minus_one;
          const Tensor g_idx = with_g_idx ? int32_tensor(groups, {K}) : Tensor();
          quant::autoround::AutoRoundWeight w(l, int32_tensor(qw, {K / per, N}), int32_tensor(qz, {G, N / per}),
                                              Tensor::from_vector(sc, {G, N}, DType::f16), g_idx, {N, K});
          const blockq::AutoRoundParams p = backend::cuda::autoround_params(w);
          const std::vector<Tensor> st = w.storage_tensors();
          std::vector<float> want(size_t(N * K));
          w.dequant_rows(0, N, compute, want.data());
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) {
              const float got = blockq::autoround_value(p, static_cast<const uint32_t*>(st[0].data_ptr()),
                                                        static_cast<const uint32_t*>(st[1].data_ptr()), st[2].data_ptr(),
                                                        with_g_idx ? st.at(3).data_ptr() : nullptr, compute, n, k);
              ASSERT_EQ(bits(got), bits(want[size_t(n * K + k)])) << n << "," << k;
            }
          ++checked;
        }
  EXPECT_EQ(checked, 36);
}

TEST(CudaBlockValues, ScaledLayoutsDecodeAsTheReference) {
  std::mt19937 rng(23);
  const int64_t N = 32, K = 128;
  auto bytes = [&](const Shape& shape, DType dt) {
    Tensor t = Tensor::empty(shape, dt);
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng());
    return t;
  };
  auto floats = [&](const Shape& shape, DType dt) {
    std::vector<float> v(size_t(shape_numel(shape)));
    std::uniform_real_distribution<float> ud(0.01f, 2.0f);
    for (float& x : v) x = ud(rng);
    return Tensor::from_vector(v, shape, dt);
  };
  float f8[256];
  for (int i = 0; i < 256; ++i) f8[i] = f8_e4m3fn_to_f32(uint8_t(i));
  std::vector<std::pair<std::shared_ptr<quant::ScaledWeight>, blockq::ScaledParams>> cases;
  for (int64_t sn : {int64_t(1), N}) {
    blockq::ScaledParams p;
    p.kind = blockq::kScaledFp8, p.K = K, p.per_row = sn == N;
    cases.push_back({std::make_shared<quant::Fp8ScaledWeight>(bytes({N, K}, DType::f8_e4m3fn), floats({sn}, DType::f32),
                                                              "bfl_fp8r", "w"), p});
  }
  {
    auto w = std::make_shared<quant::Nvfp4Weight>(bytes({N, K / 2}, DType::u8), bytes({N, K / 16}, DType::f8_e4m3fn),
                                                  floats({1}, DType::f32), "bfl_nvfp4", "w");
    blockq::ScaledParams p;
    p.kind = blockq::kScaledNvfp4, p.K = K, p.global_scale = w->weight_scale_2();
    cases.push_back({w, p});
  }
  for (DType sdt : {DType::f32, DType::bf16, DType::f16}) {
    blockq::ScaledParams p;
    p.kind = blockq::kScaledInt4Awq, p.K = K, p.group = 32, p.scale_dtype = sdt;
    cases.push_back({std::make_shared<quant::Int4AwqWeight>(bytes({N / 2, K}, DType::u8), floats({N, K / 32}, sdt),
                                                            "modelopt_int4_awq", "w"), p});
  }
  {
    blockq::ScaledParams p;
    p.kind = blockq::kScaledInt8Channel, p.K = K;
    cases.push_back({std::make_shared<quant::Int8ChannelWeight>(bytes({N, K}, DType::i8), floats({N}, DType::f32),
                                                                "modelopt_int8", "w"), p});
  }
  for (const auto& [w, p] : cases) {
    SCOPED_TRACE(w->scheme() + " kind " + std::to_string(p.kind));
    const std::vector<Tensor> st = w->storage_tensors();
    std::vector<float> want(size_t(N * K));
    w->dequant_rows_f32(0, N, want.data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < K; ++c) {
        const float got =
            blockq::scaled_value(p, static_cast<const uint8_t*>(st.at(0).data_ptr()), st.at(1).data_ptr(), f8, n, c);
        ASSERT_EQ(bits(got), bits(want[size_t(n * K + c)])) << n << "," << c;
      }
  }
  EXPECT_EQ(cases.size(), 7u);
}

// torchao int8dq on CUDA, value by value (dynamic_act.cuh), assembled here on the host: per-token (or per-tensor)
// scales and codes of x, the exact int32 dot products, the epilogue; equal bit for bit to the CPU's linear.
TEST(CudaBlockValues, Int8DynamicLinearAsTheCpu) {
  namespace tao = quant::torchao;
  for (const char* g : {"PerRow", "PerTensor"})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(g) + " " + std::string(dtype_name(dt)));
      std::mt19937 rng(29);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      const int64_t M = 5, N = 24, K = 96;
      std::vector<float> wv(static_cast<size_t>(N * K)), xv(static_cast<size_t>(M * K)), bv(static_cast<size_t>(N));
      for (float& v : wv) v = nd(rng);
      for (float& v : xv) v = 3.0f * nd(rng);
      for (float& v : bv) v = nd(rng);
      const auto cfg = cudatest::torchao_config("Int8DynamicActivationInt8WeightConfig", g, /*pair=*/true);
      const auto w = std::dynamic_pointer_cast<tao::AffineInt8Weight>(tao::quantize(Tensor::from_vector(wv, {N, K}, dt), cfg));
      ASSERT_TRUE(w && w->act_granularity().has_value()) << "not an int8dq weight";
      const bool per_tensor = w->act_granularity()->type == tao::Granularity::PerTensor;
      const Tensor x = Tensor::from_vector(xv, {M, K}, dt), b = Tensor::from_vector(bv, {N}, dt);
      const Tensor want = w->linear(x, b).to(DType::f32);
      const std::vector<float> xr = x.to_f32_vector(), br = b.to_f32_vector();
      // scales
      std::vector<float> xs(size_t(per_tensor ? 1 : M));
      float tmn = INFINITY, tmx = -INFINITY;
      for (int64_t r = 0; r < M; ++r) {
        float mn = INFINITY, mx = -INFINITY;
        for (int64_t c = 0; c < K; ++c)
          mn = blockq::std_min(mn, xr[size_t(r * K + c)]), mx = blockq::std_max(mx, xr[size_t(r * K + c)]);
        if (!per_tensor) xs[size_t(r)] = blockq::int8_symmetric_scale(mn, mx, dt);
        tmn = blockq::std_min(tmn, mn), tmx = blockq::std_max(tmx, mx);
      }
      if (per_tensor) xs[0] = blockq::int8_symmetric_scale(tmn, tmx, dt);
      const auto* qw = w->qdata().data<int8_t>();
      const Tensor ws = w->scale().contiguous();
      for (int64_t r = 0; r < M; ++r)
        for (int64_t n = 0; n < N; ++n) {
          const float sx = xs[per_tensor ? 0 : size_t(r)];
          int32_t acc = 0;
          for (int64_t c = 0; c < K; ++c)
            acc += int32_t(blockq::int8_code(xr[size_t(r * K + c)], blockq::div(1.0f, sx))) * int32_t(qw[n * K + c]);
          const float v = round_through(dt, blockq::int8dq_output(acc, sx, blockq::load_value(ws.data_ptr(), ws.dtype(), n / w->block_rows()),
                                                                  true, br[size_t(n)], dt));
          ASSERT_EQ(bits(v), bits(want.data<float>()[r * N + n])) << r << "," << n;
        }
    }
}

TEST(CudaBlockValues, Float8ActivationsAsTheCpu) {  // (the e4m3fn conversion is the host's own: core/float8_e4m3.h)
  float f8[256];
  for (int i = 0; i < 256; ++i) f8[i] = f8_e4m3fn_to_f32(uint8_t(i));
  namespace tao = quant::torchao;
  for (bool per_tensor : {false, true})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(per_tensor ? "per tensor " : "per row ") + std::string(dtype_name(dt)));
      std::mt19937 rng(31);
      std::normal_distribution<float> nd(0.0f, 40.0f);
      const int64_t M = 6, K = 80;
      std::vector<float> xv(static_cast<size_t>(M * K));
      for (float& v : xv) v = nd(rng);
      const std::vector<float> xr = Tensor::from_vector(xv, {M, K}, dt).to_f32_vector();  // values of dtype dt
      tao::Float8ActQuant a;
      a.granularity.type = per_tensor ? tao::Granularity::PerTensor : tao::Granularity::PerRow;
      std::vector<float> want(xr.size());
      tao::float8_quant_dequant_activations(xr.data(), M, K, dt, a, want.data());
      std::vector<float> amax(size_t(M), 0.0f);
      float all = 0.0f;
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t c = 0; c < K; ++c) amax[size_t(r)] = blockq::amax_combine(amax[size_t(r)], std::fabs(xr[size_t(r * K + c)]));
        all = blockq::amax_combine(all, amax[size_t(r)]);
      }
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < K; ++c) {
          const float s = blockq::e4m3_scale(per_tensor ? all : amax[size_t(r)], dt);
          ASSERT_EQ(bits(blockq::e4m3_fake_quant(xr[size_t(r * K + c)], s, f8)), bits(want[size_t(r * K + c)])) << r << "," << c;
        }
    }
}
