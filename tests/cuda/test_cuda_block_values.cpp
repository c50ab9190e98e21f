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
#include "backend/cuda/quant/bnb_int8_values.cuh"
#include "backend/cuda/quant/dynamic_act.cuh"
#include "backend/cuda/quant/nunchaku_values.cuh"
#include "backend/cuda/quant/scheme_params.h"
#include "quant/autoround/autoround_weight.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_int8.h"
#include "quant/gguf/gguf_quants.h"
#include "quant/modelopt/int4_awq_weight.h"
#include "quant/modelopt/int8_channel_weight.h"
#include "quant/nunchaku/nunchaku.h"
#include "quant/nunchaku/nunchaku_layout.h"
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

// fp8dq's float8 GEMM path on CUDA, assembled here on the host: x's codes (blockq::e4m3_code: the fake
// quantization's codes), the products of the codes' values summed in double (a tensor-core GEMM sums
// exactly representable products; only its order differs), then blockq::fp8dq_output and the rounding to
// x's dtype: within the dtype's rounding of the CPU's linear (which sums the dequantized products).
TEST(CudaBlockValues, Float8GemmOnCodesAsTheCpu) {
  float f8[256];
  for (int i = 0; i < 256; ++i) f8[i] = f8_e4m3fn_to_f32(uint8_t(i));
  namespace tao = quant::torchao;
  for (const char* g : {"PerRow", "PerTensor"})
    for (DType dt : {DType::bf16, DType::f16}) {
      if (std::string(g) == "PerRow" && dt == DType::f16) continue;  // torchao: PerRow takes bfloat16 weights only
      SCOPED_TRACE(std::string(g) + " " + std::string(dtype_name(dt)));
      std::mt19937 rng(37);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      const int64_t M = 5, N = 32, K = 64;
      std::vector<float> wv(static_cast<size_t>(N * K)), xv(static_cast<size_t>(M * K)), bv(static_cast<size_t>(N));
      for (float& v : wv) v = nd(rng);
      for (float& v : xv) v = 3.0f * nd(rng);
      for (float& v : bv) v = nd(rng);
      const auto cfg = cudatest::torchao_config("Float8DynamicActivationFloat8WeightConfig", g, /*pair=*/true);
      const auto w = std::dynamic_pointer_cast<tao::Float8Weight>(tao::quantize(Tensor::from_vector(wv, {N, K}, dt), cfg));
      ASSERT_TRUE(w && w->act_quant()) << "not an fp8dq weight";
      ASSERT_EQ(w->block_cols(), K);
      const bool per_tensor = w->act_quant()->granularity.type == tao::Granularity::PerTensor;
      const Tensor x = Tensor::from_vector(xv, {M, K}, dt), b = Tensor::from_vector(bv, {N}, dt);
      const Tensor want = w->linear(x, b).to(DType::f32);
      const std::vector<float> xr = x.to_f32_vector(), br = b.to_f32_vector();
      std::vector<float> amax(static_cast<size_t>(M), 0.0f), xs(static_cast<size_t>(M));
      float all = 0.0f;
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t c = 0; c < K; ++c) amax[size_t(r)] = blockq::amax_combine(amax[size_t(r)], std::fabs(xr[size_t(r * K + c)]));
        all = blockq::amax_combine(all, amax[size_t(r)]);
      }
      for (int64_t r = 0; r < M; ++r) xs[size_t(r)] = blockq::e4m3_scale(per_tensor ? all : amax[size_t(r)], dt);
      const auto* qw = static_cast<const uint8_t*>(w->qdata().contiguous().data_ptr());
      const Tensor ws = w->scale().contiguous();
      int64_t differ = 0;
      for (int64_t r = 0; r < M; ++r)
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0;
          for (int64_t c = 0; c < K; ++c) {
            const uint8_t code = blockq::e4m3_code(xr[size_t(r * K + c)], xs[size_t(r)]);
            ASSERT_EQ(bits(f8[code] * xs[size_t(r)]), bits(blockq::e4m3_fake_quant(xr[size_t(r * K + c)], xs[size_t(r)], f8)));
            acc += double(f8[code]) * double(f8[qw[n * K + c]]);
          }
          const float v = round_through(dt, blockq::fp8dq_output(float(acc), xs[size_t(r)], ws.data<float>()[n / w->block_rows()],
                                                                 true, br[size_t(n)]));
          const float ref = want.data<float>()[r * N + n];
          EXPECT_LE(std::fabs(v - ref), (dt == DType::bf16 ? 1.0f / 128 : 1.0f / 1024) * std::max(1.0f, std::fabs(ref)))
              << r << "," << n;
          differ += bits(v) != bits(ref);
        }
      EXPECT_LT(differ, M * N / 4) << "most outputs round to the CPU's own value";
    }
}

