// Video output (io/video_writer.h) and reading back (io/video_reader.h): a synthetic clip through mp4
// (H.264) and animated WebP compared with its source frames (PSNR), metadata, fps, atomic writes, bad
// input; PNG frame folders through io/png.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "io/io_test_util.h"
#include "io/libav_util.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/video_reader.h"
#include "io/video_writer.h"

namespace {

namespace fs = std::filesystem;
using diffq::DType;
using diffq::Error;
using diffq::Tensor;
using diffq::io::testing::TempDir;

// [F, H, W, 3]: smooth gradients drifting over time plus a 16x16 square moving diagonally. The square
// lifts all three channels by 64 (a sharp moving luma edge, smooth chroma): yuv420p halves the chroma
// resolution, and a saturated colour edge (a yellow square on blue) measured 32 dB even at crf 0, so
// it would test 4:2:0 rather than this code.
Tensor synthetic_clip(int64_t F, int64_t H, int64_t W) {
  Tensor t = Tensor::empty({F, H, W, 3}, DType::u8);
  uint8_t* p = t.data<uint8_t>();
  for (int64_t f = 0; f < F; ++f)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const bool square = x >= 4 + 3 * f && x < 20 + 3 * f && y >= 2 + 2 * f && y < 18 + 2 * f;
        const double lift = square ? 64.0 : 0.0;
        uint8_t* px = p + ((f * H + y) * W + x) * 3;
        px[0] = uint8_t(std::lround(lift + 16.0 + 164.0 * double(x + 2 * f) / double(W + 2 * F)));
        px[1] = uint8_t(std::lround(lift + 16.0 + 164.0 * double(y) / double(H > 1 ? H - 1 : 1)));
        px[2] = uint8_t(std::lround(lift + 98.0 + 60.0 * std::sin(double(x + y) / 9.0 + double(f) / 3.0)));
      }
  return t;
}

// PSNR of frame f of `got` ([F, Hg, Wg, 3], cropped to the reference's H x W) against `ref`.
double psnr(const Tensor& ref, const Tensor& got, int64_t f) {
  const int64_t H = ref.size(1), W = ref.size(2), Wg = got.size(2), Hg = got.size(1);
  const uint8_t* a = ref.data<uint8_t>() + size_t(f) * H * W * 3;
  const uint8_t* b = got.data<uint8_t>() + size_t(f) * Hg * Wg * 3;
  double se = 0;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W * 3; ++x) {
      const double d = double(a[y * W * 3 + x]) - double(b[y * Wg * 3 + x]);
      se += d * d;
    }
  const double mse = se / double(H * W * 3);
  return mse == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / mse);
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

const std::map<std::string, std::string> kMeta = {
    {"title", "diffq test clip"},
    {"comment", "synthetic gradients"},
    {"prompt", "a cat sipping a margarita \xE2\x80\x94 at dusk"},  // UTF-8 em dash
    {"seed", "42"},
};

// All fields set (designated initializers that skip one warn under -Wextra with GCC 12).
diffq::io::VideoWriteOptions opts(double fps, std::map<std::string, std::string> metadata = {}, int crf = -1) {
  diffq::io::VideoWriteOptions o;
  o.fps = fps;
  o.metadata = std::move(metadata);
  o.crf = crf;
  return o;
}

