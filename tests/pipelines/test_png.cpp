// PNG writing/reading with text chunks and Diffusers' float -> uint8 image conversion.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "diffq/error.h"
#include "io/png.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using diffq::DType;
using diffq::Tensor;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("diffq-png-test-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<uint8_t> gradient(int64_t w, int64_t h) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) px[size_t((y * w + x) * 3 + c)] = uint8_t((x * 7 + y * 13 + c * 101) & 255);
  return px;
}

TEST(Png, RoundTripPixelsAndText) {
  TempDir dir;
  const auto px = gradient(37, 21);
  const diffq::io::PngText text = {{"prompt", "a cat sipping a margarita"},
                                   {"seed", "0"},
                                   {"steps", "28"},
                                   {"guidance", "3.5"},
                                   {"size", "37x21"},
                                   {"model", "FLUX.1-dev"},
                                   {"diffq version", DIFFQ_VERSION},
                                   {"negative", "caf\xc3\xa9 \xe7\x8c\xab \xf0\x9f\x90\xb1"}};  // UTF-8: iTXt
  const fs::path out = dir.path / "img.png";
  diffq::io::write_png(out, px.data(), 37, 21, text);
  auto img = diffq::io::read_png(out);
  EXPECT_EQ(img.width, 37);
  EXPECT_EQ(img.height, 21);
  EXPECT_EQ(img.rgb, px);
  EXPECT_EQ(img.text, text);
  // Only the final file remains in the directory (no temporaries).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // Overwrites atomically.
  const auto px2 = gradient(4, 4);
  diffq::io::write_png(out, px2.data(), 4, 4);
  EXPECT_EQ(diffq::io::read_png(out).rgb, px2);
  EXPECT_TRUE(diffq::io::read_png(out).text.empty());
}

TEST(Png, TensorOverloadAcceptsBatchOfOne) {
  TempDir dir;
  Tensor t = Tensor::empty({1, 3, 2, 3}, DType::u8);
  for (int i = 0; i < 18; ++i) t.data<uint8_t>()[i] = uint8_t(i * 10);
  diffq::io::write_png(dir.path / "t.png", t, {{"seed", "42"}});
  auto img = diffq::io::read_png(dir.path / "t.png");
  EXPECT_EQ(img.width, 2);
  EXPECT_EQ(img.height, 3);
  EXPECT_EQ(img.rgb.size(), 18u);
  EXPECT_EQ(img.rgb[17], 170);
  EXPECT_THROW(diffq::io::write_png(dir.path / "bad.png", Tensor::zeros({2, 2, 3}, DType::f32)),
               diffq::Error);
}

TEST(Png, ErrorsNameThePathAndLeaveNothingBehind) {
  TempDir dir;
  const auto px = gradient(2, 2);
  const fs::path missing = dir.path / "no" / "such" / "dir" / "x.png";
  try {
    diffq::io::write_png(missing, px.data(), 2, 2);
    FAIL() << "expected an error";
  } catch (const diffq::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[png]", 0), 0u) << e.what();
  }
  // A bad key fails before anything is written; an existing file is left untouched.
  const fs::path keep = dir.path / "keep.png";
  diffq::io::write_png(keep, px.data(), 2, 2, {{"seed", "1"}});
  EXPECT_THROW(diffq::io::write_png(keep, px.data(), 2, 2, {{"", "v"}}), diffq::Error);
  EXPECT_THROW(diffq::io::write_png(keep, px.data(), 2, 2, {{std::string(80, 'k'), "v"}}), diffq::Error);
  EXPECT_THROW(diffq::io::write_png(keep, px.data(), 0, 2), diffq::Error);
  EXPECT_EQ(diffq::io::read_png(keep).text, (diffq::io::PngText{{"seed", "1"}}));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Png, RejectsCorruptInput) {
  TempDir dir;
  const auto px = gradient(8, 8);
  auto bytes = diffq::io::encode_png(px.data(), 8, 8);
  EXPECT_THROW(diffq::io::decode_png(bytes.data(), 7, "short"), diffq::Error);
  EXPECT_THROW(diffq::io::decode_png(bytes.data(), bytes.size() / 2, "half"), diffq::Error);
  std::vector<uint8_t> junk(100, 0x42);
  EXPECT_THROW(diffq::io::decode_png(junk.data(), junk.size(), "junk"), diffq::Error);
  EXPECT_THROW(diffq::io::read_png(dir.path / "absent.png"), diffq::Error);
  EXPECT_EQ(diffq::io::decode_png(bytes.data(), bytes.size(), "ok").rgb, px);
}

TEST(ImageToUint8, RoundsHalfToEvenLikeNumpy) {
  EXPECT_EQ(diffq::io::float_to_uint8(0.0f), 0);
  EXPECT_EQ(diffq::io::float_to_uint8(1.0f), 255);
  EXPECT_EQ(diffq::io::float_to_uint8(0.5f), 128);   // 127.5 -> 128 (even)
  EXPECT_EQ(diffq::io::float_to_uint8(-0.25f), 0);
  EXPECT_EQ(diffq::io::float_to_uint8(1.25f), 255);
}

TEST(ImageToUint8, MatchesGenerateFixtureBitExact) {
  for (const char* folder : {"tiny-flux", "tiny-flux-schnell"}) {
    SCOPED_TRACE(folder);
    auto gen = diffq::io::SafetensorsFile::open(std::string(DIFFQ_SOURCE_DIR "/tests/fixtures/") + folder +
                                                "/reference/generate.safetensors");
    Tensor u8 = diffq::io::image_to_uint8(gen.tensor("image_f32"));
    Tensor want = gen.tensor("image_u8");
    ASSERT_EQ(u8.shape(), want.shape());
    const uint8_t* a = u8.data<uint8_t>();
    const uint8_t* b = want.contiguous().data<uint8_t>();
    int64_t bad = 0;
    for (int64_t i = 0; i < u8.numel(); ++i) bad += a[i] != b[i];
    EXPECT_EQ(bad, 0);
  }
}

TEST(DenormalizeImage, ClampsAndPermutes) {
  Tensor x = Tensor::from_vector({-3.0f, -1.0f, 0.0f, 1.0f, 3.0f, 0.5f}, {1, 3, 1, 2});
  Tensor y = diffq::io::denormalize_image(x);
  ASSERT_EQ(y.shape(), (diffq::Shape{1, 1, 2, 3}));
  // [B,H,W,C]: pixel 0 = channels (-3, 0, 3), pixel 1 = (-1, 1, 0.5).
  EXPECT_EQ(y.to_f32_vector(), (std::vector<float>{0.0f, 0.5f, 1.0f, 0.0f, 1.0f, 0.75f}));
}

}  // namespace