// bitsandbytes LLM.int8 on CUDA, value by value (bnb_int8_values.cuh), assembled here on the host: the float16
// activations, outliers per element and per column, row absmax and codes, the exact int32 products, the
// int8_mm_dequant epilogue with the bias, the outlier columns in x's dtype; equal bit for bit to the CPU's
// linear (backend/cpu/quant/bnb_int8_linear.h). With and without the threshold, one row and several (a
// column holding an outlier is zeroed only with more than one row).
TEST(CudaBlockValues, BnbInt8LinearAsTheCpu) {
  int with_outliers = 0;
  for (double threshold : {6.0, 0.0})
    for (int64_t M : {int64_t(5), int64_t(1)})
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE("threshold " + std::to_string(threshold) + " M " + std::to_string(M) + " " +
                     std::string(dtype_name(dt)));
        std::mt19937 rng(41);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const int64_t N = 24, K = 96;
        std::vector<float> wv(static_cast<size_t>(N * K)), xv(static_cast<size_t>(M * K)), bv(static_cast<size_t>(N));
        for (float& v : wv) v = nd(rng);
        for (float& v : xv) v = 2.0f * nd(rng);
        for (float& v : bv) v = nd(rng);
        xv[7] = 9.5f, xv[size_t(K - 3)] = -7.25f;  // outliers in row 0 (columns 7 and K-3)
        if (M > 1) xv[size_t(2 * K + 40)] = 6.0f;   // exactly at the threshold: an outlier
        const auto w = quant::Bnb8bitWeight::quantize(Tensor::from_vector(wv, {N, K}, DType::f32), threshold);
        const Tensor x = Tensor::from_vector(xv, {M, K}, dt), b = Tensor::from_vector(bv, {N}, DType::f32);
        const std::vector<float> want = w->linear(x, b).to_f32_vector();
        const std::vector<float> xr = x.to_f32_vector();
        const bool sparse = threshold > 0;
        const float thr16 = f16_to_f32(f32_to_f16(float(threshold)));
        std::vector<uint8_t> flag(size_t(K), 0);
        for (int64_t i = 0; i < M * K; ++i)
          if (sparse && blockq::bnb8_is_outlier(blockq::bnb8_half(xr[size_t(i)]), thr16)) flag[size_t(i % K)] = 1;
        std::vector<int64_t> cols;
        for (int64_t c = 0; c < K; ++c)
          if (flag[size_t(c)]) cols.push_back(c);
        if (sparse) {
          ASSERT_GE(cols.size(), 2u) << "the case must hold outlier columns";
          ++with_outliers;
        }
        std::vector<float> am(size_t(M), 0.0f);
        std::vector<int8_t> q(size_t(M * K));
        for (int64_t r = 0; r < M; ++r) {
          for (int64_t c = 0; c < K; ++c) {
            const float a = blockq::bnb8_half(xr[size_t(r * K + c)]);
            am[size_t(r)] = blockq::bnb8_max(am[size_t(r)], blockq::bnb8_abs(a, sparse && blockq::bnb8_is_outlier(a, thr16)));
          }
          const float mult = blockq::bnb8_mult(am[size_t(r)]);
          for (int64_t c = 0; c < K; ++c) {
            const float a = blockq::bnb8_half(xr[size_t(r * K + c)]);
            q[size_t(r * K + c)] = sparse && M > 1 && flag[size_t(c)]
                                       ? int8_t(0)
                                       : blockq::bnb8_code(a, sparse && blockq::bnb8_is_outlier(a, thr16), mult);
          }
        }
        const int8_t* cb = w->cb().data<int8_t>();
        const float* scb = w->scb().data<float>();
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            int32_t acc = 0;
            for (int64_t c = 0; c < K; ++c) acc += int32_t(q[size_t(m * K + c)]) * int32_t(cb[n * K + c]);
            float v = blockq::bnb8_main(acc, am[size_t(m)], scb[n], true, bv[size_t(n)], dt);
            if (!cols.empty()) {
              float s = 0.0f;
              for (int64_t col : cols)
                s = blockq::bnb8_outlier_term(s, xr[size_t(m * K + col)], blockq::bnb8_outlier_weight(cb[n * K + col], scb[n], dt));
              v = blockq::bnb8_with_outliers(v, s, dt);
            }
            ASSERT_EQ(bits(v), bits(want[size_t(m * N + n)])) << m << "," << n;
          }
        // The dequantize_fp mode's weight: the CPU plan's row dequantizer.
        w->set_mode(quant::Int8LinearMode::dequantize_fp);
        const auto plan = w->tile_linear_plan(x, b);
        ASSERT_TRUE(plan.has_value());
        std::vector<float> rows(size_t(N * K));
        plan->dequant_rows(0, N, rows.data());
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < K; ++c)
            ASSERT_EQ(bits(blockq::bnb8_fp_weight(cb[n * K + c], scb[n], dt)), bits(rows[size_t(n * K + c)])) << n << "," << c;
      }
  EXPECT_EQ(with_outliers, 6);
}