void expect_error_contains(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(Video, Mp4RoundTrip) {
  TempDir dir;
  const Tensor clip = synthetic_clip(17, 64, 96);
  const fs::path out = dir / "clip.mp4";
  diffq::io::write_video(out, clip, opts(16.0, kMeta));
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"clip.mp4"});  // no temporary left

  const diffq::io::DecodedVideo v = diffq::io::read_video(out);
  EXPECT_EQ(v.codec, "h264");
  ASSERT_EQ(v.frames_u8.shape(), (diffq::Shape{17, 64, 96, 3}));
  EXPECT_NEAR(v.fps, 16.0, 1e-9);
  for (int64_t f = 0; f < 17; ++f) EXPECT_GE(psnr(clip, v.frames_u8, f), 35.0) << "frame " << f;
  for (const auto& [k, val] : kMeta) {
    ASSERT_TRUE(v.metadata.count(k)) << "metadata key " << k << " missing";
    EXPECT_EQ(v.metadata.at(k), val) << k;
  }

  // The stream as libavformat sees it: H.264, yuv420p, BT.601 limited range, 16 fps.
  AVFormatContext* ic = nullptr;
  ASSERT_GE(avformat_open_input(&ic, out.c_str(), nullptr, nullptr), 0);
  ASSERT_GE(avformat_find_stream_info(ic, nullptr), 0);
  ASSERT_EQ(ic->nb_streams, 1u);
  const AVCodecParameters* par = ic->streams[0]->codecpar;
  EXPECT_EQ(par->codec_id, AV_CODEC_ID_H264);
  EXPECT_EQ(par->format, AV_PIX_FMT_YUV420P);
  EXPECT_EQ(par->color_range, AVCOL_RANGE_MPEG);
  EXPECT_EQ(par->color_space, AVCOL_SPC_SMPTE170M);
  EXPECT_EQ(ic->streams[0]->avg_frame_rate.num, 16);
  EXPECT_EQ(ic->streams[0]->avg_frame_rate.den, 1);
  avformat_close_input(&ic);
}

TEST(Video, Mp4CrfDefaultsToImageioQuality5AndIsApplied) {
  // imageio-ffmpeg (Diffusers' export_to_video, quality=5): crf = int((1 - 5 / 10) * 51) = 25.
  EXPECT_EQ(diffq::io::effective_crf({}), 25);
  EXPECT_EQ(diffq::io::effective_crf(opts(16.0, {}, 18)), 18);
  TempDir dir;
  const Tensor clip = synthetic_clip(5, 64, 96);
  diffq::io::write_video(dir / "hi.mp4", clip, opts(16.0, {}, 10));
  diffq::io::write_video(dir / "lo.mp4", clip, opts(16.0, {}, 45));
  const auto hi = diffq::io::read_video(dir / "hi.mp4"), lo = diffq::io::read_video(dir / "lo.mp4");
  EXPECT_GT(fs::file_size(dir / "hi.mp4"), fs::file_size(dir / "lo.mp4"));
  EXPECT_GT(psnr(clip, hi.frames_u8, 2), psnr(clip, lo.frames_u8, 2) + 3.0);
  expect_error_contains([&] { diffq::io::write_video(dir / "x.mp4", clip, opts(16.0, {}, 52)); }, {"crf 52"});
}

TEST(Video, WebpRoundTrip) {
  TempDir dir;
  const Tensor clip = synthetic_clip(17, 64, 96);
  const fs::path out = dir / "clip.webp";
  diffq::io::write_video(out, clip, opts(16.0, kMeta));
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"clip.webp"});

  const diffq::io::DecodedVideo v = diffq::io::read_video(out);
  EXPECT_EQ(v.codec, "webp");
  EXPECT_EQ(v.loop_count, 0);  // loops forever
  ASSERT_EQ(v.frames_u8.shape(), (diffq::Shape{17, 64, 96, 3}));
  EXPECT_NEAR(v.fps, 16.0, 1e-9);  // 16 fps: frames start at round(i * 62.5) ms
  for (int64_t f = 0; f < 17; ++f) EXPECT_GE(psnr(clip, v.frames_u8, f), 35.0) << "frame " << f;
  // FFmpeg 5.1's WebP muxer writes no metadata (documented in video_writer.h).
  for (const auto& [k, val] : kMeta) EXPECT_EQ(v.metadata.count(k), 0u) << k;

  // Container facts read from the bytes: RIFF/WEBP, VP8X with the animation flag, ANIM loop 0.
  const std::vector<uint8_t> b = diffq::io::testing::read_bytes(out);
  ASSERT_GE(b.size(), 42u);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "RIFF");
  EXPECT_EQ(std::string(b.begin() + 12, b.begin() + 16), "VP8X");
  EXPECT_TRUE(b[20] & 0x02);
  EXPECT_EQ(std::string(b.begin() + 30, b.begin() + 34), "ANIM");
  EXPECT_EQ(b[42] | b[43] << 8, 0);
}

