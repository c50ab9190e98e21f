#include <gtest/gtest.h>

#include <cmath>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/tensor.h"

using namespace diffq;

namespace {
Tensor iota(const Shape& s, DType dt = DType::f32) {
  std::vector<float> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  return Tensor::from_vector(v, s, dt);
}
}  // namespace

TEST(Tensor, ViewsShareStorage) {
  Tensor t = iota({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.storage(), t.storage());
  const auto v = p.contiguous().to_f32_vector();
  // p[k][i][j] = t[i][j][k] = i*12 + j*4 + k
  EXPECT_EQ(v[0 * 6 + 1 * 3 + 2], 1 * 12 + 2 * 4 + 0);
  EXPECT_EQ(v[3 * 6 + 0 * 3 + 1], 0 * 12 + 1 * 4 + 3);
}

TEST(Tensor, SliceSelectExpand) {
  Tensor t = iota({4, 5});
  Tensor s = t.slice(1, 1, 5, 2);  // columns 1, 3
  EXPECT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_EQ(s.to_f32_vector(), (std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18}));
  EXPECT_EQ(t.select(0, -1).to_f32_vector(), (std::vector<float>{15, 16, 17, 18, 19}));
  Tensor col = iota({3, 1});
  Tensor e = col.expand({3, 2});
  EXPECT_EQ(e.strides()[1], 0);
  EXPECT_EQ(e.contiguous().to_f32_vector(), (std::vector<float>{0, 0, 1, 1, 2, 2}));
}

TEST(Tensor, ReshapeViewsOrCopies) {
  Tensor t = iota({2, 6});
  EXPECT_EQ(t.reshape({3, -1}).storage(), t.storage());
  Tensor tt = t.transpose(0, 1);  // [6, 2], not viewable as [12]
  EXPECT_THROW(tt.view({12}), Error);
  Tensor r = tt.reshape({12});
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_EQ(r.to_f32_vector()[1], 6.0f);
  EXPECT_THROW(t.reshape({5, -1}), Error);
}

TEST(Tensor, ChunkAndSplit) {
  Tensor t = iota({6, 2});
  auto c = t.chunk(3, 0);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].to_f32_vector(), (std::vector<float>{8, 9, 10, 11}));
  auto s = t.split({1, 5}, 0);
  EXPECT_EQ(s[1].size(0), 5);
  EXPECT_THROW(t.split({1, 1}, 0), Error);
}

TEST(Tensor, CastRoundsLikeTorch) {
  Tensor t = Tensor::from_vector({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 500.0f, -2.5f}, {4});
  EXPECT_EQ(t.to(DType::bf16).to_f32_vector(), (std::vector<float>{1.0f, 1.015625f, 500.0f, -2.5f}));
  EXPECT_EQ(t.to(DType::i32).to_f32_vector(), (std::vector<float>{1, 1, 500, -2}));
  auto f8 = t.to(DType::f8_e4m3fn).to_f32_vector();
  EXPECT_EQ(f8[2], 448.0f);  // torch saturates e4m3fn
}

TEST(Tensor, ErrorsHaveBracketedContext) {
  Tensor t = iota({2, 2});
  try {
    t.select(0, 5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[select]", 0), 0u) << e.what();
  }
}

TEST(Memory, CountsCurrentAndPeak) {
  const Device cpu = Device::cpu();
  reset_peak_memory_stats(cpu);
  const int64_t before = memory_stats(cpu).current_bytes;
  {
    Tensor a = Tensor::empty({1024, 256}, DType::f32);
    EXPECT_EQ(memory_stats(cpu).current_bytes, before + 1024 * 256 * 4);
  }
  EXPECT_EQ(memory_stats(cpu).current_bytes, before);
  EXPECT_GE(memory_stats(cpu).peak_bytes, before + 1024 * 256 * 4);
  reset_peak_memory_stats(cpu);
  EXPECT_EQ(memory_stats(cpu).peak_bytes, before);
}

TEST(Device, Parse) {
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cpu").str(), "cpu");
  EXPECT_THROW(Device::parse("tpu"), Error);
}