namespace {

// A SVDQ W4A4 weight from random logical tensors: codes in [-8, 7], positive scales and smoothing.
std::shared_ptr<quant::nunchaku::SvdqW4A4Weight> random_svdq(int64_t N, int64_t K, int64_t R, bool packed, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pos(0.25f, 2.0f), sym(-1.0f, 1.0f);
  Tensor codes = Tensor::empty({N, K}, DType::i8);
  for (int64_t i = 0; i < N * K; ++i) codes.data<int8_t>()[i] = int8_t(int(rng() % 16) - 8);
  std::vector<float> ws(static_cast<size_t>(K / 64 * N)), sm(static_cast<size_t>(K)), dn(static_cast<size_t>(R * K)),
      up(static_cast<size_t>(N * R));
  for (float& v : ws) v = 0.01f * pos(rng);
  for (float& v : sm) v = pos(rng);
  for (float& v : dn) v = 0.1f * sym(rng);
  for (float& v : up) v = 0.1f * sym(rng);
  return std::make_shared<quant::nunchaku::SvdqW4A4Weight>(
      codes, Tensor::from_vector(ws, {K / 64, N}, DType::f32), Tensor::from_vector(sm, {K}, DType::f32),
      Tensor::from_vector(dn, {R, K}, DType::f32), Tensor::from_vector(up, {N, R}, DType::f32), packed, "layer");
}

}  // namespace