// Animated WebPs written by libwebp's own animation encoder (tools/reference/make_video_fixtures.py):
// sub-rectangles at offsets, alpha blending, ALPH chunks, lossless (VP8L) and lossy (VP8) frames.
fs::path video_fixture(const std::string& name) {
  return fs::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures" / "video" / name;
}

TEST(Video, ReadsLibwebpAnimationsLossless) {
  const diffq::io::SafetensorsFile ref = diffq::io::SafetensorsFile::open(video_fixture("frames.safetensors"));
  const Tensor src = ref.tensor("source");  // [8, 32, 48, 3]
  const auto v = diffq::io::read_video(video_fixture("lossless.webp"));
  EXPECT_EQ(v.codec, "webp");
  EXPECT_EQ(v.loop_count, 0);
  EXPECT_NEAR(v.fps, 20.0, 1e-9);  // 50 ms frames
  ASSERT_EQ(v.frames_u8.shape(), src.shape());
  const size_t frame = size_t(32 * 48 * 3);
  for (int64_t f = 0; f < 8; ++f)  // lossless: the composited canvas equals the source exactly
    EXPECT_EQ(std::memcmp(v.frames_u8.data<uint8_t>() + f * frame, src.data<uint8_t>() + f * frame, frame), 0)
        << "frame " << f;
}

TEST(Video, ReadsLibwebpAnimationsLossy) {
  const diffq::io::SafetensorsFile ref = diffq::io::SafetensorsFile::open(video_fixture("frames.safetensors"));
  const Tensor src = ref.tensor("source"), libwebp = ref.tensor("lossy_libwebp");
  const auto v = diffq::io::read_video(video_fixture("lossy.webp"));
  EXPECT_EQ(v.loop_count, 3);
  EXPECT_NEAR(v.fps, 17.5, 1e-9);  // 7 intervals of 40/80 ms over 400 ms
  ASSERT_EQ(v.frames_u8.shape(), src.shape());
  for (int64_t f = 0; f < 8; ++f) {
    // The saturated square's edges cost 4:2:0 chroma: libwebp's own decoder reaches only 26.6-33.4 dB
    // against the source here, so the bound is "no worse than libwebp" rather than an absolute one...
    const double ours = psnr(src, v.frames_u8, f), theirs = psnr(src, libwebp, f);
    EXPECT_GE(ours, theirs - 0.5) << "frame " << f;
    // ...and the frames agree with libwebp's (it upsamples chroma its own way; measured >= 37.7 dB).
    const double agree = psnr(libwebp, v.frames_u8, f);
    EXPECT_GE(agree, 37.0) << "frame " << f;
    std::printf("frame %d: ours %.2f dB, libwebp %.2f dB vs source; ours vs libwebp %.2f dB\n", int(f), ours,
                theirs, agree);
  }
}

