// Host checks (no GPU needed) of the per-element decoding the CUDA linear_q kernels run
// (src/backend/cuda/quant/block_values.cuh, compiled here for the host): every element of every GGUF block
// type, of bitsandbytes' 4-bit layouts, of torchao's int4 and of quanto's weights equals, bit for bit, the scalar reference dequantization in
// src/quant on the same packed bytes. The kernels add nothing but the element index map checked here
// (row, block, element within the block) and the store to the output dtype (convert.cuh, checked by the
// op table on a GPU).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")  // the reference's order, as the kernels' __fmul_rn & co. keep it
#endif

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/quant/block_values.cuh"
#include "quant/bnb/bnb_4bit.h"
#include "quant/gguf/gguf_quants.h"
#include "quant/quanto/quanto.h"
#include "quant/torchao/int4_weight.h"

using namespace diffq;
namespace blockq = diffq::backend::cuda::blockq;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
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
      blockq::QuantoParams p;
      p.dtype = q->dtype();
      p.in_features = K;
      p.float8 = qt == quant::QuantoQType::float8;
      p.bits = qt == quant::QuantoQType::int4 ? 4 : qt == quant::QuantoQType::int2 ? 2 : 8;
      if (p.bits != 8) {
        p.group_cols = q->group_size().value_or(K);
        const int64_t groups = N * K / p.group_cols;
        p.packed_rows = (groups + 8 / p.bits - 1) / (8 / p.bits);
        p.scalar_scale = q->scale().numel() == 1 && groups > 1;
      } else {
        p.scalar_scale = q->scale().numel() == 1 && N > 1;
      }
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