// Nunchaku SVDQ W4A4 on CUDA, value by value (nunchaku_values.cuh): the activation quantization equals the
// reference's (SvdqW4A4Weight::quantize_activations: codes and scales, an all-zero group and a NaN
// included), the bias permutation equals svdq_scale_index, and the linear assembled from the values (exact
// int32 group sums) equals the CPU's kernel bit for bit, in the packed and the logical layout.
TEST(CudaBlockValues, NunchakuSvdqAsTheCpu) {
  for (bool packed : {false, true})
    for (int64_t n : {int64_t(128), int64_t(384)})
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(blockq::svdq_vector_index(j, packed), quant::nunchaku::svdq_scale_index(0, j, 1, n, packed))
            << (packed ? "packed " : "logical ") << n << " " << j;
  for (bool packed : {false, true})
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(packed ? "packed " : "logical ") + std::string(dtype_name(dt)));
      const int64_t N = 128, K = 192, R = 16, M = 4, G = K / 64;
      const auto w = random_svdq(N, K, R, packed, 51);
      std::mt19937 rng(52);
      std::normal_distribution<float> nd(0.0f, 3.0f);
      std::vector<float> xv(static_cast<size_t>(M * K)), bv(static_cast<size_t>(N));
      for (float& v : xv) v = nd(rng);
      for (float& v : bv) v = nd(rng);
      for (int64_t k = 64; k < 128; ++k) xv[size_t(K + k)] = 0.0f;  // token 1, group 1: scale 0
      const Tensor x = Tensor::from_vector(xv, {M, K}, dt), b = Tensor::from_vector(bv, {N}, dt);
      const std::vector<float> xr = x.to_f32_vector();
      // activations, with a NaN in token 3 (its group's codes: the reference's NaN rule)
      std::vector<float> xn = xr;
      xn[size_t(3 * K + 5)] = NAN;
      std::vector<int8_t> qw(size_t(M * K)), qg(size_t(M * K));
      std::vector<float> aw(size_t(M * G)), ag(size_t(M * G));
      w->quantize_activations(xn.data(), M, qw.data(), aw.data());
      const Tensor sm = w->storage_tensors()[2];
      for (int64_t t = 0; t < M; ++t)
        for (int64_t g = 0; g < G; ++g)
          blockq::svdq_quantize_group(xn.data(), DType::f32, sm.data<float>(), K, t, g, qg.data() + t * K + g * 64,
                                      ag.data() + t * G + g);
      for (size_t i = 0; i < qw.size(); ++i) ASSERT_EQ(qg[i], qw[i]) << "code " << i;
      for (size_t i = 0; i < aw.size(); ++i) ASSERT_EQ(bits(ag[i]), bits(aw[i])) << "scale " << i;
      EXPECT_EQ(ag[size_t(1 * G + 1)], 0.0f);
      // the linear, from x in its own dtype
      w->quantize_activations(xr.data(), M, qw.data(), aw.data());
      for (int64_t t = 0; t < M; ++t)
        for (int64_t g = 0; g < G; ++g)
          blockq::svdq_quantize_group(x.data_ptr(), dt, sm.data<float>(), K, t, g, qg.data() + t * K + g * 64,
                                      ag.data() + t * G + g);
      for (size_t i = 0; i < qw.size(); ++i) ASSERT_EQ(qg[i], qw[i]) << "code " << i << " from " << dtype_name(dt);
      const std::vector<float> want = w->linear(x, b).to_f32_vector();
      const int8_t* c = w->codes().data<int8_t>();
      const float* ws = w->wscales().data<float>();
      const float* dn = w->down().data<float>();
      const float* up = w->up().data<float>();
      for (int64_t t = 0; t < M; ++t) {
        std::vector<float> la(size_t(R), 0.0f);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t k = 0; k < K; ++k) la[size_t(r)] = blockq::svdq_dot_term(la[size_t(r)], xr[size_t(t * K + k)], dn[r * K + k]);
        for (int64_t n = 0; n < N; ++n) {
          float acc = 0.0f;
          for (int64_t g = 0; g < G; ++g) {
            int32_t d = 0;
            for (int64_t k = g * 64; k < g * 64 + 64; ++k) d += int32_t(qg[size_t(t * K + k)]) * int32_t(c[n * K + k]);
            acc = blockq::svdq_group_term(acc, d, ag[size_t(t * G + g)], ws[g * N + n]);
          }
          float lr = 0.0f;
          for (int64_t r = 0; r < R; ++r) lr = blockq::svdq_dot_term(lr, la[size_t(r)], up[n * R + r]);
          const float bias = blockq::load_value(b.data_ptr(), dt, blockq::svdq_vector_index(n, packed));
          const float v = round_through(dt, blockq::svdq_output(acc, lr, bias));
          ASSERT_EQ(bits(v), bits(want[size_t(t * N + n)])) << t << "," << n;
        }
      }
    }
}

// Nunchaku AWQ W4A16: every weight of random qweight words decodes as AwqW4A16Weight::dequantize, and every
// code as the layout's awq_code.
TEST(CudaBlockValues, NunchakuAwqDecodesAsTheReference) {
  const int64_t N = 12, K = 192;
  std::mt19937 rng(61);
  std::vector<int32_t> qv(size_t(N / 4 * K / 2));
  for (int32_t& v : qv) v = int32_t(rng());
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> sv(size_t(K / 64 * N)), zv(sv.size());
  for (float& v : sv) v = u(rng);
  for (float& v : zv) v = u(rng);
  const Tensor qw = int32_tensor(qv, {N / 4, K / 2}), ws = Tensor::from_vector(sv, {K / 64, N}, DType::f32),
               wz = Tensor::from_vector(zv, {K / 64, N}, DType::f32);
  const quant::nunchaku::AwqW4A16Weight w(qw, ws, wz, {N, K}, "layer");
  const std::vector<float> want = w.dequantize(DType::f32).to_f32_vector();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_EQ(blockq::awq_code(qv.data(), K, n, k), quant::nunchaku::awq_code(qv.data(), K, n, k)) << n << "," << k;
      ASSERT_EQ(bits(blockq::awq_value(qv.data(), sv.data(), zv.data(), N, K, n, k)), bits(want[size_t(n * K + k)]))
          << n << "," << k;
    }
}