TEST(Video, OddSizes) {
  TempDir dir;
  const Tensor clip = synthetic_clip(3, 33, 47);
  // mp4 (yuv420p): padded by one repeated column and row (crf 18: tiny frames at crf 25 dip to 34 dB).
  diffq::io::write_video(dir / "odd.mp4", clip, opts(16.0, {}, 18));
  const auto m = diffq::io::read_video(dir / "odd.mp4");
  ASSERT_EQ(m.frames_u8.shape(), (diffq::Shape{3, 34, 48, 3}));
  for (int64_t f = 0; f < 3; ++f) EXPECT_GE(psnr(clip, m.frames_u8, f), 35.0) << "frame " << f;
  const uint8_t* g = m.frames_u8.data<uint8_t>();
  const uint8_t* s = clip.data<uint8_t>();
  double d = 0;
  for (int y = 0; y < 33; ++y)  // the padded column repeats the source's last column
    for (int c = 0; c < 3; ++c) d += std::abs(int(g[(y * 48 + 47) * 3 + c]) - int(s[(y * 47 + 46) * 3 + c]));
  EXPECT_LT(d / (33 * 3), 6.0);
  // webp keeps odd sizes.
  diffq::io::write_video(dir / "odd.webp", clip);
  const auto w = diffq::io::read_video(dir / "odd.webp");
  ASSERT_EQ(w.frames_u8.shape(), (diffq::Shape{3, 33, 47, 3}));
  for (int64_t f = 0; f < 3; ++f) EXPECT_GE(psnr(clip, w.frames_u8, f), 35.0) << "frame " << f;
}

TEST(Video, SingleFrameWebpIsAStillImage) {
  TempDir dir;
  const Tensor clip = synthetic_clip(1, 32, 32);
  diffq::io::write_video(dir / "still.webp", clip);
  const auto v = diffq::io::read_video(dir / "still.webp");
  ASSERT_EQ(v.frames_u8.shape(), (diffq::Shape{1, 32, 32, 3}));
  EXPECT_EQ(v.fps, 0.0);
  EXPECT_GE(psnr(clip, v.frames_u8, 0), 35.0);
}

TEST(Video, UnwritablePathsFailCleanly) {
  TempDir dir;
  const Tensor clip = synthetic_clip(2, 16, 16);
  for (const char* ext : {".mp4", ".webp"}) {
    // A missing folder.
    const fs::path missing = dir / "no_such_dir" / (std::string("clip") + ext);
    expect_error_contains([&] { diffq::io::write_video(missing, clip); },
                          {"[video]", missing.string(), "No such file or directory"});
    EXPECT_FALSE(fs::exists(dir / "no_such_dir"));
    // A directory in the way of the target.
    const fs::path blocked = dir / (std::string("blocked") + ext);
    fs::create_directory(blocked);
    fs::create_directory(blocked / "inside");
    expect_error_contains([&] { diffq::io::write_video(blocked, clip); }, {"[video]", blocked.string(), "directory"});
    EXPECT_TRUE(fs::is_directory(blocked / "inside"));
  }
  // Only the two blocking directories: no temporaries left behind.
  EXPECT_EQ(listing(dir.path()), (std::vector<std::string>{"blocked.mp4", "blocked.webp"}));
  // An unknown extension.
  expect_error_contains([&] { diffq::io::write_video(dir / "clip.avi", clip); }, {"clip.avi", "'.avi'"});
}

TEST(Video, FailureAfterTheTemporaryExistsRemovesIt) {
  // An empty metadata key is refused once the temporary file and the muxer exist.
  TempDir dir;
  const Tensor clip = synthetic_clip(2, 16, 16);
  expect_error_contains([&] { diffq::io::write_video(dir / "meta.mp4", clip, opts(16.0, {{"", "x"}})); },
                        {"[video]", "meta.mp4", "empty metadata key"});
  EXPECT_TRUE(listing(dir.path()).empty());
}

TEST(Video, BadTensorsAreRefused) {
  TempDir dir;
  const fs::path out = dir / "bad.mp4";
  const Tensor f32 = Tensor::zeros({2, 16, 16, 3}, DType::f32);
  expect_error_contains([&] { diffq::io::write_video(out, f32); }, {"uint8", "bad.mp4"});
  const Tensor rank3 = Tensor::zeros({16, 16, 3}, DType::u8);
  expect_error_contains([&] { diffq::io::write_video(out, rank3); }, {"[F, H, W, 3]"});
  const Tensor rgba = Tensor::zeros({2, 16, 16, 4}, DType::u8);
  expect_error_contains([&] { diffq::io::write_video(out, rgba); }, {"[F, H, W, 3]"});
  const Tensor empty = Tensor::zeros({0, 16, 16, 3}, DType::u8);
  expect_error_contains([&] { diffq::io::write_video(out, empty); }, {"empty"});
  expect_error_contains([&] { diffq::io::write_video(out, Tensor::zeros({1, 8, 8, 3}, DType::u8), opts(0)); },
                        {"fps"});
  expect_error_contains([&] { diffq::io::write_frames_png(dir / "frames", f32); }, {"uint8"});
  EXPECT_TRUE(listing(dir.path()).empty());
}

TEST(Video, FramesPngFolderRoundTrip) {
  TempDir dir;
  const Tensor clip = synthetic_clip(17, 24, 40);
  const fs::path folder = dir / "run" / "frames";
  diffq::io::write_frames_png(folder, clip, kMeta);
  const std::vector<std::string> names = listing(folder);
  ASSERT_EQ(names.size(), 17u);
  EXPECT_EQ(names.front(), "00000.png");
  EXPECT_EQ(names.back(), "00016.png");
  for (int64_t f = 0; f < 17; ++f) {
    char name[16];
    std::snprintf(name, sizeof name, "%05d.png", int(f));
    const diffq::io::PngImage img = diffq::io::read_png(folder / name);
    ASSERT_EQ(img.width, 40);
    ASSERT_EQ(img.height, 24);
    EXPECT_EQ(std::memcmp(img.rgb.data(), clip.data<uint8_t>() + size_t(f) * 24 * 40 * 3, img.rgb.size()), 0)
        << name;
    std::map<std::string, std::string> text(img.text.begin(), img.text.end());
    EXPECT_EQ(text, kMeta) << name;
  }
  // A file where the folder should be.
  diffq::io::testing::write_text(dir / "file", "x");
  expect_error_contains([&] { diffq::io::write_frames_png(dir / "file", clip); }, {"file", "cannot create"});
}

TEST(Video, ReadErrors) {
  TempDir dir;
  expect_error_contains([&] { diffq::io::read_video(dir / "none.mp4"); }, {"none.mp4", "no such file"});
  diffq::io::testing::write_text(dir / "junk.mp4", std::string(300, 'j'));
  expect_error_contains([&] { diffq::io::read_video(dir / "junk.mp4"); }, {"[video]", "junk.mp4"});
  // Every truncation of a small animated WebP is an error, never a crash or a read past the end.
  diffq::io::write_video(dir / "a.webp", synthetic_clip(3, 16, 16));
  const std::vector<uint8_t> b = diffq::io::testing::read_bytes(dir / "a.webp");
  for (size_t n : {size_t(12), size_t(30), size_t(60), b.size() / 2, b.size() - 1}) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + n);
    // keep the RIFF size claiming the full file, as a truncated download would
    diffq::io::testing::write_bytes(dir / "cut.webp", cut);
    EXPECT_THROW(diffq::io::read_video(dir / "cut.webp"), Error) << n << " bytes";
  }
  // Corrupted bytes of a libwebp animation (headers, chunk sizes, offsets, bitstreams): an Error or
  // some frames, never a crash (the sanitizer build checks the reads).
  std::vector<uint8_t> lossy = diffq::io::testing::read_bytes(video_fixture("lossy.webp"));
  int errors = 0;
  for (size_t i = 12; i < lossy.size(); i += 7) {
    std::vector<uint8_t> bad = lossy;
    bad[i] ^= 0xA5;
    diffq::io::testing::write_bytes(dir / "bad.webp", bad);
    try {
      const auto v = diffq::io::read_video(dir / "bad.webp");
      EXPECT_EQ(v.frames_u8.dim(), 4);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
